// ============================================================================================
// Q4_0 and Q4_1 weights (4-bit, blocks of 32)
// ============================================================================================
//
// Q4_0, 18 bytes: d f16, qs[16]; element j is the low nibble of qs[j], element j+16 the high one;
//   w = d * (q - 8). Dotted with q8_0 activations.
// Q4_1, 20 bytes: d f16, m f16, qs[16] as Q4_0; w = d * q + m. Dotted with q8_1 activations:
//   sum_j w_j x_j = dw*dx * sum_j q_j xq_j + m * s_x, the minimum's part summed separately, in a
//   scalar, block after block, and added to the lanes' sum at the end.

import { f16ToF32, QK } from "./common";

export const BLOCK_Q4_0: i32 = 18;
export const BLOCK_Q4_1: i32 = 20;

@inline function lowNibbles(qs: v128): v128 {
  return v128.and(qs, i8x16.splat(0x0f));
}

@inline function highNibbles(qs: v128): v128 {
  return i8x16.shr_u(qs, 4);
}

/** Elements 0..15 (high: 16..31) of the Q4_0 block at wb, q unsigned (the value is q - 8). */
@inline export function unpackQ4_0(wb: usize, high: bool): v128 {
  const qs = v128.load(wb, 2);
  return high ? highNibbles(qs) : lowNibbles(qs);
}

/** Elements 0..15 (high: 16..31) of the Q4_1 block at wb, q unsigned. */
@inline export function unpackQ4_1(wb: usize, high: bool): v128 {
  const qs = v128.load(wb, 4);
  return high ? highNibbles(qs) : lowNibbles(qs);
}

@inline function embedQ4(out: usize, w: usize, tokens: usize, T: i32, cols: i32, withMin: bool): void {
  const block = withMin ? BLOCK_Q4_1 : BLOCK_Q4_0;
  const nb = cols / QK;
  for (let t = 0; t < T; t++) {
    const row = w + <usize>load<i32>(tokens + (<usize>t << 2)) * <usize>(nb * block);
    const dst = out + (<usize>(t * cols) << 2);
    for (let b = 0; b < nb; b++) {
      const wb = row + <usize>(b * block);
      const d = f16ToF32(load<u16>(wb));
      const m: f32 = withMin ? f16ToF32(load<u16>(wb, 2)) : 0;
      const qs = wb + (withMin ? 4 : 2);
      const o = dst + (<usize>(b * QK) << 2);
      for (let j = 0; j < 16; j++) {
        const byte = <i32>load<u8>(qs + <usize>j);
        const q0 = withMin ? byte & 15 : (byte & 15) - 8;
        const q1 = withMin ? byte >> 4 : (byte >> 4) - 8;
        store<f32>(o + (<usize>j << 2), withMin ? <f32>q0 * d + m : <f32>q0 * d);
        store<f32>(o + (<usize>(j + 16) << 2), withMin ? <f32>q1 * d + m : <f32>q1 * d);
      }
    }
  }
}

export function embedQ4_0(out: usize, w: usize, tokens: usize, T: i32, cols: i32): void {
  embedQ4(out, w, tokens, T, cols, false);
}

export function embedQ4_1(out: usize, w: usize, tokens: usize, T: i32, cols: i32): void {
  embedQ4(out, w, tokens, T, cols, true);
}
