/**
 * The prompt of a chat request's messages. A conversation of the usual shape (an optional system
 * message, then user and assistant messages in turn, ending with a user message) is built as
 * `pagellm chat` builds it, so each turn's prompt is an exact token prefix of the next and the
 * prefix cache serves the history. Other shapes (several system messages, two user messages in
 * a row), which OpenAI clients send too, are rendered whole by the model's Jinja template, as
 * vLLM and llama.cpp render them; a built-in format has no rules for them (400). So are the
 * messages of a request with `chat_template_kwargs` (vLLM's: template variables for this request).
 */
import { encodeRendered, contentSpans } from "../chat/render-tokens.ts";
import type { ChatMessage } from "../chat/jinja-template.ts";
import type { LLM } from "../engine/llm.ts";
import { InputError } from "../errors.ts";
import { ApiError, asApiError } from "./api-error.ts";

export function chatPromptIds(llm: LLM, messages: readonly ChatMessage[], kwargs: Record<string, unknown> | null): number[] {
  const last = messages.at(-1)!;
  if (last.role !== "user") throw ApiError.badField(`messages[${messages.length - 1}].role`, "the last message must be the user's");
  try {
    if (kwargs !== null && llm.chatFormat.kind !== "jinja") {
      throw ApiError.badField("chat_template_kwargs", "'chat_template_kwargs' needs a Jinja chat template; this server's format is built in");
    }
    if ((isTurnTaking(messages) && kwargs === null) || llm.chatFormat.kind !== "jinja") return llm.messagesPromptIds(messages);
    const template = llm.chatFormat.template;
    const text = template.render(messages, true, kwargs ?? {});
    const ids = encodeRendered(llm.tokenizer, text, contentSpans(template, llm.tokenizer, text, messages, true, kwargs ?? {}));
    const bos = llm.tokenizer.bosId;
    if (llm.addBos && bos !== null && ids[0] !== bos) ids.unshift(bos);
    if (ids.length === 0) throw new InputError("the messages render to an empty prompt");
    return ids;
  } catch (e) {
    throw asApiError(e, "messages");
  }
}

/** An optional system message, then user and assistant messages in turn. */
function isTurnTaking(messages: readonly ChatMessage[]): boolean {
  const rest = messages[0]?.role === "system" ? messages.slice(1) : messages;
  return rest.every((m, i) => m.role === (i % 2 === 0 ? "user" : "assistant"));
}
