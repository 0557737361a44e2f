/**
 * Two ways of running the same requests, measured in the same run: each request on both back to
 * back, which goes first alternating from one request to the next, so that both see the same
 * machine (on a busy machine the load changes from second to second). The CPU time each way takes
 * (this process, user + system) is measured too: on a shared machine it is the steadier figure.
 */
import type { CompletionResult, GenerateRequest } from "../llm/llm.ts";
import { summarize, type RepeatOptions, type Summary } from "./measure.ts";

/** One repetition: each way's results (in request order) and CPU microseconds. */
export interface AlternatingRep {
  results: { a: CompletionResult[]; b: CompletionResult[] };
  cpu: { a: number; b: number };
}

/** The timed repetitions (warm-up ones run and dropped), and the last repetition run. */
export async function runAlternating(
  requests: readonly GenerateRequest[], o: RepeatOptions, run: (which: "a" | "b", request: GenerateRequest) => Promise<CompletionResult>,
): Promise<{ reps: AlternatingRep[]; last: AlternatingRep }> {
  const reps: AlternatingRep[] = [];
  let last: AlternatingRep = { results: { a: [], b: [] }, cpu: { a: 0, b: 0 } };
  let turn = 0;
  for (let rep = -o.warmup; rep < o.reps; rep++) {
    const r: AlternatingRep = { results: { a: [], b: [] }, cpu: { a: 0, b: 0 } };
    for (const request of requests) {
      const order = (turn++ & 1) === 0 ? (["a", "b"] as const) : (["b", "a"] as const);
      for (const which of order) {
        const before = process.cpuUsage();
        r.results[which].push(await run(which, request));
        const used = process.cpuUsage(before);
        r.cpu[which] += used.user + used.system;
      }
    }
    last = r;
    if (rep >= 0) reps.push(r);
  }
  return { reps, last };
}

/** Tokens/s after each request's first token, over the requests. */
export function decodeTokensPerSecond(results: readonly CompletionResult[]): number {
  const tokens = results.reduce((n, r) => n + Math.max(0, r.completion_tokens - 1), 0);
  const seconds = results.reduce((n, r) => n + (r.latency_ms - r.ttft_ms) / 1000, 0);
  return seconds > 0 ? tokens / seconds : Number.NaN;
}

/**
 * Over the repetitions: each way's decode tokens/s, and the medians of b / a tokens/s and of a / b
 * CPU time per generated token (above 1: b is faster).
 */
export function alternatingRates(reps: readonly AlternatingRep[]): { a: Summary; b: Summary; ratio: number; cpuRatio: number } {
  const a = reps.map((r) => decodeTokensPerSecond(r.results.a));
  const b = reps.map((r) => decodeTokensPerSecond(r.results.b));
  const cpuPerToken = (cpu: number, results: readonly CompletionResult[]) => cpu / Math.max(1, results.reduce((n, r) => n + r.completion_tokens, 0));
  const cpu = reps.map((r) => cpuPerToken(r.cpu.a, r.results.a) / cpuPerToken(r.cpu.b, r.results.b));
  return { a: summarize(a), b: summarize(b), ratio: summarize(b.map((x, i) => x / a[i]!)).median, cpuRatio: summarize(cpu).median };
}
