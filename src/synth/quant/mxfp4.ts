/**
 * MXFP4 (OCP microscaling FP4), the type of gpt-oss's experts: blocks of 32 values, one E8M0 scale
 * byte (a power of two) and 16 bytes of 4-bit E2M1 codes (values 0..15 in the low nibbles, 16..31
 * in the high ones). ggml stores the E2M1 values doubled, as the integers of kvalues_mxfp4, and
 * halves the scale instead (GGML_E8M0_TO_FP32_HALF), so a value is an exact int8 times a power of
 * two: x = kvalue[code] * 2^(e - 128). Quantized as ggml-quants.c's quantize_row_mxfp4_ref (f32
 * arithmetic, rounded here with Math.fround at the same steps) and dequantized as
 * dequantize_row_mxfp4, which is exact: every product is a small integer times a power of two.
 */

const fr = Math.fround;
export const MXFP4_BLOCK_VALUES = 32;
export const MXFP4_BLOCK_BYTES = 17;

/** ggml's kvalues_mxfp4: the E2M1 values times two, by 4-bit code. */
export const MXFP4_VALUES: readonly number[] = [0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12];

const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);

/** GGML_E8M0_TO_FP32_HALF: 2^(e - 128) as an f32 (subnormal for e < 2, as ggml writes the bits). */
export function e8m0Half(e: number): number {
  u32[0] = e < 2 ? 0x00200000 << e : (e - 1) << 23;
  return f32[0]!;
}

/** The code whose value times d is nearest x (the first such), as best_index_mxfp4. */
function bestIndex(x: number, d: number): number {
  let best = 0;
  let bestErr = Math.abs(fr(MXFP4_VALUES[0]! * d - x));
  for (let i = 1; i < 16; i++) {
    const err = Math.abs(fr(fr(MXFP4_VALUES[i]! * d) - x));
    if (err < bestErr) {
      best = i;
      bestErr = err;
    }
  }
  return best;
}

/** Quantize x (a multiple of 32 values) to MXFP4 blocks. */
export function quantizeMxfp4(x: Float32Array): Uint8Array {
  if (x.length % MXFP4_BLOCK_VALUES !== 0) throw new RangeError(`MXFP4 needs a multiple of ${MXFP4_BLOCK_VALUES} values, got ${x.length}`);
  const nb = x.length / MXFP4_BLOCK_VALUES;
  const out = new Uint8Array(nb * MXFP4_BLOCK_BYTES);
  for (let i = 0; i < nb; i++) {
    const at = i * MXFP4_BLOCK_VALUES;
    const o = i * MXFP4_BLOCK_BYTES;
    let amax = 0;
    for (let j = 0; j < MXFP4_BLOCK_VALUES; j++) amax = Math.max(amax, Math.abs(x[at + j]!));
    // (uint8_t)(floorf(log2f(amax)) - 2 + 127): the exponent that puts amax's doubled E2M1 value in 4..8.
    const e = amax > 0 ? (Math.floor(fr(Math.log2(amax))) - 2 + 127) & 0xff : 0;
    const d = e8m0Half(e);
    out[o] = e;
    for (let j = 0; j < MXFP4_BLOCK_VALUES / 2; j++) {
      out[o + 1 + j] = bestIndex(x[at + j]!, d) | (bestIndex(x[at + MXFP4_BLOCK_VALUES / 2 + j]!, d) << 4);
    }
  }
  return out;
}

/** The n values that MXFP4 blocks stand for, as dequantize_row_mxfp4. */
export function dequantizeMxfp4(bytes: Uint8Array, n: number): Float32Array {
  const out = new Float32Array(n);
  for (let i = 0; i < n / MXFP4_BLOCK_VALUES; i++) {
    const o = i * MXFP4_BLOCK_BYTES;
    const d = e8m0Half(bytes[o]!);
    for (let j = 0; j < MXFP4_BLOCK_VALUES / 2; j++) {
      const q = bytes[o + 1 + j]!;
      out[i * MXFP4_BLOCK_VALUES + j] = MXFP4_VALUES[q & 0x0f]! * d;
      out[i * MXFP4_BLOCK_VALUES + j + MXFP4_BLOCK_VALUES / 2] = MXFP4_VALUES[q >> 4]! * d;
    }
  }
  return out;
}
