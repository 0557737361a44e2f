/**
 * Picks the next token from a row of logits. Each request owns its sampler and its random
 * stream, so what it samples never depends on what else is in the batch.
 *
 * Order (as vLLM and llama.cpp): logit bias, repetition penalty (over the last repeatLastN tokens,
 * prompt included), frequency and presence penalties (OpenAI's, over the generated tokens only),
 * a constraint's token mask, temperature, top-k, top-p, min-p, then a draw. Temperature 0 is greedy: the first index of the
 * largest (biased and penalised) logit, as run.c.
 */
import { Xoshiro128 } from "../util/random.ts";
import { applyTokenBitmask } from "../constraint/token-constraint.ts";

export interface SamplingParams {
  /** 0 = greedy. */
  temperature: number;
  /** Keep the k most likely tokens; 0 = off. */
  topK: number;
  /** Keep the smallest set whose probability reaches p; 1 = off. */
  topP: number;
  /** Drop tokens less likely than minP times the most likely; 0 = off. */
  minP: number;
  /** Divide positive (multiply negative) logits of recently seen tokens by this; 1 = off. */
  repetitionPenalty: number;
  /** How many of the latest tokens (prompt included) the penalty looks at. */
  repeatLastN: number;
  /** Subtract this times a token's count among the generated tokens from its logit; 0 = off. */
  frequencyPenalty: number;
  /** Subtract this from the logit of every token generated at least once; 0 = off. */
  presencePenalty: number;
  /** Added to the logits of these token ids before anything else (OpenAI's logit_bias); empty = off. */
  logitBias: ReadonlyMap<number, number>;
  /** Seed of this request's random stream. */
  seed: number;
}

export const DEFAULT_SAMPLING: SamplingParams = {
  temperature: 0.8,
  topK: 40,
  topP: 0.95,
  minP: 0.05,
  repetitionPenalty: 1.0,
  repeatLastN: 64,
  frequencyPenalty: 0,
  presencePenalty: 0,
  logitBias: new Map(),
  seed: 0,
};

/**
 * Sampling's work arrays, one vocabulary long, sized once. The engine shares one among all its
 * sequences (sampling is synchronous, one sequence at a time): per sequence they would take
 * 8 bytes x vocabulary x sequences (64 sequences of a 150k vocabulary: 77 MB; of millions: GBs).
 */
export class SamplerWork {
  scratch = new Float32Array(0);
  order = new Int32Array(0);

  /** The arrays, at least n long. */
  fit(n: number): this {
    if (this.scratch.length < n) {
      this.scratch = new Float32Array(n);
      this.order = new Int32Array(n);
    }
    return this;
  }
}

export class Sampler {
  private readonly rng: Xoshiro128;
  /** Work arrays when the caller gives none. */
  private ownWork: SamplerWork | null = null;

  constructor(readonly params: SamplingParams) {
    this.rng = new Xoshiro128(params.seed);
  }

  /**
   * Sample from logits (read only); `history` is every token so far, the generated ones from index
   * `outputStart` on (for the penalties); `work` holds the intermediate arrays (its contents are
   * overwritten).
   */
  sample(
    logits: Float32Array, history: ArrayLike<number>, work: SamplerWork = (this.ownWork ??= new SamplerWork()), outputStart = history.length,
    mask: Uint32Array | null = null,
  ): number {
    const p = this.params;
    work.fit(logits.length);
    const x = this.penalised(logits, history, outputStart, work.scratch.subarray(0, logits.length));
    // A constraint's mask last: a disallowed token's logit is -Infinity, whatever else moved it.
    if (mask !== null) applyTokenBitmask(x, mask);
    if (p.temperature <= 0) return argmax(x);
    const n = x.length;
    // probabilities at this temperature, unnormalised: exp((l - max) / T)
    const max = x[argmax(x)]!;
    for (let i = 0; i < n; i++) x[i] = Math.exp((x[i]! - max) / p.temperature);
    const candidates = this.candidates(x, work.order.subarray(0, n));
    return this.draw(x, candidates);
  }

  /** logits with the bias and the penalties applied, in `x` (the work array, as long as the logits). */
  private penalised(logits: Float32Array, history: ArrayLike<number>, outputStart: number, x: Float32Array): Float32Array {
    const p = this.params;
    x.set(logits);
    for (const [t, bias] of p.logitBias) if (t < x.length) x[t] = x[t]! + bias;
    if (p.repetitionPenalty !== 1 && p.repeatLastN > 0) {
      const seen = new Set<number>();
      for (let i = Math.max(0, history.length - p.repeatLastN); i < history.length; i++) seen.add(history[i]!);
      for (const t of seen) {
        const v = x[t]!;
        x[t] = v > 0 ? v / p.repetitionPenalty : v * p.repetitionPenalty;
      }
    }
    if (p.frequencyPenalty !== 0 || p.presencePenalty !== 0) {
      const counts = new Map<number, number>();
      for (let i = outputStart; i < history.length; i++) counts.set(history[i]!, (counts.get(history[i]!) ?? 0) + 1);
      for (const [t, count] of counts) x[t] = x[t]! - p.frequencyPenalty * count - p.presencePenalty;
    }
    return x;
  }

  /** Indices that survive top-k, top-p and min-p, most likely first (all of them, unsorted, when none applies). */
  private candidates(prob: Float32Array, order: Int32Array): Int32Array {
    const p = this.params;
    const n = prob.length;
    if (p.topK <= 0 && p.topP >= 1 && p.minP <= 0) {
      // Plain temperature sampling draws over the whole vocabulary: no sort needed.
      for (let i = 0; i < n; i++) order[i] = i;
      return order;
    }
    let count = 0;
    let total = 0;
    for (let i = 0; i < n; i++) total += prob[i]!;
    // Tokens below min-p (the top token's probability is exp(0) = 1 here) or far below the top-p
    // tail can never be kept: drop them before sorting, as run.c does for top-p.
    const floor = Math.max(p.minP, p.topP < 1 ? ((1 - p.topP) / (n - 1)) * total : 0);
    for (let i = 0; i < n; i++) if (prob[i]! >= floor) order[count++] = i;
    const kept = order.subarray(0, count);
    kept.sort((a, b) => prob[b]! - prob[a]! || a - b);
    let keep = p.topK > 0 ? Math.min(p.topK, count) : count;
    if (p.topP < 1) {
      let sum = 0;
      for (let i = 0; i < keep; i++) sum += prob[kept[i]!]!;
      let cum = 0;
      for (let i = 0; i < keep; i++) {
        cum += prob[kept[i]!]!;
        if (cum >= p.topP * sum) {
          keep = i + 1;
          break;
        }
      }
    }
    return kept.subarray(0, Math.max(1, keep));
  }

  private draw(prob: Float32Array, candidates: Int32Array): number {
    let sum = 0;
    for (let i = 0; i < candidates.length; i++) sum += prob[candidates[i]!]!;
    const r = this.rng.nextFloat() * sum;
    let cum = 0;
    for (let i = 0; i < candidates.length; i++) {
      cum += prob[candidates[i]!]!;
      if (r < cum) return candidates[i]!;
    }
    return candidates[candidates.length - 1]!;
  }
}

/** First index of the largest value. */
export function argmax(x: ArrayLike<number>): number {
  let best = 0;
  let bestValue = x[0]!;
  for (let i = 1; i < x.length; i++) {
    if (x[i]! > bestValue) {
      bestValue = x[i]!;
      best = i;
    }
  }
  return best;
}
