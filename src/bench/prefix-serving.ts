/**
 * One serving run: every request of a workload submitted at once to a freshly loaded engine (so
 * each configuration starts with a cold cache), run to completion, and summarised the way serving
 * benchmarks report: output tokens/s, time to first token percentiles (queueing included: all
 * requests arrive at time zero), prefix-cache hit rate, evictions and preemptions.
 */
import type { EngineOptions } from "../engine/engine-options.ts";
import type { SchedulePolicy } from "../engine/scheduler.ts";
import type { EvictionPolicyName } from "../kv/eviction.ts";
import { serveInProcess } from "./engine-runs.ts";
import { summarize, type Summary } from "./measure.ts";
import type { BenchModel } from "./bench-models.ts";
import type { Workload } from "./prefix-workloads.ts";

export interface ServingConfig {
  cache: boolean;
  schedule: SchedulePolicy;
  /** Meaningless with the cache off. */
  evictionPolicy: EvictionPolicyName;
}

export interface ServingResult extends ServingConfig {
  wallSeconds: number;
  promptTokens: number;
  /** Prompt tokens served from the cache (each request's hit at admission). */
  cachedTokens: number;
  outputTokens: number;
  outputTokensPerSecond: number;
  /** Prompt and output tokens per second. */
  totalTokensPerSecond: number;
  ttftMs: Summary;
  /** Engine counters: prefix hits / lookups, in tokens (vLLM's definition). */
  hitRate: number;
  evictions: number;
  preemptions: number;
}

export function configLabel(c: ServingConfig): string {
  return c.cache ? `on ${c.schedule} ${c.evictionPolicy}` : "off";
}

export async function runServing(
  model: BenchModel, workload: Workload, config: ServingConfig, engine: Partial<EngineOptions>,
): Promise<ServingResult> {
  const options: Partial<EngineOptions> = { ...engine, enablePrefixCaching: config.cache, schedule: config.schedule, evictionPolicy: config.evictionPolicy };
  const run = await serveInProcess(model, options, workload.requests, { label: workload.name });
  const s = run.stats;
  return {
    ...config,
    wallSeconds: run.seconds,
    promptTokens: run.promptTokens,
    cachedTokens: run.cachedTokens,
    outputTokens: run.outputTokens,
    outputTokensPerSecond: run.outputTokens / run.seconds,
    totalTokensPerSecond: (run.outputTokens + run.promptTokens) / run.seconds,
    ttftMs: summarize(run.results.map((r) => r.ttft_ms)),
    hitRate: s.prefixQueries === 0 ? 0 : s.prefixHits / s.prefixQueries,
    evictions: s.evictions,
    preemptions: s.preemptions,
  };
}
