/**
 * Speculative decoding's settings and each sequence's drafting state.
 *
 * How a step speculates (engine.ts, scheduler.ts, model-runner.ts): before scheduling, every
 * running sequence may get a draft (ngram-proposer.ts); the scheduler runs its last token and as
 * much of the draft as the step's leftover budget and free KV blocks allow, like a prefill chunk;
 * the model returns logits at each of those positions; the sampler then draws, position by
 * position, exactly what it would have drawn decoding one token at a time (the same logits, by
 * batch invariance; the same random stream, one draw per token; the same history for penalties),
 * accepting while the draw equals the draft. The first difference is the sampled token itself, so
 * every verification yields at least one token and the output is the same bits as without.
 *
 * Adaptive: a draft of which nothing was accepted costs a wider forward for one token. After such a
 * miss the sequence stops drafting for a pause that doubles with each consecutive miss (1, 2, 4 ...
 * MAX_PAUSE_STEPS steps) and resets on any accepted token, so text without repetition drafts
 * about once in MAX_PAUSE_STEPS steps.
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
}

export const DEFAULT_SPECULATIVE: SpeculativeOptions = { method: "ngram", tokens: 4, ngram: { min: 1, max: 4 } };
/** Largest K accepted: a step's logit rows grow with it. */
export const MAX_SPEC_TOKENS = 32;
/** Longest pause after consecutive misses, in steps. */
export const MAX_PAUSE_STEPS = 64;

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

/** One sequence's drafting: proposals, the pause after misses, and its counts. */
export class Drafter {
  readonly counts: SpeculationCounts = { drafted: 0, accepted: 0 };
  /** Steps left before the next proposal. */
  private pauseLeft = 0;
  /** Length of the pause the next miss starts (doubles per consecutive miss). */
  private nextPause = 1;

  constructor(private readonly o: SpeculativeOptions) {}

  /** A draft of at most `limit` tokens to follow `tokens`, or [] (pausing, or no match). */
  propose(tokens: readonly number[], limit: number): number[] {
    if (this.pauseLeft > 0) {
      this.pauseLeft--;
      return [];
    }
    return proposeNgram(tokens, this.o.ngram, Math.min(this.o.tokens, limit));
  }

  /** After a verification of `drafted` tokens (> 0) of which the first `accepted` were accepted. */
  record(drafted: number, accepted: number): void {
    this.counts.drafted += drafted;
    this.counts.accepted += accepted;
    if (accepted > 0) {
      this.nextPause = 1;
      return;
    }
    this.pauseLeft = this.nextPause;
    this.nextPause = Math.min(2 * this.nextPause, MAX_PAUSE_STEPS);
  }
}
