// ============================================================================================
// One online-softmax step of paged attention: one query's batch of heads over one tile of keys
// ============================================================================================
//
// attention.ts walks the block tables and hands this file a tile: the row addresses of up to
// ATTN_TILE keys (values at a fixed offset after each) and up to HEAD_BATCH query heads that read
// the same kv head (grouped-query attention: nHeads / nKvHeads of them). The heads of a batch are
// computed together so that every K and V load (and, for an f16 cache read in place, every
// conversion) serves all of them: decode attention reads each cached value once per batch
// instead of once per head.
//
// Every score and every output element is still computed in one fixed order, whatever the batch:
//   score    q · k: one f32x4 accumulator over the head dimension in steps of 4, its lanes summed
//            as (l0 + l1) + (l2 + l3), then the scalar tail, then times 1/sqrt(headDim)
//   output   acc * alpha (when the running max rose), then + p[j] * v[j] for j in key order
// so the bits do not depend on how heads are batched, how keys fall into blocks or which thread
// runs an item.
//
// Keys and values are f32, or f16 read in place (`half`): halves widened in registers to
// value * 2^-112 (kv-types.ts halfRowScaled's bits), the query and the softmax weights carrying
// the 2^112 (attention.ts), so every product is the same real number, the same f32.

import { exp4, expScalar } from "./math";

/**
 * Positions per step of the online softmax. Fixed, and independent of the KV block size, so the
 * rounding of attention (and therefore the output) is the same whatever block size the cache uses.
 */
export const ATTN_TILE: i32 = 16;
/** Query heads computed together (registers: two keys x four heads of score sums, eight columns x four heads of output). */
export const HEAD_BATCH: i32 = 4;

@inline function hsum(v: v128): f32 {
  return (f32x4.extract_lane(v, 0) + f32x4.extract_lane(v, 1)) + (f32x4.extract_lane(v, 2) + f32x4.extract_lane(v, 3));
}

/** Four keys' or values' elements at p as f32x4: f32 loaded, or four halves as value * 2^-112 (sign-extending load, shift, mask). */
@inline function load4(p: usize, half: bool): v128 {
  return half ? v128.and(i32x4.shl(v128.load16x4_s(p), 13), i32x4.splat(0x8fffe000)) : v128.load(p);
}

/** load4's scalar tail: one element. */
@inline function load1(p: usize, half: bool): f32 {
  return half ? reinterpret<f32>((<i32>load<i16>(p) << 13) & 0x8fffe000) : load<f32>(p);
}

/** acc[0..n) *= s. */
@inline export function scaleRow(acc: usize, s: f32, n: i32): void {
  const n4 = n & ~3;
  const sv = f32x4.splat(s);
  for (let j = 0; j < n4; j += 4) v128.store(acc + (<usize>j << 2), f32x4.mul(v128.load(acc + (<usize>j << 2)), sv));
  for (let j = n4; j < n; j++) store<f32>(acc + (<usize>j << 2), load<f32>(acc + (<usize>j << 2)) * s);
}

/** p[j] = exp(scores[j] - m) in place for j < n; four at a time, same values as one at a time. */
@inline function expShifted(scores: usize, n: i32, m: f32): void {
  const mv = f32x4.splat(m);
  let j = 0;
  for (; j + 4 <= n; j += 4) {
    const p = scores + (<usize>j << 2);
    v128.store(p, exp4(f32x4.sub(v128.load(p), mv)));
  }
  for (; j < n; j++) {
    const p = scores + (<usize>j << 2);
    store<f32>(p, expScalar(load<f32>(p) - m));
  }
}

/** Finish head h's scores of keys j and j + 1 (the head dimension's scalar tail, the scale) and store them. */
@inline function storeScorePair(
  scores: usize, h: i32, j: i32, s0: f32, s1: f32, q: usize, headBytes: usize, k0: usize, k1: usize,
  n4: i32, headDim: i32, scale: f32, half: bool, shift: i32,
): void {
  const qh = q + <usize>h * headBytes;
  for (let c = n4; c < headDim; c++) {
    const qc = load<f32>(qh + (<usize>c << 2));
    s0 += qc * load1(k0 + (<usize>c << shift), half);
    s1 += qc * load1(k1 + (<usize>c << shift), half);
  }
  const at = scores + (<usize>(h * ATTN_TILE + j) << 2);
  store<f32>(at, s0 * scale);
  store<f32>(at, s1 * scale, 4);
}

/**
 * Scaled scores of hb heads (query rows q + h * headBytes) against the keys [0, n) at rows[], into
 * scores + h * ATTN_TILE. Two keys at a time: each K load serves the hb heads, each q load two keys.
 * `shift` is log2 of the element's bytes.
 */
@inline function batchScores(
  scores: usize, q: usize, headBytes: usize, rows: usize, n: i32, headDim: i32, scale: f32, hb: i32, half: bool, shift: i32,
): void {
  const n4 = headDim & ~3;
  let j = 0;
  for (; j + 2 <= n; j += 2) {
    const k0 = <usize>load<i32>(rows + (<usize>j << 2)), k1 = <usize>load<i32>(rows + (<usize>j << 2), 4);
    let a00 = f32x4.splat(0), a01 = f32x4.splat(0), a10 = f32x4.splat(0), a11 = f32x4.splat(0);
    let a20 = f32x4.splat(0), a21 = f32x4.splat(0), a30 = f32x4.splat(0), a31 = f32x4.splat(0);
    for (let c = 0; c < n4; c += 4) {
      const e = <usize>c << shift;
      const kv0 = load4(k0 + e, half), kv1 = load4(k1 + e, half);
      const o = <usize>c << 2;
      const q0 = v128.load(q + o);
      a00 = f32x4.add(a00, f32x4.mul(q0, kv0));
      a01 = f32x4.add(a01, f32x4.mul(q0, kv1));
      if (hb > 1) {
        const q1 = v128.load(q + headBytes + o);
        a10 = f32x4.add(a10, f32x4.mul(q1, kv0));
        a11 = f32x4.add(a11, f32x4.mul(q1, kv1));
      }
      if (hb > 2) {
        const q2 = v128.load(q + 2 * headBytes + o);
        a20 = f32x4.add(a20, f32x4.mul(q2, kv0));
        a21 = f32x4.add(a21, f32x4.mul(q2, kv1));
      }
      if (hb > 3) {
        const q3 = v128.load(q + 3 * headBytes + o);
        a30 = f32x4.add(a30, f32x4.mul(q3, kv0));
        a31 = f32x4.add(a31, f32x4.mul(q3, kv1));
      }
    }
    storeScorePair(scores, 0, j, hsum(a00), hsum(a01), q, headBytes, k0, k1, n4, headDim, scale, half, shift);
    if (hb > 1) storeScorePair(scores, 1, j, hsum(a10), hsum(a11), q, headBytes, k0, k1, n4, headDim, scale, half, shift);
    if (hb > 2) storeScorePair(scores, 2, j, hsum(a20), hsum(a21), q, headBytes, k0, k1, n4, headDim, scale, half, shift);
    if (hb > 3) storeScorePair(scores, 3, j, hsum(a30), hsum(a31), q, headBytes, k0, k1, n4, headDim, scale, half, shift);
  }
  // An odd last key: one head at a time, the same order.
  for (; j < n; j++) {
    const k = <usize>load<i32>(rows + (<usize>j << 2));
    for (let h = 0; h < hb; h++) {
      const qh = q + <usize>h * headBytes;
      let acc = f32x4.splat(0);
      for (let c = 0; c < n4; c += 4) acc = f32x4.add(acc, f32x4.mul(v128.load(qh + (<usize>c << 2)), load4(k + (<usize>c << shift), half)));
      let s = hsum(acc);
      for (let c = n4; c < headDim; c++) s += load<f32>(qh + (<usize>c << 2)) * load1(k + (<usize>c << shift), half);
      store<f32>(scores + (<usize>(h * ATTN_TILE + j) << 2), s * scale);
    }
  }
}

/**
 * acc_h = acc_h * alpha_h + sum over j < n of p_h[j] * v[j], for hb heads (output rows acc + h *
 * headBytes, weights p + h * ATTN_TILE, alphas[h]), value row j at rows[j] + vOffset. Eight columns
 * of every head stay in registers across the tile's keys; each V load serves the hb heads.
 */
@inline function batchValues(
  acc: usize, headBytes: usize, p: usize, alphas: usize, rows: usize, vOffset: usize, n: i32, headDim: i32, hb: i32, half: bool, shift: i32,
): void {
  const al0 = v128.load32_splat(alphas), al1 = v128.load32_splat(alphas, 4), al2 = v128.load32_splat(alphas, 8), al3 = v128.load32_splat(alphas, 12);
  const p1 = p + (<usize>ATTN_TILE << 2), p2 = p + (<usize>(2 * ATTN_TILE) << 2), p3 = p + (<usize>(3 * ATTN_TILE) << 2);
  let c = 0;
  for (; c + 8 <= headDim; c += 8) {
    const a = acc + (<usize>c << 2);
    let a00 = f32x4.mul(v128.load(a), al0), a01 = f32x4.mul(v128.load(a, 16), al0);
    let a10 = f32x4.splat(0), a11 = f32x4.splat(0), a20 = f32x4.splat(0), a21 = f32x4.splat(0), a30 = f32x4.splat(0), a31 = f32x4.splat(0);
    if (hb > 1) { a10 = f32x4.mul(v128.load(a + headBytes), al1); a11 = f32x4.mul(v128.load(a + headBytes, 16), al1); }
    if (hb > 2) { a20 = f32x4.mul(v128.load(a + 2 * headBytes), al2); a21 = f32x4.mul(v128.load(a + 2 * headBytes, 16), al2); }
    if (hb > 3) { a30 = f32x4.mul(v128.load(a + 3 * headBytes), al3); a31 = f32x4.mul(v128.load(a + 3 * headBytes, 16), al3); }
    const col = vOffset + (<usize>c << shift);
    for (let j = 0; j < n; j++) {
      const vr = <usize>load<i32>(rows + (<usize>j << 2)) + col;
      const v0 = load4(vr, half), v1 = load4(vr + (<usize>4 << shift), half);
      const pj = <usize>j << 2;
      const w0 = v128.load32_splat(p + pj);
      a00 = f32x4.add(a00, f32x4.mul(w0, v0));
      a01 = f32x4.add(a01, f32x4.mul(w0, v1));
      if (hb > 1) {
        const w = v128.load32_splat(p1 + pj);
        a10 = f32x4.add(a10, f32x4.mul(w, v0));
        a11 = f32x4.add(a11, f32x4.mul(w, v1));
      }
      if (hb > 2) {
        const w = v128.load32_splat(p2 + pj);
        a20 = f32x4.add(a20, f32x4.mul(w, v0));
        a21 = f32x4.add(a21, f32x4.mul(w, v1));
      }
      if (hb > 3) {
        const w = v128.load32_splat(p3 + pj);
        a30 = f32x4.add(a30, f32x4.mul(w, v0));
        a31 = f32x4.add(a31, f32x4.mul(w, v1));
      }
    }
    v128.store(a, a00); v128.store(a, a01, 16);
    if (hb > 1) { v128.store(a + headBytes, a10); v128.store(a + headBytes, a11, 16); }
    if (hb > 2) { v128.store(a + 2 * headBytes, a20); v128.store(a + 2 * headBytes, a21, 16); }
    if (hb > 3) { v128.store(a + 3 * headBytes, a30); v128.store(a + 3 * headBytes, a31, 16); }
  }
  // The last headDim % 8 columns: one head and one column at a time, the same order.
  for (; c < headDim; c++) {
    const col = vOffset + (<usize>c << shift);
    for (let h = 0; h < hb; h++) {
      const a = acc + <usize>h * headBytes + (<usize>c << 2);
      const ph = p + (<usize>(h * ATTN_TILE) << 2);
      let a0 = load<f32>(a) * load<f32>(alphas + (<usize>h << 2));
      for (let j = 0; j < n; j++) a0 += load<f32>(ph + (<usize>j << 2)) * load1(<usize>load<i32>(rows + (<usize>j << 2)) + col, half);
      store<f32>(a, a0);
    }
  }
}

/**
 * One online-softmax step for hb heads of one query over the keys [0, n): states holds each
 * head's running max m and sum l (two f32 per head), acc its unnormalised weighted sum of values.
 * scores (hb x ATTN_TILE f32) and alphas (hb f32) are scratch.
 */
@inline function onlineStep(
  acc: usize, states: usize, q: usize, headBytes: usize, rows: usize, vOffset: usize, n: i32, headDim: i32, scale: f32,
  scores: usize, alphas: usize, valueScale: f32, hb: i32, half: bool,
): void {
  const shift = half ? 1 : 2;
  batchScores(scores, q, headBytes, rows, n, headDim, scale, hb, half, shift);
  for (let h = 0; h < hb; h++) {
    const state = states + (<usize>h << 3);
    const p = scores + (<usize>(h * ATTN_TILE) << 2);
    let tileMax: f32 = -Infinity;
    for (let j = 0; j < n; j++) tileMax = max(tileMax, load<f32>(p + (<usize>j << 2)));
    const mOld = load<f32>(state);
    const mNew = max(mOld, tileMax);
    let l = load<f32>(state, 4);
    // When the max rises, the sum and the accumulator are rescaled by exp(m_old - m_new) first;
    // exp(-inf) = 0 on the first tile, so the empty accumulator stays zero.
    const alpha = mNew > mOld ? expScalar(mOld - mNew) : <f32>1;
    l *= alpha;
    expShifted(p, n, mNew);
    for (let j = 0; j < n; j++) l += load<f32>(p + (<usize>j << 2));
    // Values read as value / valueScale (f16 rows in the 2^-112 form): the weights take valueScale,
    // so every product p * v is the same real number, the same f32.
    if (valueScale != 1) scaleRow(p, valueScale, n);
    store<f32>(alphas + (<usize>h << 2), alpha);
    store<f32>(state, mNew);
    store<f32>(state, l, 4);
  }
  batchValues(acc, headBytes, scores, alphas, rows, vOffset, n, headDim, hb, half, shift);
}

/**
 * onlineStep for a batch of hb (1 to HEAD_BATCH) heads, each batch size and element kind compiled
 * as its own loop (the unused accumulators removed), so the registers hold only live sums.
 */
@inline export function tileStep(
  acc: usize, states: usize, q: usize, headBytes: usize, rows: usize, vOffset: usize, n: i32, headDim: i32, scale: f32,
  scores: usize, alphas: usize, valueScale: f32, hb: i32, half: bool,
): void {
  if (half) {
    if (hb == 4) onlineStep(acc, states, q, headBytes, rows, vOffset, n, headDim, scale, scores, alphas, valueScale, 4, true);
    else if (hb == 3) onlineStep(acc, states, q, headBytes, rows, vOffset, n, headDim, scale, scores, alphas, valueScale, 3, true);
    else if (hb == 2) onlineStep(acc, states, q, headBytes, rows, vOffset, n, headDim, scale, scores, alphas, valueScale, 2, true);
    else onlineStep(acc, states, q, headBytes, rows, vOffset, n, headDim, scale, scores, alphas, valueScale, 1, true);
  } else {
    if (hb == 4) onlineStep(acc, states, q, headBytes, rows, vOffset, n, headDim, scale, scores, alphas, valueScale, 4, false);
    else if (hb == 3) onlineStep(acc, states, q, headBytes, rows, vOffset, n, headDim, scale, scores, alphas, valueScale, 3, false);
    else if (hb == 2) onlineStep(acc, states, q, headBytes, rows, vOffset, n, headDim, scale, scores, alphas, valueScale, 2, false);
    else onlineStep(acc, states, q, headBytes, rows, vOffset, n, headDim, scale, scores, alphas, valueScale, 1, false);
  }
}
