// ============================================================================================
// Q5_0 and Q5_1 weights (5-bit, blocks of 32)
// ============================================================================================
//
// Q5_0, 22 bytes: d f16, qh u32, qs[16]; element j = low nibble of qs[j] | bit j of qh << 4,
//   element j+16 = high nibble | bit j+16 of qh << 4; w = d * (q - 16). With q8_0 activations.
// Q5_1, 24 bytes: d f16, m f16, qh u32, qs[16]; w = d * q + m. With q8_1 activations, the
//   minimum's part summed as in q4.ts.

import { f16ToF32, highBitMask, QK } from "./common";

export const BLOCK_Q5_0: i32 = 22;
export const BLOCK_Q5_1: i32 = 24;

/** Elements 0..15 (high: 16..31) of the Q5_0 block at wb, q unsigned (the value is q - 16). */
@inline export function unpackQ5_0(wb: usize, high: bool): v128 {
  const qs = v128.load(wb, 6);
  const nibbles = high ? i8x16.shr_u(qs, 4) : v128.and(qs, i8x16.splat(0x0f));
  return v128.or(nibbles, v128.and(i8x16.splat(16), highBitMask(load<u32>(wb, 2), high)));
}

/** Elements 0..15 (high: 16..31) of the Q5_1 block at wb, q unsigned. */
@inline export function unpackQ5_1(wb: usize, high: bool): v128 {
  const qs = v128.load(wb, 8);
  const nibbles = high ? i8x16.shr_u(qs, 4) : v128.and(qs, i8x16.splat(0x0f));
  return v128.or(nibbles, v128.and(i8x16.splat(16), highBitMask(load<u32>(wb, 4), high)));
}

@inline function embedQ5(out: usize, w: usize, tokens: usize, T: i32, cols: i32, withMin: bool): void {
  const block = withMin ? BLOCK_Q5_1 : BLOCK_Q5_0;
  const nb = cols / QK;
  for (let t = 0; t < T; t++) {
    const row = w + <usize>load<i32>(tokens + (<usize>t << 2)) * <usize>(nb * block);
    const dst = out + (<usize>(t * cols) << 2);
    for (let b = 0; b < nb; b++) {
      const wb = row + <usize>(b * block);
      const d = f16ToF32(load<u16>(wb));
      const m: f32 = withMin ? f16ToF32(load<u16>(wb, 2)) : 0;
      const qhAt = wb + (withMin ? 4 : 2);
      const qh = load<u32>(qhAt);
      const qs = qhAt + 4;
      const o = dst + (<usize>(b * QK) << 2);
      for (let j = 0; j < 16; j++) {
        const byte = <i32>load<u8>(qs + <usize>j);
        let q0 = (byte & 15) | (<i32>((qh >> j) & 1) << 4);
        let q1 = (byte >> 4) | (<i32>((qh >> (j + 16)) & 1) << 4);
        if (!withMin) {
          q0 -= 16;
          q1 -= 16;
        }
        store<f32>(o + (<usize>j << 2), withMin ? <f32>q0 * d + m : <f32>q0 * d);
        store<f32>(o + (<usize>(j + 16) << 2), withMin ? <f32>q1 * d + m : <f32>q1 * d);
      }
    }
  }
}

export function embedQ5_0(out: usize, w: usize, tokens: usize, T: i32, cols: i32): void {
  embedQ5(out, w, tokens, T, cols, false);
}

export function embedQ5_1(out: usize, w: usize, tokens: usize, T: i32, cols: i32): void {
  embedQ5(out, w, tokens, T, cols, true);
}
