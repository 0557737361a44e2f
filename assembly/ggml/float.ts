// ============================================================================================
// 16-bit float weights: F16 (IEEE half) and BF16 (the top half of an f32)
// ============================================================================================
//
// The activations are rounded to the weight's type first (roundActivations below), as llama.cpp
// does for these products (its vec_dot_type of F16 is F16, of BF16 BF16): a model's greedy text
// then follows llama.cpp's where the f32 top two logits are closer than that rounding moves them.
// The products of two 16-bit floats are exact in f32. Per output element, four accumulators of four lanes: column k of each 16 goes to
// accumulator (k >> 2) & 3, lane k & 3, acc = acc + w * x in column order; then
// (a0 + a1) + (a2 + a3) lane-wise, ((l0 + l1) + (l2 + l3)), and the columns past the last
// multiple of 16 in order: the same operations for any T and any row range. (One accumulator
// chains every add: four run 1.7x faster for BF16.)
// matmulX(out, x, w, T, cols, outStride, scratch, rowStart, rowEnd), scratch: halfRowScratchBytes(cols) per thread.

import { halfToF32, sumLanes } from "./common";

/**
 * Four halves, sign-extended to i32 lanes, to f32x4: shifted by 13 the sign fills bits 31..28
 * and exponent and mantissa sit at 27..13, 112 below f32's bias; the mask keeps bit 31 and
 * those, the multiply by 2^112 rebiases. Exact for every finite half, subnormals included (their
 * operand is a subnormal f32, but measured here: weights of +-1e-4, 60% subnormal halves, 205 us
 * against 197 us at 2048x768). Infinities and NaNs (no valid model holds them) come out as
 * +-65536 * (1 + m/1024), where halfToF32 is exact. Measured against the exact select-based
 * widening (subnormal, normal and inf/NaN paths blended): 6x faster under JSC.
 */
@inline function signedHalvesToF32x4(h: v128): v128 {
  return f32x4.mul(v128.and(i32x4.shl(h, 13), i32x4.splat(0x8fffe000)), f32x4.splat(reinterpret<f32>(0x77800000)));
}

@inline function lowFour(h: v128, bf16: bool): v128 {
  return bf16 ? i32x4.shl(i32x4.extend_low_i16x8_u(h), 16) : signedHalvesToF32x4(i32x4.extend_low_i16x8_s(h));
}

@inline function highFour(h: v128, bf16: bool): v128 {
  return bf16 ? i32x4.shl(i32x4.extend_high_i16x8_u(h), 16) : signedHalvesToF32x4(i32x4.extend_high_i16x8_s(h));
}

@inline function scalarWeight(p: usize, bf16: bool): f32 {
  const h = <u32>load<u16>(p);
  return bf16 ? reinterpret<f32>(h << 16) : halfToF32(h);
}

/** Row `row` (cols 16-bit weights) dotted with the f32 vector x: SIMD over 16 columns at a time, then a scalar tail. */
@inline function rowDot(row: usize, x: usize, cols: i32, bf16: bool): f32 {
  const c16 = cols & ~15;
  let a0 = f32x4.splat(0), a1 = f32x4.splat(0), a2 = f32x4.splat(0), a3 = f32x4.splat(0);
  for (let k = 0; k < c16; k += 16) {
    const h0 = v128.load(row + <usize>(k * 2));
    const h1 = v128.load(row + <usize>(k * 2), 16);
    const xp = x + (<usize>k << 2);
    a0 = f32x4.add(a0, f32x4.mul(lowFour(h0, bf16), v128.load(xp)));
    a1 = f32x4.add(a1, f32x4.mul(highFour(h0, bf16), v128.load(xp, 16)));
    a2 = f32x4.add(a2, f32x4.mul(lowFour(h1, bf16), v128.load(xp, 32)));
    a3 = f32x4.add(a3, f32x4.mul(highFour(h1, bf16), v128.load(xp, 48)));
  }
  let s = sumLanes(f32x4.add(f32x4.add(a0, a1), f32x4.add(a2, a3)));
  for (let k = c16; k < cols; k++) s += scalarWeight(row + <usize>(k * 2), bf16) * load<f32>(x + (<usize>k << 2));
  return s;
}

// ---- activations rounded to the weights' 16-bit type, kept as f32

const SIGN = i32x4.splat(0x80000000);
const ABS = i32x4.splat(0x7fffffff);

/**
 * Four f32 rounded to bfloat16 (nearest, ties to even) as ggml_compute_fp32_to_bf16: add 0x7fff
 * plus the lowest kept bit, drop the low 16 bits; a NaN stays a (quiet) NaN.
 */
@inline function roundBF16x4(u: v128): v128 {
  const rounded = v128.and(i32x4.add(u, i32x4.add(i32x4.splat(0x7fff), v128.and(i32x4.shr_u(u, 16), i32x4.splat(1)))), i32x4.splat(0xffff0000));
  const nan = i32x4.gt_u(v128.and(u, ABS), i32x4.splat(0x7f800000));
  return v128.bitselect(v128.or(u, i32x4.splat(0x00400000)), rounded, nan);
}

/**
 * Four f32 rounded to IEEE half (nearest, ties to even, as F16C's vcvtps2ph and ggml's
 * ggml_compute_fp32_to_fp16), kept as f32. Three ranges by magnitude a: below 2^-14 the half is
 * subnormal, a multiple of 2^-24: (a + 0.5) - 0.5 rounds to one, 2^-24 being the f32 step at 0.5;
 * up to 65520 the 13 low mantissa bits are rounded off in integers (a carry into the exponent is
 * right); from 65520 up a half is infinite. NaN stays NaN.
 */
@inline function roundF16x4(x: v128): v128 {
  const a = v128.and(x, ABS);
  const sign = v128.and(x, SIGN);
  const normal = v128.and(i32x4.add(a, i32x4.add(i32x4.splat(0xfff), v128.and(i32x4.shr_u(a, 13), i32x4.splat(1)))), i32x4.splat(0xffffe000));
  const half = f32x4.splat(0.5);
  const subnormal = f32x4.sub(f32x4.add(a, half), half);
  let r = v128.bitselect(subnormal, normal, f32x4.lt(a, f32x4.splat(6.103515625e-5)));
  r = v128.bitselect(i32x4.splat(0x7f800000), r, f32x4.ge(a, f32x4.splat(65520)));
  r = v128.bitselect(a, r, i32x4.gt_u(a, i32x4.splat(0x7f800000)));
  return v128.or(r, sign);
}

/**
 * dst[i] = x[i] rounded to bfloat16 (bf16 != 0) or IEEE half, as f32, for n values: SIMD over
 * four at a time, the tail through the same operations one lane at a time.
 */
export function roundActivations(dst: usize, x: usize, n: i32, bf16: i32): void {
  const n4 = n & ~3;
  for (let i = 0; i < n4; i += 4) {
    const v = v128.load(x + (<usize>i << 2));
    v128.store(dst + (<usize>i << 2), bf16 != 0 ? roundBF16x4(v) : roundF16x4(v));
  }
  for (let i = n4; i < n; i++) {
    const v = f32x4.splat(load<f32>(x + (<usize>i << 2)));
    store<f32>(dst + (<usize>i << 2), f32x4.extract_lane(bf16 != 0 ? roundBF16x4(v) : roundF16x4(v), 0));
  }
}

/**
 * Tokens' activations a pass over the rows keeps in the second-level cache: 64 Ki floats
 * (256 KiB) of x per token block. Each row is widened once per block, and x is read from the
 * cache for every row instead of from memory (a batch of encoder inputs is thousands of tokens).
 */
const TOKEN_BLOCK_FLOATS: i32 = 65536;

/** Bytes of per-thread scratch matmulF16 and matmulBF16 need for rows of `cols` values: one row widened to f32. */
export function halfRowScratchBytes(cols: i32): i32 {
  return cols << 2;
}

/** Row `row`'s 16-bit weights as f32 at dst: rowDot's SIMD widening for the 16-column groups, scalarWeight's for the tail. */
@inline function widenRow(dst: usize, row: usize, cols: i32, bf16: bool): void {
  const c16 = cols & ~15;
  for (let k = 0; k < c16; k += 16) {
    const h0 = v128.load(row + <usize>(k * 2));
    const h1 = v128.load(row + <usize>(k * 2), 16);
    const d = dst + (<usize>k << 2);
    v128.store(d, lowFour(h0, bf16));
    v128.store(d, highFour(h0, bf16), 16);
    v128.store(d, lowFour(h1, bf16), 32);
    v128.store(d, highFour(h1, bf16), 48);
  }
  for (let k = c16; k < cols; k++) store<f32>(dst + (<usize>k << 2), scalarWeight(row + <usize>(k * 2), bf16));
}

/** rowDot over a widened row w (f32): the same operations on the same values, so the same bits. */
@inline function wideDot(w: usize, x: usize, cols: i32): f32 {
  const c16 = cols & ~15;
  let a0 = f32x4.splat(0), a1 = f32x4.splat(0), a2 = f32x4.splat(0), a3 = f32x4.splat(0);
  for (let k = 0; k < c16; k += 16) {
    const o = <usize>k << 2;
    a0 = f32x4.add(a0, f32x4.mul(v128.load(w + o), v128.load(x + o)));
    a1 = f32x4.add(a1, f32x4.mul(v128.load(w + o, 16), v128.load(x + o, 16)));
    a2 = f32x4.add(a2, f32x4.mul(v128.load(w + o, 32), v128.load(x + o, 32)));
    a3 = f32x4.add(a3, f32x4.mul(v128.load(w + o, 48), v128.load(x + o, 48)));
  }
  let s = sumLanes(f32x4.add(f32x4.add(a0, a1), f32x4.add(a2, a3)));
  for (let k = c16; k < cols; k++) s += load<f32>(w + (<usize>k << 2)) * load<f32>(x + (<usize>k << 2));
  return s;
}

/** wideDot for two tokens x0 and x1 at once (each weight load serves both), results at o0 and o1. */
@inline function wideDot2(w: usize, x0: usize, x1: usize, cols: i32, o0: usize, o1: usize): void {
  const c16 = cols & ~15;
  let a0 = f32x4.splat(0), a1 = f32x4.splat(0), a2 = f32x4.splat(0), a3 = f32x4.splat(0);
  let b0 = f32x4.splat(0), b1 = f32x4.splat(0), b2 = f32x4.splat(0), b3 = f32x4.splat(0);
  for (let k = 0; k < c16; k += 16) {
    const o = <usize>k << 2;
    const w0 = v128.load(w + o), w1 = v128.load(w + o, 16), w2 = v128.load(w + o, 32), w3 = v128.load(w + o, 48);
    a0 = f32x4.add(a0, f32x4.mul(w0, v128.load(x0 + o)));
    a1 = f32x4.add(a1, f32x4.mul(w1, v128.load(x0 + o, 16)));
    a2 = f32x4.add(a2, f32x4.mul(w2, v128.load(x0 + o, 32)));
    a3 = f32x4.add(a3, f32x4.mul(w3, v128.load(x0 + o, 48)));
    b0 = f32x4.add(b0, f32x4.mul(w0, v128.load(x1 + o)));
    b1 = f32x4.add(b1, f32x4.mul(w1, v128.load(x1 + o, 16)));
    b2 = f32x4.add(b2, f32x4.mul(w2, v128.load(x1 + o, 32)));
    b3 = f32x4.add(b3, f32x4.mul(w3, v128.load(x1 + o, 48)));
  }
  let s = sumLanes(f32x4.add(f32x4.add(a0, a1), f32x4.add(a2, a3)));
  let u = sumLanes(f32x4.add(f32x4.add(b0, b1), f32x4.add(b2, b3)));
  for (let k = c16; k < cols; k++) {
    const wk = load<f32>(w + (<usize>k << 2));
    s += wk * load<f32>(x0 + (<usize>k << 2));
    u += wk * load<f32>(x1 + (<usize>k << 2));
  }
  store<f32>(o0, s);
  store<f32>(o1, u);
}


/** wideDot for three tokens at once. */
@inline function wideDot3(w: usize, x0: usize, x1: usize, x2: usize, cols: i32, o0: usize, o1: usize, o2: usize): void {
  const c16 = cols & ~15;
  let a0 = f32x4.splat(0), a1 = f32x4.splat(0), a2 = f32x4.splat(0), a3 = f32x4.splat(0);
  let b0 = f32x4.splat(0), b1 = f32x4.splat(0), b2 = f32x4.splat(0), b3 = f32x4.splat(0);
  let c0 = f32x4.splat(0), c1 = f32x4.splat(0), c2 = f32x4.splat(0), c3 = f32x4.splat(0);
  for (let k = 0; k < c16; k += 16) {
    const o = <usize>k << 2;
    const w0 = v128.load(w + o);
    a0 = f32x4.add(a0, f32x4.mul(w0, v128.load(x0 + o)));
    b0 = f32x4.add(b0, f32x4.mul(w0, v128.load(x1 + o)));
    c0 = f32x4.add(c0, f32x4.mul(w0, v128.load(x2 + o)));
    const w1 = v128.load(w + o, 16);
    a1 = f32x4.add(a1, f32x4.mul(w1, v128.load(x0 + o, 16)));
    b1 = f32x4.add(b1, f32x4.mul(w1, v128.load(x1 + o, 16)));
    c1 = f32x4.add(c1, f32x4.mul(w1, v128.load(x2 + o, 16)));
    const w2 = v128.load(w + o, 32);
    a2 = f32x4.add(a2, f32x4.mul(w2, v128.load(x0 + o, 32)));
    b2 = f32x4.add(b2, f32x4.mul(w2, v128.load(x1 + o, 32)));
    c2 = f32x4.add(c2, f32x4.mul(w2, v128.load(x2 + o, 32)));
    const w3 = v128.load(w + o, 48);
    a3 = f32x4.add(a3, f32x4.mul(w3, v128.load(x0 + o, 48)));
    b3 = f32x4.add(b3, f32x4.mul(w3, v128.load(x1 + o, 48)));
    c3 = f32x4.add(c3, f32x4.mul(w3, v128.load(x2 + o, 48)));
  }
  let s = sumLanes(f32x4.add(f32x4.add(a0, a1), f32x4.add(a2, a3)));
  let u = sumLanes(f32x4.add(f32x4.add(b0, b1), f32x4.add(b2, b3)));
  let v = sumLanes(f32x4.add(f32x4.add(c0, c1), f32x4.add(c2, c3)));
  for (let k = c16; k < cols; k++) {
    const wk = load<f32>(w + (<usize>k << 2));
    s += wk * load<f32>(x0 + (<usize>k << 2));
    u += wk * load<f32>(x1 + (<usize>k << 2));
    v += wk * load<f32>(x2 + (<usize>k << 2));
  }
  store<f32>(o0, s);
  store<f32>(o1, u);
  store<f32>(o2, v);
}

/**
 * One token: each row dotted as it is read. Several: tokens in blocks of TOKEN_BLOCK_FLOATS
 * values; per block, each row is widened once into this thread's scratch (halfRowScratchBytes)
 * and the block's tokens go over it two at a time. Every element is rowDot's operations in
 * rowDot's order whatever the path, the block or the pairing: the same bits at any T.
 */
@inline function matmulHalf(out: usize, x: usize, w: usize, T: i32, cols: i32, outStride: i32, scratch: usize, rowStart: i32, rowEnd: i32, bf16: bool): void {
  if (T == 1) {
    for (let r = rowStart; r < rowEnd; r++) store<f32>(out + (<usize>r << 2), rowDot(w + <usize>(r * cols * 2), x, cols, bf16));
    return;
  }
  const block = max(2, (TOKEN_BLOCK_FLOATS / cols) & ~1);
  const xBytes = <usize>cols << 2;
  const oBytes = <usize>outStride << 2;
  for (let t0 = 0; t0 < T; t0 += block) {
    const t1 = min(T, t0 + block);
    for (let r = rowStart; r < rowEnd; r++) {
      widenRow(scratch, w + <usize>(r * cols * 2), cols, bf16);
      let xt = x + <usize>t0 * xBytes;
      let o = out + <usize>t0 * oBytes + (<usize>r << 2);
      let t = t0;
      for (; t + 3 <= t1; t += 3, xt += 3 * xBytes, o += 3 * oBytes) wideDot3(scratch, xt, xt + xBytes, xt + 2 * xBytes, cols, o, o + oBytes, o + 2 * oBytes);
      if (t + 2 <= t1) wideDot2(scratch, xt, xt + xBytes, cols, o, o + oBytes);
      else if (t < t1) store<f32>(o, wideDot(scratch, xt, cols));
    }
  }
}

export function matmulF16(out: usize, x: usize, w: usize, T: i32, cols: i32, outStride: i32, scratch: usize, rowStart: i32, rowEnd: i32): void {
  matmulHalf(out, x, w, T, cols, outStride, scratch, rowStart, rowEnd, false);
}

export function matmulBF16(out: usize, x: usize, w: usize, T: i32, cols: i32, outStride: i32, scratch: usize, rowStart: i32, rowEnd: i32): void {
  matmulHalf(out, x, w, T, cols, outStride, scratch, rowStart, rowEnd, true);
}

@inline function embedHalf(out: usize, w: usize, tokens: usize, T: i32, cols: i32, bf16: bool): void {
  for (let t = 0; t < T; t++) {
    const row = w + <usize>(load<i32>(tokens + (<usize>t << 2)) * cols * 2);
    for (let k = 0; k < cols; k++) store<f32>(out + (<usize>(t * cols + k) << 2), scalarWeight(row + <usize>(k * 2), bf16));
  }
}

export function embedF16(out: usize, w: usize, tokens: usize, T: i32, cols: i32): void {
  embedHalf(out, w, tokens, T, cols, false);
}

export function embedBF16(out: usize, w: usize, tokens: usize, T: i32, cols: i32): void {
  embedHalf(out, w, tokens, T, cols, true);
}
