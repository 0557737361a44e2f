/**
 * WGSL products of quantized weights in f16 arithmetic, for adapters that offer `shader-f16`.
 *
 * The activations are read in the f16 form of wgsl-half.ts, written once per product input by the
 * kernel before the products (RMSNorm, SwiGLU, attention) or by a conversion of its own: blocks of 32 values
 * divided by a power of two u and stored as f16, u in f32. The f16 copy carries 11 significant
 * bits of every value (llama.cpp's CPU products carry 8: it quantizes activations to int8
 * blocks), and every stored value is below 2 in magnitude, so no f16 sum below can overflow.
 *
 * A product then works as ggml's integer dots do, with f16 in place of int8: over each group of
 * values sharing one scale (32 values, or 16 for Q2_K, Q3_K and Q6_K), the integer quants q times
 * the f16 activations are summed in f16 (packed: one vec4<f16> for the group's 4 tokens), and so
 * is the sum of the activations where the type has a minimum; the group's sums are then scaled
 * in f32: (scale * Σ q·x' - min * Σ x') * u, and added to the f32 total in block order. The
 * largest group sum is 32 * 128 * 2 = 8192 (Q8_0), inside f16's range.
 *
 * Bitwise invariance is kept: each of a vec4's components goes through the same operations in the
 * same order whatever its token's place, the conversion of a token's row depends on that row
 * alone, and lanes and rows are reduced as in wgsl-matmul.ts (MATMUL_ENTRY, REDUCE_AND_STORE).
 * F32, F16 and BF16 weights keep the f32 products: their results match llama.cpp's exactly there.
 */
import { HALF_BLOCK } from "./wgsl-half.ts";
import {
  blockProductWgsl, GGML_SHADERS, MXFP4_READERS, productHead, Q5_HIGH_BITS, SCALE_MIN_K4, SCALE_Q3_K,
} from "./wgsl-matmul.ts";

/**
 * The activations of an f16 product: values (binding 2) and block scales (binding 4) of the 4
 * token rows, and a group's f16 sums scaled in f32 (the shader must enable f16).
 */
export const HALF_ACTIVATIONS = /* wgsl */ `
@group(0) @binding(2) var<storage, read> xh: array<f16>;
@group(0) @binding(4) var<storage, read> xs: array<f32>;
// Element i of the 4 token rows as stored (x / u), and the scale u of the 32-value block holding i.
fn xh4(i: u32) -> vec4<f16> { return vec4<f16>(xh[xRows.x + i], xh[xRows.y + i], xh[xRows.z + i], xh[xRows.w + i]); }
fn xs4(i: u32) -> vec4<f32> {
  return vec4<f32>(xs[(xRows.x + i) / ${HALF_BLOCK}u], xs[(xRows.y + i) / ${HALF_BLOCK}u], xs[(xRows.z + i) / ${HALF_BLOCK}u], xs[(xRows.w + i) / ${HALF_BLOCK}u]);
}
// A group's f16 sums scaled in f32: without and with a minimum.
fn scaled(sq: vec4<f16>, scale: f32, i: u32) -> vec4<f32> { return scale * vec4<f32>(sq) * xs4(i); }
fn scaledMin(sq: vec4<f16>, sx: vec4<f16>, scale: f32, mn: f32, i: u32) -> vec4<f32> {
  return (scale * vec4<f32>(sq) - mn * vec4<f32>(sx)) * xs4(i);
}`;

const HALF_HEAD = /* wgsl */ `
enable f16;
${productHead(5)}
${HALF_ACTIVATIONS}`;

/**
 * blockDot of Q4_K and Q5_K: four pairs of 32-value groups with six-bit scales and minimums
 * (scaleMinK4); pair i reads byte l of qs[32i ..] (qs at byte `qsAt`) for both groups, `perByte`
 * runs first for each l, and `lowQ` / `highQ` are the two groups' quants of that byte.
 */
function sixBitScaleDot(qsAt: number, perByte: string, lowQ: string, highQ: string): string {
  return /* wgsl */ `${SCALE_MIN_K4}
fn blockDot(b: u32, xi: u32) -> vec4<f32> {
  let d = f16At(b);
  let dmin = f16At(b + 2u);
  var s = vec4<f32>(0.0);
  for (var i = 0u; i < 4u; i++) {
    let lo = scaleMinK4(b, 2u * i);
    let hi = scaleMinK4(b, 2u * i + 1u);
    let q = b + ${qsAt}u + 32u * i;
    let xo = xi + 64u * i;
    var sq1 = vec4<f16>(0.0h); var sx1 = vec4<f16>(0.0h);
    var sq2 = vec4<f16>(0.0h); var sx2 = vec4<f16>(0.0h);
    for (var l = 0u; l < 32u; l++) {
      let byte = u8At(q + l);
      ${perByte}
      let v1 = xh4(xo + l);
      let v2 = xh4(xo + 32u + l);
      sq1 = sq1 + f16(${lowQ}) * v1; sx1 = sx1 + v1;
      sq2 = sq2 + f16(${highQ}) * v2; sx2 = sx2 + v2;
    }
    s = s + scaledMin(sq1, sx1, d * lo.x, dmin * lo.y, xo);
    s = s + scaledMin(sq2, sx2, d * hi.x, dmin * hi.y, xo + 32u);
  }
  return s;
}`;
}

/** blockDot(b, xi) per type, as in wgsl-matmul.ts, in the f16 scheme above. */
const HALF_BLOCK_DOTS: ReadonlyMap<number, string> = new Map([
  // Q4_0: one group of 32, q = nibble - 8.
  [2, /* wgsl */ `
fn blockDot(b: u32, xi: u32) -> vec4<f32> {
  var sq = vec4<f16>(0.0h);
  for (var j = 0u; j < 32u; j++) { sq = sq + f16(i32(nibble(b + 2u, j)) - 8) * xh4(xi + j); }
  return scaled(sq, f16At(b), xi);
}`],
  // Q4_1: one group of 32, q = nibble, value d * q + m.
  [3, /* wgsl */ `
fn blockDot(b: u32, xi: u32) -> vec4<f32> {
  var sq = vec4<f16>(0.0h);
  var sx = vec4<f16>(0.0h);
  for (var j = 0u; j < 32u; j++) { let v = xh4(xi + j); sq = sq + f16(nibble(b + 4u, j)) * v; sx = sx + v; }
  return scaledMin(sq, sx, f16At(b), -f16At(b + 2u), xi);
}`],
  // Q5_0: one group of 32, q = (nibble | fifth bit << 4) - 16.
  [6, /* wgsl */ `${Q5_HIGH_BITS}
fn blockDot(b: u32, xi: u32) -> vec4<f32> {
  let qh = q5High(b + 2u);
  var sq = vec4<f16>(0.0h);
  for (var j = 0u; j < 32u; j++) { sq = sq + f16(i32(nibble(b + 6u, j) | (((qh >> j) & 1u) << 4u)) - 16) * xh4(xi + j); }
  return scaled(sq, f16At(b), xi);
}`],
  // Q5_1: one group of 32, q = nibble | fifth bit << 4, value d * q + m.
  [7, /* wgsl */ `${Q5_HIGH_BITS}
fn blockDot(b: u32, xi: u32) -> vec4<f32> {
  let qh = q5High(b + 4u);
  var sq = vec4<f16>(0.0h);
  var sx = vec4<f16>(0.0h);
  for (var j = 0u; j < 32u; j++) {
    let v = xh4(xi + j);
    sq = sq + f16(nibble(b + 8u, j) | (((qh >> j) & 1u) << 4u)) * v;
    sx = sx + v;
  }
  return scaledMin(sq, sx, f16At(b), -f16At(b + 2u), xi);
}`],
  // MXFP4: one group of 32, q = the code's doubled E2M1 value (-12..12), scale 2^(e - 128).
  [39, /* wgsl */ `${MXFP4_READERS}
fn blockDot(b: u32, xi: u32) -> vec4<f32> {
  var sq = vec4<f16>(0.0h);
  for (var j = 0u; j < 32u; j++) { sq = sq + f16(mxfp4Values[nibble(b + 1u, j)]) * xh4(xi + j); }
  return scaled(sq, e8m0Half(u8At(b)), xi);
}`],
  // Q8_0: one group of 32, q = qs[j].
  [8, /* wgsl */ `
fn blockDot(b: u32, xi: u32) -> vec4<f32> {
  var sq = vec4<f16>(0.0h);
  for (var j = 0u; j < 32u; j++) { sq = sq + f16(i8At(b + 2u + j)) * xh4(xi + j); }
  return scaled(sq, f16At(b), xi);
}`],
  // Q2_K: sixteen groups of 16, q = 2 bits, scale d * (sc & 15), minimum dmin * (sc >> 4).
  [10, /* wgsl */ `
fn blockDot(b: u32, xi: u32) -> vec4<f32> {
  let d = f16At(b + 80u);
  let dmin = f16At(b + 82u);
  var s = vec4<f32>(0.0);
  for (var n = 0u; n < 2u; n++) {
    for (var j = 0u; j < 4u; j++) {
      let xo = xi + 128u * n + 32u * j;
      // The two groups of 16 in one pass: their sums in sq[0], sx[0] and sq[1], sx[1].
      var sq = array<vec4<f16>, 2>(vec4<f16>(0.0h), vec4<f16>(0.0h));
      var sx = array<vec4<f16>, 2>(vec4<f16>(0.0h), vec4<f16>(0.0h));
      for (var l = 0u; l < 32u; l++) {
        let v = xh4(xo + l);
        sq[l / 16u] = sq[l / 16u] + f16((u8At(b + 16u + 32u * n + l) >> (2u * j)) & 3u) * v;
        sx[l / 16u] = sx[l / 16u] + v;
      }
      for (var h = 0u; h < 2u; h++) {
        let sc = u8At(b + 8u * n + 2u * j + h);
        s = s + scaledMin(sq[h], sx[h], d * f32(sc & 15u), dmin * f32(sc >> 4u), xo + 16u * h);
      }
    }
  }
  return s;
}`],
  // Q3_K: sixteen groups of 16, q = 2 bits - 4 unless the hmask bit is set, scale d * (6-bit scale - 32).
  [11, /* wgsl */ `${SCALE_Q3_K}
fn blockDot(b: u32, xi: u32) -> vec4<f32> {
  let d = f16At(b + 108u);
  var s = vec4<f32>(0.0);
  for (var n = 0u; n < 2u; n++) {
    for (var j = 0u; j < 4u; j++) {
      let xo = xi + 128u * n + 32u * j;
      // The two groups of 16 in one pass, summed in sq[0] and sq[1].
      var sq = array<vec4<f16>, 2>(vec4<f16>(0.0h), vec4<f16>(0.0h));
      for (var l = 0u; l < 32u; l++) {
        let q = i32((u8At(b + 32u + 32u * n + l) >> (2u * j)) & 3u);
        let high = (u8At(b + l) >> (4u * n + j)) & 1u;
        sq[l / 16u] = sq[l / 16u] + f16(q - select(4, 0, high != 0u)) * xh4(xo + l);
      }
      for (var h = 0u; h < 2u; h++) { s = s + scaled(sq[h], d * f32(scaleQ3K(b, 8u * n + 2u * j + h)), xo + 16u * h); }
    }
  }
  return s;
}`],
  // Q4_K: eight groups of 32, q = nibble, scale d * sc, minimum dmin * m (six bits each).
  [12, sixBitScaleDot(16, "", "byte & 15u", "byte >> 4u")],
  // Q5_K: as Q4_K, with fifth bits 2i (low nibbles) and 2i + 1 (high nibbles) of qh[l].
  [13, sixBitScaleDot(48, "let h = u8At(b + 16u + l);", "(byte & 15u) | (((h >> (2u * i)) & 1u) << 4u)", "(byte >> 4u) | (((h >> (2u * i + 1u)) & 1u) << 4u)")],
  // Q6_K: sixteen groups of 16, q = (nibble | 2 bits << 4) - 32, scale d * scales[group].
  [14, /* wgsl */ `
fn blockDot(b: u32, xi: u32) -> vec4<f32> {
  let d = f16At(b + 208u);
  var s = vec4<f32>(0.0);
  for (var half = 0u; half < 2u; half++) {
    let ql = b + 64u * half;
    let qh = b + 128u + 32u * half;
    let sc = b + 192u + 8u * half;
    for (var k = 0u; k < 4u; k++) {
      let xo = xi + 128u * half + 32u * k;
      // The two groups of 16 in one pass, summed in sq[0] and sq[1].
      var sq = array<vec4<f16>, 2>(vec4<f16>(0.0h), vec4<f16>(0.0h));
      for (var l = 0u; l < 32u; l++) {
        let byte = u8At(ql + l + 32u * (k & 1u));
        let low = select(byte & 15u, byte >> 4u, k >= 2u);
        let high = (u8At(qh + l) >> (2u * k)) & 3u;
        sq[l / 16u] = sq[l / 16u] + f16(i32(low | (high << 4u)) - 32) * xh4(xo + l);
      }
      for (var g = 0u; g < 2u; g++) { s = s + scaled(sq[g], d * f32(i8At(sc + g + 2u * k)), xo + 16u * g); }
    }
  }
  return s;
}`],
]);

/** The f16 blockDot of ggml type `type` (undefined for a type without an f16 product). */
export function halfBlockDot(type: number): string | undefined {
  return HALF_BLOCK_DOTS.get(type);
}

/** Whether ggml type `type` has an f16 product (the quantized types; not F32, F16 or BF16). */
export function hasHalfProduct(type: number): boolean {
  return HALF_BLOCK_DOTS.has(type);
}

/** The f16 product over one ggml type: lane i takes blocks i, i + 8, ... of the row (as matmulGgmlWgsl). */
export function matmulHalfWgsl(type: number): string {
  const shader = GGML_SHADERS.get(type);
  const blockDot = HALF_BLOCK_DOTS.get(type);
  if (shader === undefined || blockDot === undefined) throw new Error(`no f16 WGSL product for ggml type ${type}`);
  return blockProductWgsl(HALF_HEAD, blockDot, shader);
}
