/**
 * Mistral's calls (Mistral 7B v0.3, Nemo, Small): the control token `[TOOL_CALLS]`, then a JSON
 * array of call objects,
 *
 *   [TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}}, {"name": ...}]
 *
 * (a single object without the array is taken too). `[TOOL_CALLS]` is a control token: the
 * engine shows its text in the reply only because the format asks for it (preservedTokens).
 * Text before the token is content. Mistral's templates want call ids of 9 letters and digits.
 */
import { CallBody } from "./call-body.ts";
import { isJsonWhitespace } from "./json-stream.ts";
import { contentUntil, SteppedParser, type ReplySink } from "./reply-sink.ts";

export const MISTRAL_CALLS = "[TOOL_CALLS]";

type State = "text" | "open" | "body" | "between" | "skip";

export class MistralParser extends SteppedParser {
  private state: State = "text";
  private body: CallBody | null = null;
  /** The calls come as an array (else one object). */
  private inArray = false;
  /** Raw text of this block, given back as content when it holds no call. */
  private block = "";
  private calls = 0;

  constructor(private readonly accept: (name: string) => boolean) {
    super();
  }

  protected finish(rest: string, sink: ReplySink): void {
    if (this.state === "text") {
      if (rest !== "") sink.content(rest);
    } else if (this.state === "body" && this.body!.started) {
      sink.callEnd();
    }
    // Else a block cut before a call's name (max_tokens): dropped, its syntax is no content.
    this.state = "text";
  }

  protected step(text: string, at: number, sink: ReplySink): number {
    const ch = text[at]!;
    switch (this.state) {
      case "text": {
        const { taken, tag } = contentUntil(text, at, [MISTRAL_CALLS], sink);
        if (tag !== null) {
          this.state = "open";
          this.block = MISTRAL_CALLS;
          this.calls = 0;
          this.inArray = false;
        }
        return taken;
      }
      case "open":
        if (isJsonWhitespace(ch) || (ch === "[" && !this.inArray)) {
          if (ch === "[") this.inArray = true;
          this.block += ch;
          return 1;
        }
        if (ch !== "{") return this.notCalls(text, at, sink);
        this.body = new CallBody(sink, this.accept);
        this.state = "body";
        return this.step(text, at, sink);
      case "body": {
        const body = this.body!;
        if (body.feed(ch)) {
          if (body.done) {
            sink.callEnd();
            this.calls++;
            this.body = null;
            this.state = this.inArray ? "between" : "text";
          }
          return 1;
        }
        if (body.started) {
          // A broken object after its name: the call ends; the rest of the block is dropped.
          sink.callEnd();
          this.calls++;
          this.state = "skip";
          return 0 + this.step(text, at, sink);
        }
        this.block += body.raw;
        this.body = null;
        return this.notCalls(text, at, sink);
      }
      case "between":
        if (isJsonWhitespace(ch)) return 1;
        if (ch === ",") {
          this.state = "open";
          return 1;
        }
        this.state = "text";
        return ch === "]" ? 1 : this.step(text, at, sink);
      case "skip":
        // Up to the end of the block's array, or of the reply.
        if (ch === "]") this.state = "text";
        return 1;
    }
  }

  /** The block holds no (more) calls: what it held is text. */
  private notCalls(text: string, at: number, sink: ReplySink): number {
    if (this.calls === 0) sink.content(this.block);
    this.state = "text";
    return this.step(text, at, sink);
  }
}
