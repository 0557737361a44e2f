// ============================================================================================
// Shared pieces of the ggml block-type kernels: half-precision conversion, the quantized
// activation layouts, and the integer dot of one 32-element block.
// ============================================================================================
//
// Quantized activations (made by act.ts from f32 rows; one row per token, blocks in order):
//   q8_0 block, 52 bytes: d f32, qs[32] int8, qsum i32x4      x ~= d * q
//   q8_1 block, 40 bytes: d f32, s f32 (= d * sum q), qs[32]  (for weights with a minimum, Q4_1/Q5_1)
// Scales stay f32 (ggml stores f16): a little more exact, same cost. qsum lane l is the sum of q
// over elements 4l..4l+3 and 16+4l..16+4l+3: what dotUnsigned's lane l sums, so weights stored
// with an offset (Q4_0: q - 8, Q5_0: q - 16) are dotted unsigned and corrected per lane.
//
// A block's integer dot leaves four exact i32 lanes: for Q8_0 (dotWide) element j of the block
// goes to lane (j >> 1) & 3, for the unsigned 4- and 5-bit weights (dotUnsigned) to lane
// (j & 15) >> 2. Integer sums are exact, so only the float steps have an order; blocks32.ts
// fixes it per output, independent of T and the row range.

export const QK: i32 = 32;
export const Q8_0_ACT_BYTES: i32 = 52;
export const Q8_1_ACT_BYTES: i32 = 40;

const TWO_POW_112: f32 = 5.192296858534828e33;

/** binary16 -> f32, exact (normals, subnormals, zeros, infinities, NaNs). */
@inline export function f16ToF32(h: u32): f32 {
  // As f16x4ToF32: sign-extend, shift the fields into place, rebias by a multiply.
  const signed = (<i32>(<i16>h) << 13) & 0x8fffe000;
  const f = reinterpret<f32>(signed) * TWO_POW_112;
  // Exponent 31 (infinities, NaNs) is rare: a branch that is never taken costs little.
  if ((signed & 0x0fffe000) > 0x0f7fffff) return reinterpret<f32>(reinterpret<u32>(f) | 0x7f800000);
  return f;
}

/** Eight binary16 values (a v128) -> two f32x4, exact; `high` picks lanes 4..7. */
@inline export function f16x4ToF32(h16: v128, high: bool): v128 {
  // Sign-extended and shifted by 13: the sign fills bits 31..28, exponent and mantissa sit at
  // 27..13 as f32 fields 112 below theirs; masking keeps bit 31 and those, the multiply rebiases
  // (exact for normals and subnormals alike).
  const h = high ? i32x4.extend_high_i16x8_s(h16) : i32x4.extend_low_i16x8_s(h16);
  const signed = v128.and(i32x4.shl(h, 13), i32x4.splat(0x8fffe000));
  const scaled = f32x4.mul(signed, f32x4.splat(TWO_POW_112));
  // Exponent 31 (infinities, NaNs): the rebias left them finite; set all exponent bits.
  const em = v128.and(signed, i32x4.splat(0x0fffe000));
  return v128.or(scaled, v128.and(i32x4.gt_s(em, i32x4.splat(0x0f7fffff)), i32x4.splat(0x7f800000)));
}

/** Sum of the four lanes in the fixed order (a0 + a1) + (a2 + a3). */
@inline export function hsum(v: v128): f32 {
  return (f32x4.extract_lane(v, 0) + f32x4.extract_lane(v, 1)) + (f32x4.extract_lane(v, 2) + f32x4.extract_lane(v, 3));
}

/**
 * Integer dot of 32 unsigned weights below 128 (lo = elements 0..15, hi = 16..31) with 32 int8
 * activations at x. relaxed_dot_i8x16_i7x16_s is exact (the same on every machine) when its
 * second operand is in [0, 127], and the weights here are at most 31: |pair sum| <= 2*127*31,
 * two of them still fit an i16.
 */
@inline export function dotUnsigned(lo: v128, hi: v128, x: usize): v128 {
  const p = i16x8.add(i16x8.relaxed_dot_i8x16_i7x16_s(v128.load(x), lo), i16x8.relaxed_dot_i8x16_i7x16_s(v128.load(x, 16), hi));
  return i32x4.extadd_pairwise_i16x8_s(p);
}

/**
 * Integer dot of 32 int8 weights with 32 int8 activations at x: only two products are summed in i16. Activations are never
 * -128 (act.ts rounds |x| / d <= 127), so |w * x| <= 128 * 127 and two fit in an i16.
 */
@inline export function dotWide(lo: v128, hi: v128, x: usize): v128 {
  const x0 = v128.load(x);
  const x1 = v128.load(x, 16);
  const a = i32x4.extadd_pairwise_i16x8_s(i16x8.add(i16x8.extmul_low_i8x16_s(lo, x0), i16x8.extmul_high_i8x16_s(lo, x0)));
  const b = i32x4.extadd_pairwise_i16x8_s(i16x8.add(i16x8.extmul_low_i8x16_s(hi, x1), i16x8.extmul_high_i8x16_s(hi, x1)));
  return i32x4.add(a, b);
}

/** The 5th bits of 16 elements, from bits [first, first + 16) of qh, as 0xFF / 0x00 bytes. */
@inline export function highBitMask(qh: u32, upper: bool): v128 {
  const bytes = i32x4.splat(qh);
  const spread = upper
    ? i8x16.swizzle(bytes, i8x16(2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3))
    : i8x16.swizzle(bytes, i8x16(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1));
  const bit = i8x16(1, 2, 4, 8, 16, 32, 64, -128, 1, 2, 4, 8, 16, 32, 64, -128);
  return i8x16.eq(v128.and(spread, bit), bit);
}
