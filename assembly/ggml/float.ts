// ============================================================================================
// 16-bit float weights: F16 (IEEE half) and BF16 (the top half of an f32)
// ============================================================================================
//
// The activations stay f32 (llama.cpp rounds them to the weight type; keeping them is more
// exact). Per output element, four lanes accumulate the products of columns k = 4i + lane in
// column order, acc = acc + w * x, then ((l0 + l1) + (l2 + l3)) and the columns past the last
// multiple of 8 in order: the same operations for any T and any row range.
// matmulX(out, x, w, T, cols, outStride, rowStart, rowEnd).

import { halfToF32, halvesToF32x4, sumLanes } from "./common";

@inline function lowFour(h: v128, bf16: bool): v128 {
  const u = i32x4.extend_low_i16x8_u(h);
  return bf16 ? i32x4.shl(u, 16) : halvesToF32x4(u);
}

@inline function highFour(h: v128, bf16: bool): v128 {
  const u = i32x4.extend_high_i16x8_u(h);
  return bf16 ? i32x4.shl(u, 16) : halvesToF32x4(u);
}

@inline function scalarWeight(p: usize, bf16: bool): f32 {
  const h = <u32>load<u16>(p);
  return bf16 ? reinterpret<f32>(h << 16) : halfToF32(h);
}

/** Row `row` (cols 16-bit weights) dotted with the f32 vector x: SIMD over 8 columns at a time, then a scalar tail. */
@inline function rowDot(row: usize, x: usize, cols: i32, bf16: bool): f32 {
  const c8 = cols & ~7;
  let a = f32x4.splat(0);
  for (let k = 0; k < c8; k += 8) {
    const h = v128.load(row + <usize>(k * 2));
    const xp = x + (<usize>k << 2);
    a = f32x4.add(a, f32x4.mul(lowFour(h, bf16), v128.load(xp)));
    a = f32x4.add(a, f32x4.mul(highFour(h, bf16), v128.load(xp, 16)));
  }
  let s = sumLanes(a);
  for (let k = c8; k < cols; k++) s += scalarWeight(row + <usize>(k * 2), bf16) * load<f32>(x + (<usize>k << 2));
  return s;
}

@inline function matmulHalf(out: usize, x: usize, w: usize, T: i32, cols: i32, outStride: i32, rowStart: i32, rowEnd: i32, bf16: bool): void {
  for (let r = rowStart; r < rowEnd; r++) {
    const row = w + <usize>(r * cols * 2);
    for (let t = 0; t < T; t++) {
      store<f32>(out + (<usize>(t * outStride + r) << 2), rowDot(row, x + (<usize>(t * cols) << 2), cols, bf16));
    }
  }
}

export function matmulF16(out: usize, x: usize, w: usize, T: i32, cols: i32, outStride: i32, rowStart: i32, rowEnd: i32): void {
  matmulHalf(out, x, w, T, cols, outStride, rowStart, rowEnd, false);
}

export function matmulBF16(out: usize, x: usize, w: usize, T: i32, cols: i32, outStride: i32, rowStart: i32, rowEnd: i32): void {
  matmulHalf(out, x, w, T, cols, outStride, rowStart, rowEnd, true);
}

@inline function embedHalf(out: usize, w: usize, tokens: usize, T: i32, cols: i32, bf16: bool): void {
  for (let t = 0; t < T; t++) {
    const row = w + <usize>(load<i32>(tokens + (<usize>t << 2)) * cols * 2);
    for (let k = 0; k < cols; k++) store<f32>(out + (<usize>(t * cols + k) << 2), scalarWeight(row + <usize>(k * 2), bf16));
  }
}

export function embedF16(out: usize, w: usize, tokens: usize, T: i32, cols: i32): void {
  embedHalf(out, w, tokens, T, cols, false);
}

export function embedBF16(out: usize, w: usize, tokens: usize, T: i32, cols: i32): void {
  embedHalf(out, w, tokens, T, cols, true);
}
