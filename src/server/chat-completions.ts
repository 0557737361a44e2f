/**
 * `POST /v1/chat/completions`: the messages rendered with the chat template into one prompt (by
 * the engine's front door), n samples of it, answered as a `chat.completion` or streamed as
 * `chat.completion.chunk`s (the role in each choice's first delta, its finish_reason in its last).
 */
import type { PreparedRequest } from "../engine/engine-client.ts";
import type { Tokenizer } from "../tokenizer/tokenizer.ts";
import { MAX_N, requestError } from "./generation-fields.ts";
import type { BodyFields } from "./body-fields.ts";
import { readChatRequest } from "./chat-request.ts";
import { NO_ECHO, runGeneration, type Choice, type GenerationContext, type ResponseShape } from "./generation-run.ts";
import { chatLogprobs, type LogprobEntry } from "./logprobs-format.ts";
import { checkModel } from "./models.ts";

export async function chatCompletions(tokenizer: Tokenizer, ctx: GenerationContext, fields: BodyFields): Promise<Response> {
  const request = readChatRequest(fields);
  checkModel(request.model, ctx.model);
  const spec = request.spec;
  let prepared: PreparedRequest;
  try {
    prepared = ctx.client.prepare({ ...spec.fields, messages: request.messages, chatTemplateKwargs: request.templateKwargs ?? undefined }, { maxSamples: MAX_N });
  } catch (e) {
    throw requestError(e, spec, "messages");
  }
  return await runGeneration(ctx, "chatcmpl", [prepared], [NO_ECHO], spec, chatShape(tokenizer, spec.logprobs !== null));
}

function chatShape(tok: Tokenizer, logprobs: boolean): ResponseShape {
  return {
    object: "chat.completion",
    chunkObject: "chat.completion.chunk",
    choice: (c: Choice) => ({
      index: c.index,
      message: { role: "assistant", content: c.text },
      logprobs: logprobs ? { content: chatLogprobs(tok, c.logprobs) } : null,
      finish_reason: c.finishReason,
    }),
    openingChoice: (c: Choice) => ({ index: c.index, delta: { role: "assistant", content: "" }, logprobs: null, finish_reason: null }),
    chunkChoice: (c: Choice, delta: string, entries: readonly LogprobEntry[], finishReason: string | null) => ({
      index: c.index,
      delta: delta === "" ? {} : { content: delta },
      logprobs: logprobs ? { content: chatLogprobs(tok, entries) } : null,
      finish_reason: finishReason,
    }),
  };
}
