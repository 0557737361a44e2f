/**
 * Token bitmasks (bit t & 31 of word t >> 5 set: token t allowed, xgrammar's layout) and applying
 * one to a row of logits: a disallowed token's logit becomes -Infinity, an allowed one keeps its
 * bits, so sampling and greedy choice never pick a disallowed token. `applyTokenBitmask` works on
 * any Float32Array: the sampler (engine/sampler.ts) applies it to its working copy of the row it
 * samples, on every backend.
 */
import { isAllowed } from "../constraint/token-constraint.ts";

// The engine samples within a mask with these (src/constraint/token-constraint.ts): one copy of each.
export { applyTokenBitmask, isAllowed } from "../constraint/token-constraint.ts";

/** A zeroed bitmask for `vocabSize` tokens. */
export function allocateTokenBitmask(vocabSize: number): Uint32Array {
  return new Uint32Array(Math.ceil(vocabSize / 32));
}

/** The allowed token ids, ascending (tests and debugging). */
export function allowedTokens(mask: Uint32Array, vocabSize: number): number[] {
  const out: number[] = [];
  for (let t = 0; t < vocabSize; t++) if (isAllowed(mask, t)) out.push(t);
  return out;
}
