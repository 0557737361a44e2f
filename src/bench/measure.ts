/**
 * Repetition and summary statistics for the benchmarks. The machine a bench runs on is usually
 * shared and noisy (20-40% run to run), so every figure is a median over repetitions after a
 * warm-up, reported with its spread, and every comparison is a ratio of two medians taken in the
 * same run.
 */

export interface Summary {
  /** Repetitions summarised. */
  n: number;
  median: number;
  min: number;
  max: number;
  p50: number;
  p99: number;
}

export interface RepeatOptions {
  /** Untimed runs first: JIT tiers, page faults, caches. */
  warmup: number;
  /** Timed runs. */
  reps: number;
}

/** The p-th percentile (0..100) of ascending `sorted`, linearly interpolated (numpy's default). */
export function percentile(sorted: readonly number[], p: number): number {
  if (sorted.length === 0) return Number.NaN;
  const rank = (p / 100) * (sorted.length - 1);
  const lo = Math.floor(rank);
  const hi = Math.ceil(rank);
  return sorted[lo]! + (sorted[hi]! - sorted[lo]!) * (rank - lo);
}

export function summarize(samples: readonly number[]): Summary {
  if (samples.length === 0) throw new RangeError("summarize: no samples");
  const sorted = [...samples].sort((a, b) => a - b);
  const p50 = percentile(sorted, 50);
  return { n: sorted.length, median: p50, min: sorted[0]!, max: sorted[sorted.length - 1]!, p50, p99: percentile(sorted, 99) };
}

/** Run `fn` warmup + reps times; the values of the timed runs, in order. */
export async function repeat<T>(opts: RepeatOptions, fn: (rep: number) => T | Promise<T>): Promise<T[]> {
  for (let i = 0; i < opts.warmup; i++) await fn(-1 - i);
  const out: T[] = [];
  for (let i = 0; i < opts.reps; i++) out.push(await fn(i));
  return out;
}

/**
 * Seconds per call of a fast synchronous `fn`: calls are grouped into rounds of at least
 * `minRoundMs` (one call can be a few microseconds, below the timer's useful resolution), one
 * warm-up round, then `reps` rounds; one sample per round.
 */
export function secondsPerCall(fn: () => void, reps: number, minRoundMs = 20): number[] {
  // Calibrate the round size from one call, then grow it until a round is long enough.
  let calls = 1;
  for (;;) {
    const t0 = performance.now();
    for (let i = 0; i < calls; i++) fn();
    const ms = performance.now() - t0;
    if (ms >= minRoundMs) break;
    calls = ms <= 0 ? calls * 10 : Math.max(calls + 1, Math.ceil((calls * minRoundMs * 1.2) / ms));
  }
  const samples: number[] = [];
  for (let r = 0; r < reps; r++) {
    const t0 = performance.now();
    for (let i = 0; i < calls; i++) fn();
    samples.push((performance.now() - t0) / 1000 / calls);
  }
  return samples;
}

/** Ratio of two summaries' medians (NaN when the denominator is not positive). */
export function ratio(a: Summary, b: Summary): number {
  return b.median > 0 ? a.median / b.median : Number.NaN;
}

/** Rates from durations: `work` per second for each duration in seconds (min/max swap over). */
export function rateSummary(seconds: readonly number[], work: number): Summary {
  return summarize(seconds.map((s) => work / s));
}
