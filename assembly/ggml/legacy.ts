// ============================================================================================
// ggml's 32-value block types: Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, MXFP4
// ============================================================================================
//
// Layouts (ggml-common.h), d and m IEEE halves:
//   Q8_0  d, qs[32] int8                                      x = d * q
//   Q4_0  d, qs[16] (values 0..15 low nibbles, 16..31 high)   x = d * (q - 8)
//   Q4_1  d, m, qs[16]                                        x = d * q + m
//   Q5_0  d, qh (u32, bit j = 5th bit of value j), qs[16]     x = d * (q - 16)
//   Q5_1  d, m, qh, qs[16]                                    x = d * q + m
//   MXFP4 e (E8M0 byte), qs[16] (4-bit codes as Q4_0's)       x = 2^(e-128) * kvalue[q], kvalue in -12..12
// matmulX(out, xq, xd, xs, w, T, cols, outStride, rowStart, rowEnd): out[t][r] = row r of w
// (cols/32 blocks) dotted with token t's int8 activations (32-value blocks), rows [rowStart,
// rowEnd). A row stays in the first-level cache while every token reads it.

import { accumulate, dotAdd, loadHalf, sumLanes } from "./common";

const LOW_NIBBLES = i8x16.splat(0x0f);
const ZERO = i32x4.splat(0);

/** The 5th bits of values 0..15 (upper = false) or 16..31 of a Q5 block, qh splat in every lane, as 0x10 bytes. */
@inline function highBits(qh: v128, upper: bool): v128 {
  const index = upper ? i8x16(2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3) : i8x16(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
  const bit = i8x16(1, 2, 4, 8, 16, 32, 64, -128, 1, 2, 4, 8, 16, 32, 64, -128);
  return v128.and(i8x16.eq(v128.and(i8x16.swizzle(qh, index), bit), bit), i8x16.splat(0x10));
}

/** Kinds, in the order of the exports below. */
const Q8_0: i32 = 0, Q4_0: i32 = 1, Q4_1: i32 = 2, Q5_0: i32 = 3, Q5_1: i32 = 4, MXFP4: i32 = 5;

@inline function blockBytes(kind: i32): i32 {
  return kind == Q8_0 ? 34 : kind == Q4_0 ? 18 : kind == Q4_1 ? 20 : kind == Q5_0 ? 22 : kind == Q5_1 ? 24 : 17;
}

/** Byte offset of the packed nibbles in a block. */
@inline function nibblesAt(kind: i32): usize {
  return <usize>(kind == Q4_0 ? 2 : kind == Q4_1 ? 4 : kind == Q5_0 ? 6 : kind == Q5_1 ? 8 : 1);
}

/**
 * MXFP4's values plus 12, by code (kvalues_mxfp4 = 0 1 2 3 4 6 8 12 0 -1 -2 -3 -4 -6 -8 -12):
 * 0..24, so they enter the dot as its unsigned operand; the 12 comes out with the activations' sum.
 */
const MXFP4_PLUS_12 = i8x16(12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0);

/** GGML_E8M0_TO_FP32_HALF: 2^(e - 128), subnormal for e < 2 (the bits ggml writes). */
@inline function e8m0Half(e: u32): f32 {
  return reinterpret<f32>(e < 2 ? <u32>0x00200000 << e : (e - 1) << 23);
}

/** The block's scale: its IEEE half d, or MXFP4's power of two. */
@inline function blockScale(kind: i32, blk: usize): f32 {
  return kind == MXFP4 ? e8m0Half(<u32>load<u8>(blk)) : loadHalf(blk);
}

/** The offset the unsigned codes carry, times the block's activation sum, a quarter per lane (the dot's start). */
@inline function offsetStart(kind: i32, sum: usize): v128 {
  if (kind == Q4_0) return i32x4.splat(-(load<i32>(sum) << 1));
  if (kind == Q5_0) return i32x4.splat(-(load<i32>(sum) << 2));
  if (kind == MXFP4) return i32x4.splat(-(load<i32>(sum) * 3));
  return ZERO;
}


/**
 * The exact integer dot of a row's block at blk with the token's 32 activations x0 (0..15), x1
 * (16..31), whose sum is at `sum`.
 */
@inline function blockIsum(kind: i32, blk: usize, x0: v128, x1: v128, sum: usize): v128 {
  if (kind == Q8_0) {
    // Signed weights: dot(x * sign(w), |w|), |w| the 0..127 operand (ggml's quantizer writes
    // -127..127). x * sign(w) is (x ^ m) - m with m = -1 where w < 0: two ops, no select.
    const w0 = v128.load(blk, 2), w1 = v128.load(blk, 18);
    const m0 = i8x16.lt_s(w0, ZERO), m1 = i8x16.lt_s(w1, ZERO);
    const s0 = i8x16.sub(v128.xor(x0, m0), m0);
    const s1 = i8x16.sub(v128.xor(x1, m1), m1);
    return dotAdd(s1, i8x16.abs(w1), dotAdd(s0, i8x16.abs(w0), ZERO));
  }
  const qs = v128.load(blk + nibblesAt(kind));
  let u0 = v128.and(qs, LOW_NIBBLES);
  let u1 = v128.and(i16x8.shr_u(qs, 4), LOW_NIBBLES);
  if (kind == Q5_0 || kind == Q5_1) {
    const qh = v128.load32_splat(blk + <usize>(kind == Q5_0 ? 2 : 4));
    u0 = v128.or(u0, highBits(qh, false));
    u1 = v128.or(u1, highBits(qh, true));
  }
  if (kind == MXFP4) {
    u0 = i8x16.swizzle(MXFP4_PLUS_12, u0);
    u1 = i8x16.swizzle(MXFP4_PLUS_12, u1);
  }
  // The offset (8 for Q4_0, 16 for Q5_0, 12 for MXFP4) times the block's sum, a quarter per lane, starts the sum.
  return dotAdd(x1, u1, dotAdd(x0, u0, offsetStart(kind, sum)));
}

/** One row dotted with one token's activations (xq, xd, xs at the token). */
@inline function rowDot(kind: i32, row: usize, xq: usize, xd: usize, xs: usize, cols: i32): f32 {
  const bs = <usize>blockBytes(kind);
  let acc = f32x4.splat(0);
  let mins: f32 = 0;
  // Pointers stepped block by block (indexing multiplies cost instructions JSC does not remove).
  let blk = row, x = xq, scale = xd, sum = xs;
  const end = xq + <usize>cols;
  for (; x < end; x += 32, blk += bs, scale += 4, sum += 4) {
    const xdg = load<f32>(scale);
    acc = accumulate(acc, blockIsum(kind, blk, v128.load(x), v128.load(x, 16), sum), blockScale(kind, blk) * xdg);
    if (kind == Q4_1 || kind == Q5_1) mins += loadHalf(blk + 2) * (xdg * <f32>load<i32>(sum));
  }
  return sumLanes(acc) + mins;
}

/** One token's share of a block in rowDotGroup: acc + its block dot, scaled (token k's activations at x + k*cols, its scale and sum at scale/sum + k*nb*4). */
@inline function tokenBlock(kind: i32, blk: usize, w0: v128, w1: v128, m0: v128, m1: v128, x: usize, scale: usize, sum: usize, wd: f32, acc: v128): v128 {
  const x0 = v128.load(x), x1 = v128.load(x, 16);
  let isum: v128;
  if (kind == Q8_0) {
    isum = dotAdd(i8x16.sub(v128.xor(x1, m1), m1), w1, dotAdd(i8x16.sub(v128.xor(x0, m0), m0), w0, ZERO));
  } else {
    isum = dotAdd(x1, w1, dotAdd(x0, w0, offsetStart(kind, sum)));
  }
  return accumulate(acc, isum, wd * load<f32>(scale));
}

/**
 * rowDot for n tokens at once, n = 2, 3 or 4 a constant at each call (their activations cols,
 * scales and sums nb apart): each weight block is loaded and unpacked once for the n, and every
 * token goes through rowDot's own operations in its order, so each result is the same bits as
 * rowDot's. Groups of 2 and 3 take a batch's last tokens: one at a time they cost about what four
 * together do (a 3-stream decode step took as long as a 4-stream one).
 */
@inline function rowDotGroup(kind: i32, n: i32, row: usize, xq: usize, xd: usize, xs: usize, cols: i32, out: usize, outStride: usize): void {
  const bs = <usize>blockBytes(kind);
  const c = <usize>cols, nb4 = <usize>(cols >> 5) << 2;
  let acc0 = f32x4.splat(0), acc1 = f32x4.splat(0), acc2 = f32x4.splat(0), acc3 = f32x4.splat(0);
  let mins0: f32 = 0, mins1: f32 = 0, mins2: f32 = 0, mins3: f32 = 0;
  let blk = row, x = xq, scale = xd, sum = xs;
  const end = xq + c;
  for (; x < end; x += 32, blk += bs, scale += 4, sum += 4) {
    const wd = blockScale(kind, blk);
    let w0: v128, w1: v128, m0 = ZERO, m1 = ZERO;
    if (kind == Q8_0) {
      const q0 = v128.load(blk, 2), q1 = v128.load(blk, 18);
      m0 = i8x16.lt_s(q0, ZERO);
      m1 = i8x16.lt_s(q1, ZERO);
      w0 = i8x16.abs(q0);
      w1 = i8x16.abs(q1);
    } else {
      const qs = v128.load(blk + nibblesAt(kind));
      w0 = v128.and(qs, LOW_NIBBLES);
      w1 = v128.and(i16x8.shr_u(qs, 4), LOW_NIBBLES);
      if (kind == Q5_0 || kind == Q5_1) {
        const qh = v128.load32_splat(blk + <usize>(kind == Q5_0 ? 2 : 4));
        w0 = v128.or(w0, highBits(qh, false));
        w1 = v128.or(w1, highBits(qh, true));
      }
      if (kind == MXFP4) {
        w0 = i8x16.swizzle(MXFP4_PLUS_12, w0);
        w1 = i8x16.swizzle(MXFP4_PLUS_12, w1);
      }
    }
    acc0 = tokenBlock(kind, blk, w0, w1, m0, m1, x, scale, sum, wd, acc0);
    acc1 = tokenBlock(kind, blk, w0, w1, m0, m1, x + c, scale + nb4, sum + nb4, wd, acc1);
    if (n > 2) acc2 = tokenBlock(kind, blk, w0, w1, m0, m1, x + 2 * c, scale + 2 * nb4, sum + 2 * nb4, wd, acc2);
    if (n > 3) acc3 = tokenBlock(kind, blk, w0, w1, m0, m1, x + 3 * c, scale + 3 * nb4, sum + 3 * nb4, wd, acc3);
    if (kind == Q4_1 || kind == Q5_1) {
      const wm = loadHalf(blk + 2);
      mins0 += wm * (load<f32>(scale) * <f32>load<i32>(sum));
      mins1 += wm * (load<f32>(scale + nb4) * <f32>load<i32>(sum + nb4));
      if (n > 2) mins2 += wm * (load<f32>(scale + 2 * nb4) * <f32>load<i32>(sum + 2 * nb4));
      if (n > 3) mins3 += wm * (load<f32>(scale + 3 * nb4) * <f32>load<i32>(sum + 3 * nb4));
    }
  }
  store<f32>(out, sumLanes(acc0) + mins0);
  store<f32>(out + outStride, sumLanes(acc1) + mins1);
  if (n > 2) store<f32>(out + 2 * outStride, sumLanes(acc2) + mins2);
  if (n > 3) store<f32>(out + 3 * outStride, sumLanes(acc3) + mins3);
}

/**
 * Bytes of int8 activations a pass over the rows keeps in the second-level cache: 128 KiB of
 * values (plus a sixteenth in scales and sums) per token block. Without blocks, a step of
 * thousands of tokens streamed all of them from memory for every row.
 */
const TOKEN_BLOCK_BYTES: i32 = 131072;

@inline function matmulLegacy(
  kind: i32, out: usize, xq: usize, xd: usize, xs: usize, w: usize, T: i32, cols: i32, outStride: i32, rowStart: i32, rowEnd: i32,
): void {
  const rowBytes = (cols >> 5) * blockBytes(kind);
  // One row at a time. Two rows per pass (sharing the activation loads) ran slower under JSC,
  // from register pressure (one thread, us, pairs -> single: 2048x768 Q8_0 206 -> 100, Q5_0
  // 185 -> 131, Q5_1 164 -> 146, Q4_0 79 -> 92, Q4_1 99 -> 112; 768x2048 Q4_0 158 -> 89, Q4_1
  // 145 -> 110).
  // Tokens in blocks whose activations stay in the second-level cache while every row reads them.
  const block = max(4, (TOKEN_BLOCK_BYTES / cols) & ~3);
  for (let t0 = 0; t0 < T; t0 += block) {
    const t1 = min(T, t0 + block);
    for (let r = rowStart; r < rowEnd; r++) {
      const row = w + <usize>(r * rowBytes);
      // Four tokens at a time, then the last 3 or 2 together, or the last one alone.
      for (let t = t0; t < t1; t += 4) {
        const x = xq + <usize>(t * cols), scales = xd + (<usize>(t * (cols >> 5)) << 2), sums = xs + (<usize>(t * (cols >> 5)) << 2);
        const o = out + (<usize>(t * outStride + r) << 2), os = <usize>outStride << 2;
        const left = t1 - t;
        if (left >= 4) rowDotGroup(kind, 4, row, x, scales, sums, cols, o, os);
        else if (left == 3) rowDotGroup(kind, 3, row, x, scales, sums, cols, o, os);
        else if (left == 2) rowDotGroup(kind, 2, row, x, scales, sums, cols, o, os);
        else store<f32>(o, rowDot(kind, row, x, scales, sums, cols));
      }
    }
  }
}

export function matmulQ8_0(out: usize, xq: usize, xd: usize, xs: usize, w: usize, T: i32, cols: i32, outStride: i32, rowStart: i32, rowEnd: i32): void {
  matmulLegacy(Q8_0, out, xq, xd, xs, w, T, cols, outStride, rowStart, rowEnd);
}
export function matmulQ4_0(out: usize, xq: usize, xd: usize, xs: usize, w: usize, T: i32, cols: i32, outStride: i32, rowStart: i32, rowEnd: i32): void {
  matmulLegacy(Q4_0, out, xq, xd, xs, w, T, cols, outStride, rowStart, rowEnd);
}
export function matmulQ4_1(out: usize, xq: usize, xd: usize, xs: usize, w: usize, T: i32, cols: i32, outStride: i32, rowStart: i32, rowEnd: i32): void {
  matmulLegacy(Q4_1, out, xq, xd, xs, w, T, cols, outStride, rowStart, rowEnd);
}
export function matmulQ5_0(out: usize, xq: usize, xd: usize, xs: usize, w: usize, T: i32, cols: i32, outStride: i32, rowStart: i32, rowEnd: i32): void {
  matmulLegacy(Q5_0, out, xq, xd, xs, w, T, cols, outStride, rowStart, rowEnd);
}
export function matmulQ5_1(out: usize, xq: usize, xd: usize, xs: usize, w: usize, T: i32, cols: i32, outStride: i32, rowStart: i32, rowEnd: i32): void {
  matmulLegacy(Q5_1, out, xq, xd, xs, w, T, cols, outStride, rowStart, rowEnd);
}
export function matmulMXFP4(out: usize, xq: usize, xd: usize, xs: usize, w: usize, T: i32, cols: i32, outStride: i32, rowStart: i32, rowEnd: i32): void {
  matmulLegacy(MXFP4, out, xq, xd, xs, w, T, cols, outStride, rowStart, rowEnd);
}

// ---- Q5_0 as Q8_0: the same values, for the faster Q8_0 product

/**
 * Write `blocks` Q5_0 blocks at src as Q8_0 blocks at dst: the same half d, and q - 16 (-16..15)
 * as the int8 values, so every weight d * (q - 16) is the same number. Q8_0's product needs fewer
 * operations per value than unpacking 5-bit values (see weights.ts, which decides when).
 */
export function transcodeQ5_0ToQ8_0(dst: usize, src: usize, blocks: i32): void {
  const sixteen = i8x16.splat(16);
  for (let b = 0; b < blocks; b++) {
    const blk = src + <usize>b * 22, out = dst + <usize>b * 34;
    const qs = v128.load(blk, 6);
    const qh = v128.load32_splat(blk + 2);
    const u0 = v128.or(v128.and(qs, LOW_NIBBLES), highBits(qh, false));
    const u1 = v128.or(v128.and(i16x8.shr_u(qs, 4), LOW_NIBBLES), highBits(qh, true));
    store<u16>(out, load<u16>(blk));
    v128.store(out, i8x16.sub(u0, sixteen), 2);
    v128.store(out, i8x16.sub(u1, sixteen), 18);
  }
}

// ---- embedding rows: ggml's dequantize_row_*, one row per token (scalar: little work)

/** Value j (0..31) of 16 packed bytes: low nibbles are values 0..15, high nibbles 16..31. */
@inline function nibble(qs: usize, j: i32): i32 {
  const b = <i32>load<u8>(qs + <usize>(j & 15));
  return j < 16 ? b & 15 : b >> 4;
}

@inline function fifthBit(qh: u32, j: i32): i32 {
  return <i32>((qh >> <u32>j) & 1) << 4;
}

/** ggml's kvalues_mxfp4 by code, for the scalar path. */
const MXFP4_VALUES = memory.data<i8>([0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12]);

@inline function mxfp4Value(code: i32): i32 {
  return <i32>load<i8>(MXFP4_VALUES + <usize>code);
}

@inline function legacyValue(kind: i32, blk: usize, j: i32): f32 {
  if (kind == MXFP4) return e8m0Half(<u32>load<u8>(blk)) * <f32>mxfp4Value(nibble(blk + 1, j));
  const d = loadHalf(blk);
  if (kind == Q8_0) return d * <f32>load<i8>(blk + 2 + <usize>j);
  if (kind == Q4_0) return d * <f32>(nibble(blk + 2, j) - 8);
  if (kind == Q4_1) return d * <f32>nibble(blk + 4, j) + loadHalf(blk + 2);
  if (kind == Q5_0) return d * <f32>((nibble(blk + 6, j) | fifthBit(load<u32>(blk, 2), j)) - 16);
  return d * <f32>(nibble(blk + 8, j) | fifthBit(load<u32>(blk, 4), j)) + loadHalf(blk + 2);
}

@inline function embedLegacy(kind: i32, out: usize, w: usize, tokens: usize, T: i32, cols: i32): void {
  const nb = cols >> 5;
  const bs = blockBytes(kind);
  for (let t = 0; t < T; t++) {
    const r = load<i32>(tokens + (<usize>t << 2));
    for (let g = 0; g < nb; g++) {
      const blk = w + <usize>((r * nb + g) * bs);
      const o = out + (<usize>(t * cols + (g << 5)) << 2);
      for (let j = 0; j < 32; j++) store<f32>(o + (<usize>j << 2), legacyValue(kind, blk, j));
    }
  }
}

export function embedQ8_0(out: usize, w: usize, tokens: usize, T: i32, cols: i32): void {
  embedLegacy(Q8_0, out, w, tokens, T, cols);
}
export function embedQ4_0(out: usize, w: usize, tokens: usize, T: i32, cols: i32): void {
  embedLegacy(Q4_0, out, w, tokens, T, cols);
}
export function embedQ4_1(out: usize, w: usize, tokens: usize, T: i32, cols: i32): void {
  embedLegacy(Q4_1, out, w, tokens, T, cols);
}
export function embedQ5_0(out: usize, w: usize, tokens: usize, T: i32, cols: i32): void {
  embedLegacy(Q5_0, out, w, tokens, T, cols);
}
export function embedQ5_1(out: usize, w: usize, tokens: usize, T: i32, cols: i32): void {
  embedLegacy(Q5_1, out, w, tokens, T, cols);
}
export function embedMXFP4(out: usize, w: usize, tokens: usize, T: i32, cols: i32): void {
  embedLegacy(MXFP4, out, w, tokens, T, cols);
}
