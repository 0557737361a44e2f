/**
 * Half-precision conversions as ggml does them: IEEE binary16 with round-to-nearest-even (ggml's
 * GGML_FP32_TO_FP16, the FP16 library's branch-free algorithm, which F16C hardware matches) and
 * bfloat16 with ggml's rounding (round-to-nearest-even on the top 16 bits, NaN made quiet).
 */

const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);

function bitsOf(x: number): number {
  f32[0] = x;
  return u32[0]!;
}

function fromBits(bits: number): number {
  u32[0] = bits >>> 0;
  return f32[0]!;
}

const SCALE_TO_INF = 2 ** 112;
const SCALE_TO_ZERO = 2 ** -110;

/** f32 -> binary16 bits, round-to-nearest-even; overflow to infinity, NaN to a quiet NaN. */
export function fp32ToFp16(x: number): number {
  const fx = Math.fround(x);
  let base = Math.fround(Math.fround(Math.abs(fx) * SCALE_TO_INF) * SCALE_TO_ZERO);
  const w = bitsOf(fx);
  const shl1 = (w * 2) >>> 0;
  const sign = w & 0x80000000;
  let bias = (shl1 & 0xff000000) >>> 0;
  if (bias < 0x71000000) bias = 0x71000000;
  base = Math.fround(fromBits((bias >>> 1) + 0x07800000) + base);
  const bits = bitsOf(base);
  const expBits = (bits >>> 13) & 0x7c00;
  const mantissaBits = bits & 0x0fff;
  const nonsign = expBits + mantissaBits;
  return ((sign >>> 16) | (shl1 > 0xff000000 ? 0x7e00 : nonsign)) & 0xffff;
}

/** binary16 bits -> f32 (exact). */
export function fp16ToFp32(h: number): number {
  const sign = (h & 0x8000) << 16;
  const exp = (h >> 10) & 0x1f;
  const mant = h & 0x3ff;
  if (exp === 0x1f) return fromBits(sign | 0x7f800000 | (mant << 13));
  if (exp === 0) return (sign ? -1 : 1) * mant * 2 ** -24;
  return fromBits(sign | ((exp + 112) << 23) | (mant << 13));
}

/** f32 -> bfloat16 bits as ggml_compute_fp32_to_bf16: NaN kept quiet, others rounded to nearest even. */
export function fp32ToBf16(x: number): number {
  const u = bitsOf(x);
  if ((u & 0x7fffffff) >>> 0 > 0x7f800000) return ((u >>> 16) | 64) & 0xffff;
  return ((u + (0x7fff + ((u >>> 16) & 1))) >>> 16) & 0xffff;
}

/** bfloat16 bits -> f32 (exact). */
export function bf16ToFp32(h: number): number {
  return fromBits((h & 0xffff) << 16);
}
