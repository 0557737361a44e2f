/**
 * The f16 form of a product's activations (see wgsl-matmul-f16.ts): each block of 32 values of a
 * token's row divided by a power of two u, the largest at or below the block's largest magnitude
 * (kept between 2^-126 and 2^126), stored as f16, and u stored as f32. Dividing by a power of two
 * is exact, and every stored value is below 2 in magnitude. The kernels that write this form (the
 * stand-alone conversion, and RMSNorm and SwiGLU when they feed f16 products) share
 * storeHalfBlock, so the bits do not depend on which one wrote them. (Infinite or NaN activations
 * give unspecified sums, as WGSL allows an implementation to assume there are none.)
 */

/** Values per activation block sharing one power-of-two scale. */
export const HALF_BLOCK = 32;

/**
 * Bindings xh (f16 values) and xs (block scales) at `binding` and `binding + 1`, and
 * storeHalfBlock(v, k): block k of xh / xs from the 32 values v. The kernel must begin with
 * `enable f16;`.
 */
export function halfStoreWgsl(binding: number): string {
  return /* wgsl */ `
@group(0) @binding(${binding}) var<storage, read_write> xh: array<f16>;
@group(0) @binding(${binding + 1}) var<storage, read_write> xs: array<f32>;
fn storeHalfBlock(v: ptr<function, array<f32, ${HALF_BLOCK}>>, k: u32) {
  var m = 0.0;
  for (var j = 0u; j < ${HALF_BLOCK}u; j++) { m = max(m, abs((*v)[j])); }
  // u = 2^(e - 127) from m's exponent bits e, and 1 / u built the same way (a division may be
  // inexact on a GPU); e is kept in 1 .. 253 so both are normal (an all-zero block gets 2^-126).
  let e = clamp(bitcast<u32>(m) >> 23u, 1u, 253u);
  let inv = bitcast<f32>((254u - e) << 23u);
  for (var j = 0u; j < ${HALF_BLOCK}u; j++) { xh[k * ${HALF_BLOCK}u + j] = f16((*v)[j] * inv); }
  xs[k] = bitcast<f32>(e << 23u);
}`;
}
