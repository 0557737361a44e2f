// ============================================================================================
// KV cache element types: rows stored as f32, f16 or ggml's q8_0, and read back as f32
// ============================================================================================
//
// A row is one head's headDim values at one position (src/kv/kv-layout.ts sizes it):
//   KV_F32   headDim f32
//   KV_F16   headDim IEEE halves, rounded to nearest even as ggml_compute_fp32_to_fp16
//   KV_Q8_0  headDim / 32 blocks of ggml's block_q8_0: an f16 scale d, then 32 int8 q; value = q * d
// Storing converts (f32ToHalf, quantizeRowQ8_0: ggml's reference quantizer, bit for bit). Reading
// widens a row to f32 exactly: every half is an f32, and q * d is an exact product (8 by 11
// significant bits), so attention over a typed cache equals f32 attention over its values.
// kvRowToF32 is the SIMD reader (with a scalar tail); kvRowToF32Ref the scalar reference it is
// tested against.

import { halfToF32, loadHalf } from "./ggml/common";

export const KV_F32: i32 = 0;
export const KV_F16: i32 = 1;
export const KV_Q8_0: i32 = 2;
const Q8_0_BLOCK: i32 = 32;
const Q8_0_BYTES: usize = 34;

/**
 * f32 to IEEE half bits, nearest even, exactly as ggml's portable ggml_compute_fp32_to_fp16:
 * the float adds round the mantissa for the normal and subnormal ranges at once; NaN becomes 0x7e00
 * with the sign, and values from 65520 up become infinity.
 */
export function f32ToHalf(f: f32): u32 {
  const scaleToInf = reinterpret<f32>(0x77800000); // 2^112
  const scaleToZero = reinterpret<f32>(0x08800000); // 2^-110
  let base = (Mathf.abs(f) * scaleToInf) * scaleToZero;
  const w = reinterpret<u32>(f);
  const shl1 = w + w;
  const sign = w & 0x80000000;
  let bias = shl1 & 0xff000000;
  if (bias < 0x71000000) bias = 0x71000000;
  base = reinterpret<f32>((bias >> 1) + 0x07800000) + base;
  const bits = reinterpret<u32>(base);
  const nonsign = ((bits >> 13) & 0x7c00) + (bits & 0x0fff);
  return (sign >> 16) | (shl1 > 0xff000000 ? 0x7e00 : nonsign);
}

/** C's roundf: to nearest, halves away from zero (|x| <= 127 here, where x - trunc(x) is exact). */
@inline function roundAway(x: f32): f32 {
  const t = Mathf.trunc(x);
  const r = x - t;
  return r >= 0.5 ? t + 1 : r <= -0.5 ? t - 1 : t;
}

/** n values (a multiple of 32) at src as block_q8_0 at dst, as ggml's quantize_row_q8_0_ref. */
export function quantizeRowQ8_0(dst: usize, src: usize, n: i32): void {
  for (let b = 0; b < n; b += Q8_0_BLOCK) {
    const x = src + (<usize>b << 2);
    let amax: f32 = 0;
    for (let j = 0; j < Q8_0_BLOCK; j++) {
      const a = Mathf.abs(load<f32>(x + (<usize>j << 2)));
      if (a > amax) amax = a;
    }
    const d: f32 = amax / <f32>127;
    const id: f32 = d != 0 ? <f32>1 / d : 0;
    const out = dst + <usize>(b / Q8_0_BLOCK) * Q8_0_BYTES;
    store<u16>(out, <u16>f32ToHalf(d));
    for (let j = 0; j < Q8_0_BLOCK; j++) store<i8>(out + 2 + <usize>j, <i8><i32>roundAway(load<f32>(x + (<usize>j << 2)) * id));
  }
}

/** Store n f32 at src as one row of `kvType` at dst. */
export function storeKVRow(dst: usize, src: usize, n: i32, kvType: i32): void {
  if (kvType == KV_F32) {
    memory.copy(dst, src, <usize>n << 2);
  } else if (kvType == KV_F16) {
    for (let j = 0; j < n; j++) store<u16>(dst + (<usize>j << 1), <u16>f32ToHalf(load<f32>(src + (<usize>j << 2))));
  } else {
    quantizeRowQ8_0(dst, src, n);
  }
}

/**
 * Four halves, sign-extended to i32 lanes, to f32x4, exactly (ggml/common.ts halfToF32's values):
 * shifted by 13 the sign fills bits 31..28, exponent and mantissa sit at 27..13, 112 below f32's
 * bias; the mask keeps bit 31 and those, the multiply by 2^112 rebiases (subnormal halves too);
 * an all-ones half exponent (inf, NaN) is set to f32's.
 */
@inline function halvesToF32x4(h: v128): v128 {
  const f = f32x4.mul(v128.and(i32x4.shl(h, 13), i32x4.splat(0x8fffe000)), f32x4.splat(reinterpret<f32>(0x77800000)));
  const infNan = i32x4.eq(v128.and(h, i32x4.splat(0x7c00)), i32x4.splat(0x7c00));
  return v128.or(f, v128.and(infNan, i32x4.splat(0x7f800000)));
}

/** Four int8 of an i16x8 half (sign-extended) as f32 times d. */
@inline function scaledQuads(q16: v128, d: v128, high: bool): v128 {
  return f32x4.mul(f32x4.convert_i32x4_s(high ? i32x4.extend_high_i16x8_s(q16) : i32x4.extend_low_i16x8_s(q16)), d);
}

/**
 * dst[0..n) = the row of `kvType` at src as f32: SIMD over 8 halves or 16 int8 at a time, then a scalar tail.
 * Inlined (as halfRowScaled) into attention's tile widening, which called it twice per row.
 */
@inline export function kvRowToF32(dst: usize, src: usize, n: i32, kvType: i32): void {
  if (kvType == KV_F32) {
    memory.copy(dst, src, <usize>n << 2);
    return;
  }
  if (kvType == KV_F16) {
    const n8 = n & ~7;
    for (let j = 0; j < n8; j += 8) {
      const h = v128.load(src + (<usize>j << 1));
      const o = dst + (<usize>j << 2);
      v128.store(o, halvesToF32x4(i32x4.extend_low_i16x8_s(h)));
      v128.store(o, halvesToF32x4(i32x4.extend_high_i16x8_s(h)), 16);
    }
    for (let j = n8; j < n; j++) store<f32>(dst + (<usize>j << 2), halfToF32(<u32>load<u16>(src + (<usize>j << 1))));
    return;
  }
  // q8_0: n is whole blocks (kv-layout.ts refuses other head dimensions), so no tail.
  for (let b = 0; b < n; b += Q8_0_BLOCK) {
    const blk = src + <usize>(b / Q8_0_BLOCK) * Q8_0_BYTES;
    const d = f32x4.splat(loadHalf(blk));
    for (let j = 0; j < Q8_0_BLOCK; j += 16) {
      const q = v128.load(blk + 2 + <usize>j);
      const lo = i16x8.extend_low_i8x16_s(q);
      const hi = i16x8.extend_high_i8x16_s(q);
      const o = dst + (<usize>(b + j) << 2);
      v128.store(o, scaledQuads(lo, d, false));
      v128.store(o, scaledQuads(lo, d, true), 16);
      v128.store(o, scaledQuads(hi, d, false), 32);
      v128.store(o, scaledQuads(hi, d, true), 48);
    }
  }
}

/**
 * 2^112: an f16 row widened by halfRowScaled holds value * 2^-112, so attention multiplies the
 * query and the softmax weights by this instead (kv-types' fast f16 path in attention.ts).
 */
export const HALF_SCALE: f32 = reinterpret<f32>(0x77800000);

/** Four halves (sign-extended i32 lanes) as f32 times 2^-112: the bits shifted into place, no multiply. */
@inline function halvesScaledx4(h: v128): v128 {
  return v128.and(i32x4.shl(h, 13), i32x4.splat(0x8fffe000));
}

/**
 * dst[0..n) = each half at src times 2^-112, exactly for every finite half (a subnormal half gives
 * a subnormal f32 of the same significand), in two integer operations per value: half the cost
 * of kvRowToF32's widening. An infinite or NaN half gives 2^-96 * (1 + m/1024) (65536 * (1 + m/1024)
 * once scaled back), as the weights' reader does (ggml/float.ts): no finite value rounds to one
 * below 65520. SIMD over 8 halves, then the same operation one value at a time.
 */
@inline export function halfRowScaled(dst: usize, src: usize, n: i32): void {
  const n8 = n & ~7;
  for (let j = 0; j < n8; j += 8) {
    const h = v128.load(src + (<usize>j << 1));
    const o = dst + (<usize>j << 2);
    v128.store(o, halvesScaledx4(i32x4.extend_low_i16x8_s(h)));
    v128.store(o, halvesScaledx4(i32x4.extend_high_i16x8_s(h)), 16);
  }
  for (let j = n8; j < n; j++) store<u32>(dst + (<usize>j << 2), halfScaledBits(<u32>load<u16>(src + (<usize>j << 1))));
}

/** halfRowScaled's scalar reference: one value at a time. */
export function halfRowScaledRef(dst: usize, src: usize, n: i32): void {
  for (let j = 0; j < n; j++) store<u32>(dst + (<usize>j << 2), halfScaledBits(<u32>load<u16>(src + (<usize>j << 1))));
}

/** The f32 bits of half h times 2^-112 (see halfRowScaled). */
@inline function halfScaledBits(h: u32): u32 {
  return <u32>((<i32>(<i16>h) << 13) & 0x8fffe000);
}

/** kvRowToF32's scalar reference: one value at a time. */
export function kvRowToF32Ref(dst: usize, src: usize, n: i32, kvType: i32): void {
  for (let j = 0; j < n; j++) {
    let v: f32;
    if (kvType == KV_F32) v = load<f32>(src + (<usize>j << 2));
    else if (kvType == KV_F16) v = halfToF32(<u32>load<u16>(src + (<usize>j << 1)));
    else {
      const blk = src + <usize>(j / Q8_0_BLOCK) * Q8_0_BYTES;
      v = <f32>load<i8>(blk + 2 + <usize>(j % Q8_0_BLOCK)) * halfToF32(<u32>load<u16>(blk));
    }
    store<f32>(dst + (<usize>j << 2), v);
  }
}
