// ============================================================================================
// Matrix products on 32-element block types (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1)
// ============================================================================================
//
// out[t*outStride + r] = row r of w · activation t for rows [rowStart, rowEnd) and tokens < T,
// one row at a time, tokens four at a time (each block unpacked once for the four): the row
// streams from memory once and stays in L1 for the T tokens. Each block's integer dot leaves
// four exact i32 lanes (which elements each holds: common.ts); the float steps are, per lane, acc += f32(isum) * (dw * dx) block after block, then
// (acc0 + acc1) + (acc2 + acc3), plus for Q4_1/Q5_1 a scalar accMin += m * sx added last.
// Nothing depends on T or the row range.
//
// Tried and dropped (measured under Bun's JSC, 2048x768, one thread): four rows per vector (the
// rows' block sums transposed into one vector's lanes, scales gathered): 2.5x slower. For Q8_0:
// relaxed dots on |x| with w's signs moved onto x (1.13x slower), on w + 128 split in nibbles
// (1.33x slower), i16 dots on sign-extended even/odd bytes (1.8x slower), on activations
// pre-widened to i16 (1.5x slower): extmul + pairwise add stays.

import { dotUnsigned, dotWide, f16ToF32, hsum, QK, Q8_0_ACT_BYTES, Q8_1_ACT_BYTES } from "./common";
import { BLOCK_Q4_0, BLOCK_Q4_1, unpackQ4_0, unpackQ4_1 } from "./q4";
import { BLOCK_Q5_0, BLOCK_Q5_1, unpackQ5_0, unpackQ5_1 } from "./q5";
import { BLOCK_Q8_0, unpackQ8_0 } from "./q8_0";

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

@inline function unpack(kind: i32, wb: usize, high: bool): v128 {
  if (kind == KIND_Q8_0) return unpackQ8_0(wb, high);
  if (kind == KIND_Q4_0) return unpackQ4_0(wb, high);
  if (kind == KIND_Q4_1) return unpackQ4_1(wb, high);
  if (kind == KIND_Q5_0) return unpackQ5_0(wb, high);
  return unpackQ5_1(wb, high);
}

/**
 * Integer dot lanes of 32 unpacked weights with the activation values at xqs; Q4_0 and Q5_0
 * subtract their offset (8, 16) times the activation's lane sums (q8_0's qsum, after qs).
 */
@inline function isum(kind: i32, lo: v128, hi: v128, xqs: usize): v128 {
  if (kind == KIND_Q8_0) return dotWide(lo, hi, xqs);
  const d = dotUnsigned(lo, hi, xqs);
  if (kind == KIND_Q4_0) return i32x4.sub(d, i32x4.shl(v128.load(xqs, 32), 3));
  if (kind == KIND_Q5_0) return i32x4.sub(d, i32x4.shl(v128.load(xqs, 32), 4));
  return d;
}

/** acc + f32(isum lanes) * (dw * dx) for the block of the activation row at xb. */
@inline function step(acc: v128, isumLanes: v128, dw: f32, xb: usize): v128 {
  return f32x4.add(acc, f32x4.mul(f32x4.convert_i32x4_s(isumLanes), f32x4.splat(dw * load<f32>(xb))));
}

/**
 * One row · activation rows x, x + actBytes, ... (TOKENS of them, 1 or 4): the row's blocks are
 * unpacked once for all of them. Results go to out, out + outStride floats, ...
 */
@inline function rowDots(kind: i32, w: usize, x: usize, actBytes: usize, nb: i32, out: usize, outStride: usize, four: bool): void {
  const bb = blockBytes(kind);
  const ab = hasMin(kind) ? Q8_1_ACT_BYTES : Q8_0_ACT_BYTES;
  const qsAt: usize = hasMin(kind) ? 8 : 4;
  let acc0 = f32x4.splat(0);
  let acc1 = f32x4.splat(0);
  let acc2 = f32x4.splat(0);
  let acc3 = f32x4.splat(0);
  let min0: f32 = 0;
  let min1: f32 = 0;
  let min2: f32 = 0;
  let min3: f32 = 0;
  for (let b = 0; b < nb; b++) {
    const wb = w + <usize>(b * bb);
    const xb = x + <usize>(b * ab);
    const lo = unpack(kind, wb, false);
    const hi = unpack(kind, wb, true);
    const dw = f16ToF32(load<u16>(wb));
    const m: f32 = hasMin(kind) ? f16ToF32(load<u16>(wb, 2)) : 0;
    acc0 = step(acc0, isum(kind, lo, hi, xb + qsAt), dw, xb);
    if (hasMin(kind)) min0 += m * load<f32>(xb, 4);
    if (four) {
      const xb1 = xb + actBytes;
      const xb2 = xb1 + actBytes;
      const xb3 = xb2 + actBytes;
      acc1 = step(acc1, isum(kind, lo, hi, xb1 + qsAt), dw, xb1);
      acc2 = step(acc2, isum(kind, lo, hi, xb2 + qsAt), dw, xb2);
      acc3 = step(acc3, isum(kind, lo, hi, xb3 + qsAt), dw, xb3);
      if (hasMin(kind)) {
        min1 += m * load<f32>(xb1, 4);
        min2 += m * load<f32>(xb2, 4);
        min3 += m * load<f32>(xb3, 4);
      }
    }
  }
  store<f32>(out, hasMin(kind) ? hsum(acc0) + min0 : hsum(acc0));
  if (four) {
    store<f32>(out + (outStride << 2), hasMin(kind) ? hsum(acc1) + min1 : hsum(acc1));
    store<f32>(out + (outStride << 3), hasMin(kind) ? hsum(acc2) + min2 : hsum(acc2));
    store<f32>(out + (outStride << 2) * 3, hasMin(kind) ? hsum(acc3) + min3 : hsum(acc3));
  }
}

@inline function matmulBlocks(kind: i32, out: usize, xAct: usize, w: usize, T: i32, cols: i32, outStride: i32, rowStart: i32, rowEnd: i32): void {
  const nb = cols / QK;
  const rowBytes = <usize>(nb * blockBytes(kind));
  const actBytes = <usize>(nb * (hasMin(kind) ? Q8_1_ACT_BYTES : Q8_0_ACT_BYTES));
  for (let r = rowStart; r < rowEnd; r++) {
    const row = w + <usize>r * rowBytes;
    let t = 0;
    for (; t + 4 <= T; t += 4) rowDots(kind, row, xAct + <usize>t * actBytes, actBytes, nb, out + (<usize>(t * outStride + r) << 2), <usize>outStride, true);
    for (; t < T; t++) rowDots(kind, row, xAct + <usize>t * actBytes, actBytes, nb, out + (<usize>(t * outStride + r) << 2), <usize>outStride, false);
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
