// ============================================================================================
// ggml's K-quants: super-blocks of 256 values, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K
// ============================================================================================
//
// Layouts (ggml-common.h, QK_K = 256; d, dmin IEEE halves):
//   Q2_K  scales[16] (4-bit scale | 4-bit min << 4), qs[64] (2 bits), d, dmin     84 bytes
//   Q3_K  hmask[32] (3rd bit), qs[64] (low 2 bits), scales[12] (16 x 6 bits), d    110 bytes
//   Q4_K  d, dmin, scales[12] (8 x 6-bit scale and min), qs[128] (4 bits)          144 bytes
//   Q5_K  d, dmin, scales[12], qh[32] (5th bit), qs[128]                           176 bytes
//   Q6_K  ql[128] (low 4 bits), qh[64] (high 2 bits), scales[16] int8, d           210 bytes
// Each super-block is walked as eight 32-value groups in value order; the unpacking below
// follows ggml's dequantize_row_*_K value for value. Q2_K, Q3_K and Q6_K scale each 16 values
// on their own, so their groups carry two integer sub-scales (applyGroupScaled).

import { loadHalf } from "./common";
import { applyGroup, applyGroupMin, applyGroupMinScaled, applyGroupScaled, clearSums, storeRow } from "./groups";

const QK_K: i32 = 256;
const LOW_NIBBLES = i8x16.splat(0x0f);
const THREE = i8x16.splat(3);

/** Scale and min j (0..7) of Q4_K/Q5_K's 12 packed bytes (ggml's get_scale_min_k4): scale | min << 8. */
@inline function scaleMinK4(q: usize, j: i32): i32 {
  if (j < 4) return (<i32>load<u8>(q + <usize>j) & 63) | ((<i32>load<u8>(q + <usize>(j + 4)) & 63) << 8);
  const sc = (<i32>load<u8>(q + <usize>(j + 4)) & 0xf) | ((<i32>load<u8>(q + <usize>(j - 4)) >> 6) << 4);
  const m = (<i32>load<u8>(q + <usize>(j + 4)) >> 4) | ((<i32>load<u8>(q + <usize>j) >> 6) << 4);
  return sc | (m << 8);
}

/** Q3_K's sixteen 6-bit scales (stored minus 32), unpacked from 12 bytes as ggml does. */
@inline function scaleQ3K(q: usize, j: i32): i32 {
  const low = j < 8 ? (<i32>load<u8>(q + <usize>j) & 0xf) : (<i32>load<u8>(q + <usize>(j - 8)) >> 4);
  const high = (<i32>load<u8>(q + 8 + <usize>(j & 3)) >> (2 * (j >> 2))) & 3;
  return (low | (high << 4)) - 32;
}

export function matmulQ2_K(
  out: usize, xq: usize, xd: usize, xs: usize, w: usize, T: i32, cols: i32, outStride: i32, acc: usize, rowStart: i32, rowEnd: i32,
): void {
  const nb = cols / QK_K;
  for (let r = rowStart; r < rowEnd; r++) {
    clearSums(acc, T);
    for (let b = 0; b < nb; b++) {
      const blk = w + <usize>((r * nb + b) * 84);
      const d = loadHalf(blk + 80);
      const negMin = -loadHalf(blk + 82);
      for (let n = 0; n < 2; n++) {
        const q0 = v128.load(blk + 16 + <usize>(32 * n));
        const q1 = v128.load(blk + 32 + <usize>(32 * n));
        for (let j = 0; j < 4; j++) {
          const lo = v128.and(i8x16.shr_u(q0, <i32>(2 * j)), THREE);
          const hi = v128.and(i8x16.shr_u(q1, <i32>(2 * j)), THREE);
          const scLo = <i32>load<u8>(blk + <usize>(8 * n + 2 * j));
          const scHi = <i32>load<u8>(blk + <usize>(8 * n + 2 * j + 1));
          const g = b * 8 + 4 * n + j;
          applyGroupScaled(lo, hi, scLo & 0xf, scHi & 0xf, d, g, xq, xd, T, cols, acc);
          applyGroupMinScaled(negMin, scLo >> 4, scHi >> 4, g, xd, xs, T, cols, acc);
        }
      }
    }
    storeRow(out, r, T, outStride, acc);
  }
}

export function matmulQ3_K(
  out: usize, xq: usize, xd: usize, xs: usize, w: usize, T: i32, cols: i32, outStride: i32, acc: usize, rowStart: i32, rowEnd: i32,
): void {
  const nb = cols / QK_K;
  const zero = i8x16.splat(0);
  const four = i8x16.splat(4);
  for (let r = rowStart; r < rowEnd; r++) {
    clearSums(acc, T);
    for (let b = 0; b < nb; b++) {
      const blk = w + <usize>((r * nb + b) * 110);
      const d = loadHalf(blk + 108);
      const hm0 = v128.load(blk);
      const hm1 = v128.load(blk, 16);
      for (let n = 0; n < 2; n++) {
        const q0 = v128.load(blk + 32 + <usize>(32 * n));
        const q1 = v128.load(blk + 48 + <usize>(32 * n));
        for (let j = 0; j < 4; j++) {
          const bit = i8x16.splat(<i8>(<i32>1 << (4 * n + j)));
          // Values without their high bit set are 4 lower.
          const lo = i8x16.sub(v128.and(i8x16.shr_u(q0, <i32>(2 * j)), THREE), v128.and(i8x16.eq(v128.and(hm0, bit), zero), four));
          const hi = i8x16.sub(v128.and(i8x16.shr_u(q1, <i32>(2 * j)), THREE), v128.and(i8x16.eq(v128.and(hm1, bit), zero), four));
          const s = 8 * n + 2 * j;
          applyGroupScaled(lo, hi, scaleQ3K(blk + 96, s), scaleQ3K(blk + 96, s + 1), d, b * 8 + 4 * n + j, xq, xd, T, cols, acc);
        }
      }
    }
    storeRow(out, r, T, outStride, acc);
  }
}

export function matmulQ4_K(
  out: usize, xq: usize, xd: usize, xs: usize, w: usize, T: i32, cols: i32, outStride: i32, acc: usize, rowStart: i32, rowEnd: i32,
): void {
  const nb = cols / QK_K;
  for (let r = rowStart; r < rowEnd; r++) {
    clearSums(acc, T);
    for (let b = 0; b < nb; b++) {
      const blk = w + <usize>((r * nb + b) * 144);
      const d = loadHalf(blk);
      const dmin = loadHalf(blk + 2);
      for (let c = 0; c < 4; c++) {
        const q0 = v128.load(blk + 16 + <usize>(32 * c));
        const q1 = v128.load(blk + 32 + <usize>(32 * c));
        const smLo = scaleMinK4(blk + 4, 2 * c);
        const smHi = scaleMinK4(blk + 4, 2 * c + 1);
        const g = b * 8 + 2 * c;
        applyGroup(v128.and(q0, LOW_NIBBLES), v128.and(q1, LOW_NIBBLES), d * <f32>(smLo & 0xff), g, xq, xd, T, cols, acc);
        applyGroupMin(-(dmin * <f32>(smLo >> 8)), g, xd, xs, T, cols, acc);
        applyGroup(i8x16.shr_u(q0, 4), i8x16.shr_u(q1, 4), d * <f32>(smHi & 0xff), g + 1, xq, xd, T, cols, acc);
        applyGroupMin(-(dmin * <f32>(smHi >> 8)), g + 1, xd, xs, T, cols, acc);
      }
    }
    storeRow(out, r, T, outStride, acc);
  }
}

export function matmulQ5_K(
  out: usize, xq: usize, xd: usize, xs: usize, w: usize, T: i32, cols: i32, outStride: i32, acc: usize, rowStart: i32, rowEnd: i32,
): void {
  const nb = cols / QK_K;
  const one = i8x16.splat(1);
  for (let r = rowStart; r < rowEnd; r++) {
    clearSums(acc, T);
    for (let b = 0; b < nb; b++) {
      const blk = w + <usize>((r * nb + b) * 176);
      const d = loadHalf(blk);
      const dmin = loadHalf(blk + 2);
      const qh0 = v128.load(blk, 16);
      const qh1 = v128.load(blk, 32);
      for (let c = 0; c < 4; c++) {
        const q0 = v128.load(blk + 48 + <usize>(32 * c));
        const q1 = v128.load(blk + 64 + <usize>(32 * c));
        const smLo = scaleMinK4(blk + 4, 2 * c);
        const smHi = scaleMinK4(blk + 4, 2 * c + 1);
        const g = b * 8 + 2 * c;
        const loBitsA = i8x16.shl(v128.and(i8x16.shr_u(qh0, <i32>(2 * c)), one), 4);
        const loBitsB = i8x16.shl(v128.and(i8x16.shr_u(qh1, <i32>(2 * c)), one), 4);
        const hiBitsA = i8x16.shl(v128.and(i8x16.shr_u(qh0, <i32>(2 * c + 1)), one), 4);
        const hiBitsB = i8x16.shl(v128.and(i8x16.shr_u(qh1, <i32>(2 * c + 1)), one), 4);
        applyGroup(v128.or(v128.and(q0, LOW_NIBBLES), loBitsA), v128.or(v128.and(q1, LOW_NIBBLES), loBitsB), d * <f32>(smLo & 0xff), g, xq, xd, T, cols, acc);
        applyGroupMin(-(dmin * <f32>(smLo >> 8)), g, xd, xs, T, cols, acc);
        applyGroup(v128.or(i8x16.shr_u(q0, 4), hiBitsA), v128.or(i8x16.shr_u(q1, 4), hiBitsB), d * <f32>(smHi & 0xff), g + 1, xq, xd, T, cols, acc);
        applyGroupMin(-(dmin * <f32>(smHi >> 8)), g + 1, xd, xs, T, cols, acc);
      }
    }
    storeRow(out, r, T, outStride, acc);
  }
}

export function matmulQ6_K(
  out: usize, xq: usize, xd: usize, xs: usize, w: usize, T: i32, cols: i32, outStride: i32, acc: usize, rowStart: i32, rowEnd: i32,
): void {
  const nb = cols / QK_K;
  const thirtyTwo = i8x16.splat(32);
  for (let r = rowStart; r < rowEnd; r++) {
    clearSums(acc, T);
    for (let b = 0; b < nb; b++) {
      const blk = w + <usize>((r * nb + b) * 210);
      const d = loadHalf(blk + 208);
      for (let n = 0; n < 2; n++) {
        const ql = blk + <usize>(64 * n);
        const qh = blk + 128 + <usize>(32 * n);
        const sc = blk + 192 + <usize>(8 * n);
        const qlA = v128.load(ql), qlB = v128.load(ql, 16), qlC = v128.load(ql, 32), qlD = v128.load(ql, 48);
        const qh0 = v128.load(qh), qh1 = v128.load(qh, 16);
        for (let k = 0; k < 4; k++) {
          // Values l + 32k of the half: nibble (low for k < 2, high after) of ql[l] or ql[l + 32], bits 2k of qh[l].
          const src0 = (k & 1) == 0 ? qlA : qlC;
          const src1 = (k & 1) == 0 ? qlB : qlD;
          const nib0 = k < 2 ? v128.and(src0, LOW_NIBBLES) : i8x16.shr_u(src0, 4);
          const nib1 = k < 2 ? v128.and(src1, LOW_NIBBLES) : i8x16.shr_u(src1, 4);
          const hb0 = i8x16.shl(v128.and(i8x16.shr_u(qh0, <i32>(2 * k)), THREE), 4);
          const hb1 = i8x16.shl(v128.and(i8x16.shr_u(qh1, <i32>(2 * k)), THREE), 4);
          const lo = i8x16.sub(v128.or(nib0, hb0), thirtyTwo);
          const hi = i8x16.sub(v128.or(nib1, hb1), thirtyTwo);
          const scLo = <i32>load<i8>(sc + <usize>(2 * k));
          const scHi = <i32>load<i8>(sc + <usize>(2 * k + 1));
          applyGroupScaled(lo, hi, scLo, scHi, d, b * 8 + 4 * n + k, xq, xd, T, cols, acc);
        }
      }
    }
    storeRow(out, r, T, outStride, acc);
  }
}

// ---- embedding rows: ggml's dequantize_row_*_K, one row per token

/** Value v (0..255) of a K-quant block at blk, as dequantize_row_*_K computes it. */
@inline function kValue(kind: i32, blk: usize, v: i32): f32 {
  const n = v >> 7; // half of the block (Q2_K, Q3_K, Q6_K) ...
  const j = (v >> 5) & 3; // ... its 32-value group
  const l = v & 31;
  if (kind == 2) {
    const q = (<i32>load<u8>(blk + 16 + <usize>(32 * n + l)) >> (2 * j)) & 3;
    const sc = <i32>load<u8>(blk + <usize>(8 * n + 2 * j + (l >> 4)));
    return loadHalf(blk + 80) * <f32>(sc & 0xf) * <f32>q - loadHalf(blk + 82) * <f32>(sc >> 4);
  }
  if (kind == 3) {
    const q = (<i32>load<u8>(blk + 32 + <usize>(32 * n + l)) >> (2 * j)) & 3;
    const high = (<i32>load<u8>(blk + <usize>l) >> (4 * n + j)) & 1;
    return loadHalf(blk + 108) * <f32>scaleQ3K(blk + 96, 8 * n + 2 * j + (l >> 4)) * <f32>(q - (high != 0 ? 0 : 4));
  }
  if (kind == 4 || kind == 5) {
    const c = v >> 6; // 64-value chunk
    const upper = (v >> 5) & 1;
    const qsBase: usize = kind == 4 ? 16 : 48;
    const byte = <i32>load<u8>(blk + qsBase + <usize>(32 * c + l));
    let q = upper != 0 ? byte >> 4 : byte & 0xf;
    if (kind == 5) q |= ((<i32>load<u8>(blk + 16 + <usize>l) >> (2 * c + upper)) & 1) << 4;
    const sm = scaleMinK4(blk + 4, 2 * c + upper);
    return loadHalf(blk) * <f32>(sm & 0xff) * <f32>q - loadHalf(blk + 2) * <f32>(sm >> 8);
  }
  // Q6_K: value l + 32k of half n
  const k = j;
  const byte = <i32>load<u8>(blk + <usize>(64 * n + l + ((k & 1) << 5)));
  const nib = k < 2 ? byte & 0xf : byte >> 4;
  const hb = (<i32>load<u8>(blk + 128 + <usize>(32 * n + l)) >> (2 * k)) & 3;
  const sc = <i32>load<i8>(blk + 192 + <usize>(8 * n + 2 * k + (l >> 4)));
  return loadHalf(blk + 208) * <f32>sc * <f32>((nib | (hb << 4)) - 32);
}

function embedK(out: usize, w: usize, tokens: usize, T: i32, cols: i32, kind: i32, blockBytes: i32): void {
  const nb = cols / QK_K;
  for (let t = 0; t < T; t++) {
    const r = load<i32>(tokens + (<usize>t << 2));
    for (let b = 0; b < nb; b++) {
      const blk = w + <usize>((r * nb + b) * blockBytes);
      const o = out + (<usize>(t * cols + b * QK_K) << 2);
      for (let v = 0; v < QK_K; v++) store<f32>(o + (<usize>v << 2), kValue(kind, blk, v));
    }
  }
}

export function embedQ2_K(out: usize, w: usize, tokens: usize, T: i32, cols: i32): void {
  embedK(out, w, tokens, T, cols, 2, 84);
}
export function embedQ3_K(out: usize, w: usize, tokens: usize, T: i32, cols: i32): void {
  embedK(out, w, tokens, T, cols, 3, 110);
}
export function embedQ4_K(out: usize, w: usize, tokens: usize, T: i32, cols: i32): void {
  embedK(out, w, tokens, T, cols, 4, 144);
}
export function embedQ5_K(out: usize, w: usize, tokens: usize, T: i32, cols: i32): void {
  embedK(out, w, tokens, T, cols, 5, 176);
}
export function embedQ6_K(out: usize, w: usize, tokens: usize, T: i32, cols: i32): void {
  embedK(out, w, tokens, T, cols, 6, 210);
}
