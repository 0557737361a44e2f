/**
 * Seeded random inputs for kernel tests.
 */
import type { Xoshiro128 } from "../../src/util/random.ts";
import type { Scratch } from "./wasm-scratch.ts";

/** n floats uniform in [-scale, scale). */
export function randomArray(rng: Xoshiro128, n: number, scale = 1): Float32Array {
  const a = new Float32Array(n);
  for (let i = 0; i < n; i++) a[i] = (rng.nextFloat() * 2 - 1) * scale;
  return a;
}

/** An integer in [lo, hi]. */
export function randInt(rng: Xoshiro128, lo: number, hi: number): number {
  return lo + Math.floor(rng.nextFloat() * (hi - lo + 1));
}

/** A sequence of a paged-attention batch: `count` new tokens from batch row `start`, ending its `ctx` positions. */
export interface PagedSequence {
  start: number;
  count: number;
  ctx: number;
  table: number[];
}

/**
 * `numSeqs` sequences with random context lengths (at most maxCtx, and what their share of the
 * pool holds) and chunks of new tokens (at most maxCount), with block tables drawn from a shuffled
 * pool of numBlocks blocks; their SEQ_INFO records are written to scratch at `info`.
 */
export function randomPagedSequences(
  rng: Xoshiro128, s: Scratch, o: { numSeqs: number; numBlocks: number; blockSize: number; maxCtx: number; maxCount: number },
): { seqs: PagedSequence[]; info: number; T: number } {
  const perm = Array.from({ length: o.numBlocks }, (_, i) => i).sort(() => rng.nextFloat() - 0.5);
  const seqs: PagedSequence[] = [];
  const records: number[] = [];
  let T = 0;
  let nextBlock = 0;
  for (let q = 0; q < o.numSeqs; q++) {
    const ctx = randInt(rng, 1, Math.min(o.maxCtx, Math.floor((o.numBlocks / o.numSeqs) * o.blockSize)));
    const count = randInt(rng, 1, Math.min(ctx, o.maxCount));
    const table = perm.slice(nextBlock, nextBlock + Math.ceil(ctx / o.blockSize));
    nextBlock += table.length;
    seqs.push({ start: T, count, ctx, table });
    records.push(T, count, ctx, s.i32(table));
    T += count;
  }
  return { seqs, info: s.i32(records), T };
}
