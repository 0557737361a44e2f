/**
 * Llama 3.1 / 3.2 / 3.3 calls: a JSON object with the function's name and its `parameters` (or
 * `arguments`), written as the reply or after the control token `<|python_tag|>`,
 *
 *   {"name": "get_weather", "parameters": {"city": "Paris"}}
 *   <|python_tag|>{"name": "get_weather", "parameters": {"city": "Paris"}}
 *
 * and after `<|python_tag|>` also plain code, which is a call of a tool named `python`, `ipython`
 * or `code_interpreter` (when one is offered) with `{"code": ...}`, as llama.cpp reads it. Several
 * calls may follow each other (separated by whitespace or `;`).
 *
 * Without a tag, a JSON object is a call only when its name is one of the request's tools (as in
 * llama.cpp: JSON in prose about something else stays text); the object is held back from the
 * stream until its name has been read.
 */
import { CallBody } from "./call-body.ts";
import { isJsonWhitespace } from "./json-stream.ts";
import { heldPrefix, SteppedParser, type ReplySink } from "./reply-sink.ts";

export const PYTHON_TAG = "<|python_tag|>";

/** Tools that take code written after `<|python_tag|>`. */
const CODE_TOOLS = ["python", "ipython", "code_interpreter"];

type State = "text" | "body" | "after" | "tagged" | "code";

export class Llama3Parser extends SteppedParser {
  private state: State = "text";
  private body: CallBody | null = null;
  private readonly codeTool: string | null;

  constructor(private readonly accept: (name: string) => boolean, toolNames: readonly string[]) {
    super();
    this.codeTool = CODE_TOOLS.find((n) => toolNames.includes(n)) ?? null;
  }

  protected finish(rest: string, sink: ReplySink): void {
    switch (this.state) {
      case "text":
      case "after":
        if (rest !== "") sink.content(rest);
        break;
      case "body":
        // An object cut while it can still be a call (max_tokens): a call cut before its name is
        // whole, dropped, since its syntax is no content (docs/tools.md).
        if (this.body!.started) sink.callEnd();
        break;
      case "tagged":
        if (this.codeTool !== null) {
          this.openCode(sink);
          sink.callArguments('"}');
          sink.callEnd();
        }
        break;
      case "code":
        sink.callArguments('"}');
        sink.callEnd();
        break;
    }
    this.state = "text";
  }

  protected step(text: string, at: number, sink: ReplySink): number {
    const ch = text[at]!;
    switch (this.state) {
      case "text": {
        let next = at;
        while (next < text.length && text[next] !== "{" && !text.startsWith(PYTHON_TAG, next)) next++;
        // A tag's start at the end stays back until the next piece says what it is.
        const held = next === text.length ? heldPrefix(text.slice(at), [PYTHON_TAG]) : 0;
        const out = next - at - held;
        if (out > 0) sink.content(text.slice(at, at + out));
        if (next === text.length) return out;
        if (text.startsWith(PYTHON_TAG, next)) {
          this.state = "tagged";
          return out + PYTHON_TAG.length;
        }
        this.body = new CallBody(sink, this.accept);
        this.state = "body";
        return out + (this.body.feed("{") ? 1 : 0);
      }
      case "body": {
        const body = this.body!;
        if (body.feed(ch)) {
          if (body.done) {
            sink.callEnd();
            this.state = "after";
          }
          return 1;
        }
        if (body.started) {
          sink.callEnd();
          this.state = "text";
          return this.step(text, at, sink);
        }
        // Not a call: the object's text so far is content.
        sink.content(body.raw);
        this.state = "text";
        return this.step(text, at, sink);
      }
      case "after":
        if (isJsonWhitespace(ch) || ch === ";") return 1;
        this.state = "text";
        return this.step(text, at, sink);
      case "tagged":
        if (isJsonWhitespace(ch)) return 1;
        if (ch === "{") {
          this.state = "text";
          return this.step(text, at, sink);
        }
        if (this.codeTool === null) {
          this.state = "text";
          return this.step(text, at, sink);
        }
        this.openCode(sink);
        this.state = "code";
        return this.step(text, at, sink);
      case "code":
        sink.callArguments(JSON.stringify(text.slice(at)).slice(1, -1));
        return text.length - at;
    }
  }

  /** Opens a call of the code tool: `{"code": "` now, the code's escaped text as it comes, `"}` at the end. */
  private openCode(sink: ReplySink): void {
    sink.callStart(this.codeTool!);
    sink.callArguments('{"code": "');
  }
}
