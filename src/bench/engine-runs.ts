/**
 * Measurements through the engine, the way requests really run: a model loaded with LLM.load,
 * decode and time to first token through llm.generate, steady-state batches through LLMEngine's
 * step() directly (so the timed window holds only decode steps).
 */
import { InputError } from "../errors.ts";
import type { WebGpuBackend } from "../backend/webgpu/backend.ts";
import { expertTypes } from "../backend/device-choice.ts";
import { openCheckpoint } from "../model/load.ts";
import type { EngineOptions, LLMEngine } from "../engine/engine.ts";
import { LLM } from "../engine/llm.ts";
import { DEFAULT_SAMPLING } from "../engine/sampler.ts";
import type { GenerationParams } from "../engine/sequence.ts";
import { repeat, summarize, type RepeatOptions, type Summary } from "./measure.ts";
import type { BenchModel } from "./models.ts";
import { TokenSource } from "./prompts.ts";

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

/** Greedy, no penalties: every figure is for the same deterministic work. */
export function greedyParams(maxTokens: number): GenerationParams {
  return { maxTokens, stop: [], sampling: { ...DEFAULT_SAMPLING, temperature: 0, repetitionPenalty: 1, seed: 0 } };
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
 * Steady-state decode of `numSeqs` sequences: per repetition, admit them with fresh prompts, step
 * until every one is decoding (timed: the prefill figure), run the warm-up steps, then time
 * `steps` steps in which every sequence decodes one token. The sequences are aborted after, so
 * each repetition starts from an empty batch.
 */
export async function measureBatch(engine: LLMEngine, o: BatchOptions): Promise<BatchMeasurement> {
  const positions = batchPositions(o, engine.options.maxNumBatchedTokens);
  if (positions > engine.maxPositions) {
    throw new InputError(`a batch sequence needs ${positions} positions; the model's context (or KV pool) holds ${engine.maxPositions}`);
  }
  // Sequences beyond the step's cap would wait for ones that never finish.
  if (o.numSeqs > engine.options.maxNumSeqs) throw new InputError(`${o.numSeqs} sequences exceed the engine's cap of ${engine.options.maxNumSeqs}`);
  const source = new TokenSource(o.seed, engine.config.vocabSize);
  const decode: number[] = [];
  const prefill: number[] = [];
  let batchSum = 0;
  let stepCount = 0;
  for (let rep = -o.warmup; rep < o.reps; rep++) {
    const seqs = Array.from({ length: o.numSeqs }, (_, i) =>
      engine.addRequest({ id: `batch-${rep}-${i}`, promptTokenIds: source.prompt(o.promptTokens), params: greedyParams(positions - o.promptTokens + 1) }),
    );
    try {
      let t0 = performance.now();
      while (seqs.some((s) => !s.isFinished && s.outputTokenIds.length === 0)) await engine.step();
      const prefillSeconds = (performance.now() - t0) / 1000;
      for (let i = 0; i < o.warmupSteps; i++) await engine.step();
      let tokens = 0;
      t0 = performance.now();
      for (let i = 0; i < o.steps; i++) {
        const events = await engine.step();
        const n = events.length;
        tokens += events.reduce((sum, e) => sum + e.numSampled, 0);
        if (rep >= 0) {
          batchSum += n;
          stepCount++;
        }
      }
      const decodeSeconds = (performance.now() - t0) / 1000;
      if (rep >= 0) {
        prefill.push((o.numSeqs * o.promptTokens) / prefillSeconds);
        decode.push(tokens / decodeSeconds);
      }
    } finally {
      for (const s of seqs) if (!s.isFinished) engine.abort(s);
    }
  }
  return {
    numSeqs: o.numSeqs,
    decodeTokensPerSecond: summarize(decode),
    prefillTokensPerSecond: summarize(prefill),
    meanBatch: batchSum / Math.max(1, stepCount),
  };
}
