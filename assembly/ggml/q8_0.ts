// ============================================================================================
// Q8_0 weights: blocks of 34 bytes, d f16 then qs[32] int8; w = d * q
// ============================================================================================

import { f16ToF32, QK } from "./common";

export const BLOCK_Q8_0: i32 = 34;
const BLOCK = BLOCK_Q8_0;

/** Elements 0..15 (high: 16..31) of the Q8_0 block at wb as int8. */
@inline export function unpackQ8_0(wb: usize, high: bool): v128 {
  return high ? v128.load(wb, 18) : v128.load(wb, 2);
}


/** out[t][0..cols) = row tokens[t] of w, dequantized. */
export function embedQ8_0(out: usize, w: usize, tokens: usize, T: i32, cols: i32): void {
  const nb = cols / QK;
  for (let t = 0; t < T; t++) {
    const row = w + <usize>load<i32>(tokens + (<usize>t << 2)) * <usize>(nb * BLOCK);
    const dst = out + (<usize>(t * cols) << 2);
    for (let b = 0; b < nb; b++) {
      const wb = row + <usize>(b * BLOCK);
      const d = f16ToF32(load<u16>(wb));
      for (let j = 0; j < QK; j++) store<f32>(dst + (<usize>(b * QK + j) << 2), <f32>load<i8>(wb + 2 + <usize>j) * d);
    }
  }
}
