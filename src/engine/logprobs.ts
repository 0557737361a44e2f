/**
 * Log-probabilities of the model's raw next-token distribution (before temperature, penalties or
 * truncation, as vLLM's default `raw_logprobs` and llama.cpp's perplexity report them), computed in
 * float64 from one row of logits.
 */

/** One candidate token and its log-probability. */
export interface TokenLogprob {
  id: number;
  logprob: number;
}

/** A generated token's log-probability and the k most likely tokens at its position. */
export interface SampledLogprob extends TokenLogprob {
  top: TokenLogprob[];
}

/** log(sum(exp(logits))), shifted by the maximum so that no term overflows. */
export function logSumExp(logits: ArrayLike<number>): number {
  let max = -Infinity;
  for (let i = 0; i < logits.length; i++) if (logits[i]! > max) max = logits[i]!;
  if (max === -Infinity) return -Infinity;
  let sum = 0;
  for (let i = 0; i < logits.length; i++) sum += Math.exp(logits[i]! - max);
  return max + Math.log(sum);
}

/**
 * Ids of the k largest logits, largest first; ties go to the lower id (the order argmax uses), so
 * the first id is always argmax(logits). One pass with a small sorted buffer: k is at most ~20.
 */
export function topKIds(logits: ArrayLike<number>, k: number): number[] {
  const n = Math.min(k, logits.length);
  const ids: number[] = [];
  for (let i = 0; i < logits.length; i++) {
    const v = logits[i]!;
    if (ids.length === n && !(v > logits[ids[n - 1]!]!)) continue;
    let at = ids.length === n ? n - 1 : ids.length;
    while (at > 0 && v > logits[ids[at - 1]!]!) at--;
    ids.splice(at, 0, i);
    if (ids.length > n) ids.pop();
  }
  return ids;
}

/** The log-probability of `id` and of the k most likely tokens under `logits`. */
export function sampledLogprob(logits: ArrayLike<number>, id: number, k: number): SampledLogprob {
  const lse = logSumExp(logits);
  return {
    id,
    logprob: logits[id]! - lse,
    top: topKIds(logits, k).map((t) => ({ id: t, logprob: logits[t]! - lse })),
  };
}
