// ============================================================================================
// Matrix products on 32-element block types (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1)
// ============================================================================================
//
// out[t*outStride + r] = row r of w · activation t for rows [rowStart, rowEnd) and tokens < T,
// one row at a time: the row streams from memory once and stays in L1 for the T tokens. Each
// block's integer dot (isumX) leaves four exact i32 lanes (element j in lane (j >> 1) & 3);
// the float steps are, per lane, acc += f32(isum) * (dw * dx) block after block, then
// (acc0 + acc1) + (acc2 + acc3), plus for Q4_1/Q5_1 a scalar accMin += m * sx added last.
// Nothing depends on T or the row range.
//
// Tried and dropped: four rows per vector (the four rows' block sums transposed into the lanes
// of one vector, scales gathered), fewer float steps per block but 2.5x slower under JSC.

import { f16ToF32, hsum, QK, Q8_0_ACT_BYTES, Q8_1_ACT_BYTES } from "./common";
import { BLOCK_Q4_0, BLOCK_Q4_1, isumQ4_0, isumQ4_1 } from "./q4";
import { BLOCK_Q5_0, BLOCK_Q5_1, isumQ5_0, isumQ5_1 } from "./q5";
import { BLOCK_Q8_0, isumQ8_0 } from "./q8_0";

const KIND_Q8_0: i32 = 0;
const KIND_Q4_0: i32 = 1;
const KIND_Q4_1: i32 = 2;
const KIND_Q5_0: i32 = 3;
const KIND_Q5_1: i32 = 4;

@inline function blockBytes(kind: i32): i32 {
  return kind == KIND_Q8_0 ? BLOCK_Q8_0 : kind == KIND_Q4_0 ? BLOCK_Q4_0 : kind == KIND_Q4_1 ? BLOCK_Q4_1 : kind == KIND_Q5_0 ? BLOCK_Q5_0 : BLOCK_Q5_1;
}

@inline function hasMin(kind: i32): bool {
  return kind == KIND_Q4_1 || kind == KIND_Q5_1;
}

@inline function isum(kind: i32, wb: usize, xqs: usize): v128 {
  if (kind == KIND_Q8_0) return isumQ8_0(wb, xqs);
  if (kind == KIND_Q4_0) return isumQ4_0(wb, xqs);
  if (kind == KIND_Q4_1) return isumQ4_1(wb, xqs);
  if (kind == KIND_Q5_0) return isumQ5_0(wb, xqs);
  return isumQ5_1(wb, xqs);
}

/** One row · one activation row: lanes acc += f32(isum lanes) * (dw * dx), then summed. */
@inline function rowDot(kind: i32, w: usize, x: usize, nb: i32): f32 {
  const bb = blockBytes(kind);
  const ab = hasMin(kind) ? Q8_1_ACT_BYTES : Q8_0_ACT_BYTES;
  const qsAt: usize = hasMin(kind) ? 8 : 4;
  let acc = f32x4.splat(0);
  let accMin: f32 = 0;
  for (let b = 0; b < nb; b++) {
    const wb = w + <usize>(b * bb);
    const xb = x + <usize>(b * ab);
    const lanes = f32x4.convert_i32x4_s(isum(kind, wb, xb + qsAt));
    acc = f32x4.add(acc, f32x4.mul(lanes, f32x4.splat(f16ToF32(load<u16>(wb)) * load<f32>(xb))));
    if (hasMin(kind)) accMin += f16ToF32(load<u16>(wb, 2)) * load<f32>(xb, 4);
  }
  return hasMin(kind) ? hsum(acc) + accMin : hsum(acc);
}

@inline function matmulBlocks(kind: i32, out: usize, xAct: usize, w: usize, T: i32, cols: i32, outStride: i32, rowStart: i32, rowEnd: i32): void {
  const nb = cols / QK;
  const rowBytes = <usize>(nb * blockBytes(kind));
  const actBytes = nb * (hasMin(kind) ? Q8_1_ACT_BYTES : Q8_0_ACT_BYTES);
  for (let r = rowStart; r < rowEnd; r++) {
    const row = w + <usize>r * rowBytes;
    for (let t = 0; t < T; t++) store<f32>(out + (<usize>(t * outStride + r) << 2), rowDot(kind, row, xAct + <usize>(t * actBytes), nb));
  }
}

export function matmulQ8_0(out: usize, xAct: usize, w: usize, T: i32, cols: i32, outStride: i32, rowStart: i32, rowEnd: i32): void {
  matmulBlocks(KIND_Q8_0, out, xAct, w, T, cols, outStride, rowStart, rowEnd);
}

export function matmulQ4_0(out: usize, xAct: usize, w: usize, T: i32, cols: i32, outStride: i32, rowStart: i32, rowEnd: i32): void {
  matmulBlocks(KIND_Q4_0, out, xAct, w, T, cols, outStride, rowStart, rowEnd);
}

export function matmulQ4_1(out: usize, xAct: usize, w: usize, T: i32, cols: i32, outStride: i32, rowStart: i32, rowEnd: i32): void {
  matmulBlocks(KIND_Q4_1, out, xAct, w, T, cols, outStride, rowStart, rowEnd);
}

export function matmulQ5_0(out: usize, xAct: usize, w: usize, T: i32, cols: i32, outStride: i32, rowStart: i32, rowEnd: i32): void {
  matmulBlocks(KIND_Q5_0, out, xAct, w, T, cols, outStride, rowStart, rowEnd);
}

export function matmulQ5_1(out: usize, xAct: usize, w: usize, T: i32, cols: i32, outStride: i32, rowStart: i32, rowEnd: i32): void {
  matmulBlocks(KIND_Q5_1, out, xAct, w, T, cols, outStride, rowStart, rowEnd);
}
