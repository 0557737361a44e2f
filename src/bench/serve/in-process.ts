/**
 * The baseline of the serving floor: the same token-id requests through the engine in this
 * process, as `pagellm generate --prompts` runs them (LLM.generate: all submitted at once), with
 * the engine capped at the benchmark's concurrency so the same number run together as over HTTP.
 * Timed from submission to the last result, after a warm-up request, like the HTTP run.
 */
import { InputError } from "../../errors.ts";
import type { GenerateRequest } from "../../engine/llm.ts";
import { withLLM } from "../engine-runs.ts";
import type { BenchModel } from "../bench-models.ts";
import { distribution, type Distribution } from "./serving-metrics.ts";
import type { BenchRequest } from "./openai-client.ts";
import { TokenDraw } from "./serve-workloads.ts";

export interface InProcessResult {
  completed: number;
  durationS: number;
  outputTokens: number;
  outputTokensPerSecond: number;
  requestsPerSecond: number;
  /** Queueing included: every request is submitted at time zero. */
  ttftMs: Distribution | null;
  e2eMs: Distribution | null;
  cachedShare: number;
}

export interface InProcessOptions {
  threads: number;
  /** The servers' context. */
  ctxSize: number;
  concurrency: number;
  ignoreEos: boolean;
  /** Seed of the warm-up prompt. */
  seed: number;
}

function engineRequest(r: BenchRequest, ignoreEos: boolean): GenerateRequest {
  if (r.prompt.kind !== "tokens") throw new InputError(`${r.id}: the in-process baseline runs token-id requests only`);
  return { id: r.id, promptTokenIds: [...r.prompt.tokenIds], maxTokens: r.maxTokens, temperature: 0, ignoreEos };
}

export async function runInProcess(model: BenchModel, requests: readonly BenchRequest[], o: InProcessOptions): Promise<InProcessResult> {
  const list = requests.map((r) => engineRequest(r, o.ignoreEos));
  return await withLLM(model, { threads: o.threads, ctxSize: o.ctxSize, maxNumSeqs: o.concurrency }, async (llm) => {
    await llm.generate([{ id: "warm-up", promptTokenIds: new TokenDraw(o.seed + 7, llm.config.vocabSize).tokens(16), maxTokens: 4, temperature: 0 }]);
    const t0 = performance.now();
    const results = await llm.generate(list);
    const durationS = (performance.now() - t0) / 1000;
    const failed = results.find((r) => r.finish_reason === "error");
    if (failed) throw new InputError(`in-process baseline: request ${failed.id} failed: ${failed.error}`);
    const outputTokens = results.reduce((n, r) => n + r.completion_tokens, 0);
    const promptTokens = results.reduce((n, r) => n + r.prompt_tokens, 0);
    return {
      completed: results.length,
      durationS,
      outputTokens,
      outputTokensPerSecond: outputTokens / durationS,
      requestsPerSecond: results.length / durationS,
      ttftMs: distribution(results.map((r) => r.ttft_ms)),
      e2eMs: distribution(results.map((r) => r.latency_ms)),
      cachedShare: promptTokens === 0 ? 0 : results.reduce((n, r) => n + r.cached_tokens, 0) / promptTokens,
    };
  });
}
