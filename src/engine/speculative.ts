/**
 * Speculative decoding's settings and each sequence's drafting state (how a step proposes and
 * verifies drafts: speculation.ts).
 *
 * Adaptive: a verified draft token is not free. On WebAssembly a forward over T tokens of one
 * sequence costs about 1 + 0.6 (T - 1) single-token forwards (the products are compute-bound, see
 * docs/speculative.md), so a draft token at depth k, accepted with probability about rate^k, pays
 * only while rate^k beats that marginal cost. Each sequence keeps `rate`, a moving average of how
 * often a verified draft position was accepted, and drafts the longest k <= K with rate^k >=
 * DRAFT_THRESHOLD. A sequence whose drafts keep failing falls below it and stops drafting; while
 * it does not draft, its rate drifts back towards PRIOR_RATE, so after a pause (tens of steps) it
 * tries one token again. A loop (rate near 1) drafts K tokens every step.
 */
import { InputError } from "../errors.ts";
import { proposeNgram, type NgramRange } from "./ngram-proposer.ts";

export type SpeculativeMethod = "ngram";
export const SPECULATIVE_METHODS: readonly SpeculativeMethod[] = ["ngram"];

export interface SpeculativeOptions {
  method: SpeculativeMethod;
  /** Most draft tokens verified per step per sequence (K). */
  tokens: number;
  /** Suffix lengths the n-gram lookup tries, longest first. */
  ngram: NgramRange;
  /** Draft as long as the acceptance rate warrants (see above); false: always up to K (for tests and measurements). */
  adaptive: boolean;
}

export const DEFAULT_SPECULATIVE: SpeculativeOptions = { method: "ngram", tokens: 4, ngram: { min: 1, max: 4 }, adaptive: true };
/** Largest K accepted: a step's logit rows grow with it. */
export const MAX_SPEC_TOKENS = 32;
/** Draft depth k is verified only while rate^k is at least this (about a verified token's marginal cost). */
export const DRAFT_THRESHOLD = 0.65;
/** A new sequence's acceptance rate, and where a sequence that stopped drafting drifts back to. */
export const PRIOR_RATE = 0.8;
/** Weight of the past in the rate, per verified draft position. */
const RATE_DECAY = 0.9;
/** Per step without a draft, the rate moves this fraction of the way back to PRIOR_RATE. */
const RATE_DRIFT = 0.02;

/** Throws InputError unless the options are usable. */
export function checkSpeculative(o: SpeculativeOptions): void {
  if (!SPECULATIVE_METHODS.includes(o.method)) throw new InputError(`speculative method must be one of ${SPECULATIVE_METHODS.join(", ")}, got "${o.method}"`);
  if (!(Number.isInteger(o.tokens) && o.tokens >= 1 && o.tokens <= MAX_SPEC_TOKENS)) {
    throw new InputError(`speculative tokens must be an integer from 1 to ${MAX_SPEC_TOKENS}, got ${o.tokens}`);
  }
  const { min, max } = o.ngram;
  if (!(Number.isInteger(min) && Number.isInteger(max) && min >= 1 && max >= min)) {
    throw new InputError(`speculative n-gram range must be MIN:MAX with 1 <= MIN <= MAX, got ${min}:${max}`);
  }
  if (typeof o.adaptive !== "boolean") throw new InputError(`speculative adaptive must be true or false, got ${String(o.adaptive)}`);
}

/** "MIN:MAX" (or one number N for N:N) as an n-gram range; InputError naming `what` when it is not one. */
export function parseNgramRange(text: string, what = "n-gram range"): NgramRange {
  const m = /^\s*(\d+)\s*(?::\s*(\d+)\s*)?$/.exec(text);
  const min = m === null ? NaN : Number(m[1]);
  const max = m === null ? NaN : m[2] === undefined ? min : Number(m[2]);
  if (!(min >= 1 && max >= min)) throw new InputError(`${what} must be MIN:MAX with 1 <= MIN <= MAX (e.g. 1:4), got "${text}"`);
  return { min, max };
}

/** What speculation did for one request: tokens drafted and verified, and how many were accepted. */
export interface SpeculationCounts {
  drafted: number;
  accepted: number;
}

/** One sequence's drafting: proposals, the length its acceptance rate warrants, and its counts. */
export class Drafter {
  readonly counts: SpeculationCounts = { drafted: 0, accepted: 0 };
  /** Moving average of accepted / verified draft positions (a rejected position ends a draft's verified ones). */
  private rate = PRIOR_RATE;

  constructor(private readonly o: SpeculativeOptions) {}

  /** Current acceptance-rate estimate (0..1). */
  get acceptanceRate(): number {
    return this.rate;
  }

  /** Draft tokens the rate warrants now: the longest k <= K with rate^k >= DRAFT_THRESHOLD. */
  get draftLength(): number {
    if (!this.o.adaptive) return this.o.tokens;
    let k = 0;
    let p = this.rate;
    while (k < this.o.tokens && p >= DRAFT_THRESHOLD) {
      k++;
      p *= this.rate;
    }
    return k;
  }

  /** A draft of at most `limit` tokens to follow `tokens`, or [] (the rate warrants none, or no match). */
  propose(tokens: readonly number[], limit: number): number[] {
    const length = Math.min(this.draftLength, limit);
    if (length === 0) {
      this.rate += RATE_DRIFT * (PRIOR_RATE - this.rate);
      return [];
    }
    return proposeNgram(tokens, this.o.ngram, length);
  }

  /**
   * After a verification of `drafted` tokens (> 0) of which the first `accepted` were accepted.
   * The positions verified are the accepted ones and, when one was rejected, that one: later
   * positions were never compared.
   */
  record(drafted: number, accepted: number): void {
    this.counts.drafted += drafted;
    this.counts.accepted += accepted;
    const verified = accepted < drafted ? accepted + 1 : accepted;
    for (let k = 0; k < verified; k++) this.rate = RATE_DECAY * this.rate + (1 - RATE_DECAY) * (k < accepted ? 1 : 0);
  }
}
