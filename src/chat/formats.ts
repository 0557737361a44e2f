/**
 * Which prompt format a chat uses: the model's own Jinja template by default (ChatML for a model
 * without one, as llama-server falls back, or plain continuation where a command asks for it), or
 * one named on the command line: a built-in format (raw, llama2), ChatML, or a Jinja file.
 */
import { existsSync, readFileSync, statSync } from "node:fs";
import { InputError, RequestFieldError } from "../errors.ts";
import type { Tokenizer } from "../tokenizer/tokenizer.ts";
import { ChatHistory, CHAT_TEMPLATES, type ChatTemplateName } from "./builtin-formats.ts";
import { loadConversation, type Conversation } from "./conversation.ts";
import { JinjaConversation } from "./jinja-conversation.ts";
import { ChatTemplate, ChatTemplateError, type ChatMessage } from "./jinja-template.ts";
import { contentSpans, continuedRendering, encodeRendered, type ContentSpan } from "./render-tokens.ts";

/** ChatML, as Qwen and SmolLM write it (without a default system prompt). */
const CHATML =
  "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}{% endfor %}" +
  "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

export const FORMAT_NAMES = [...CHAT_TEMPLATES, "chatml"] as const;

export type ChatFormat = { kind: "builtin"; name: ChatTemplateName } | { kind: "jinja"; template: ChatTemplate };

/**
 * The format of a model without a chat template when none is named: `chatml` (llama-server's
 * fallback: system messages and every role work) or `raw` (plain continuation, for base models:
 * what `pagellm chat` keeps).
 */
export type UntemplatedFormat = "chatml" | "raw";

/**
 * The format `choice` names (a built-in name or a Jinja file), or, when absent, the model's own
 * template (`modelTemplate`, from its metadata), or `untemplated` for a model without one.
 */
export function chatFormat(
  choice: string | undefined, modelTemplate: string | null, modelSource: string, tok: Tokenizer, variables: Readonly<Record<string, unknown>> = {},
  untemplated: UntemplatedFormat = "chatml",
): ChatFormat {
  const specials = {
    bosToken: tok.bosId === null ? "" : tok.tokenText(tok.bosId),
    eosToken: tok.eosId === null ? "" : tok.tokenText(tok.eosId),
  };
  if (choice === undefined) {
    if (modelTemplate === null) return chatFormat(untemplated, null, modelSource, tok, variables);
    return { kind: "jinja", template: new ChatTemplate(modelTemplate, modelSource, specials, variables) };
  }
  if ((CHAT_TEMPLATES as readonly string[]).includes(choice)) return { kind: "builtin", name: choice as ChatTemplateName };
  if (choice === "chatml") return { kind: "jinja", template: new ChatTemplate(CHATML, "chatml", specials, variables) };
  if (existsSync(choice) && statSync(choice).isFile()) return { kind: "jinja", template: new ChatTemplate(readFileSync(choice, "utf8"), choice, specials, variables) };
  throw formatChoiceError(choice, "--template");
}

/** The line a command shows when a model has no chat template and `untemplated` stands in (null when it has one or a format was named). */
export function untemplatedNote(choice: string | undefined, modelTemplate: string | null, untemplated: UntemplatedFormat): string | null {
  if (choice !== undefined || modelTemplate !== null) return null;
  return untemplated === "chatml"
    ? "the model has no chat template; chat messages are rendered in ChatML"
    : "the model has no chat template; the chat continues plain text (raw)";
}

/**
 * Throws unless `choice` names a format chatFormat takes (a built-in name or a template file):
 * the command line checks its option (`option`: --template, or serve's --chat-template) before
 * loading a model, so the message names the option the user gave.
 */
export function checkFormatChoice(choice: string, option: string): void {
  if ((FORMAT_NAMES as readonly string[]).includes(choice) || (existsSync(choice) && statSync(choice).isFile())) return;
  throw formatChoiceError(choice, option);
}

function formatChoiceError(choice: string, option: string): InputError {
  return new InputError(`${option} must be ${FORMAT_NAMES.join(", ")} or a Jinja template file, got "${choice}" (no such file)`);
}

export function newConversation(format: ChatFormat, tok: Tokenizer, opts: { addBos: boolean; system?: string | null; onNote?: (line: string) => void }): Conversation {
  return format.kind === "builtin"
    ? new ChatHistory(format.name, tok, { addBos: opts.addBos, system: opts.system ?? null })
    : new JinjaConversation(format.template, tok, opts);
}

/**
 * The prompt ids of a whole message list (a request's "messages", a saved conversation); the
 * prompt ends where the assistant's reply to the last message, a user's, starts. When the last
 * message is the assistant's, its reply is continued (prefill, as OpenAI and llama-server do):
 * the prompt is the conversation rendered up to and including that message's text, with no
 * end-of-turn and no new generation prompt. A conversation of the usual shape (an optional system
 * message, then user and assistant messages in turn) is built as `pagellm chat` builds it, so each
 * turn's prompt is an exact token prefix of the next and the prefix cache serves the history.
 * Other shapes (several system messages, two user messages in a row), which OpenAI clients send
 * too, are rendered whole by the model's Jinja template, as vLLM and llama.cpp render them; a
 * built-in format has no rules for them. So are messages rendered with `kwargs` (more template
 * variables for this request: vLLM's chat_template_kwargs), messages with a `name`, which the
 * template is given as transformers gives it, and conversations with tools (`tools`, OpenAI's
 * tool objects, the template's `tools` variable; tool results; calls in assistant messages),
 * whose last message may also be a tool's result (the reply then answers it).
 * Throws RequestFieldError naming the message or field at fault.
 */
export function messagesPromptIds(
  format: ChatFormat, tok: Tokenizer, addBos: boolean, messages: readonly ChatMessage[], kwargs: Readonly<Record<string, unknown>> | null = null,
  tools: readonly unknown[] | null = null,
): number[] {
  const last = messages.at(-1);
  if (last === undefined) throw new RequestFieldError("messages", "must not be empty");
  const prefill = last.role === "assistant" && last.tool_calls === undefined;
  if (last.role !== "user" && last.role !== "tool" && !prefill) {
    throw new RequestFieldError(`messages[${messages.length - 1}].role`, "must be user, tool or assistant: the last message is the user's or a tool's result, or an assistant's reply to continue");
  }
  if (kwargs !== null && format.kind !== "jinja") {
    throw new RequestFieldError("chatTemplateKwargs", "needs a Jinja chat template; this format is built in");
  }
  const withTools = tools !== null || messages.some(usesTools);
  if (withTools && format.kind !== "jinja") {
    throw new RequestFieldError("messages", "use tools, which need a Jinja chat template; this format is built in");
  }
  try {
    // Names reach only a template rendering the messages whole (a conversation keeps contents).
    const named = messages.some((m) => m.name !== undefined);
    if ((isTurnTaking(messages) && kwargs === null && !named && !withTools) || format.kind !== "jinja") {
      const conversation = newConversation(format, tok, { addBos });
      // The user message the reply answers: the last, or the one before the begun reply.
      const userAt = prefill ? messages.length - 2 : messages.length - 1;
      const user = messages[userAt];
      if (user?.role !== "user") throw new InputError("a conversation is an optional system message, then user and assistant messages in turn");
      loadConversation(conversation, tok, messages.slice(0, userAt), '"messages"');
      return prefill ? conversation.prefillIds(user.content, last.content) : conversation.promptIds(user.content);
    }
    const template = format.template;
    let rendered: { text: string; spans: ContentSpan[] };
    try {
      const extra = templateExtra(kwargs, tools);
      rendered = prefill ? continuedRendering(template, messages, extra) : wholeRendering(template, tok, messages, extra);
    } catch (e) {
      if (!(e instanceof ChatTemplateError)) throw e;
      const field = e.stopped ? "messages" : renderingFault(template, messages, !prefill, kwargs, tools);
      if (field === "messages") throw e;
      const what = field.endsWith(".description") ? "is needed by" : "cannot be rendered by";
      throw new RequestFieldError(field, `${what} ${e.source}'s chat template: ${e.problem}`);
    }
    const ids = encodeRendered(tok, rendered.text, rendered.spans);
    const bos = tok.bosId;
    if (addBos && bos !== null && ids[0] !== bos) ids.unshift(bos);
    if (ids.length === 0) throw new RequestFieldError("messages", "render to an empty prompt");
    return ids;
  } catch (e) {
    if (e instanceof RequestFieldError || !(e instanceof InputError || e instanceof ChatTemplateError)) throw e;
    throw new RequestFieldError("messages", `cannot be rendered: ${e.message}`);
  }
}

/** The variables a request adds to a rendering: its template kwargs and its tools. */
function templateExtra(kwargs: Readonly<Record<string, unknown>> | null, tools: readonly unknown[] | null): Record<string, unknown> {
  return { ...kwargs, ...(tools === null ? {} : { tools }) };
}

/**
 * The request field a failed rendering is the fault of, found by rendering again without it: a
 * tool's description when the rendering works once every tool has one (Hermes' tool_use
 * template writes `tool.description` as it is), the tools when it works without them, the
 * template variables when it works without those, else the messages (also when it works as it
 * is: then the contents could not be read back from it). Only after a failure, and never after a
 * render limit stopped it: at most four more renderings, each within the limits.
 */
function renderingFault(
  template: ChatTemplate, messages: readonly ChatMessage[], addGenerationPrompt: boolean, kwargs: Readonly<Record<string, unknown>> | null, tools: readonly unknown[] | null,
): string {
  const renders = (k: typeof kwargs, t: typeof tools): boolean => {
    try {
      template.render(messages, addGenerationPrompt, templateExtra(k, t));
      return true;
    } catch (e) {
      if (e instanceof ChatTemplateError) return false;
      throw e;
    }
  };
  // Nothing else to blame; or it renders, and what failed was reading the contents back from the rendering (control text in them).
  if ((tools === null && kwargs === null) || renders(kwargs, tools)) return "messages";
  if (tools !== null) {
    const missing = tools.findIndex((t) => functionOf(t)?.description === undefined);
    const described = tools.map((t) => (functionOf(t)?.description === undefined ? { ...(t as object), function: { ...functionOf(t), description: "" } } : t));
    if (missing >= 0 && renders(kwargs, described)) return `tools[${missing}].function.description`;
    if (renders(kwargs, null)) return "tools";
  }
  if (kwargs !== null && renders(null, tools)) return "chatTemplateKwargs";
  return "messages";
}

/** A tool's `function` object (OpenAI's shape), if it has one. */
function functionOf(tool: unknown): Record<string, unknown> | undefined {
  const f = typeof tool === "object" && tool !== null ? (tool as Record<string, unknown>).function : undefined;
  return typeof f === "object" && f !== null ? (f as Record<string, unknown>) : undefined;
}

/** The rendering of `messages` with the generation prompt, and its content spans. */
function wholeRendering(template: ChatTemplate, tok: Tokenizer, messages: readonly ChatMessage[], extra: Record<string, unknown>): { text: string; spans: ContentSpan[] } {
  const text = template.render(messages, true, extra);
  return { text, spans: contentSpans(template, tok, text, messages, true, extra) };
}

/** A tool result, or an assistant message with calls. */
function usesTools(m: ChatMessage): boolean {
  return m.role === "tool" || m.tool_calls !== undefined;
}

/** An optional system message, then user and assistant messages in turn. */
function isTurnTaking(messages: readonly ChatMessage[]): boolean {
  const rest = messages[0]?.role === "system" ? messages.slice(1) : messages;
  return rest.every((m, i) => m.role === (i % 2 === 0 ? "user" : "assistant"));
}
