/**
 * `POST /v1/completions`: each prompt (text, tokenized with BOS as the model expects, or token
 * ids as given) with n samples, answered as a `text_completion` or streamed. `echo` puts the
 * prompt's text before the generated text; with `logprobs` too, the prompt's tokens come with
 * their log-probabilities (the first has none), and `max_tokens: 0` scores the prompt without
 * generating, as lm-evaluation-harness asks for loglikelihoods.
 */
import type { RequestInput } from "../llm/generate-request.ts";
import type { Tokenizer } from "../tokenizer/tokenizer.ts";
import type { BodyFields } from "./body-fields.ts";
import { readCompletionRequest, type PromptInput } from "./completion-request.ts";
import { MAX_N, requestError, type GenerationSpec } from "./generation-fields.ts";
import { responseId, runGeneration, type Choice, type ChoiceDelta, type Echo, type GenerationContext, type ResponseShape, type Usage } from "./generation-run.ts";
import type { LogprobEntry } from "../llm/sample-fold.ts";
import { completionLogprobs, type CompletionLogprobs } from "./logprobs-format.ts";
import { checkModel } from "./models.ts";
import { promptLogprobs, type PromptLogprobs } from "./prompt-logprobs.ts";
import { SseStream } from "./sse.ts";

export async function completions(tokenizer: Tokenizer, ctx: GenerationContext, fields: BodyFields): Promise<Response> {
  const request = readCompletionRequest(fields, ctx.maxPrompts, ctx.defaults);
  checkModel(request.model, ctx.model);
  const spec = request.spec;
  const param = (i: number) => (request.prompts.length === 1 ? "prompt" : `prompt[${i}]`);
  // Every prompt checked (and tokenized) before anything runs: a bad one refuses the whole request.
  const prepared = request.prompts.map((p, i) => {
    try {
      // max_tokens 0 scores an echoed prompt only: checked as if it generated one token.
      return ctx.client.prepare(requestOf(p, spec, request.scoreOnly), { maxSamples: MAX_N });
    } catch (e) {
      throw requestError(e, spec, param(i));
    }
  });
  const echoes = await Promise.all(
    request.prompts.map(async (p, i): Promise<Echo> => {
      if (!request.echo) return { text: "", logprobs: null };
      const ids = prepared[i]!.promptTokenIds;
      const text = "text" in p ? p.text : tokenizer.decode([...ids]);
      const logprobs = spec.logprobs === null ? null : await promptLogprobs(tokenizer, ctx.client, ids, spec.logprobs);
      return { text, logprobs };
    }),
  );
  if (request.scoreOnly) return echoOnly(ctx, prepared.map((p) => p.promptTokenIds.length), echoes, spec);
  return await runGeneration(ctx, "cmpl", prepared, echoes, spec, completionShape(tokenizer, spec.logprobs !== null));
}

/** One prompt's request: the shared fields and the prompt as text or token ids. */
function requestOf(p: PromptInput, spec: GenerationSpec, scoreOnly: boolean): RequestInput {
  const fields = scoreOnly ? { ...spec.fields, maxTokens: 1 } : spec.fields;
  return "text" in p ? { ...fields, prompt: p.text } : { ...fields, promptTokenIds: p.tokenIds };
}

function completionShape(tok: Tokenizer, logprobs: boolean): ResponseShape {
  // Where each streamed choice's next token starts in its text (echo included).
  const offsets = new Map<Choice, number>();
  return {
    object: "text_completion",
    chunkObject: "text_completion",
    choice: (c: Choice) => ({
      index: c.index,
      text: c.echo.text + c.text,
      logprobs: logprobs ? withPrompt(c.echo.logprobs, completionLogprobs(tok, c.logprobs, c.echo.text.length)) : null,
      finish_reason: c.finishReason,
    }),
    // The echoed prompt comes first, as its own chunk.
    openingChoice: (c: Choice) => (c.echo.text === "" && c.echo.logprobs === null ? null : echoChoice(c.index, c.echo, null)),
    chunkChoice: (c: Choice, delta: ChoiceDelta, entries: readonly LogprobEntry[], finishReason: string | null) => {
      let part: CompletionLogprobs | null = null;
      if (logprobs) {
        part = completionLogprobs(tok, entries, offsets.get(c) ?? c.echo.text.length);
        const last = part.tokens.length - 1;
        if (last >= 0) offsets.set(c, part.text_offset[last]! + part.tokens[last]!.length);
      }
      return { index: c.index, text: delta.text, logprobs: part, finish_reason: finishReason };
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
function echoOnly(ctx: GenerationContext, promptLengths: readonly number[], echoes: readonly Echo[], spec: GenerationSpec): Response {
  const envelope = { id: responseId("cmpl"), object: "text_completion", created: Math.floor(Date.now() / 1000), model: ctx.model };
  const choices = echoes.flatMap((echo, p) => Array.from({ length: spec.n }, (_, i) => echoChoice(p * spec.n + i, echo, "length")));
  const prompt = promptLengths.reduce((n, p) => n + p, 0);
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
