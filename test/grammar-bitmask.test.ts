/**
 * Applying a token bitmask to logits: the sampler's path against a plain scalar loop, bitwise, on
 * odd sizes (not multiples of the 32 tokens of a mask word) over many random masks, all-ones and
 * all-zeros words included.
 */
import { describe, expect, test } from "bun:test";
import { allocateTokenBitmask, allowedTokens, applyTokenBitmask, isAllowed } from "../src/grammar/token-bitmask.ts";
import { Xoshiro128 } from "../src/util/random.ts";

/** The reference: one token at a time. */
function scalarApply(logits: Float32Array, mask: Uint32Array): void {
  for (let t = 0; t < logits.length; t++) if (((mask[t >>> 5]! >>> (t & 31)) & 1) === 0) logits[t] = -Infinity;
}

function randomCase(rng: Xoshiro128): { logits: Float32Array; mask: Uint32Array } {
  const n = 1 + Math.floor(rng.nextFloat() * 700);
  const logits = new Float32Array(n);
  for (let i = 0; i < n; i++) logits[i] = (rng.nextFloat() - 0.5) * 40;
  const mask = allocateTokenBitmask(n);
  const style = Math.floor(rng.nextFloat() * 4);
  for (let w = 0; w < mask.length; w++) {
    // Dense, sparse, all-ones and all-zeros words, mixed.
    const kind = style === 3 ? Math.floor(rng.nextFloat() * 4) : style;
    mask[w] = kind === 0 ? rng.nextUint32() : kind === 1 ? rng.nextUint32() & rng.nextUint32() & rng.nextUint32() : kind === 2 ? 0xffffffff : 0;
  }
  return { logits, mask };
}

const bits = (a: Float32Array): Uint32Array => new Uint32Array(a.buffer.slice(a.byteOffset, a.byteOffset + a.byteLength));

describe("token bitmask on logits", () => {
  test("applyTokenBitmask equals the scalar loop bitwise", () => {
    const rng = new Xoshiro128(21);
    for (let iter = 0; iter < 500; iter++) {
      const { logits, mask } = randomCase(rng);
      const want = logits.slice();
      scalarApply(want, mask);
      applyTokenBitmask(logits, mask);
      expect(bits(logits)).toEqual(bits(want));
    }
  });

  test("mask helpers", () => {
    const mask = allocateTokenBitmask(70);
    expect(mask.length).toBe(3);
    mask[0] = 0b101;
    mask[2] = 1 << 5;
    expect(allowedTokens(mask, 70)).toEqual([0, 2, 69]);
    expect(isAllowed(mask, 1)).toBe(false);
  });
});
