/**
 * Where the readers of a reply (reasoning splitters, tool-call parsers) put what they find, in the
 * order the reply says it: text for the user, reasoning, and calls (a call's start with its
 * function's name, its arguments' JSON text in pieces, its end). reply-reader.ts collects it into
 * deltas and the whole message.
 */
export interface ReplySink {
  content(text: string): void;
  reasoning(text: string): void;
  /** A call begins; its arguments follow (callArguments), then callEnd. */
  callStart(name: string): void;
  /** The next piece of the current call's arguments, as JSON text. */
  callArguments(text: string): void;
  callEnd(): void;
}

/** Reads one reply's text as it streams, into a sink. */
export interface ReplyParser {
  /** The next piece of the reply's text. */
  push(text: string, sink: ReplySink): void;
  /** The reply has ended: whatever is held back goes out (an open call ends with what it has). */
  end(sink: ReplySink): void;
}

/**
 * The length of the longest suffix of `text` that is a proper prefix of one of `tags`: text a
 * streaming reader holds back, since the next piece may complete a tag.
 */
export function heldPrefix(text: string, tags: readonly string[]): number {
  let held = 0;
  for (const tag of tags) {
    for (let n = Math.min(tag.length - 1, text.length); n > held; n--) {
      if (text.endsWith(tag.slice(0, n))) {
        held = n;
        break;
      }
    }
  }
  return held;
}

/** The first of `tags` in `text` from `from`: its index and the tag, or null. */
export function firstTag(text: string, tags: readonly string[], from = 0): { at: number; tag: string } | null {
  let best: { at: number; tag: string } | null = null;
  for (const tag of tags) {
    const at = text.indexOf(tag, from);
    if (at >= 0 && (best === null || at < best.at)) best = { at, tag };
  }
  return best;
}

/**
 * A parser that reads its buffered text in steps (a state machine): each step takes some
 * characters from a position, or none to wait for more text.
 */
export abstract class SteppedParser implements ReplyParser {
  private pending = "";

  push(text: string, sink: ReplySink): void {
    this.pending += text;
    let i = 0;
    while (i < this.pending.length) {
      const taken = this.step(this.pending, i, sink);
      if (taken === 0) break;
      i += taken;
    }
    this.pending = this.pending.slice(i);
  }

  end(sink: ReplySink): void {
    const rest = this.pending;
    this.pending = "";
    this.finish(rest, sink);
  }

  /** Reads `text` from `at`; returns the characters taken (0: wait for more text). */
  protected abstract step(text: string, at: number, sink: ReplySink): number;

  /** The reply ended with `rest` not yet taken. */
  protected abstract finish(rest: string, sink: ReplySink): void;
}

/**
 * Content from `at` up to the first of `tags`: sent to the sink, except a tail that may be a tag's
 * start (held). Returns the characters taken, through the tag when one was found.
 */
export function contentUntil(text: string, at: number, tags: readonly string[], sink: ReplySink): { taken: number; tag: string | null } {
  const found = firstTag(text, tags, at);
  const end = found === null ? text.length - heldPrefix(text.slice(at), tags) : found.at;
  if (end > at) sink.content(text.slice(at, end));
  return found === null ? { taken: end - at, tag: null } : { taken: end - at + found.tag.length, tag: found.tag };
}
