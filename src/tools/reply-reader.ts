/**
 * A reply read as it streams into what a client sees: content, reasoning and tool calls. Every
 * front end folds a sample's text through one ReplyReader: the server's chat deltas (and the
 * Anthropic and Responses APIs' events), `generate`'s results and the library's. A message is the
 * concatenation of its deltas, so a streamed reply and the same reply whole always agree.
 *
 * ReplySetup says how a request's replies are read, from the model's chat template, the end of its
 * rendered prompt and the request's tools: harmony channels (gpt-oss), else reasoning between
 * `<think>` tags (templates that write them) in front of the tool-call format's parser (when the
 * request offers tools and tool_choice is not "none"). A request with none of these has no setup:
 * its text passes through untouched, as before.
 *
 * Whitespace at the end of content is held until what follows is known: more content takes it
 * along, a call drops it (the "\n\n" after `</think>`, the newline between two calls, the space
 * in "Sure: <tool_call>"), and so does the end of a reply that made calls; a message with calls
 * thus has no blank content, and every other character of content is kept exactly.
 */
import type { CallSyntax } from "./call-syntax.ts";
import type { ReplyParser, ReplySink } from "./reply-sink.ts";
import { HarmonyParser } from "./harmony.ts";
import { promptOpensThinking, THINK_CLOSE, THINK_OPEN, ThinkSplitter } from "./think.ts";
import { genericToolPrompt, toolCallFormat, type ToolCallFormat } from "./tool-format.ts";
import type { CheckedTools, ToolCall } from "./tool-types.ts";

/** How the replies to one request are read. */
export interface ReplySetup {
  /** The template's call format (chosen even without tools: its preserved tokens, its name for info). */
  readonly format: ToolCallFormat;
  /** The request's tools; null: no call is read. */
  readonly tools: CheckedTools | null;
  /** How reasoning is marked: harmony channels, `<think>` tags (the reply may open them, or the prompt did), or not at all. */
  readonly reasoning: "harmony" | "tags" | "open" | "none";
  /** Control tokens, by text, whose text replies must show (the engine renders them). */
  readonly preservedTokens: readonly string[];
}

/** What a piece of a reply added. */
export interface ReplyDelta {
  content: string;
  reasoning: string;
  /** Calls begun or continued: a call's first delta has its id and name. */
  toolCalls: ToolCallDelta[];
}

export interface ToolCallDelta {
  /** The call's place among the reply's calls (0, 1, ...). */
  index: number;
  id?: string;
  name?: string;
  arguments: string;
}

/** A whole reply. */
export interface ReplyMessage {
  content: string;
  reasoning: string;
  toolCalls: ToolCall[];
}

/**
 * The setup for a request rendered with `templateText` (null: a built-in format) whose prompt ends
 * with `promptTail`, offering `tools` (null: none); null when its replies need no reading.
 */
export function replySetup(templateText: string | null, promptTail: string, tools: CheckedTools | null): ReplySetup | null {
  const format = toolCallFormat(templateText);
  const template = templateText ?? "";
  const reasoning = format.name === "harmony" ? "harmony"
    : template.includes(THINK_OPEN) ? (promptOpensThinking(promptTail) ? "open" : "tags")
    : "none";
  const calling = tools !== null && tools.choice !== "none" ? tools : null;
  if (calling === null && reasoning === "none") return null;
  const preserved = [...(calling === null ? [] : format.preservedTokens), ...(reasoning === "tags" || reasoning === "open" ? [THINK_OPEN, THINK_CLOSE] : [])];
  return { format, tools: calling, reasoning, preservedTokens: preserved };
}

/** The grammar hook: what the calls of replies under `setup` look like (null without tools). */
export function replyCallSyntax(setup: ReplySetup): CallSyntax | null {
  const tools = setup.tools;
  if (tools === null) return null;
  const choice = tools.choice;
  const callable = typeof choice === "object" ? tools.tools.filter((t) => t.function.name === choice.function.name) : tools.tools;
  return setup.format.syntax(callable, choice === "auto" ? "lazy" : "forced", tools.parallel && typeof choice !== "object");
}

/** The system-message text a template that cannot render tools needs (null when it can, or without tools). */
export function toolSystemPrompt(setup: ReplySetup | null): string | null {
  if (setup === null || setup.tools === null || setup.format.templateRendersTools) return null;
  return genericToolPrompt(setup.tools.tools);
}

export class ReplyReader implements ReplySink {
  private readonly parser: ReplyParser;
  private readonly names: ReadonlySet<string>;
  private delta: ReplyDelta = emptyDelta();
  private readonly whole: ReplyMessage = { content: "", reasoning: "", toolCalls: [] };
  /** Whitespace-only content held until it is known whether a call follows it. */
  private heldSpace = "";
  /** The current call's index, or null; -1 while a call that is not kept (parallel calls off) runs. */
  private current: number | null = null;
  /**
   * tool_choice "required" or a named function: the constraint makes the reply (after its
   * reasoning) a block of calls, so what a parser gives as content is a piece of their syntax
   * (a tag's start that a cut left, call-syntax.ts), never text for the user.
   */
  private readonly forced: boolean;

  constructor(private readonly setup: ReplySetup) {
    this.names = new Set(setup.tools?.tools.map((t) => t.function.name) ?? []);
    this.forced = setup.tools !== null && setup.tools.choice !== "auto";
    const accept = (name: string) => this.names.has(name) || setup.format.name !== "llama3";
    const calls = setup.tools === null ? null : setup.format.parser(setup.tools.tools, accept);
    if (setup.reasoning === "harmony") this.parser = new HarmonyParser(setup.tools === null ? () => false : accept);
    else if (setup.reasoning === "none") this.parser = calls ?? passThrough;
    else this.parser = new ThinkSplitter(setup.reasoning === "open", calls);
  }

  /** The next piece of the reply's text; returns what it added. */
  push(text: string): ReplyDelta {
    if (text !== "") this.parser.push(text, this);
    return this.take();
  }

  /** The next piece of the reply's text, and `last`: the reply ends with it (one delta for both). */
  read(text: string, last: boolean): ReplyDelta {
    if (!last) return this.push(text);
    if (text !== "") this.parser.push(text, this);
    return this.end();
  }

  /** The reply has ended: returns what was held back. */
  end(): ReplyDelta {
    this.parser.end(this);
    if (this.current !== null) this.callEnd();
    if (this.whole.toolCalls.length === 0 && this.heldSpace !== "") this.emitContent(this.heldSpace);
    this.heldSpace = "";
    return this.take();
  }

  /** The reply so far (whole once ended). */
  get message(): ReplyMessage {
    return this.whole;
  }

  content(text: string): void {
    if (text === "" || this.forced) return;
    // Trailing whitespace waits for what follows it: more content takes it along, a call drops it.
    const all = this.heldSpace + text;
    const kept = all.trimEnd().length;
    this.heldSpace = all.slice(kept);
    if (kept > 0) this.emitContent(all.slice(0, kept));
  }

  reasoning(text: string): void {
    this.delta.reasoning += text;
    this.whole.reasoning += text;
  }

  callStart(name: string): void {
    if (this.current !== null) this.callEnd();
    this.heldSpace = "";
    const calls = this.whole.toolCalls;
    if (calls.length > 0 && !this.setup.tools!.parallel) {
      this.current = -1;
      return;
    }
    const call: ToolCall = { id: this.setup.format.newCallId(), type: "function", function: { name, arguments: "" } };
    calls.push(call);
    this.current = calls.length - 1;
    this.delta.toolCalls.push({ index: this.current, id: call.id, name, arguments: "" });
  }

  callArguments(text: string): void {
    const index = this.current;
    if (index === null || index < 0 || text === "") return;
    this.whole.toolCalls[index]!.function.arguments += text;
    const last = this.delta.toolCalls.at(-1);
    if (last !== undefined && last.index === index) last.arguments += text;
    else this.delta.toolCalls.push({ index, arguments: text });
  }

  callEnd(): void {
    this.current = null;
  }

  private emitContent(text: string): void {
    this.delta.content += text;
    this.whole.content += text;
  }

  private take(): ReplyDelta {
    const d = this.delta;
    this.delta = emptyDelta();
    return d;
  }
}

function emptyDelta(): ReplyDelta {
  return { content: "", reasoning: "", toolCalls: [] };
}

/** Content only. */
const passThrough: ReplyParser = {
  push: (text, sink) => sink.content(text),
  end: () => {},
};
