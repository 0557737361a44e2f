// ============================================================================================
// Q8_0 weights: blocks of 34 bytes, d f16 then qs[32] int8; w = d * q
// ============================================================================================

import { accumulate, dotWide, f16ToF32, hsum, QK, Q8_0_ACT_BYTES } from "./common";

const BLOCK: i32 = 34;

/** Dot of one Q8_0 weight row with one q8_0 activation row (nb blocks), in common.ts's order. */
@inline function rowDot(w: usize, x: usize, nb: i32): f32 {
  let acc = f32x4.splat(0);
  for (let b = 0; b < nb; b++) {
    const wb = w + <usize>(b * BLOCK);
    const xb = x + <usize>(b * Q8_0_ACT_BYTES);
    const isum = dotWide(v128.load(wb, 2), v128.load(wb, 18), xb + 4);
    acc = accumulate(acc, isum, f16ToF32(load<u16>(wb)) * load<f32>(xb));
  }
  return hsum(acc);
}

/** out[t*outStride + r] = row r of w · activation t, rows [rowStart, rowEnd), tokens < T. */
export function matmulQ8_0(out: usize, xAct: usize, w: usize, T: i32, cols: i32, outStride: i32, rowStart: i32, rowEnd: i32): void {
  const nb = cols / QK;
  const rowBytes = nb * BLOCK;
  const actBytes = nb * Q8_0_ACT_BYTES;
  for (let r = rowStart; r < rowEnd; r++) {
    const row = w + <usize>r * <usize>rowBytes;
    for (let t = 0; t < T; t++) {
      store<f32>(out + (<usize>(t * outStride + r) << 2), rowDot(row, xAct + <usize>(t * actBytes), nb));
    }
  }
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
