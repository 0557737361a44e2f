/**
 * `POST /v1/chat/completions`: the messages rendered with the chat template into one prompt, n
 * samples of it, answered as a `chat.completion` or streamed as `chat.completion.chunk`s (the
 * role in each choice's first delta, its finish_reason in its last).
 */
import type { LLM } from "../engine/llm.ts";
import { asApiError } from "./api-error.ts";
import type { BodyFields } from "./body-fields.ts";
import { readChatRequest } from "./chat-request.ts";
import { NO_ECHO, runGeneration, type Choice, type GenerationContext, type ResponseShape } from "./generation-run.ts";
import { chatLogprobs } from "./logprobs-format.ts";
import { chatPromptIds } from "./chat-prompt.ts";
import { checkSamples } from "./generation-fields.ts";
import { checkModel } from "./models.ts";

export async function chatCompletions(llm: LLM, ctx: GenerationContext, fields: BodyFields): Promise<Response> {
  const request = readChatRequest(fields);
  checkModel(request.model, ctx.model);
  checkSamples(request.spec, llm.engine.options.maxNumSeqs);
  const prompt = chatPromptIds(llm, request.messages, request.templateKwargs);
  try {
    return await runGeneration(ctx, "chatcmpl", [prompt], [NO_ECHO], request.spec, chatShape(llm, request.spec.logprobs !== undefined));
  } catch (e) {
    // The context is exceeded by the prompt alone, or by max_tokens.
    throw asApiError(e, [prompt].some((p) => p.length > llm.config.seqLen) ? "messages" : "max_tokens");
  }
}

function chatShape(llm: LLM, logprobs: boolean): ResponseShape {
  const tok = llm.tokenizer;
  return {
    object: "chat.completion",
    chunkObject: "chat.completion.chunk",
    choice: (c: Choice) => ({
      index: c.index,
      message: { role: "assistant", content: c.seq.text },
      logprobs: logprobs ? { content: chatLogprobs(tok, c.seq, 0, c.seq.outputTokenIds.length) } : null,
      finish_reason: c.seq.finishReason,
    }),
    openingChoice: (c: Choice) => ({ index: c.index, delta: { role: "assistant", content: "" }, logprobs: null, finish_reason: null }),
    chunkChoice: (c: Choice, delta: string, from: number, to: number, finishReason: string | null) => ({
      index: c.index,
      delta: delta === "" ? {} : { content: delta },
      logprobs: logprobs ? { content: chatLogprobs(tok, c.seq, from, to) } : null,
      finish_reason: finishReason,
    }),
  };
}
