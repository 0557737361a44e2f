/**
 * 16-bit floats as ggml stores them: IEEE half (GGML_FP32_TO_FP16, round to nearest even) and
 * bfloat16 (ggml_compute_fp32_to_bf16: round to nearest even, NaN kept quiet).
 */

const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);

/** The bits of x as an f32. */
export function f32Bits(x: number): number {
  f32[0] = x;
  return u32[0]!;
}

export function bitsF32(bits: number): number {
  u32[0] = bits >>> 0;
  return f32[0]!;
}

/** f32 to IEEE half bits, rounding to nearest even (what F16C's vcvtps2ph does with mode 0). */
export function f32ToHalf(x: number): number {
  const bits = f32Bits(x);
  const sign = (bits >>> 16) & 0x8000;
  const exp = (bits >>> 23) & 0xff;
  let mant = bits & 0x7fffff;
  if (exp === 0xff) return sign | 0x7c00 | (mant !== 0 ? 0x200 : 0); // inf, NaN
  const e = exp - 127 + 15;
  if (e >= 31) return sign | 0x7c00; // overflow to inf
  if (e <= 0) {
    // Subnormal half (or zero): shift the full mantissa right, rounding to nearest even.
    if (e < -10) return sign;
    mant |= 0x800000;
    const shift = 14 - e;
    const half = mant >>> shift;
    const rest = mant & ((1 << shift) - 1);
    const mid = 1 << (shift - 1);
    const round = rest > mid || (rest === mid && (half & 1) === 1) ? 1 : 0;
    return sign | (half + round);
  }
  const half = (e << 10) | (mant >>> 13);
  const rest = mant & 0x1fff;
  const round = rest > 0x1000 || (rest === 0x1000 && (half & 1) === 1) ? 1 : 0;
  return sign | (half + round); // a carry into the exponent is the correct rounding
}

export function halfToF32(h: number): number {
  const sign = h & 0x8000 ? -1 : 1;
  const exp = (h >>> 10) & 0x1f;
  const mant = h & 0x3ff;
  if (exp === 0) return sign * mant * 2 ** -24;
  if (exp === 31) return mant !== 0 ? NaN : sign * Infinity;
  return sign * (1 + mant / 1024) * 2 ** (exp - 15);
}

/** f32 to bfloat16 bits, as ggml: nearest even, a NaN stays a (quiet) NaN. */
export function f32ToBF16(x: number): number {
  const u = f32Bits(x);
  if ((u & 0x7fffffff) > 0x7f800000) return ((u >>> 16) | 64) & 0xffff;
  return ((u + (0x7fff + ((u >>> 16) & 1))) >>> 16) & 0xffff;
}

export function bf16ToF32(b: number): number {
  return bitsF32((b & 0xffff) << 16);
}

