// ============================================================================================
// Activation quantizers: f32 rows x[T][cols] -> q8_0 / q8_1 blocks (layouts in common.ts)
// ============================================================================================
//
// Per block of 32: d = max|x| / 127, q = round-half-even(x * (1/d)) (0 where d = 0), as ggml's
// SIMD quantize_row_q8_0 does; q8_0 adds the lane sums qsum, q8_1 s = d * sum(q). cols is a multiple of 32 (GGUF rows of
// these types always are).

import { dotUnsigned, QK, Q8_0_ACT_BYTES, Q8_1_ACT_BYTES } from "./common";

@inline function quantizeBlock(dst: usize, src: usize, withSum: bool): void {
  let amax = f32x4.abs(v128.load(src));
  for (let k = 1; k < 8; k++) amax = f32x4.max(amax, f32x4.abs(v128.load(src + (<usize>k << 4))));
  const m = max(max(f32x4.extract_lane(amax, 0), f32x4.extract_lane(amax, 1)), max(f32x4.extract_lane(amax, 2), f32x4.extract_lane(amax, 3)));
  const d: f32 = m / 127.0;
  const id: f32 = d != 0 ? <f32>1.0 / d : <f32>0.0;
  const vid = f32x4.splat(id);
  const qs = dst + (withSum ? 8 : 4);
  let sum = i32x4.splat(0);
  for (let k = 0; k < 2; k++) {
    const s = src + (<usize>k << 6);
    const q0 = i32x4.trunc_sat_f32x4_s(f32x4.nearest(f32x4.mul(v128.load(s), vid)));
    const q1 = i32x4.trunc_sat_f32x4_s(f32x4.nearest(f32x4.mul(v128.load(s, 16), vid)));
    const q2 = i32x4.trunc_sat_f32x4_s(f32x4.nearest(f32x4.mul(v128.load(s, 32), vid)));
    const q3 = i32x4.trunc_sat_f32x4_s(f32x4.nearest(f32x4.mul(v128.load(s, 48), vid)));
    if (withSum) sum = i32x4.add(sum, i32x4.add(i32x4.add(q0, q1), i32x4.add(q2, q3)));
    v128.store(qs + (<usize>k << 4), i8x16.narrow_i16x8_s(i16x8.narrow_i32x4_s(q0, q1), i16x8.narrow_i32x4_s(q2, q3)));
  }
  store<f32>(dst, d);
  if (!withSum) v128.store(dst, dotUnsigned(i8x16.splat(1), i8x16.splat(1), qs), 36);
  if (withSum) {
    const total = i32x4.extract_lane(sum, 0) + i32x4.extract_lane(sum, 1) + i32x4.extract_lane(sum, 2) + i32x4.extract_lane(sum, 3);
    store<f32>(dst, d * <f32>total, 4);
  }
}

@inline function quantizeRows(dst: usize, x: usize, T: i32, cols: i32, blockBytes: i32, withSum: bool): void {
  const nb = cols / QK;
  for (let t = 0; t < T; t++) {
    const src = x + (<usize>(t * cols) << 2);
    const out = dst + <usize>(t * nb * blockBytes);
    for (let b = 0; b < nb; b++) quantizeBlock(out + <usize>(b * blockBytes), src + (<usize>(b * QK) << 2), withSum);
  }
}

/** x[T][cols] f32 -> q8_0 blocks, (cols / 32) * 52 bytes per row. */
export function quantizeActQ8_0(dst: usize, x: usize, T: i32, cols: i32): void {
  quantizeRows(dst, x, T, cols, Q8_0_ACT_BYTES, false);
}

/** x[T][cols] f32 -> q8_1 blocks, (cols / 32) * 40 bytes per row. */
export function quantizeActQ8_1(dst: usize, x: usize, T: i32, cols: i32): void {
  quantizeRows(dst, x, T, cols, Q8_1_ACT_BYTES, true);
}
