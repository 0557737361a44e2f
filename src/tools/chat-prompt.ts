/**
 * A conversation's prompt with its tools: the messages rendered by the chat format (the template's
 * `tools` variable; for a template that cannot render tools, their description in the system
 * message, the generic fallback), and how the replies are read (ReplySetup: from the template and
 * the end of the rendered prompt, which says whether the template opened the reasoning), with the
 * ids of the control tokens the replies must show for their calls to be read.
 */
import { messagesPromptIds, type ChatFormat } from "../chat/formats.ts";
import type { ChatMessage } from "../chat/jinja-template.ts";
import type { Tokenizer } from "../tokenizer/tokenizer.ts";
import { replySetup, toolSystemPrompt, type ReplySetup } from "./reply-reader.ts";
import type { CheckedTools } from "./tool-types.ts";

/** A conversation's prompt. */
export interface ChatPrompt {
  ids: number[];
  /** How its replies are read into content, reasoning and tool calls; null: as plain text. */
  reply: ReplySetup | null;
  /** Control tokens the replies must show as text (the reply format's markers). */
  shownTokenIds: readonly number[];
}

/** Prompt tokens decoded to see how a prompt ends (an opened `<think>` and a newline fit in far fewer). */
const TAIL_TOKENS = 8;

export function chatPrompt(
  format: ChatFormat, tok: Tokenizer, addBos: boolean, messages: readonly ChatMessage[], kwargs: Readonly<Record<string, unknown>> | null, tools: CheckedTools | null,
): ChatPrompt {
  const templateText = format.kind === "jinja" ? format.template.text : null;
  const planned = replySetup(templateText, "", tools);
  let rendered = [...messages];
  const system = toolSystemPrompt(planned);
  if (system !== null) rendered = withSystemText(rendered, system);
  if (planned?.format.name === "mistral") rendered = rendered.map(mistralIds);
  const ids = messagesPromptIds(format, tok, addBos, rendered, kwargs, tools === null ? null : tools.tools);
  const reply = replySetup(templateText, tok.decode(ids.slice(-TAIL_TOKENS)), tools);
  return { ids, reply, shownTokenIds: reply === null ? [] : controlIds(tok, reply.preservedTokens) };
}

/** `text` at the end of the first system message, or as a system message of its own. */
function withSystemText(messages: ChatMessage[], text: string): ChatMessage[] {
  const first = messages[0];
  if (first?.role === "system") return [{ ...first, content: `${first.content}\n\n${text}` }, ...messages.slice(1)];
  return [{ role: "system", content: text }, ...messages];
}

/**
 * Mistral's templates refuse call ids that are not 9 letters and digits (they raise): other ids
 * in the history are shortened to their last 9 (as vLLM does), padded with zeros if shorter, the
 * same way for a call and its result.
 */
function mistralIds(m: ChatMessage): ChatMessage {
  if (m.tool_calls === undefined && m.tool_call_id === undefined) return m;
  const out: ChatMessage = { ...m };
  if (m.tool_calls !== undefined) out.tool_calls = m.tool_calls.map((c) => ({ ...c, id: mistralId(c.id) }));
  if (m.tool_call_id !== undefined) out.tool_call_id = mistralId(m.tool_call_id);
  return out;
}

export function mistralId(id: string): string {
  return id.replace(/[^A-Za-z0-9]/g, "").slice(-9).padStart(9, "0");
}

/** The ids of those texts that are one control token each (text that decodes to nothing). */
function controlIds(tok: Tokenizer, texts: readonly string[]): number[] {
  const ids: number[] = [];
  for (const text of texts) {
    const encoded = tok.encode(text, { parseSpecial: true, continuation: true });
    if (encoded.length === 1 && tok.decode(encoded) === "") ids.push(encoded[0]!);
  }
  return ids;
}
