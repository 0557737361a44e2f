/**
 * Reasoning between `<think>` and `</think>` (Qwen3, QwQ, DeepSeek-R1 and its distills, SmolLM3):
 * the text between the tags is reasoning, never content; what follows `</think>` is the reply,
 * read on by the content parser (a tool-call format, or plain text). The split is exact: nothing
 * between or after the tags is trimmed.
 *
 * A reply starts in its reasoning when the prompt opened `<think>` itself (DeepSeek-R1 distills'
 * templates end the prompt with `<think>\n`; so does llama.cpp's copy of them with
 * enable_thinking); otherwise only a `<think>` at the very start of the reply (after whitespace)
 * opens it, so a `<think>` a reply mentions later is text. A reply that ends inside its reasoning
 * (max_tokens) has reasoning only.
 */
import { heldPrefix, type ReplyParser, type ReplySink } from "./reply-sink.ts";

export const THINK_OPEN = "<think>";
export const THINK_CLOSE = "</think>";

type State = "start" | "reasoning" | "content";

export class ThinkSplitter implements ReplyParser {
  private state: State;
  private buffer = "";

  constructor(
    /** The prompt ended inside `<think>`: the reply begins with reasoning. */
    openInPrompt: boolean,
    /** Reads what follows the reasoning; null: it is all content. */
    private readonly content: ReplyParser | null,
  ) {
    this.state = openInPrompt ? "reasoning" : "start";
  }

  push(text: string, sink: ReplySink): void {
    if (this.state === "content") return this.toContent(text, sink);
    this.buffer += text;
    if (this.state === "start") {
      const lead = this.buffer.trimStart();
      if (lead.startsWith(THINK_OPEN)) {
        this.state = "reasoning";
        this.buffer = lead.slice(THINK_OPEN.length);
      } else if (THINK_OPEN.startsWith(lead)) {
        return; // maybe the opening tag: wait
      } else {
        this.state = "content";
        const all = this.buffer;
        this.buffer = "";
        return this.toContent(all, sink);
      }
    }
    const close = this.buffer.indexOf(THINK_CLOSE);
    if (close < 0) {
      const out = this.buffer.length - heldPrefix(this.buffer, [THINK_CLOSE]);
      if (out > 0) sink.reasoning(this.buffer.slice(0, out));
      this.buffer = this.buffer.slice(out);
      return;
    }
    if (close > 0) sink.reasoning(this.buffer.slice(0, close));
    const after = this.buffer.slice(close + THINK_CLOSE.length);
    this.buffer = "";
    this.state = "content";
    if (after !== "") this.toContent(after, sink);
  }

  end(sink: ReplySink): void {
    const rest = this.buffer;
    this.buffer = "";
    if (this.state === "reasoning") {
      if (rest !== "") sink.reasoning(rest);
      return;
    }
    if (rest !== "") this.toContent(rest, sink);
    this.content?.end(sink);
  }

  private toContent(text: string, sink: ReplySink): void {
    if (this.content === null) sink.content(text);
    else this.content.push(text, sink);
  }
}

/** Whether a prompt's text ends inside an opened `<think>` (the template opened the reasoning). */
export function promptOpensThinking(promptTail: string): boolean {
  const open = promptTail.lastIndexOf(THINK_OPEN);
  return open >= 0 && promptTail.indexOf(THINK_CLOSE, open) < 0 && promptTail.slice(open + THINK_OPEN.length).trim() === "";
}
