/**
 * `POST /v1/completions`: each prompt (text, tokenized with BOS as the model expects, or token
 * ids as given) with n samples, answered as a `text_completion` or streamed; `echo` puts the
 * prompt's text before the generated text.
 */
import type { LLM } from "../engine/llm.ts";
import { asApiError } from "./api-error.ts";
import type { BodyFields } from "./body-fields.ts";
import { readCompletionRequest } from "./completion-request.ts";
import { runGeneration, type Choice, type GenerationContext, type ResponseShape } from "./generation-run.ts";
import { completionLogprobs, type CompletionLogprobs } from "./logprobs-format.ts";
import { checkModel } from "./models.ts";

export async function completions(llm: LLM, ctx: GenerationContext, fields: BodyFields): Promise<Response> {
  const request = readCompletionRequest(fields, llm.config.vocabSize);
  checkModel(request.model, ctx.model);
  const prompts = request.prompts.map((p) => ("text" in p ? llm.encode(p.text) : p.tokenIds));
  const echoes = request.prompts.map((p, i) => (!request.echo ? "" : "text" in p ? p.text : llm.tokenizer.decode(prompts[i]!)));
  try {
    return await runGeneration(ctx, "cmpl", prompts, echoes, request.spec, completionShape(llm, request.spec.logprobs !== undefined));
  } catch (e) {
    // The context is exceeded by the prompt alone, or by max_tokens.
    throw asApiError(e, prompts.some((p) => p.length > llm.config.seqLen) ? "prompt" : "max_tokens");
  }
}

function completionShape(llm: LLM, logprobs: boolean): ResponseShape {
  const tok = llm.tokenizer;
  // Where each streamed choice's next token starts in its text (echo included).
  const offsets = new Map<Choice, number>();
  return {
    object: "text_completion",
    chunkObject: "text_completion",
    choice: (c: Choice) => ({
      index: c.index,
      text: c.echo + c.seq.text,
      logprobs: logprobs ? completionLogprobs(tok, c.seq, 0, c.seq.outputTokenIds.length, c.echo.length) : null,
      finish_reason: c.seq.finishReason,
    }),
    // The echoed prompt comes first, as its own chunk.
    openingChoice: (c: Choice) => (c.echo === "" ? null : { index: c.index, text: c.echo, logprobs: null, finish_reason: null }),
    chunkChoice: (c: Choice, delta: string, from: number, to: number, finishReason: string | null) => {
      let part: CompletionLogprobs | null = null;
      if (logprobs) {
        part = completionLogprobs(tok, c.seq, from, to, offsets.get(c) ?? c.echo.length);
        const last = part.tokens.length - 1;
        if (last >= 0) offsets.set(c, part.text_offset[last]! + part.tokens[last]!.length);
      }
      return { index: c.index, text: delta, logprobs: part, finish_reason: finishReason };
    },
  };
}
