/**
 * The sampling side of constrained output: what the engine needs of a constraint on one
 * sequence's output, without knowing what it constrains or how it was compiled (the request's
 * ConstraintSpec and its compiler are src/grammar/constraint-spec.ts; the front door, src/llm/,
 * wires them together). The engine holds one TokenConstraint per sample: before each draw it
 * masks the logits to the tokens the constraint allows, after it the constraint accepts the token
 * drawn. Every decision depends only on the sequence's own tokens, so a constrained output is the
 * same bits at any batch size, thread count and cache state.
 */
/**
 * One sequence's place in a constraint. Invariants (GrammarMatcher's): a mask allows a token iff
 * acceptToken would take it; an end-of-generation token is allowed iff the output may end there;
 * rollback(n) restores exactly the state before the last n accepted tokens.
 */
export interface TokenConstraint {
  /** Fill `mask` (ceil(vocabulary / 32) words; bit t & 31 of word t >> 5 for token t) with the tokens allowed next. */
  fillNextTokenBitmask(mask: Uint32Array): void;
  /** Advance past `token`; false, changing nothing, when it is not allowed. */
  acceptToken(token: number): boolean;
  /** Undo the last `n` accepted tokens. */
  rollback(n: number): void;
  /** The tokens that are the only possible continuation now, in order ([] when there is a choice). */
  forcedTokens(): number[];
  /** An end-of-generation token was accepted: nothing else is allowed. */
  isTerminated(): boolean;
}

/**
 * A model that reasons before it answers (Qwen3's `<think>`, DeepSeek-R1's): the constraint holds
 * from where the reasoning ends. The tags are found in the tokens' text, whether the vocabulary
 * has them as tokens (Qwen3's, DeepSeek-R1's) or a reply writes them as text.
 */
export interface ReasoningMarkers {
  /** `<think>` and `</think>`, as bytes. */
  readonly start: Uint8Array;
  readonly end: Uint8Array;
  /** The bytes token `id` writes (a tag token: its tag). */
  tokenBytes(id: number): Uint8Array;
  /** The tokens that write `start` (or `end`) from its byte `at` on: the tag's own token where the vocabulary has one. */
  startTokens(at: number): readonly number[];
  endTokens(at: number): readonly number[];
}

/**
 * Whether a constrained output may end after the first tokens of what its constraint accepted (a
 * stop string ends it only where it may: docs/structured-output.md): the constraint is taken back
 * to there, asked whether it allows an end-of-generation token, and given the tokens again.
 */
export class EndCheck {
  constructor(
    /** A mask buffer to fill (the engine's: sampling does not need it once a token is drawn). */
    private readonly mask: Uint32Array,
    private readonly endTokens: ReadonlySet<number>,
  ) {}

  /** Whether the output may end after the first `kept` of `tokens`, all of which `constraint` has accepted; it is left as it was. */
  mayEndAfter(constraint: TokenConstraint, tokens: readonly number[], kept: number): boolean {
    const undone = tokens.slice(kept);
    constraint.rollback(undone.length);
    constraint.fillNextTokenBitmask(this.mask);
    let may = false;
    for (const t of this.endTokens) may ||= t >>> 5 < this.mask.length && isAllowed(this.mask, t);
    for (const t of undone) if (!constraint.acceptToken(t)) throw new Error(`the constraint refused token ${t}, which it had accepted`);
    return may;
  }
}

/** The tokens `mask` allows (bit t of word t >> 5). */
export function isAllowed(mask: Uint32Array, t: number): boolean {
  return ((mask[t >>> 5]! >>> (t & 31)) & 1) === 1;
}

/** logits[t] = -Infinity for each t < logits.length whose bit is clear; an allowed logit keeps its bits. */
export function applyTokenBitmask(logits: Float32Array, mask: Uint32Array): void {
  const n = logits.length;
  const words = n >>> 5;
  for (let w = 0; w < words; w++) {
    const word = mask[w]!;
    if (word === 0xffffffff) continue;
    const base = w << 5;
    if (word === 0) {
      logits.fill(-Infinity, base, base + 32);
      continue;
    }
    for (let b = 0; b < 32; b++) if (((word >>> b) & 1) === 0) logits[base + b] = -Infinity;
  }
  for (let t = words << 5; t < n; t++) if (!isAllowed(mask, t)) logits[t] = -Infinity;
}
