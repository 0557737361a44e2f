/**
 * Hermes-style calls, as Qwen2.5, Qwen3, Hermes 2 Pro / 3 and SmolLM3 write them (and the generic
 * fallback, generic.ts): each call a JSON object between tags, anywhere in the reply,
 *
 *   Let me look.<tool_call>
 *   {"name": "get_weather", "arguments": {"city": "Paris"}}
 *   </tool_call>
 *
 * Text outside the tags is the reply's content. A tag whose body is no call object (a model that
 * writes `<tool_call>` in prose) stays text, as vLLM's hermes parser leaves it. A call whose
 * object breaks off after its name ends there, with the arguments it has (the closing tag, if it
 * comes, is skipped); the grammar constraint (call-syntax.ts) makes that impossible later. A reply
 * that ends inside a call before its name is whole (max_tokens) drops that call: its text is
 * syntax, never content.
 */
import { CallBody } from "./call-body.ts";
import { isJsonWhitespace } from "./json-stream.ts";
import { contentUntil, heldPrefix, SteppedParser, type ReplySink } from "./reply-sink.ts";

export const HERMES_OPEN = "<tool_call>";
export const HERMES_CLOSE = "</tool_call>";

type State = "text" | "open" | "body" | "close" | "skip";

export class HermesParser extends SteppedParser {
  private state: State = "text";
  private body: CallBody | null = null;
  /** The tag and the whitespace after it, given back as text when no call follows. */
  private opening = "";

  constructor(private readonly accept: (name: string) => boolean) {
    super();
  }

  protected finish(rest: string, sink: ReplySink): void {
    switch (this.state) {
      case "text":
        if (rest !== "") sink.content(rest);
        break;
      case "open":
        // A call cut before its name (max_tokens): dropped, its syntax is no content (docs/tools.md).
        break;
      case "body":
        if (this.body!.started) sink.callEnd();
        break;
      case "close":
      case "skip":
        sink.callEnd();
        break;
    }
    this.state = "text";
  }

  protected step(text: string, at: number, sink: ReplySink): number {
    switch (this.state) {
      case "text": {
        const { taken, tag } = contentUntil(text, at, [HERMES_OPEN], sink);
        if (tag !== null) {
          this.state = "open";
          this.opening = HERMES_OPEN;
        }
        return taken;
      }
      case "open": {
        const ch = text[at]!;
        if (isJsonWhitespace(ch)) {
          this.opening += ch;
          return 1;
        }
        if (ch !== "{") {
          // No call object: the tag was text.
          sink.content(this.opening);
          this.state = "text";
          return 0 + this.step(text, at, sink);
        }
        this.body = new CallBody(sink, this.accept);
        this.state = "body";
        return this.step(text, at, sink);
      }
      case "body": {
        const body = this.body!;
        if (body.feed(text[at]!)) {
          if (body.done) this.state = "close";
          return 1;
        }
        if (body.started) {
          this.state = "skip";
          return 0 + this.step(text, at, sink);
        }
        sink.content(this.opening + body.raw);
        this.body = null;
        this.state = "text";
        return this.step(text, at, sink);
      }
      case "close": {
        const ch = text[at]!;
        if (isJsonWhitespace(ch)) return 1;
        const rest = text.slice(at);
        if (rest.startsWith(HERMES_CLOSE)) {
          sink.callEnd();
          this.state = "text";
          return HERMES_CLOSE.length;
        }
        if (HERMES_CLOSE.startsWith(rest)) return 0;
        // The closing tag is missing: the call ends where its object did.
        sink.callEnd();
        this.state = "text";
        return this.step(text, at, sink);
      }
      case "skip": {
        const close = text.indexOf(HERMES_CLOSE, at);
        if (close < 0) return Math.max(0, text.length - at - heldPrefix(text.slice(at), [HERMES_CLOSE]));
        sink.callEnd();
        this.state = "text";
        return close - at + HERMES_CLOSE.length;
      }
    }
  }
}
