/**
 * What serving benchmarks report about a run (vLLM's benchmark_serving definitions): requests/s
 * and output tokens/s over the run's duration; time to first token, inter-token latency (the gap
 * between successive pieces of streamed text), time per output token after the first and
 * end-to-end latency as distributions over requests; the share of prompt tokens the server served
 * from its cache, from its own `usage` (null when it does not report it).
 */
import { percentile } from "../measure.ts";
import type { RequestFailure, RequestTiming } from "./openai-client.ts";
import type { ServeRun } from "./run.ts";

/** A latency distribution, ms. */
export interface Distribution {
  n: number;
  mean: number;
  p50: number;
  p90: number;
  p99: number;
  max: number;
}

/** Percentiles (numpy's linear interpolation) of the samples; null when there are none. */
export function distribution(samples: readonly number[]): Distribution | null {
  if (samples.length === 0) return null;
  const sorted = [...samples].sort((a, b) => a - b);
  return {
    n: sorted.length,
    mean: sorted.reduce((a, b) => a + b, 0) / sorted.length,
    p50: percentile(sorted, 50),
    p90: percentile(sorted, 90),
    p99: percentile(sorted, 99),
    max: sorted[sorted.length - 1]!,
  };
}

export interface ServeMetrics {
  completed: number;
  failed: number;
  /** Of the failed: cut by the time limit. */
  cut: number;
  unsent: number;
  durationS: number;
  requestsPerSecond: number;
  outputTokensPerSecond: number;
  outputTokens: number;
  /** Prompt tokens by the server's usage; null when some completed request had no usage. */
  promptTokens: number | null;
  ttftMs: Distribution | null;
  itlMs: Distribution | null;
  /** (end-to-end - TTFT) / (output tokens - 1) per request. */
  tpotMs: Distribution | null;
  e2eMs: Distribution | null;
  /** Cached / prompt tokens; null ("n/a") when the server does not report cached tokens. */
  cachedShare: number | null;
  /** The first failure not caused by the time limit, as one line. */
  firstError: string | null;
  stoppedBy: string | null;
}

/** Sum of a field over timings, or null when any lacks it. */
function sumOrNull(timings: readonly RequestTiming[], field: (t: RequestTiming) => number | null): number | null {
  let sum = 0;
  for (const t of timings) {
    const v = field(t);
    if (v === null) return null;
    sum += v;
  }
  return sum;
}

export function serveMetrics(run: ServeRun): ServeMetrics {
  const timings = run.outcomes.flatMap((o) => (o.ok ? [o.timing] : []));
  const failures: RequestFailure[] = run.outcomes.flatMap((o) => (o.ok ? [] : [o.failure]));
  const outputTokens = timings.reduce((n, t) => n + t.outputTokens, 0);
  const promptTokens = timings.length === 0 ? null : sumOrNull(timings, (t) => t.promptTokens);
  const cachedTokens = timings.length === 0 ? null : sumOrNull(timings, (t) => t.cachedTokens);
  const rate = (n: number) => (run.durationS > 0 ? n / run.durationS : Number.NaN);
  const serverError = failures.find((f) => !f.cut);
  return {
    completed: timings.length,
    failed: failures.length,
    cut: failures.filter((f) => f.cut).length,
    unsent: run.unsent,
    durationS: run.durationS,
    requestsPerSecond: rate(timings.length),
    outputTokensPerSecond: rate(outputTokens),
    outputTokens,
    promptTokens,
    ttftMs: distribution(timings.map((t) => t.ttftMs)),
    itlMs: distribution(timings.flatMap((t) => t.itlMs)),
    tpotMs: distribution(timings.filter((t) => t.outputTokens > 1).map((t) => (t.e2eMs - t.ttftMs) / (t.outputTokens - 1))),
    e2eMs: distribution(timings.map((t) => t.e2eMs)),
    cachedShare: cachedTokens === null || promptTokens === null || promptTokens === 0 ? null : cachedTokens / promptTokens,
    firstError: serverError === undefined ? null : `${serverError.id}: ${serverError.error}`,
    stoppedBy: run.stoppedBy,
  };
}
