/**
 * `POST /v1/chat/completions`: the messages rendered with the chat template into one prompt (by
 * the engine's front door), n samples of it, answered as a `chat.completion` or streamed as
 * `chat.completion.chunk`s (the role in each choice's first delta, its finish_reason in its last).
 *
 * A conversation whose replies are read (tools offered, a template that reasons) answers with
 * the reader's message: `content`, `reasoning_content` apart (never inside content), and
 * `tool_calls` with `finish_reason: "tool_calls"`; streamed, `delta.reasoning_content`,
 * `delta.content` and `delta.tool_calls` (a call's first delta with its index, id, type and name,
 * then its arguments in pieces under the same index). A request with the legacy `functions` gets
 * its call as `function_call` (finish_reason "function_call").
 */
import type { PreparedRequest } from "../llm/input-processor.ts";
import type { Tokenizer } from "../tokenizer/tokenizer.ts";
import type { ReplyDelta } from "../tools/reply-reader.ts";
import { MAX_N, requestError } from "./generation-fields.ts";
import type { BodyFields } from "./body-fields.ts";
import { readChatRequest } from "./chat-request.ts";
import { NO_ECHO, runGeneration, type Choice, type ChoiceDelta, type GenerationContext, type ResponseShape } from "./generation-run.ts";
import type { LogprobEntry } from "../llm/sample-fold.ts";
import { chatLogprobs } from "./logprobs-format.ts";
import { checkModel } from "./models.ts";

export async function chatCompletions(tokenizer: Tokenizer, ctx: GenerationContext, fields: BodyFields): Promise<Response> {
  const request = readChatRequest(fields, ctx.defaults);
  checkModel(request.model, ctx.model);
  const spec = request.spec;
  let prepared: PreparedRequest;
  try {
    prepared = ctx.client.prepare({ ...spec.fields, messages: request.messages, chatTemplateKwargs: request.templateKwargs ?? undefined }, { maxSamples: MAX_N });
  } catch (e) {
    throw requestError(e, spec, "messages");
  }
  return await runGeneration(ctx, "chatcmpl", [prepared], [NO_ECHO], spec, chatShape(tokenizer, spec.logprobs !== null, request.legacyFunctions));
}

function chatShape(tok: Tokenizer, logprobs: boolean, legacy: boolean): ResponseShape {
  const finish = (c: Choice, reason: string | null) => callFinish(c, reason, legacy);
  return {
    object: "chat.completion",
    chunkObject: "chat.completion.chunk",
    choice: (c: Choice) => ({
      index: c.index,
      message: message(c, legacy),
      logprobs: logprobs ? { content: chatLogprobs(tok, c.logprobs) } : null,
      finish_reason: finish(c, c.finishReason),
    }),
    openingChoice: (c: Choice) => ({ index: c.index, delta: { role: "assistant", content: "" }, logprobs: null, finish_reason: null }),
    chunkChoice: (c: Choice, delta: ChoiceDelta, entries: readonly LogprobEntry[], finishReason: string | null) => ({
      index: c.index,
      delta: delta.reply === null ? (delta.text === "" ? {} : { content: delta.text }) : replyDelta(delta.reply, legacy),
      logprobs: logprobs ? { content: chatLogprobs(tok, entries) } : null,
      finish_reason: finish(c, finishReason),
    }),
  };
}

/** The assistant message of a whole choice. */
function message(c: Choice, legacy: boolean): Record<string, unknown> {
  if (c.reply === null) return { role: "assistant", content: c.text };
  const m = c.reply.message;
  const calls = m.toolCalls;
  const out: Record<string, unknown> = { role: "assistant", content: m.content === "" && calls.length > 0 ? null : m.content };
  if (m.reasoning !== "") out.reasoning_content = m.reasoning;
  if (calls.length > 0) {
    if (legacy) out.function_call = { ...calls[0]!.function };
    else out.tool_calls = calls.map((call) => ({ id: call.id, type: call.type, function: { ...call.function } }));
  }
  return out;
}

/** A streamed delta of a read reply: reasoning, content and calls, each only when there is some. */
function replyDelta(d: ReplyDelta, legacy: boolean): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  if (d.reasoning !== "") out.reasoning_content = d.reasoning;
  if (d.content !== "") out.content = d.content;
  if (d.toolCalls.length === 0) return out;
  if (legacy) {
    // One function call: its name first, then its arguments.
    const first = d.toolCalls.filter((c) => c.index === 0);
    if (first.length > 0) {
      const name = first.find((c) => c.name !== undefined)?.name;
      out.function_call = { ...(name === undefined ? {} : { name }), arguments: first.map((c) => c.arguments).join("") };
    }
    return out;
  }
  out.tool_calls = d.toolCalls.map((c) =>
    c.name === undefined ? { index: c.index, function: { arguments: c.arguments } } : { index: c.index, id: c.id, type: "function", function: { name: c.name, arguments: c.arguments } });
  return out;
}

/** A choice that ended with calls ends "tool_calls" ("function_call" for the legacy fields). */
function callFinish(c: Choice, reason: string | null, legacy: boolean): string | null {
  if (!c.endedWithCalls(reason)) return reason;
  return legacy ? "function_call" : "tool_calls";
}
