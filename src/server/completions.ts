/**
 * `POST /v1/completions`: each prompt (text, tokenized with BOS as the model expects, or token
 * ids as given) with n samples, answered as a `text_completion` or streamed. `echo` puts the
 * prompt's text before the generated text; with `logprobs` too, the prompt's tokens come with
 * their log-probabilities (the first has none), and `max_tokens: 0` scores the prompt without
 * generating, as lm-evaluation-harness asks for loglikelihoods.
 */
import type { LLM } from "../engine/llm.ts";
import { asApiError } from "./api-error.ts";
import type { BodyFields } from "./body-fields.ts";
import { readCompletionRequest } from "./completion-request.ts";
import { checkSamples, type GenerationSpec } from "./generation-fields.ts";
import { responseId, runGeneration, type Choice, type Echo, type GenerationContext, type ResponseShape, type Usage } from "./generation-run.ts";
import { completionLogprobs, type CompletionLogprobs } from "./logprobs-format.ts";
import { checkModel } from "./models.ts";
import { promptLogprobs, type PromptLogprobs } from "./prompt-logprobs.ts";
import { SseStream } from "./sse.ts";

export async function completions(llm: LLM, ctx: GenerationContext, fields: BodyFields): Promise<Response> {
  const request = readCompletionRequest(fields, llm.config.vocabSize);
  checkModel(request.model, ctx.model);
  checkSamples(request.spec, llm.engine.options.maxNumSeqs);
  const spec = request.spec;
  const prompts = request.prompts.map((p) => ("text" in p ? llm.encode(p.text) : p.tokenIds));
  // The context is exceeded by the prompt alone, or by max_tokens.
  const param = prompts.some((p) => p.length > llm.config.seqLen) ? "prompt" : "max_tokens";
  try {
    const echoes = await Promise.all(
      request.prompts.map(async (p, i): Promise<Echo> => {
        if (!request.echo) return { text: "", logprobs: null };
        const text = "text" in p ? p.text : llm.tokenizer.decode(prompts[i]!);
        const logprobs = spec.logprobs === undefined ? null : await promptLogprobs(llm, ctx.loop, prompts[i]!, spec.logprobs);
        return { text, logprobs };
      }),
    );
    if (spec.maxTokens === 0) return echoOnly(ctx, prompts, echoes, spec);
    return await runGeneration(ctx, "cmpl", prompts, echoes, spec, completionShape(llm, spec.logprobs !== undefined));
  } catch (e) {
    throw asApiError(e, param);
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
      text: c.echo.text + c.seq.text,
      logprobs: logprobs ? withPrompt(c.echo.logprobs, completionLogprobs(tok, c.seq, 0, c.seq.outputTokenIds.length, c.echo.text.length)) : null,
      finish_reason: c.seq.finishReason,
    }),
    // The echoed prompt comes first, as its own chunk.
    openingChoice: (c: Choice) => (c.echo.text === "" && c.echo.logprobs === null ? null : echoChoice(c.index, c.echo, null)),
    chunkChoice: (c: Choice, delta: string, from: number, to: number, finishReason: string | null) => {
      let part: CompletionLogprobs | null = null;
      if (logprobs) {
        part = completionLogprobs(tok, c.seq, from, to, offsets.get(c) ?? c.echo.text.length);
        const last = part.tokens.length - 1;
        if (last >= 0) offsets.set(c, part.text_offset[last]! + part.tokens[last]!.length);
      }
      return { index: c.index, text: delta, logprobs: part, finish_reason: finishReason };
    },
  };
}

/** A prompt's log-probabilities in the completion shape: offsets from 0, token by token. */
function promptPart(p: PromptLogprobs): { tokens: string[]; token_logprobs: (number | null)[]; top_logprobs: (Record<string, number> | null)[]; text_offset: number[] } {
  const text_offset: number[] = [];
  let at = 0;
  for (const t of p.tokens) {
    text_offset.push(at);
    at += t.length;
  }
  return { ...p, text_offset };
}

/** The prompt's log-probabilities (when echoed with logprobs) followed by the generated tokens'. */
function withPrompt(prompt: PromptLogprobs | null, generated: CompletionLogprobs): Record<string, unknown> {
  if (prompt === null) return { ...generated };
  const p = promptPart(prompt);
  return {
    tokens: [...p.tokens, ...generated.tokens],
    token_logprobs: [...p.token_logprobs, ...generated.token_logprobs],
    top_logprobs: [...p.top_logprobs, ...generated.top_logprobs],
    text_offset: [...p.text_offset, ...generated.text_offset],
  };
}

function echoChoice(index: number, echo: Echo, finishReason: string | null): Record<string, unknown> {
  return { index, text: echo.text, logprobs: echo.logprobs === null ? null : promptPart(echo.logprobs), finish_reason: finishReason };
}

/** max_tokens 0 with echo: the prompts (and their log-probabilities), nothing generated. */
function echoOnly(ctx: GenerationContext, prompts: readonly number[][], echoes: readonly Echo[], spec: GenerationSpec): Response {
  const envelope = { id: responseId("cmpl"), object: "text_completion", created: Math.floor(Date.now() / 1000), model: ctx.model };
  const choices = echoes.flatMap((echo, p) => Array.from({ length: spec.n }, (_, i) => echoChoice(p * spec.n + i, echo, "length")));
  const prompt = prompts.reduce((n, p) => n + p.length, 0);
  const usage: Usage = { prompt_tokens: prompt, completion_tokens: 0, total_tokens: prompt, prompt_tokens_details: { cached_tokens: 0 } };
  ctx.onDone(usage);
  if (!spec.stream) return Response.json({ ...envelope, choices, usage });
  const sse = new SseStream(() => {});
  const usageField = spec.includeUsage ? { usage: null } : {};
  for (const choice of choices) sse.send({ ...envelope, choices: [choice], ...usageField });
  if (spec.includeUsage) sse.send({ ...envelope, choices: [], usage });
  sse.finish();
  return sse.response();
}
