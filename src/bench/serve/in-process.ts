/**
 * The baseline of the serving floor: the same token-id requests through the engine in this
 * process, as `pagellm generate --prompts` runs them (LLM.generate: all submitted at once), with
 * the engine capped at the benchmark's concurrency so the same number run together as over HTTP.
 * Timed from submission to the last result, after a warm-up request, like the HTTP run.
 */
import { InputError } from "../../errors.ts";
import type { GenerateRequest } from "../../llm/llm.ts";
import { serveInProcess } from "../engine-runs.ts";
import type { BenchModel } from "../bench-models.ts";
import { distribution, type Distribution } from "./serving-metrics.ts";
import type { BenchRequest } from "./openai-client.ts";
import { servingTokens } from "./serve-workloads.ts";

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
  const run = await serveInProcess(model, { threads: o.threads, ctxSize: o.ctxSize, maxNumSeqs: o.concurrency }, requests.map((r) => engineRequest(r, o.ignoreEos)), {
    label: "in-process baseline",
    warmUp: (llm) => ({ id: "warm-up", promptTokenIds: servingTokens(o.seed + 7, llm.config.vocabSize).tokens(16), maxTokens: 4, temperature: 0 }),
  });
  return {
    completed: run.results.length,
    durationS: run.seconds,
    outputTokens: run.outputTokens,
    outputTokensPerSecond: run.outputTokens / run.seconds,
    requestsPerSecond: run.results.length / run.seconds,
    ttftMs: distribution(run.results.map((r) => r.ttft_ms)),
    e2eMs: distribution(run.results.map((r) => r.latency_ms)),
    cachedShare: run.promptTokens === 0 ? 0 : run.cachedTokens / run.promptTokens,
  };
}
