/**
 * gpt-oss's harmony replies: a sequence of messages, each a header and a body,
 *
 *   <|channel|>analysis<|message|>REASONING<|end|><|start|>assistant<|channel|>final<|message|>ANSWER
 *   <|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city": "Paris"}
 *
 * (the prompt ends with `<|start|>assistant`; the recipient may stand before the channel too:
 * ` to=functions.f<|channel|>commentary json<|message|>`). The analysis channel is reasoning, the
 * final channel content, a message to `functions.NAME` a call of NAME whose body is its arguments,
 * and any other message (a commentary preamble) content, as llama.cpp reads them. `<|call|>` and
 * `<|return|>` end the reply (the engine stops at them); `<|end|>` ends a message. These tokens'
 * texts are in a reply because the tokenizer renders them (src/tokenizer/eog.ts).
 */
import { heldPrefix, type ReplyParser, type ReplySink } from "./reply-sink.ts";

const MESSAGE = "<|message|>";
const END = "<|end|>";
const ENDINGS = [END, "<|call|>", "<|return|>"];
const START = "<|start|>";
const CHANNEL = "<|channel|>";
/** Text a header holds and plain text does not: a harmony token, or a recipient. */
const HEADER_SYNTAX = /<\||(?:^|\s)to=/;
/** How a recipient in the role begins (the reply's first header, after the prompt's `<|start|>assistant`). */
const RECIPIENT = " to=functions.";
/** A recipient whose name is whole: something that is not part of a name follows it. */
const WHOLE_RECIPIENT = /to=functions\.([A-Za-z0-9_.-]+)[^A-Za-z0-9_.-]/;
/** Characters a header may take before text without a channel counts as plain content. */
const MAX_HEADER = 256;

type State = "header" | "body" | "between";
type Route = "reasoning" | "content" | "call";

export class HarmonyParser implements ReplyParser {
  private state: State = "header";
  private buffer = "";
  private route: Route = "content";
  /** Whether a message has begun: every header after it is harmony's, never plain text. */
  private readMessage = false;

  constructor(private readonly accept: (name: string) => boolean) {}

  push(text: string, sink: ReplySink): void {
    this.buffer += text;
    for (;;) {
      const [buffer, state] = [this.buffer, this.state];
      if (this.state === "header") this.header(sink);
      else if (this.state === "body") this.body(sink);
      else this.between();
      if ((this.buffer === buffer && this.state === state) || this.buffer === "") break;
    }
  }

  end(sink: ReplySink): void {
    const rest = this.buffer;
    this.buffer = "";
    if (this.state === "header") {
      this.endInHeader(rest, sink);
    } else if (this.state === "body") {
      if (rest !== "") this.emit(rest, sink);
      if (this.route === "call") sink.callEnd();
    }
    this.state = "header";
  }

  /**
   * The reply ended before a header's `<|message|>`: a reply that never wrote a header (a model
   * that writes plain text) is content; a header cut by max_tokens is syntax, never content: a call
   * whose name is whole is kept with no arguments (as a call cut after its name in the other
   * formats), anything else dropped.
   */
  private endInHeader(rest: string, sink: ReplySink): void {
    const plain = !this.readMessage && !HEADER_SYNTAX.test(rest) && !(rest !== "" && RECIPIENT.startsWith(rest));
    if (plain) {
      if (rest !== "") sink.content(rest);
      return;
    }
    const name = WHOLE_RECIPIENT.exec(rest)?.[1];
    if (name !== undefined && this.accept(name)) {
      sink.callStart(name);
      sink.callEnd();
    }
  }

  private header(sink: ReplySink): void {
    const at = this.buffer.indexOf(MESSAGE);
    if (at < 0) {
      // Plain text where a header should be (no channel in sight): content, streamed.
      if (this.buffer.length > MAX_HEADER && !this.buffer.includes(CHANNEL)) {
        this.route = "content";
        this.state = "body";
      }
      return;
    }
    const header = this.buffer.slice(0, at);
    this.buffer = this.buffer.slice(at + MESSAGE.length);
    this.readMessage = true;
    this.route = this.routeOf(header);
    if (this.route === "call") sink.callStart(recipient(header)!);
    this.state = "body";
  }

  private body(sink: ReplySink): void {
    let end = -1;
    let tag = "";
    for (const t of ENDINGS) {
      const i = this.buffer.indexOf(t);
      if (i >= 0 && (end < 0 || i < end)) [end, tag] = [i, t];
    }
    if (end < 0) {
      const out = this.buffer.length - heldPrefix(this.buffer, ENDINGS);
      if (out > 0) this.emit(this.buffer.slice(0, out), sink);
      this.buffer = this.buffer.slice(out);
      return;
    }
    if (end > 0) this.emit(this.buffer.slice(0, end), sink);
    if (this.route === "call") sink.callEnd();
    this.buffer = this.buffer.slice(end + tag.length);
    this.state = "between";
  }

  /** After a message: `<|start|>ROLE` opens the next one's header. */
  private between(): void {
    const lead = this.buffer;
    if (lead.startsWith(START)) {
      this.buffer = lead.slice(START.length);
      this.state = "header";
    } else if (!START.startsWith(lead)) {
      this.state = "header";
    }
  }

  private routeOf(header: string): Route {
    const name = recipient(header);
    if (name !== null) return this.accept(name) ? "call" : "content";
    return /<\|channel\|>\s*analysis\b/.test(header) ? "reasoning" : "content";
  }

  private emit(text: string, sink: ReplySink): void {
    if (this.route === "reasoning") sink.reasoning(text);
    else if (this.route === "call") sink.callArguments(text);
    else sink.content(text);
  }
}

/** The function a header addresses (`to=functions.NAME`), or null. */
function recipient(header: string): string | null {
  const m = /to=functions\.([A-Za-z0-9_.-]+)/.exec(header);
  return m === null ? null : m[1]!;
}
