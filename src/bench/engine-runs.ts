/**
 * Measurements through the engine's front door, the way requests really run: a model loaded with
 * LLM.load, decode and time to first token through llm.generate, steady-state batches timed step
 * by step with the front door's step reports (so the timed window holds only decode steps).
 */
import { InputError } from "../errors.ts";
import type { WebGpuBackend } from "../backend/webgpu/backend.ts";
import { expertTypes } from "../backend/device-choice.ts";
import { openCheckpoint } from "../model/load.ts";
import type { StepReport } from "../llm/engine-client.ts";
import type { EngineOptions } from "../engine/engine-options.ts";
import type { GenerateRequest } from "../llm/generate-request.ts";
import { LLM, type CompletionResult } from "../llm/llm.ts";
import { repeat, summarize, type RepeatOptions, type Summary } from "./measure.ts";
import type { BenchModel } from "./bench-models.ts";
import { TokenSource } from "./token-source.ts";

/**
 * Load `model` with `engine` options (on `gpu` when given, else WebAssembly), run `fn`, and always
 * stop the worker threads and free the model's GPU buffers.
 */
export async function withLLM<T>(model: BenchModel, engine: Partial<EngineOptions>, fn: (llm: LLM) => Promise<T>, gpu?: WebGpuBackend): Promise<T> {
  if (gpu !== undefined && model.config.experts !== undefined) await gpu.prepareExperts(expertTypes(openCheckpoint(model.path)));
  const llm = LLM.load({ model: model.path, tokenizer: model.tokenizer, engine, gpu });
  try {
    return await fn(llm);
  } finally {
    llm.close();
  }
}

/** A serving run in this process: what came back and what the engine counted. */
export interface InProcessRun {
  results: CompletionResult[];
  /** From submission to the last result. */
  seconds: number;
  promptTokens: number;
  outputTokens: number;
  /** Prompt tokens served from the prefix cache. */
  cachedTokens: number;
  stats: ReturnType<LLM["stats"]>;
}

/**
 * The benches' in-process serving core: a freshly loaded engine, an untimed `warmUp` request when
 * given, then every request submitted at once (LLM.generate, as `pagellm generate --prompts` runs
 * them) and timed to the last result. A failed request is an InputError naming `label`.
 */
export async function serveInProcess(
  model: BenchModel, engine: Partial<EngineOptions>, requests: readonly GenerateRequest[], o: { label: string; warmUp?: (llm: LLM) => GenerateRequest },
): Promise<InProcessRun> {
  return await withLLM(model, engine, async (llm): Promise<InProcessRun> => {
    if (o.warmUp !== undefined) await llm.generate([o.warmUp(llm)]);
    const t0 = performance.now();
    const results = await llm.generate(requests);
    const seconds = (performance.now() - t0) / 1000;
    const failed = results.find((r) => r.finish_reason === "error");
    if (failed) throw new InputError(`${o.label}: request ${failed.id} failed: ${failed.error}`);
    const total = (count: (r: CompletionResult) => number): number => results.reduce((n, r) => n + count(r), 0);
    return {
      results,
      seconds,
      promptTokens: total((r) => r.prompt_tokens),
      outputTokens: total((r) => r.completion_tokens),
      cachedTokens: total((r) => r.cached_tokens),
      stats: llm.stats(),
    };
  });
}

/** Greedy, no penalties: every figure is for the same deterministic work. */
export function greedyRequest(id: string, promptTokenIds: readonly number[], maxTokens: number): GenerateRequest {
  return { id, promptTokenIds, maxTokens, temperature: 0, repetitionPenalty: 1, seed: 0 };
}

export interface DecodeMeasurement {
  /** Milliseconds per generated token after the first, per repetition. */
  msPerToken: Summary;
  tokensPerSecond: Summary;
  /** Tokens the repetitions generated (fewer than asked when the model sampled a stop token). */
  generatedTokens: number;
}

/**
 * Single-sequence decode: per repetition, one request with a fresh `promptTokens`-token prompt
 * generating `genTokens` greedily; the time per token is (latency - ttft) / (tokens - 1), so the
 * prompt is out of it.
 */
export async function measureDecode(
  llm: LLM, opts: RepeatOptions & { promptTokens: number; genTokens: number; seed: number },
): Promise<DecodeMeasurement> {
  const source = new TokenSource(opts.seed, llm.config.vocabSize);
  const runs = await repeat(opts, async () => {
    const [r] = await llm.generate([{ promptTokenIds: source.prompt(opts.promptTokens), maxTokens: opts.genTokens, temperature: 0, repetitionPenalty: 1 }]);
    if (!r || r.finish_reason === "error") throw new InputError(`decode request failed: ${r?.error ?? "no result"}`);
    return { ms: (r.latency_ms - r.ttft_ms) / Math.max(1, r.completion_tokens - 1), tokens: r.completion_tokens };
  });
  const valid = runs.filter((r) => r.tokens > 1);
  if (valid.length === 0) throw new InputError("every decode repetition stopped at its first token (the model sampled a stop token)");
  const ms = valid.map((r) => r.ms);
  return {
    msPerToken: summarize(ms),
    tokensPerSecond: summarize(ms.map((m) => 1000 / m)),
    generatedTokens: runs.reduce((n, r) => n + r.tokens, 0),
  };
}

/** Time to first token, in ms, of one request per repetition, each with a fresh prompt from `prompt`. */
export async function measureTtft(llm: LLM, opts: RepeatOptions, prompt: (rep: number) => number[]): Promise<number[]> {
  return await repeat(opts, async (rep) => {
    const [r] = await llm.generate([{ promptTokenIds: prompt(rep), maxTokens: 1, temperature: 0 }]);
    if (!r || r.finish_reason === "error") throw new InputError(`request failed: ${r?.error ?? "no result"}`);
    return r.ttft_ms;
  });
}

export interface BatchMeasurement {
  numSeqs: number;
  /** Aggregate decode tokens per second over the timed steps, per repetition. */
  decodeTokensPerSecond: Summary;
  /** Prompt tokens per second while the batch's prompts were prefilled (chunked by the step budget). */
  prefillTokensPerSecond: Summary;
  /** Mean sequences per timed step (below numSeqs only if some sampled a stop token). */
  meanBatch: number;
}

export interface BatchOptions extends RepeatOptions {
  numSeqs: number;
  promptTokens: number;
  /** Decode steps timed per repetition. */
  steps: number;
  /** Decode steps run untimed before them. */
  warmupSteps: number;
  seed: number;
}

/**
 * Positions one sequence of a batch repetition may reach: its prompt, a token per step while the
 * batch's prompts are prefilled (the first admitted decode while later ones are still being
 * read, `budget` prompt tokens a step), then every decode step.
 */
export function batchPositions(o: Pick<BatchOptions, "numSeqs" | "promptTokens" | "steps" | "warmupSteps">, budget: number): number {
  const prefillSteps = Math.ceil((o.numSeqs * o.promptTokens) / budget) + 1;
  return o.promptTokens + prefillSteps + o.warmupSteps + o.steps + 1;
}

/**
 * Steady-state decode of `numSeqs` sequences: per repetition, submit them with fresh prompts, let
 * the steps run until every one is decoding (timed: the prefill figure), let the warm-up steps
 * pass, then time `steps` steps in which every sequence decodes one token (from the end of the
 * step before them to the end of the last, as the front door reports steps). The sequences are
 * aborted after, so each repetition starts from an empty batch.
 */
export async function measureBatch(llm: LLM, o: BatchOptions): Promise<BatchMeasurement> {
  const info = llm.info;
  const positions = batchPositions(o, info.maxNumBatchedTokens);
  if (positions > info.maxPositions) {
    throw new InputError(`a batch sequence needs ${positions} positions; the model's context (or KV pool) holds ${info.maxPositions}`);
  }
  // Sequences beyond the step's cap would wait for ones that never finish.
  if (o.numSeqs > info.maxNumSeqs) throw new InputError(`${o.numSeqs} sequences exceed the engine's cap of ${info.maxNumSeqs}`);
  const source = new TokenSource(o.seed, llm.config.vocabSize);
  const decode: number[] = [];
  const prefill: number[] = [];
  let batchSum = 0;
  let stepCount = 0;
  for (let rep = -o.warmup; rep < o.reps; rep++) {
    const requests = Array.from({ length: o.numSeqs }, (_, i) => greedyRequest(`batch-${rep}-${i}`, source.prompt(o.promptTokens), positions - o.promptTokens + 1));
    const run = await timeBatchSteps(llm, requests, o.warmupSteps, o.steps);
    if (rep >= 0) {
      prefill.push((o.numSeqs * o.promptTokens) / run.prefillSeconds);
      decode.push(run.tokens / run.decodeSeconds);
      batchSum += run.outputs;
      stepCount += o.steps;
    }
  }
  return {
    numSeqs: o.numSeqs,
    decodeTokensPerSecond: summarize(decode),
    prefillTokensPerSecond: summarize(prefill),
    meanBatch: batchSum / Math.max(1, stepCount),
  };
}

/** One batch repetition: the seconds until every request decodes, then the tokens, outputs and seconds of `steps` steps after `warmupSteps`. */
async function timeBatchSteps(
  llm: LLM, requests: readonly GenerateRequest[], warmupSteps: number, steps: number,
): Promise<{ prefillSeconds: number; decodeSeconds: number; tokens: number; outputs: number }> {
  const reports: StepReport[] = [];
  const stopListening = llm.client.onStep((r) => reports.push(r));
  const t0 = performance.now();
  const stream = llm.client.submit(requests);
  const started = new Set<string>();
  let prefillEnd = -1;
  let prefillSeconds = 0;
  try {
    for await (const output of stream) {
      if (output.tokenIds.length > 0 || output.finishReason !== null) started.add(output.requestId);
      if (prefillEnd < 0 && started.size === requests.length) {
        prefillSeconds = (performance.now() - t0) / 1000;
        prefillEnd = reports.length;
      }
      if (prefillEnd >= 0 && reports.length >= prefillEnd + warmupSteps + steps) break;
    }
  } finally {
    stopListening();
    stream.abort();
  }
  const timed = reports.slice(prefillEnd + warmupSteps, prefillEnd + warmupSteps + steps);
  if (prefillEnd < 0 || timed.length < steps) throw new InputError("the batch ended before its timed steps (a sequence reached its end)");
  const before = reports[prefillEnd + warmupSteps - 1]!;
  return {
    prefillSeconds,
    decodeSeconds: (timed.at(-1)!.endMs - before.endMs) / 1000,
    tokens: timed.reduce((n, r) => n + r.sampled, 0),
    outputs: timed.reduce((n, r) => n + r.outputs, 0),
  };
}
