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
// The activations come in 256-value blocks (llama.cpp's Q8_K), so a whole super-block is one
// exact integer sum of sub-block dots times their integer sub-scales, and only one float
// multiply-add per super-block; the unpacking follows ggml's dequantize_row_*_K value for value.
// matmulX(out, xq, xd, xs, w, T, cols, outStride, scratch, rowStart, rowEnd), as the 32-value
// types, with 4 bytes of per-thread scratch.

import { accumulate, dotAdd, laneTotal, loadHalf, sumLanes } from "./common";

const QK_K: i32 = 256;
/** Tokens from which a product unpacks each row once (below, unpacking inside each dot costs less). */
const UNPACK_MIN_TOKENS = 4;
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

/**
 * Q3_K's sixteen scales (stored minus 32) as i8 lanes, all at once: low nibbles of bytes 0..7 are
 * the low 4 bits of scales 0..7, their high nibbles those of 8..15, and bits 2(j >> 2), +1 of byte
 * 8 + (j & 3) the top 2 bits of scale j (scaleQ3K's rule). Reads the 12 bytes only.
 */
@inline function scalesQ3K(q: usize): v128 {
  const v = v128.load64_zero(q);
  const low = i8x16.shuffle(v128.and(v, LOW_NIBBLES), v128.and(i16x8.shr_u(v, 4), LOW_NIBBLES), 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23);
  const h = v128.load32_splat(q + 8); // lane j: byte 8 + (j & 3)
  const top = v128.or(
    v128.or(v128.and(h, v128.and(THREE, i32x4(-1, 0, 0, 0))), v128.and(v128.and(i16x8.shr_u(h, 2), THREE), i32x4(0, -1, 0, 0))),
    v128.or(v128.and(v128.and(i16x8.shr_u(h, 4), THREE), i32x4(0, 0, -1, 0)), v128.and(v128.and(i16x8.shr_u(h, 6), THREE), i32x4(0, 0, 0, -1))),
  );
  return i8x16.sub(v128.or(low, i16x8.shl(top, 4)), i8x16.splat(32));
}

const ZERO = i32x4.splat(0);
const Q2_K: i32 = 2, Q3_K: i32 = 3, Q4_K: i32 = 4, Q5_K: i32 = 5, Q6_K: i32 = 6;

@inline function blockBytes(kind: i32): i32 {
  return kind == Q2_K ? 84 : kind == Q3_K ? 110 : kind == Q4_K ? 144 : kind == Q5_K ? 176 : 210;
}

/**
 * dot(x, u) over 16 pairs with every product times `scale` (an i16x8 splat), in four i32 lanes:
 * the i8 x i7 dot to eight i16 pair sums (at most 2 * 63 * 127, no saturation), then
 * i32x4.dot_i16x8_s multiplies them by the scale and adds pairs (x86: pmaddubsw, pmaddwd).
 */
@inline function scaledDot(x: v128, u: v128, scale: v128): v128 {
  return i32x4.dot_i16x8_s(i16x8.relaxed_dot_i8x16_i7x16_s(x, u), scale);
}

/**
 * Byte fields are extracted with 16-bit shifts (one x86 instruction; byte shifts are emulated)
 * followed by a mask that drops the bits the neighbouring byte shifted in: every use below masks
 * the low bits of a byte after shifting it right by at most 7 in all.
 */
@inline function highNibbles(v: v128): v128 {
  return v128.and(i16x8.shr_u(v, 4), LOW_NIBBLES);
}

/** Bit `bit` (0..7, a constant after inlining) of each byte moved to 0x10, the rest 0 (Q5_K's fifth bits). */
@inline function toBit4(v: v128, bit: i32): v128 {
  const at = bit < 4 ? i16x8.shl(v, 4 - bit) : bit > 4 ? i16x8.shr_u(v, bit - 4) : v;
  return v128.and(at, i8x16.splat(0x10));
}

/**
 * The 8 scales (bytes 0..7) and 8 minimums (bytes 8..15) of Q4_K/Q5_K's 12 packed bytes at q, as
 * get_scale_min_k4 unpacks them, for all sub-blocks at once: j < 4 are the low 6 bits of bytes j
 * and j + 4; j >= 4 take a nibble of byte j + 4 and the top 2 bits of byte j - 4 (scale) or j (min).
 */
@inline function scalesMinsK4(q: usize): v128 {
  const v = v128.load(q); // 12 bytes and 4 that are not read
  const none = <i8>-128; // swizzle index that gives 0
  const low = i8x16.swizzle(v, i8x16(0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7, 8, 9, 10, 11));
  const top = i8x16.swizzle(v, i8x16(none, none, none, none, 0, 1, 2, 3, none, none, none, none, 4, 5, 6, 7));
  // Lanes 0-3, 8-11: the 6 low bits; lanes 4-7: the low nibble; lanes 12-15: the high nibble.
  const nibbles = v128.or(
    v128.and(low, i8x16(63, 63, 63, 63, 15, 15, 15, 15, 63, 63, 63, 63, 0, 0, 0, 0)),
    v128.and(i16x8.shr_u(low, 4), i8x16(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 15, 15, 15, 15)),
  );
  // The top 2 bits of the partner byte above them (lanes 4-7, 12-15 only: `top` is 0 elsewhere).
  return v128.or(nibbles, i16x8.shl(v128.and(i16x8.shr_u(top, 6), THREE), 4));
}

/** Sums of each 32 activations (two 16-value sums) of sub-blocks 4k..4k+3, k = at / 32 (bytes into xs). */
@inline function pairSums(xs: usize, at: usize): v128 {
  const a = v128.load(xs + at), b = v128.load(xs + at, 16);
  return i32x4.add(i32x4.shuffle(a, b, 0, 2, 4, 6), i32x4.shuffle(a, b, 1, 3, 5, 7));
}

/** i16 lane `lane` of v in every lane (lane a compile-time constant after inlining). */
@inline function lane16(v: v128, lane: i32): v128 {
  return i8x16.swizzle(v, i16x8.splat(<i16>((2 * lane) | ((2 * lane + 1) << 8))));
}

/** isum + the 64-value chunk c of a Q4_K/Q5_K super-block: low nibbles are sub-block 2c, high 2c + 1. */
@inline function chunkK45(kind: i32, isum: v128, blk: usize, xq: usize, sc: v128, c: i32): v128 {
  const qsAt: usize = kind == Q4_K ? 16 : 48;
  const q0 = v128.load(blk + qsAt + <usize>(32 * c));
  const q1 = v128.load(blk + qsAt + <usize>(32 * c + 16));
  let lo0 = v128.and(q0, LOW_NIBBLES), lo1 = v128.and(q1, LOW_NIBBLES);
  let hi0 = highNibbles(q0), hi1 = highNibbles(q1);
  if (kind == Q5_K) {
    // Bits 2c and 2c + 1 of qh: the fifth bits of this chunk's low and high nibbles, each shifted
    // straight to 0x10 (by 4 - 2c and 3 - 2c) and masked.
    const qh0 = v128.load(blk, 16), qh1 = v128.load(blk, 32);
    lo0 = v128.or(lo0, toBit4(qh0, 2 * c));
    lo1 = v128.or(lo1, toBit4(qh1, 2 * c));
    hi0 = v128.or(hi0, toBit4(qh0, 2 * c + 1));
    hi1 = v128.or(hi1, toBit4(qh1, 2 * c + 1));
  }
  const x = xq + <usize>(64 * c);
  const sLo = lane16(sc, 2 * c), sHi = lane16(sc, 2 * c + 1);
  isum = i32x4.add(isum, i32x4.add(scaledDot(v128.load(x), lo0, sLo), scaledDot(v128.load(x, 16), lo1, sLo)));
  return i32x4.add(isum, i32x4.add(scaledDot(v128.load(x, 32), hi0, sHi), scaledDot(v128.load(x, 48), hi1, sHi)));
}

/**
 * isum + quarter h of half n of a Q6_K super-block: positions l = 16h..16h+15 of the half's four
 * 32-value groups (values l + 32k). Working a quarter at a time keeps three weight registers live
 * (the 16 low-bit bytes of ql[l], ql[l + 32] and the 16 high-bit bytes of qh[l]); a whole half
 * at once spilled. sc holds the half's 8 sub-block scales as i16: value l + 32k is sub-block 2k + h.
 */
@inline function quarterQ6K(isum: v128, blk: usize, xq: usize, n: i32, h: i32, sc: v128): v128 {
  const l0 = v128.load(blk + <usize>(64 * n + 16 * h));
  const l1 = v128.load(blk + <usize>(64 * n + 32 + 16 * h));
  const hb = v128.load(blk + 128 + <usize>(32 * n + 16 * h));
  const x = xq + <usize>(128 * n + 16 * h);
  // Bits 2k, 2k + 1 of hb are the high bits of group k, wanted at 0x30: shifted there by 4, 2,
  // 0 and -2 (three shifts; shifting each pair down to bit 0 and back up took seven).
  const HIGH = i8x16.splat(0x30);
  isum = i32x4.add(isum, scaledDot(v128.load(x), v128.or(v128.and(l0, LOW_NIBBLES), v128.and(i16x8.shl(hb, 4), HIGH)), lane16(sc, h)));
  isum = i32x4.add(isum, scaledDot(v128.load(x, 32), v128.or(v128.and(l1, LOW_NIBBLES), v128.and(i16x8.shl(hb, 2), HIGH)), lane16(sc, 2 + h)));
  isum = i32x4.add(isum, scaledDot(v128.load(x, 64), v128.or(highNibbles(l0), v128.and(hb, HIGH)), lane16(sc, 4 + h)));
  return i32x4.add(isum, scaledDot(v128.load(x, 96), v128.or(highNibbles(l1), v128.and(i16x8.shr_u(hb, 2), HIGH)), lane16(sc, 6 + h)));
}

/**
 * A Q6_K super-block's 16 sub-block scales (lo: 0-7, hi: 8-15, as i16) times the token's 16-value
 * activation sums at xs, summed. The sums fit i16 (at most 16 x 127), so one multiply-add of pairs
 * does it.
 */
@inline function scaledSumsQ6K(xs: usize, lo: v128, hi: v128): i32 {
  const sums0 = i16x8.narrow_i32x4_s(v128.load(xs), v128.load(xs, 16));
  const sums1 = i16x8.narrow_i32x4_s(v128.load(xs, 32), v128.load(xs, 48));
  return laneTotal(i32x4.add(i32x4.dot_i16x8_s(sums0, lo), i32x4.dot_i16x8_s(sums1, hi)));
}

/**
 * One super-block of `kind` dotted with its 256 activations (xq, xs at the block): the integer
 * sum of every sub-block's dot times its sub-scale, spread over four lanes, and (stored at `mins`)
 * the integer sum of the sub-minimums times the activations' sums. Exact. Weights enter the dot
 * unsigned; where ggml's values carry an offset (Q3_K: 4, Q6_K: 32) the offset times each
 * sub-block's scaled activation sum is taken out at the end, a quarter per lane. Bit fields are
 * reached by shifting a register a constant 1 or 2 further each step (x86 has no byte shifts, and
 * a variable one costs several instructions).
 */
@inline function superBlockDot(kind: i32, blk: usize, xq: usize, xs: usize, mins: usize): v128 {
  let isum = ZERO;
  let minSum = 0;
  if (kind == Q4_K || kind == Q5_K) {
    const sm = scalesMinsK4(blk + 4);
    const sc = i16x8.extend_low_i8x16_u(sm);
    isum = chunkK45(kind, isum, blk, xq, sc, 0);
    isum = chunkK45(kind, isum, blk, xq, sc, 1);
    isum = chunkK45(kind, isum, blk, xq, sc, 2);
    isum = chunkK45(kind, isum, blk, xq, sc, 3);
    // Minimums times the activations' 32-value sums, in integers.
    const mins8 = i16x8.extend_high_i8x16_u(sm);
    const m = i32x4.add(
      i32x4.mul(i32x4.extend_low_i16x8_u(mins8), pairSums(xs, 0)),
      i32x4.mul(i32x4.extend_high_i16x8_u(mins8), pairSums(xs, 32)),
    );
    minSum = laneTotal(m);
  } else if (kind == Q6_K) {
    const scales = v128.load(blk, 192);
    const lo = i16x8.extend_low_i8x16_s(scales), hi = i16x8.extend_high_i8x16_s(scales);
    isum = quarterQ6K(isum, blk, xq, 0, 0, lo);
    isum = quarterQ6K(isum, blk, xq, 0, 1, lo);
    isum = quarterQ6K(isum, blk, xq, 1, 0, hi);
    isum = quarterQ6K(isum, blk, xq, 1, 1, hi);
    // Values are u - 32: take out 32 x the scaled sums, 8 per lane.
    isum = i32x4.sub(isum, i32x4.splat(scaledSumsQ6K(xs, lo, hi) << 3));
  } else {
    // Q2_K and Q3_K: 2-bit values (plus Q3_K's high bit), 16-value sub-blocks, whose 16 scales
    // (Q2_K: and minimums) are unpacked at once; their products with the 16-value activation sums
    // (at most 16 x 127, so i16) are Q3_K's offset of 4 and Q2_K's minimum sum.
    const qsAt: usize = kind == Q2_K ? 16 : 32;
    const packed = kind == Q2_K ? v128.load(blk) : ZERO;
    const sc8 = kind == Q3_K ? scalesQ3K(blk + 96) : v128.and(packed, LOW_NIBBLES);
    const scLo = i16x8.extend_low_i8x16_s(sc8), scHi = i16x8.extend_high_i8x16_s(sc8);
    const sums0 = i16x8.narrow_i32x4_s(v128.load(xs), v128.load(xs, 16));
    const sums1 = i16x8.narrow_i32x4_s(v128.load(xs, 32), v128.load(xs, 48));
    let offset = 0;
    if (kind == Q3_K) {
      const o = i32x4.add(i32x4.dot_i16x8_s(sums0, scLo), i32x4.dot_i16x8_s(sums1, scHi));
      offset = laneTotal(o);
    } else {
      const mn = v128.and(i16x8.shr_u(packed, 4), LOW_NIBBLES);
      const m = i32x4.add(i32x4.dot_i16x8_s(sums0, i16x8.extend_low_i8x16_u(mn)), i32x4.dot_i16x8_s(sums1, i16x8.extend_high_i8x16_u(mn)));
      minSum = laneTotal(m);
    }
    const hm0 = kind == Q3_K ? v128.load(blk) : ZERO;
    const hm1 = kind == Q3_K ? v128.load(blk, 16) : ZERO;
    const q0 = v128.load(blk + qsAt), q1 = v128.load(blk + qsAt, 16), q2 = v128.load(blk + qsAt, 32), q3 = v128.load(blk + qsAt, 48);
    isum = pairQ23(kind, isum, xq, q0, q1, hm0, hm1, scLo, 0, 0);
    isum = pairQ23(kind, isum, xq, q0, q1, hm0, hm1, scLo, 0, 1);
    isum = pairQ23(kind, isum, xq, q0, q1, hm0, hm1, scLo, 0, 2);
    isum = pairQ23(kind, isum, xq, q0, q1, hm0, hm1, scLo, 0, 3);
    isum = pairQ23(kind, isum, xq, q2, q3, hm0, hm1, scHi, 1, 0);
    isum = pairQ23(kind, isum, xq, q2, q3, hm0, hm1, scHi, 1, 1);
    isum = pairQ23(kind, isum, xq, q2, q3, hm0, hm1, scHi, 1, 2);
    isum = pairQ23(kind, isum, xq, q2, q3, hm0, hm1, scHi, 1, 3);
    if (kind == Q3_K) isum = i32x4.sub(isum, i32x4.splat(offset)); // 4 x the sums, 1 per lane
  }
  store<i32>(mins, minSum);
  return isum;
}

/**
 * isum + sub-blocks s = 8n + 2j and s + 1 of a Q2_K or Q3_K super-block (n, j constants after
 * inlining): the 2-bit fields at 2j of half n's low and high 16 bytes (q0, q1), Q3_K's high bit
 * (bit 4n + j of hmask) as 4, times their scales (lanes 2j, 2j + 1 of sc, half n's eight).
 */
@inline function pairQ23(kind: i32, isum: v128, xq: usize, q0: v128, q1: v128, hm0: v128, hm1: v128, sc: v128, n: i32, j: i32): v128 {
  let u0 = v128.and(i16x8.shr_u(q0, 2 * j), THREE);
  let u1 = v128.and(i16x8.shr_u(q1, 2 * j), THREE);
  if (kind == Q3_K) {
    const bit = 4 * n + j;
    const FOUR = i8x16.splat(4);
    u0 = v128.or(u0, v128.and(bit < 2 ? i16x8.shl(hm0, 2 - bit) : i16x8.shr_u(hm0, bit - 2), FOUR));
    u1 = v128.or(u1, v128.and(bit < 2 ? i16x8.shl(hm1, 2 - bit) : i16x8.shr_u(hm1, bit - 2), FOUR));
  }
  const x = xq + <usize>(16 * (8 * n + 2 * j));
  return i32x4.add(isum, i32x4.add(scaledDot(v128.load(x), u0, lane16(sc, 2 * j)), scaledDot(v128.load(x, 16), u1, lane16(sc, 2 * j + 1))));
}

/** The super-block's weight scale d and minimum scale dmin (0 for types without minimums). */
@inline function superScale(kind: i32, blk: usize): f32 {
  return kind == Q2_K ? loadHalf(blk + 80) : kind == Q3_K ? loadHalf(blk + 108) : kind == Q6_K ? loadHalf(blk + 208) : loadHalf(blk);
}

@inline function superMinScale(kind: i32, blk: usize): f32 {
  return kind == Q2_K ? loadHalf(blk + 82) : kind == Q4_K || kind == Q5_K ? loadHalf(blk + 2) : 0;
}

/** One row dotted with one token's activations (256-value blocks). */
@inline function rowDot(kind: i32, row: usize, xq: usize, xd: usize, xs: usize, cols: i32, minSlot: usize): f32 {
  const nb = cols >> 8;
  const bs = blockBytes(kind);
  let acc = f32x4.splat(0);
  let mins: f32 = 0;
  for (let b = 0; b < nb; b++) {
    const blk = row + <usize>(b * bs);
    const isum = superBlockDot(kind, blk, xq + <usize>(b << 8), xs + (<usize>(b << 4) << 2), minSlot);
    const xdb = load<f32>(xd + (<usize>b << 2));
    acc = accumulate(acc, isum, superScale(kind, blk) * xdb);
    if (kind == Q2_K || kind == Q4_K || kind == Q5_K) mins -= superMinScale(kind, blk) * (xdb * <f32>load<i32>(minSlot));
  }
  return sumLanes(acc) + mins;
}

// ---- several tokens: each row unpacked once, then read by every token

/**
 * Bytes per super-block of an unpacked row: 256 weights, 16 scale splats (i16x8), then 16 i32:
 * the 8 minimums of Q4_K/Q5_K, the 16 minimums of Q2_K, or the 16 scales of Q3_K.
 */
const UNPACKED_BYTES: usize = 256 + 256 + 64;

/** Bytes of scratch unpackRow needs for a row of `cols` values (cols / 256 super-blocks). */
export function unpackedRowBytes(cols: i32): i32 {
  return (cols >> 8) * <i32>UNPACKED_BYTES;
}

/**
 * Write row `row`'s super-blocks unpacked at dst, each as the same numbers superBlockDot takes:
 * 256 weights 0..63 in activation order, the scale of each 16 as an i16x8 splat, and 16 i32: the
 * 8 minimums (Q4_K, Q5_K), the 16 minimums (Q2_K) or the 16 scales (Q3_K, for its offset of 4).
 */
@inline function unpackRow(kind: i32, row: usize, nb: i32, dst: usize): void {
  const bs = <usize>blockBytes(kind);
  for (let b = 0; b < nb; b++) {
    const blk = row + <usize>b * bs;
    const u = dst + <usize>b * UNPACKED_BYTES, scales = u + 256, mins = u + 512;
    if (kind == Q2_K || kind == Q3_K) {
      // As superBlockDot: 2-bit values (Q3_K: plus its high bit as 4) in 16-value sub-blocks s =
      // 8n + 2j (low 16 bytes of qs half n) and s + 1 (high 16), shifted down 2j.
      const qsAt: usize = kind == Q2_K ? 16 : 32;
      let hm0 = kind == Q3_K ? v128.load(blk) : ZERO;
      let hm1 = kind == Q3_K ? v128.load(blk, 16) : ZERO;
      for (let n = 0; n < 2; n++) {
        let q0 = v128.load(blk + qsAt + <usize>(32 * n));
        let q1 = v128.load(blk + qsAt + <usize>(32 * n + 16));
        for (let j = 0; j < 4; j++) {
          let u0 = v128.and(q0, THREE);
          let u1 = v128.and(q1, THREE);
          q0 = i16x8.shr_u(q0, 2);
          q1 = i16x8.shr_u(q1, 2);
          if (kind == Q3_K) {
            u0 = v128.or(u0, i16x8.shl(v128.and(hm0, i8x16.splat(1)), 2));
            u1 = v128.or(u1, i16x8.shl(v128.and(hm1, i8x16.splat(1)), 2));
            hm0 = i16x8.shr_u(hm0, 1);
            hm1 = i16x8.shr_u(hm1, 1);
          }
          const sub = 8 * n + 2 * j;
          v128.store(u + <usize>(16 * sub), u0);
          v128.store(u + <usize>(16 * sub + 16), u1);
        }
      }
      for (let sub = 0; sub < 16; sub++) {
        const byte = <i32>load<u8>(blk + <usize>sub);
        const sc = kind == Q2_K ? byte & 0xf : scaleQ3K(blk + 96, sub);
        v128.store(scales + <usize>(16 * sub), i16x8.splat(<i16>sc));
        // Q2_K: the sub-block's minimum; Q3_K: its scale, for the offset of 4.
        store<i32>(mins + <usize>(4 * sub), kind == Q2_K ? byte >> 4 : sc);
      }
    } else if (kind == Q6_K) {
      const raw = v128.load(blk, 192);
      const lo = i16x8.extend_low_i8x16_s(raw), hi = i16x8.extend_high_i8x16_s(raw);
      for (let n = 0; n < 2; n++) {
        for (let h = 0; h < 2; h++) {
          // Group k of quarter h of half n: values 128n + 16h + 32k, activation group 8n + 2k + h.
          const l0 = v128.load(blk + <usize>(64 * n + 16 * h));
          const l1 = v128.load(blk + <usize>(64 * n + 32 + 16 * h));
          const hb = v128.load(blk + 128 + <usize>(32 * n + 16 * h));
          const HIGH = i8x16.splat(0x30);
          const g = u + <usize>(128 * n + 16 * h);
          v128.store(g, v128.or(v128.and(l0, LOW_NIBBLES), v128.and(i16x8.shl(hb, 4), HIGH)));
          v128.store(g, v128.or(v128.and(l1, LOW_NIBBLES), v128.and(i16x8.shl(hb, 2), HIGH)), 32);
          v128.store(g, v128.or(highNibbles(l0), v128.and(hb, HIGH)), 64);
          v128.store(g, v128.or(highNibbles(l1), v128.and(i16x8.shr_u(hb, 2), HIGH)), 96);
        }
        const sc = n == 0 ? lo : hi;
        for (let k = 0; k < 4; k++) {
          for (let h = 0; h < 2; h++) v128.store(scales + <usize>((8 * n + 2 * k + h) << 4), lane16(sc, 2 * k + h));
        }
      }
    } else {
      const sm = scalesMinsK4(blk + 4);
      const sc = i16x8.extend_low_i8x16_u(sm);
      const qsAt: usize = kind == Q4_K ? 16 : 48;
      const qh0 = v128.load(blk, 16), qh1 = v128.load(blk, 32);
      for (let c = 0; c < 4; c++) {
        const q0 = v128.load(blk + qsAt + <usize>(32 * c));
        const q1 = v128.load(blk + qsAt + <usize>(32 * c + 16));
        let lo0 = v128.and(q0, LOW_NIBBLES), lo1 = v128.and(q1, LOW_NIBBLES);
        let hi0 = highNibbles(q0), hi1 = highNibbles(q1);
        if (kind == Q5_K) {
          // Bits 2c and 2c + 1 of qh at 0x10 (a variable shift here: the loop runs once per row).
          const b0 = 2 * c, b1 = 2 * c + 1;
          const FIFTH = i8x16.splat(0x10);
          lo0 = v128.or(lo0, v128.and(i8x16.shr_u(i8x16.shl(qh0, 7 - b0), 3), FIFTH));
          lo1 = v128.or(lo1, v128.and(i8x16.shr_u(i8x16.shl(qh1, 7 - b0), 3), FIFTH));
          hi0 = v128.or(hi0, v128.and(i8x16.shr_u(i8x16.shl(qh0, 7 - b1), 3), FIFTH));
          hi1 = v128.or(hi1, v128.and(i8x16.shr_u(i8x16.shl(qh1, 7 - b1), 3), FIFTH));
        }
        const g = u + <usize>(64 * c);
        v128.store(g, lo0);
        v128.store(g, lo1, 16);
        v128.store(g, hi0, 32);
        v128.store(g, hi1, 48);
        const sLo = lane16(sc, 2 * c), sHi = lane16(sc, 2 * c + 1);
        v128.store(scales + <usize>(64 * c), sLo);
        v128.store(scales + <usize>(64 * c), sLo, 16);
        v128.store(scales + <usize>(64 * c), sHi, 32);
        v128.store(scales + <usize>(64 * c), sHi, 48);
      }
      const mins8 = i16x8.extend_high_i8x16_u(sm);
      v128.store(mins, i32x4.extend_low_i16x8_u(mins8));
      v128.store(mins, i32x4.extend_high_i16x8_u(mins8), 16);
    }
  }
}

/** isum + one 16-value piece of a token's dot over an unpacked row: weights u (0..63), their scale splat sc. */
@inline function pieceDot(x: v128, u: v128, sc: v128, isum: v128): v128 {
  return i32x4.add(isum, i32x4.dot_i16x8_s(i16x8.relaxed_dot_i8x16_i7x16_s(x, u), sc));
}

/** The 16 numbers after a super-block's scales (Q2_K's minimums, Q3_K's scales) times the token's 16-value sums at s, summed. */
@inline function storedTimesSums(ub: usize, s: usize): i32 {
  const p = i32x4.add(
    i32x4.add(i32x4.mul(v128.load(ub + 512), v128.load(s)), i32x4.mul(v128.load(ub + 512, 16), v128.load(s, 16))),
    i32x4.add(i32x4.mul(v128.load(ub + 512, 32), v128.load(s, 32)), i32x4.mul(v128.load(ub + 512, 48), v128.load(s, 48))),
  );
  return laneTotal(p);
}

/**
 * acc + a token's integer sum over super-block blk (unpacked at ub), the type's offset taken out
 * (Q3_K's 4, Q6_K's 32, with the token's 16-value sums at s), scaled by d * the token's scale xdb.
 */
@inline function superAccumulate(kind: i32, acc: v128, isum: v128, blk: usize, ub: usize, s: usize, xdb: f32): v128 {
  if (kind == Q3_K) {
    isum = i32x4.sub(isum, i32x4.splat(storedTimesSums(ub, s)));
  } else if (kind == Q6_K) {
    // Values are u - 32: 32 x the scaled 16-value sums out, as superBlockDot.
    const raw = v128.load(blk, 192);
    isum = i32x4.sub(isum, i32x4.splat(scaledSumsQ6K(s, i16x8.extend_low_i8x16_s(raw), i16x8.extend_high_i8x16_s(raw)) << 3));
  }
  return accumulate(acc, isum, superScale(kind, blk) * xdb);
}

/** The minimum term a token's result loses for super-block blk (Q2_K, Q4_K, Q5_K; 0 for the others): dmin * (xdb * its integer sum). */
@inline function superMinTerm(kind: i32, blk: usize, ub: usize, s: usize, xdb: f32): f32 {
  if (kind == Q2_K) return superMinScale(kind, blk) * (xdb * <f32>storedTimesSums(ub, s));
  if (kind == Q4_K || kind == Q5_K) {
    const m = i32x4.add(i32x4.mul(v128.load(ub + 512), pairSums(s, 0)), i32x4.mul(v128.load(ub + 512, 16), pairSums(s, 32)));
    const minSum = laneTotal(m);
    return superMinScale(kind, blk) * (xdb * <f32>minSum);
  }
  return 0;
}

/**
 * rowDot over an unpacked row (u as unpackRow wrote it) for n tokens at once, n = 1..4 a constant
 * at each call (token k's activations at xq + k*cols, its scales and sums one token's length
 * apart): the same integer sums as superBlockDot, each 16 weights and their scale a load shared by
 * the n tokens instead of an unpacking, then rowDot's float part in rowDot's order for each token,
 * so every result is the same bits as rowDot's. Results go to out + k*outStride.
 */
@inline function rowDotUnpacked(
  kind: i32, n: i32, row: usize, u: usize, xq: usize, xd: usize, xs: usize, cols: i32, out: usize, outStride: usize,
): void {
  const nb = cols >> 8;
  const bs = <usize>blockBytes(kind);
  const c = <usize>cols, dk = <usize>nb << 2, sk = <usize>(cols >> 4) << 2;
  const hasMins = kind == Q2_K || kind == Q4_K || kind == Q5_K;
  let acc0 = f32x4.splat(0), acc1 = f32x4.splat(0), acc2 = f32x4.splat(0), acc3 = f32x4.splat(0);
  let mins0: f32 = 0, mins1: f32 = 0, mins2: f32 = 0, mins3: f32 = 0;
  let blk = row, ub = u, x = xq, s = xs, d = xd;
  for (let b = 0; b < nb; b++, blk += bs, ub += UNPACKED_BYTES, x += 256, s += 64, d += 4) {
    let i0 = i32x4.splat(0), i1 = i32x4.splat(0), i2 = i32x4.splat(0), i3 = i32x4.splat(0);
    for (let g: usize = 0; g < 256; g += 16) {
      const w = v128.load(ub + g), sc = v128.load(ub + 256 + g);
      i0 = pieceDot(v128.load(x + g), w, sc, i0);
      if (n > 1) i1 = pieceDot(v128.load(x + c + g), w, sc, i1);
      if (n > 2) i2 = pieceDot(v128.load(x + 2 * c + g), w, sc, i2);
      if (n > 3) i3 = pieceDot(v128.load(x + 3 * c + g), w, sc, i3);
    }
    const x0 = load<f32>(d);
    acc0 = superAccumulate(kind, acc0, i0, blk, ub, s, x0);
    if (hasMins) mins0 -= superMinTerm(kind, blk, ub, s, x0);
    if (n > 1) {
      const x1 = load<f32>(d + dk);
      acc1 = superAccumulate(kind, acc1, i1, blk, ub, s + sk, x1);
      if (hasMins) mins1 -= superMinTerm(kind, blk, ub, s + sk, x1);
    }
    if (n > 2) {
      const x2 = load<f32>(d + 2 * dk);
      acc2 = superAccumulate(kind, acc2, i2, blk, ub, s + 2 * sk, x2);
      if (hasMins) mins2 -= superMinTerm(kind, blk, ub, s + 2 * sk, x2);
    }
    if (n > 3) {
      const x3 = load<f32>(d + 3 * dk);
      acc3 = superAccumulate(kind, acc3, i3, blk, ub, s + 3 * sk, x3);
      if (hasMins) mins3 -= superMinTerm(kind, blk, ub, s + 3 * sk, x3);
    }
  }
  store<f32>(out, sumLanes(acc0) + mins0);
  if (n > 1) store<f32>(out + outStride, sumLanes(acc1) + mins1);
  if (n > 2) store<f32>(out + 2 * outStride, sumLanes(acc2) + mins2);
  if (n > 3) store<f32>(out + 3 * outStride, sumLanes(acc3) + mins3);
}

/**
 * `minSlot` is per-thread scratch: 64 bytes whose first 4 carry superBlockDot's integer minimum
 * sum out (AssemblyScript returns one value), then room for one unpacked row (unpackedRowBytes).
 */
@inline function matmulK(
  kind: i32, out: usize, xq: usize, xd: usize, xs: usize, w: usize, T: i32, cols: i32, outStride: i32, minSlot: usize, rowStart: i32, rowEnd: i32,
): void {
  const rowBytes = (cols >> 8) * blockBytes(kind);
  // With several tokens, each row is unpacked once into the scratch after the minimum slot, then
  // read by every token.
  const unpacked = T >= UNPACK_MIN_TOKENS;
  const u = minSlot + 64;
  for (let r = rowStart; r < rowEnd; r++) {
    const row = w + <usize>(r * rowBytes);
    if (unpacked) {
      // Four tokens at a time, then the last 3, 2 or 1 together.
      unpackRow(kind, row, cols >> 8, u);
      for (let t = 0; t < T; t += 4) {
        const x = xq + <usize>(t * cols), d = xd + (<usize>(t * (cols >> 8)) << 2), s = xs + (<usize>(t * (cols >> 4)) << 2);
        const o = out + (<usize>(t * outStride + r) << 2), os = <usize>outStride << 2;
        const left = T - t;
        if (left >= 4) rowDotUnpacked(kind, 4, row, u, x, d, s, cols, o, os);
        else if (left == 3) rowDotUnpacked(kind, 3, row, u, x, d, s, cols, o, os);
        else if (left == 2) rowDotUnpacked(kind, 2, row, u, x, d, s, cols, o, os);
        else rowDotUnpacked(kind, 1, row, u, x, d, s, cols, o, os);
      }
      continue;
    }
    for (let t = 0; t < T; t++) {
      const v = rowDot(kind, row, xq + <usize>(t * cols), xd + (<usize>(t * (cols >> 8)) << 2), xs + (<usize>(t * (cols >> 4)) << 2), cols, minSlot);
      store<f32>(out + (<usize>(t * outStride + r) << 2), v);
    }
  }
}

export function matmulQ2_K(out: usize, xq: usize, xd: usize, xs: usize, w: usize, T: i32, cols: i32, outStride: i32, scratch: usize, rowStart: i32, rowEnd: i32): void {
  matmulK(Q2_K, out, xq, xd, xs, w, T, cols, outStride, scratch, rowStart, rowEnd);
}
export function matmulQ3_K(out: usize, xq: usize, xd: usize, xs: usize, w: usize, T: i32, cols: i32, outStride: i32, scratch: usize, rowStart: i32, rowEnd: i32): void {
  matmulK(Q3_K, out, xq, xd, xs, w, T, cols, outStride, scratch, rowStart, rowEnd);
}
export function matmulQ4_K(out: usize, xq: usize, xd: usize, xs: usize, w: usize, T: i32, cols: i32, outStride: i32, scratch: usize, rowStart: i32, rowEnd: i32): void {
  matmulK(Q4_K, out, xq, xd, xs, w, T, cols, outStride, scratch, rowStart, rowEnd);
}
export function matmulQ5_K(out: usize, xq: usize, xd: usize, xs: usize, w: usize, T: i32, cols: i32, outStride: i32, scratch: usize, rowStart: i32, rowEnd: i32): void {
  matmulK(Q5_K, out, xq, xd, xs, w, T, cols, outStride, scratch, rowStart, rowEnd);
}
export function matmulQ6_K(out: usize, xq: usize, xd: usize, xs: usize, w: usize, T: i32, cols: i32, outStride: i32, scratch: usize, rowStart: i32, rowEnd: i32): void {
  matmulK(Q6_K, out, xq, xd, xs, w, T, cols, outStride, scratch, rowStart, rowEnd);
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
