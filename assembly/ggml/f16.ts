// ============================================================================================
// F16 and BF16 weights, f32 activations
// ============================================================================================
//
// Row r is cols half-precision values (2 bytes each). The dot keeps four f32x4 accumulators:
// element j of each 16-element chunk goes to accumulator (j >> 2) & 3, lane j & 3, as
// acc += w * x; then ((a0 + a1) + (a2 + a3)) lane-wise, lanes summed as (l0 + l1) + (l2 + l3),
// then the last cols % 16 elements one by one. The same order at any T and row range.

import { f16ToF32, f16x4ToF32, hsum } from "./common";

@inline function bf16x4ToF32(h16: v128, high: bool): v128 {
  const h = high ? i32x4.extend_high_i16x8_u(h16) : i32x4.extend_low_i16x8_u(h16);
  return i32x4.shl(h, 16);
}

@inline function widen(h16: v128, high: bool, brain: bool): v128 {
  return brain ? bf16x4ToF32(h16, high) : f16x4ToF32(h16, high);
}

@inline function halfToF32(h: u32, brain: bool): f32 {
  return brain ? reinterpret<f32>(h << 16) : f16ToF32(h);
}

@inline function rowDotHalf(w: usize, x: usize, cols: i32, brain: bool): f32 {
  let a0 = f32x4.splat(0);
  let a1 = f32x4.splat(0);
  let a2 = f32x4.splat(0);
  let a3 = f32x4.splat(0);
  let j = 0;
  for (; j + 16 <= cols; j += 16) {
    const h0 = v128.load(w + (<usize>j << 1));
    const h1 = v128.load(w + (<usize>j << 1), 16);
    const xj = x + (<usize>j << 2);
    a0 = f32x4.add(a0, f32x4.mul(widen(h0, false, brain), v128.load(xj)));
    a1 = f32x4.add(a1, f32x4.mul(widen(h0, true, brain), v128.load(xj, 16)));
    a2 = f32x4.add(a2, f32x4.mul(widen(h1, false, brain), v128.load(xj, 32)));
    a3 = f32x4.add(a3, f32x4.mul(widen(h1, true, brain), v128.load(xj, 48)));
  }
  let sum = hsum(f32x4.add(f32x4.add(a0, a1), f32x4.add(a2, a3)));
  for (; j < cols; j++) sum += halfToF32(<u32>load<u16>(w + (<usize>j << 1)), brain) * load<f32>(x + (<usize>j << 2));
  return sum;
}

@inline function matmulHalf(out: usize, x: usize, w: usize, T: i32, cols: i32, outStride: i32, rowStart: i32, rowEnd: i32, brain: bool): void {
  const rowBytes = <usize>cols << 1;
  for (let r = rowStart; r < rowEnd; r++) {
    const row = w + <usize>r * rowBytes;
    for (let t = 0; t < T; t++) {
      store<f32>(out + (<usize>(t * outStride + r) << 2), rowDotHalf(row, x + (<usize>(t * cols) << 2), cols, brain));
    }
  }
}

/** out[t*outStride + r] = row r of w (F16) · x[t] (f32), rows [rowStart, rowEnd), tokens < T. */
export function matmulF16(out: usize, x: usize, w: usize, T: i32, cols: i32, outStride: i32, rowStart: i32, rowEnd: i32): void {
  matmulHalf(out, x, w, T, cols, outStride, rowStart, rowEnd, false);
}

/** As matmulF16 for BF16 weights. */
export function matmulBF16(out: usize, x: usize, w: usize, T: i32, cols: i32, outStride: i32, rowStart: i32, rowEnd: i32): void {
  matmulHalf(out, x, w, T, cols, outStride, rowStart, rowEnd, true);
}

@inline function embedHalf(out: usize, w: usize, tokens: usize, T: i32, cols: i32, brain: bool): void {
  for (let t = 0; t < T; t++) {
    const row = w + <usize>load<i32>(tokens + (<usize>t << 2)) * (<usize>cols << 1);
    const dst = out + (<usize>(t * cols) << 2);
    for (let j = 0; j < cols; j++) store<f32>(dst + (<usize>j << 2), halfToF32(<u32>load<u16>(row + (<usize>j << 1)), brain));
  }
}

export function embedF16(out: usize, w: usize, tokens: usize, T: i32, cols: i32): void {
  embedHalf(out, w, tokens, T, cols, false);
}

export function embedBF16(out: usize, w: usize, tokens: usize, T: i32, cols: i32): void {
  embedHalf(out, w, tokens, T, cols, true);
}
