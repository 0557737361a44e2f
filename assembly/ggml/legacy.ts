// ============================================================================================
// ggml's 32-value block types: Q8_0, Q4_0, Q4_1, Q5_0, Q5_1
// ============================================================================================
//
// Layouts (ggml-common.h), d and m IEEE halves:
//   Q8_0  d, qs[32] int8                          x = d * q
//   Q4_0  d, qs[16]                               x = d * (q - 8), q = low nibbles then high nibbles
//   Q4_1  d, m, qs[16]                            x = d * q + m
//   Q5_0  d, qh (u32, bit j = 5th bit of value j), qs[16]   x = d * (q - 16)
//   Q5_1  d, m, qh, qs[16]                        x = d * q + m
// matmulX(out, xq, xd, xs, w, T, cols, outStride, acc, rowStart, rowEnd): out[t][r] = row r of w
// (cols/32 blocks) dotted with token t's int8 activations, for rows [rowStart, rowEnd).

import { loadHalf, QK } from "./common";
import { applyGroup, applyGroupMin, clearSums, storeRow } from "./groups";

const LOW_NIBBLES = i8x16.splat(0x0f);

/** The 5th bits of values 0..15 (lo) or 16..31 (hi) of a Q5 block as 0x10 bytes. */
@inline function highBits(qh: u32, upper: bool): v128 {
  const bytes = i32x4.splat(<i32>qh);
  const index = upper ? i8x16(2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3) : i8x16(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
  const bit = i8x16(1, 2, 4, 8, 16, 32, 64, -128, 1, 2, 4, 8, 16, 32, 64, -128);
  return v128.and(i8x16.eq(v128.and(i8x16.swizzle(bytes, index), bit), bit), i8x16.splat(0x10));
}

export function matmulQ8_0(
  out: usize, xq: usize, xd: usize, xs: usize, w: usize, T: i32, cols: i32, outStride: i32, acc: usize, rowStart: i32, rowEnd: i32,
): void {
  const nb = cols / QK;
  for (let r = rowStart; r < rowEnd; r++) {
    clearSums(acc, T);
    const row = w + <usize>(r * nb * 34);
    for (let g = 0; g < nb; g++) {
      const blk = row + <usize>(g * 34);
      applyGroup(v128.load(blk, 2), v128.load(blk, 18), loadHalf(blk), g, xq, xd, T, cols, acc);
    }
    storeRow(out, r, T, outStride, acc);
  }
}

export function matmulQ4_0(
  out: usize, xq: usize, xd: usize, xs: usize, w: usize, T: i32, cols: i32, outStride: i32, acc: usize, rowStart: i32, rowEnd: i32,
): void {
  const nb = cols / QK;
  const eight = i8x16.splat(8);
  for (let r = rowStart; r < rowEnd; r++) {
    clearSums(acc, T);
    const row = w + <usize>(r * nb * 18);
    for (let g = 0; g < nb; g++) {
      const blk = row + <usize>(g * 18);
      const qs = v128.load(blk, 2);
      const lo = i8x16.sub(v128.and(qs, LOW_NIBBLES), eight);
      const hi = i8x16.sub(i8x16.shr_u(qs, 4), eight);
      applyGroup(lo, hi, loadHalf(blk), g, xq, xd, T, cols, acc);
    }
    storeRow(out, r, T, outStride, acc);
  }
}

export function matmulQ4_1(
  out: usize, xq: usize, xd: usize, xs: usize, w: usize, T: i32, cols: i32, outStride: i32, acc: usize, rowStart: i32, rowEnd: i32,
): void {
  const nb = cols / QK;
  for (let r = rowStart; r < rowEnd; r++) {
    clearSums(acc, T);
    const row = w + <usize>(r * nb * 20);
    for (let g = 0; g < nb; g++) {
      const blk = row + <usize>(g * 20);
      const qs = v128.load(blk, 4);
      applyGroup(v128.and(qs, LOW_NIBBLES), i8x16.shr_u(qs, 4), loadHalf(blk), g, xq, xd, T, cols, acc);
      applyGroupMin(loadHalf(blk + 2), g, xd, xs, T, cols, acc);
    }
    storeRow(out, r, T, outStride, acc);
  }
}

export function matmulQ5_0(
  out: usize, xq: usize, xd: usize, xs: usize, w: usize, T: i32, cols: i32, outStride: i32, acc: usize, rowStart: i32, rowEnd: i32,
): void {
  const nb = cols / QK;
  const sixteen = i8x16.splat(16);
  for (let r = rowStart; r < rowEnd; r++) {
    clearSums(acc, T);
    const row = w + <usize>(r * nb * 22);
    for (let g = 0; g < nb; g++) {
      const blk = row + <usize>(g * 22);
      const qh = load<u32>(blk, 2);
      const qs = v128.load(blk, 6);
      const lo = i8x16.sub(v128.or(v128.and(qs, LOW_NIBBLES), highBits(qh, false)), sixteen);
      const hi = i8x16.sub(v128.or(i8x16.shr_u(qs, 4), highBits(qh, true)), sixteen);
      applyGroup(lo, hi, loadHalf(blk), g, xq, xd, T, cols, acc);
    }
    storeRow(out, r, T, outStride, acc);
  }
}

export function matmulQ5_1(
  out: usize, xq: usize, xd: usize, xs: usize, w: usize, T: i32, cols: i32, outStride: i32, acc: usize, rowStart: i32, rowEnd: i32,
): void {
  const nb = cols / QK;
  for (let r = rowStart; r < rowEnd; r++) {
    clearSums(acc, T);
    const row = w + <usize>(r * nb * 24);
    for (let g = 0; g < nb; g++) {
      const blk = row + <usize>(g * 24);
      const qh = load<u32>(blk, 4);
      const qs = v128.load(blk, 8);
      const lo = v128.or(v128.and(qs, LOW_NIBBLES), highBits(qh, false));
      const hi = v128.or(i8x16.shr_u(qs, 4), highBits(qh, true));
      applyGroup(lo, hi, loadHalf(blk), g, xq, xd, T, cols, acc);
      applyGroupMin(loadHalf(blk + 2), g, xd, xs, T, cols, acc);
    }
    storeRow(out, r, T, outStride, acc);
  }
}

// ---- embedding rows: dequantize one row per token (scalar: one row per token is little work)

/** Dequantize row `r` of a legacy-type matrix (bytes per block `bs`) into out[cols]. */
function dequantizeLegacyRow(out: usize, w: usize, r: i32, cols: i32, kind: i32): void {
  const nb = cols / QK;
  const bs: i32 = kind == 0 ? 34 : kind == 1 ? 18 : kind == 2 ? 20 : kind == 3 ? 22 : 24;
  for (let g = 0; g < nb; g++) {
    const blk = w + <usize>((r * nb + g) * bs);
    const d = loadHalf(blk);
    const o = out + (<usize>(g * QK) << 2);
    for (let j = 0; j < QK; j++) {
      let v: f32;
      if (kind == 0) v = d * <f32>load<i8>(blk + 2 + <usize>j);
      else if (kind == 1) v = d * <f32>(nibble(blk + 2, j) - 8);
      else if (kind == 2) v = d * <f32>nibble(blk + 4, j) + loadHalf(blk + 2);
      else if (kind == 3) v = d * <f32>((nibble(blk + 6, j) | fifthBit(load<u32>(blk, 2), j)) - 16);
      else v = d * <f32>(nibble(blk + 8, j) | fifthBit(load<u32>(blk, 4), j)) + loadHalf(blk + 2);
      store<f32>(o + (<usize>j << 2), v);
    }
  }
}

/** Value j (0..31) of 16 packed bytes: low nibbles are values 0..15, high nibbles 16..31. */
@inline function nibble(qs: usize, j: i32): i32 {
  const b = <i32>load<u8>(qs + <usize>(j & 15));
  return j < 16 ? b & 15 : b >> 4;
}

@inline function fifthBit(qh: u32, j: i32): i32 {
  return <i32>((qh >> <u32>j) & 1) << 4;
}

function embedLegacy(out: usize, w: usize, tokens: usize, T: i32, cols: i32, kind: i32): void {
  for (let t = 0; t < T; t++) dequantizeLegacyRow(out + (<usize>(t * cols) << 2), w, load<i32>(tokens + (<usize>t << 2)), cols, kind);
}

export function embedQ8_0(out: usize, w: usize, tokens: usize, T: i32, cols: i32): void {
  embedLegacy(out, w, tokens, T, cols, 0);
}
export function embedQ4_0(out: usize, w: usize, tokens: usize, T: i32, cols: i32): void {
  embedLegacy(out, w, tokens, T, cols, 1);
}
export function embedQ4_1(out: usize, w: usize, tokens: usize, T: i32, cols: i32): void {
  embedLegacy(out, w, tokens, T, cols, 2);
}
export function embedQ5_0(out: usize, w: usize, tokens: usize, T: i32, cols: i32): void {
  embedLegacy(out, w, tokens, T, cols, 3);
}
export function embedQ5_1(out: usize, w: usize, tokens: usize, T: i32, cols: i32): void {
  embedLegacy(out, w, tokens, T, cols, 4);
}
