// ============================================================================================
// The token loop every block-type product shares
// ============================================================================================
//
// A product walks one weight row at a time, unpacks each 32-value group once to int8 and then
// applies it to every token of the call, so a prefill or batched step reads each weight once.
// Per token the running sums live in `acc` (per-thread scratch): acc[t] (f32x4) for the scaled
// integer dots, then mins[t] (f32, after T vectors) for the weights' minimum terms.

import { accumulate, dot16, sumLanes } from "./common";

/** Bytes of per-thread scratch a product over T tokens needs. */
export function groupScratchBytes(T: i32): i32 {
  return T * 20;
}

@inline export function clearSums(acc: usize, T: i32): void {
  memory.fill(acc, 0, <usize>(T * 20));
}

/**
 * For every token t: acc[t] += dot(group (lo, hi), token t's group g) * (wScale * xd[t][g]).
 * lo holds the group's values 0..15, hi 16..31.
 */
@inline export function applyGroup(lo: v128, hi: v128, wScale: f32, g: i32, xq: usize, xd: usize, T: i32, cols: i32, acc: usize): void {
  const nb = cols >> 5;
  for (let t = 0; t < T; t++) {
    const xp = xq + <usize>(t * cols + (g << 5));
    const isum = i32x4.add(dot16(lo, v128.load(xp)), dot16(hi, v128.load(xp, 16)));
    const a = acc + (<usize>t << 4);
    v128.store(a, accumulate(v128.load(a), isum, wScale * load<f32>(xd + (<usize>(t * nb + g) << 2))));
  }
}

/**
 * Two 16-value halves with integer sub-scales (K-quants with 16-value sub-blocks): for every token
 * acc[t] += (dot(lo) * scLo + dot(hi) * scHi) * (wScale * xd[t][g]), the sub-scaled sum exact.
 */
@inline export function applyGroupScaled(
  lo: v128, hi: v128, scLo: i32, scHi: i32, wScale: f32, g: i32, xq: usize, xd: usize, T: i32, cols: i32, acc: usize,
): void {
  const nb = cols >> 5;
  const sLo = i32x4.splat(scLo);
  const sHi = i32x4.splat(scHi);
  for (let t = 0; t < T; t++) {
    const xp = xq + <usize>(t * cols + (g << 5));
    const isum = i32x4.add(i32x4.mul(dot16(lo, v128.load(xp)), sLo), i32x4.mul(dot16(hi, v128.load(xp, 16)), sHi));
    const a = acc + (<usize>t << 4);
    v128.store(a, accumulate(v128.load(a), isum, wScale * load<f32>(xd + (<usize>(t * nb + g) << 2))));
  }
}

/**
 * A weight minimum over one 32-value group (x = d*q + m): for every token,
 * mins[t] += m * (xd[t][g] * f32(sum of token t's quantized group)).
 */
@inline export function applyGroupMin(m: f32, g: i32, xd: usize, xs: usize, T: i32, cols: i32, acc: usize): void {
  const nb = cols >> 5;
  const mins = acc + (<usize>T << 4);
  for (let t = 0; t < T; t++) {
    const s = load<i32>(xs + (<usize>(t * (nb << 1) + (g << 1)) << 2)) + load<i32>(xs + (<usize>(t * (nb << 1) + (g << 1) + 1) << 2));
    const p = mins + (<usize>t << 2);
    store<f32>(p, load<f32>(p) + m * (load<f32>(xd + (<usize>(t * nb + g) << 2)) * <f32>s));
  }
}

/**
 * Minimums of two 16-value halves with integer sub-minimums (Q2_K): for every token,
 * mins[t] += m * (xd[t][g] * f32(mLo * sum16(lo half) + mHi * sum16(hi half))).
 */
@inline export function applyGroupMinScaled(m: f32, mLo: i32, mHi: i32, g: i32, xd: usize, xs: usize, T: i32, cols: i32, acc: usize): void {
  const nb = cols >> 5;
  const mins = acc + (<usize>T << 4);
  for (let t = 0; t < T; t++) {
    const s = mLo * load<i32>(xs + (<usize>(t * (nb << 1) + (g << 1)) << 2)) + mHi * load<i32>(xs + (<usize>(t * (nb << 1) + (g << 1) + 1) << 2));
    const p = mins + (<usize>t << 2);
    store<f32>(p, load<f32>(p) + m * (load<f32>(xd + (<usize>(t * nb + g) << 2)) * <f32>s));
  }
}

/** out[t][r] = the finished sums of row r for every token. */
@inline export function storeRow(out: usize, r: i32, T: i32, outStride: i32, acc: usize): void {
  const mins = acc + (<usize>T << 4);
  for (let t = 0; t < T; t++) {
    store<f32>(out + (<usize>(t * outStride + r) << 2), sumLanes(v128.load(acc + (<usize>t << 4))) + load<f32>(mins + (<usize>t << 2)));
  }
}
