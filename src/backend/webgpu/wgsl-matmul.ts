/**
 * WGSL matrix products out[t][outOffset + r] = W[r] · x[t]. A workgroup of 64 invocations takes 8
 * rows and a group of 4 tokens, 8 lanes per row: lane i sums the products of the row's columns
 * (f32) or blocks (ggml types) i, i + 8, ... in order, one vec4 component per token (each weight
 * is read and dequantized once for the 4 tokens), then lane 0 adds the 8 partial sums in lane
 * order. Every component goes through the same operations in the same order, so each output
 * element is reduced in one order that does not depend on T, on which of the group's 4 places its
 * token took, on the other tokens of the batch, or on how the matrix was split into buffers. No
 * atomics. (A workgroup per row and token cost a software adapter about 3 µs per workgroup, most
 * of a decode step.)
 *
 * ggml weights stay as the GGUF file has them (rows of blocks, `rowBytes` each, not 4-byte
 * aligned in general) and are read as bytes from an array<u32>; each block is dequantized in the
 * shader with the layouts of ggml-common.h. These products compute in f32; wgsl-matmul-f16.ts
 * has the f16 ones of the quantized types, on the same grid and reduction.
 */
import { WORKGROUP } from "./wgsl-elementwise.ts";

/** Invocations that share one row's dot product. */
export const LANES = 8;
/** Rows per workgroup. */
export const ROWS_PER_GROUP = WORKGROUP / LANES;
/** Tokens a workgroup takes: the components of a vec4. */
export const TOKENS_PER_GROUP = 4;
/** Row groups per grid column: groups are wg.x + wg.z * GROUPS_PER_Z (a grid dimension holds 65,535). */
export const GROUPS_PER_Z = 32768;

/** Workgroup grid for a product of `rows` rows and T tokens. */
export function matmulGrid(rows: number, T: number): [number, number, number] {
  const groups = Math.ceil(rows / ROWS_PER_GROUP);
  return [Math.min(groups, GROUPS_PER_Z), Math.ceil(T / TOKENS_PER_GROUP), Math.ceil(groups / GROUPS_PER_Z)];
}

/**
 * The shared tail: lane 0 of each row adds its lanes' partial sums in lane order, then the row's
 * bias if the product has one (qwen2's q, k and v: the same f32 addition as adding it after), and
 * stores the group's tokens. Row g of a stack of up to three matrices (q, k and v; gate and up)
 * goes to the output of its member: rows before split1 to out (rows outStride apart), then to out2
 * and out3 (rows of their members' widths).
 */
const REDUCE_AND_STORE = /* wgsl */ `
  partial[lid] = s;
  workgroupBarrier();
  if (live && lane == 0u) {
    var sum = partial[lid];
    for (var k = 1u; k < ${LANES}u; k++) { sum = sum + partial[lid + k]; }
    let g = p.outOffset + r;
    if (p.hasBias != 0u) { sum = sum + bias[g]; }
    for (var k = 0u; k < ${TOKENS_PER_GROUP}u && t0 + k < p.T; k++) {
      let t = t0 + k;
      if (g < p.split1) { out[t * p.outStride + g] = sum[k]; }
      else if (g < p.split2) { out2[t * (p.split2 - p.split1) + g - p.split1] = sum[k]; }
      else { out3[t * (p.total - p.split2) + g - p.split2] = sum[k]; }
    }
  }`;

/**
 * Every product's parameters, outputs, lane sums and token rows: the weights are binding 1, the
 * activations 2 (and 4 in f16 products), the output 3, the outputs of a stack's second and third
 * members `stackBinding` and the next, and the bias (one per row of the stack, read when hasBias)
 * the one after. rows counts the part's rows, outOffset is the part's first row in the (stacked)
 * matrix, split1 / split2 where the second and third members begin (total, the stack's rows, when
 * there are none).
 */
export function productHead(stackBinding: number): string {
  return /* wgsl */ `
struct Params { rows: u32, cols: u32, outStride: u32, outOffset: u32, rowBytes: u32, T: u32, split1: u32, split2: u32, total: u32, hasBias: u32 }
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;
@group(0) @binding(${stackBinding}) var<storage, read_write> out2: array<f32>;
@group(0) @binding(${stackBinding + 1}) var<storage, read_write> out3: array<f32>;
@group(0) @binding(${stackBinding + 2}) var<storage, read> bias: array<f32>;
${PRODUCT_STATE}`;
}

/** What every product's lanes share: their partial sums, and where the group's 4 token rows start in x. */
export const PRODUCT_STATE = /* wgsl */ `
var<workgroup> partial: array<vec4<f32>, ${WORKGROUP}>;
// Where the group's 4 token rows start in x (a token past T repeats the last: computed, never stored).
var<private> xRows: vec4<u32>;`;

/** The f32 activations (binding 2) of a product, read for the 4 token rows. */
export const F32_ACTIVATIONS = /* wgsl */ `
@group(0) @binding(2) var<storage, read> x: array<f32>;
// Element i of the 4 token rows.
fn xv(i: u32) -> vec4<f32> { return vec4<f32>(x[xRows.x + i], x[xRows.y + i], x[xRows.z + i], x[xRows.w + i]); }`;

const MATMUL_HEAD = /* wgsl */ `${productHead(4)}
${F32_ACTIVATIONS}`;

const MATMUL_ENTRY = /* wgsl */ `
@compute @workgroup_size(${WORKGROUP})
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
  let r = (wg.x + wg.z * ${GROUPS_PER_Z}u) * ${ROWS_PER_GROUP}u + lid / ${LANES}u;
  let lane = lid % ${LANES}u;
  let t0 = wg.y * ${TOKENS_PER_GROUP}u;
  let last = p.T - 1u;
  xRows = vec4<u32>(min(t0, last), min(t0 + 1u, last), min(t0 + 2u, last), min(t0 + 3u, last)) * p.cols;
  // Rows past the end compute nothing but still reach the barrier (it must be in uniform control flow).
  let live = r < p.rows;`;

/** f32 weights (binding 1), [rows][cols] row-major. */
export const F32_WEIGHTS = /* wgsl */ `
@group(0) @binding(1) var<storage, read> w: array<f32>;`;

/** Lane `lane`'s sum over columns lane, lane + 8, ... of f32 weight row `row` (nothing unless `live`). */
export function f32RowLoop(row: string): string {
  return /* wgsl */ `
  let wRow = ${row} * p.cols;
  let cols = select(0u, p.cols, live);
  var s = vec4<f32>(0.0);
  for (var c = lane; c < cols; c += ${LANES}u) { s = s + w[wRow + c] * xv(c); }`;
}

/** W is f32 [rows][cols], row-major. rowBytes is unused (4 * cols). */
export const MATMUL_F32_WGSL = /* wgsl */ `
${MATMUL_HEAD}
${F32_WEIGHTS}
${MATMUL_ENTRY}
${f32RowLoop("r")}
${REDUCE_AND_STORE}
}`;

/** Byte, signed byte and f16 readers over the weight words. */
export const BYTE_READERS = /* wgsl */ `
@group(0) @binding(1) var<storage, read> w: array<u32>;
fn u8At(off: u32) -> u32 { return (w[off >> 2u] >> ((off & 3u) * 8u)) & 0xffu; }
fn i8At(off: u32) -> i32 { return (i32(u8At(off)) << 24u) >> 24u; }
fn f16At(off: u32) -> f32 { return unpack2x16float(u8At(off) | (u8At(off + 1u) << 8u)).x; }
// Value j (0..31) of 16 bytes of nibbles at q: low nibbles are values 0..15, high nibbles 16..31.
fn nibble(q: u32, j: u32) -> u32 { let byte = u8At(q + (j & 15u)); return select(byte & 15u, byte >> 4u, j >= 16u); }`;

/**
 * Per ggml type: block size in values and bytes, and blockDot(b, xi) = the dots of the block whose
 * first byte is b with elements xi .. xi + blockValues of the 4 token rows (xv), the values in the
 * block's element order.
 */
interface GgmlShader {
  blockValues: number;
  blockDot: string;
}

/** block_q8_0: f16 d, int8 qs[32); value j = d * qs[j]. */
const Q8_0: GgmlShader = {
  blockValues: 32,
  blockDot: /* wgsl */ `
fn blockDot(b: u32, xi: u32) -> vec4<f32> {
  let d = f16At(b);
  var s = vec4<f32>(0.0);
  for (var j = 0u; j < 32u; j++) { s = s + (d * f32(i8At(b + 2u + j))) * xv(xi + j); }
  return s;
}`,
};

/** block_q4_0: f16 d, qs[16]; value j = d * ((qs[j] & 15) - 8), value j + 16 = d * ((qs[j] >> 4) - 8). */
const Q4_0: GgmlShader = {
  blockValues: 32,
  blockDot: /* wgsl */ `
fn blockDot(b: u32, xi: u32) -> vec4<f32> {
  let d = f16At(b);
  var s = vec4<f32>(0.0);
  for (var j = 0u; j < 32u; j++) { s = s + (d * f32(i32(nibble(b + 2u, j)) - 8)) * xv(xi + j); }
  return s;
}`,
};

/** Scale and minimum j (0..7) of block_q4_K / q5_K: six bits each, packed in scales[12] at byte b + 4. */
export const SCALE_MIN_K4 = /* wgsl */ `
fn scaleMinK4(b: u32, j: u32) -> vec2<f32> {
  let q = b + 4u;
  if (j < 4u) { return vec2<f32>(f32(u8At(q + j) & 63u), f32(u8At(q + j + 4u) & 63u)); }
  let sc = (u8At(q + j + 4u) & 15u) | ((u8At(q + j - 4u) >> 6u) << 4u);
  let mn = (u8At(q + j + 4u) >> 4u) | ((u8At(q + j) >> 6u) << 4u);
  return vec2<f32>(f32(sc), f32(mn));
}`;

/**
 * block_q4_K: f16 d, f16 dmin, scales[12] (eight 6-bit scale/min pairs), qs[128]. Sub-block
 * pair i (64 values) uses qs[32i .. 32i + 32): low nibbles with (scale, min) 2i, high nibbles 2i + 1.
 */
const Q4_K: GgmlShader = {
  blockValues: 256,
  blockDot: /* wgsl */ `${SCALE_MIN_K4}
fn blockDot(b: u32, xi: u32) -> vec4<f32> {
  let d = f16At(b);
  let dmin = f16At(b + 2u);
  var s = vec4<f32>(0.0);
  for (var i = 0u; i < 4u; i++) {
    let lo = scaleMinK4(b, 2u * i);
    let hi = scaleMinK4(b, 2u * i + 1u);
    let d1 = d * lo.x; let m1 = dmin * lo.y;
    let d2 = d * hi.x; let m2 = dmin * hi.y;
    let q = b + 16u + 32u * i;
    let xo = xi + 64u * i;
    for (var l = 0u; l < 32u; l++) { s = s + (d1 * f32(u8At(q + l) & 15u) - m1) * xv(xo + l); }
    for (var l = 0u; l < 32u; l++) { s = s + (d2 * f32(u8At(q + l) >> 4u) - m2) * xv(xo + 32u + l); }
  }
  return s;
}`,
};

/**
 * block_q6_K: ql[128] low nibbles, qh[64] high 2-bit pairs, int8 scales[16], f16 d. Each half of
 * 128 values reads ql[64h ..], qh[32h ..], scales[8h ..]; value l + 32k of the half is
 * (nibble | 2 bits << 4) - 32 times d * scales[l / 16 + 2k].
 */
const Q6_K: GgmlShader = {
  blockValues: 256,
  blockDot: /* wgsl */ `
fn blockDot(b: u32, xi: u32) -> vec4<f32> {
  let d = f16At(b + 208u);
  var s = vec4<f32>(0.0);
  for (var half = 0u; half < 2u; half++) {
    let ql = b + 64u * half;
    let qh = b + 128u + 32u * half;
    let sc = b + 192u + 8u * half;
    let xo = xi + 128u * half;
    for (var k = 0u; k < 4u; k++) {
      for (var l = 0u; l < 32u; l++) {
        let low = select(u8At(ql + l + 32u * (k & 1u)) & 15u, u8At(ql + l + 32u * (k & 1u)) >> 4u, k >= 2u);
        let high = (u8At(qh + l) >> (2u * k)) & 3u;
        let q = i32(low | (high << 4u)) - 32;
        let scale = d * f32(i8At(sc + l / 16u + 2u * k));
        s = s + (scale * f32(q)) * xv(xo + 32u * k + l);
      }
    }
  }
  return s;
}`,
};

/**
 * F16: a "block" of two values, one u32 word (rows of an even width stay word-aligned). The
 * activations are rounded to halves first, as llama.cpp and the WebAssembly kernels do
 * (assembly/ggml/float.ts roundActivations), in integer operations: pack2x16float's rounding is
 * the implementation's choice. Below 2^-14 a half is a multiple of 2^-24: scaled by 2^24 (exact),
 * round() (ties to even) and scaled back; up to 65520 the 13 low mantissa bits are rounded off;
 * from there on it is infinite; NaN stays NaN.
 */
const F16: GgmlShader = {
  blockValues: 2,
  blockDot: /* wgsl */ `
fn roundF16(v: vec4<f32>) -> vec4<f32> {
  let u = bitcast<vec4<u32>>(v);
  let a = u & vec4<u32>(0x7fffffffu);
  let normal = (a + vec4<u32>(0xfffu) + ((a >> vec4<u32>(13u)) & vec4<u32>(1u))) & vec4<u32>(0xffffe000u);
  let tiny = bitcast<vec4<u32>>(round(bitcast<vec4<f32>>(a) * 16777216.0) * 5.9604644775390625e-8);
  var r = select(normal, tiny, a < vec4<u32>(0x38800000u));
  r = select(r, vec4<u32>(0x7f800000u), a >= vec4<u32>(0x477ff000u));
  r = select(r, a, a > vec4<u32>(0x7f800000u));
  return bitcast<vec4<f32>>(r | (u & vec4<u32>(0x80000000u)));
}
fn blockDot(b: u32, xi: u32) -> vec4<f32> {
  let h = unpack2x16float(w[b >> 2u]);
  return h.x * roundF16(xv(xi)) + h.y * roundF16(xv(xi + 1u));
}`,
};

/** BF16: two values per u32 word, each the high half of an f32; activations rounded to bfloat16 (nearest even) as for F16. */
const BF16: GgmlShader = {
  blockValues: 2,
  blockDot: /* wgsl */ `
fn roundBF16(v: vec4<f32>) -> vec4<f32> {
  let u = bitcast<vec4<u32>>(v);
  let r = (u + vec4<u32>(0x7fffu) + ((u >> vec4<u32>(16u)) & vec4<u32>(1u))) & vec4<u32>(0xffff0000u);
  return bitcast<vec4<f32>>(select(r, u | vec4<u32>(0x00400000u), (u & vec4<u32>(0x7fffffffu)) > vec4<u32>(0x7f800000u)));
}
fn blockDot(b: u32, xi: u32) -> vec4<f32> {
  let word = w[b >> 2u];
  return bitcast<f32>(word << 16u) * roundBF16(xv(xi)) + bitcast<f32>(word & 0xffff0000u) * roundBF16(xv(xi + 1u));
}`,
};

/** block_q4_1: f16 d, f16 m, qs[16]; value j = d * (qs[j] & 15) + m, value j + 16 = d * (qs[j] >> 4) + m. */
const Q4_1: GgmlShader = {
  blockValues: 32,
  blockDot: /* wgsl */ `
fn blockDot(b: u32, xi: u32) -> vec4<f32> {
  let d = f16At(b);
  let m = f16At(b + 2u);
  var s = vec4<f32>(0.0);
  for (var j = 0u; j < 32u; j++) { s = s + (d * f32(nibble(b + 4u, j)) + m) * xv(xi + j); }
  return s;
}`,
};

/** The fifth bits of block_q5_0 / q5_1: qh (a little-endian u32 at byte h), bit j for value j. */
export const Q5_HIGH_BITS = /* wgsl */ `
fn q5High(h: u32) -> u32 { return u8At(h) | (u8At(h + 1u) << 8u) | (u8At(h + 2u) << 16u) | (u8At(h + 3u) << 24u); }`;

/** block_q5_0: f16 d, qh[4], qs[16]; value j = d * ((nibble | bit j of qh << 4) - 16). */
const Q5_0: GgmlShader = {
  blockValues: 32,
  blockDot: /* wgsl */ `${Q5_HIGH_BITS}
fn blockDot(b: u32, xi: u32) -> vec4<f32> {
  let d = f16At(b);
  let qh = q5High(b + 2u);
  var s = vec4<f32>(0.0);
  for (var j = 0u; j < 32u; j++) { s = s + (d * f32(i32(nibble(b + 6u, j) | (((qh >> j) & 1u) << 4u)) - 16)) * xv(xi + j); }
  return s;
}`,
};

/** block_q5_1: f16 d, f16 m, qh[4], qs[16]; value j = d * (nibble | bit j of qh << 4) + m. */
const Q5_1: GgmlShader = {
  blockValues: 32,
  blockDot: /* wgsl */ `${Q5_HIGH_BITS}
fn blockDot(b: u32, xi: u32) -> vec4<f32> {
  let d = f16At(b);
  let m = f16At(b + 2u);
  let qh = q5High(b + 4u);
  var s = vec4<f32>(0.0);
  for (var j = 0u; j < 32u; j++) { s = s + (d * f32(nibble(b + 8u, j) | (((qh >> j) & 1u) << 4u)) + m) * xv(xi + j); }
  return s;
}`,
};

/**
 * block_q5_K: f16 d, f16 dmin, scales[12] (as Q4_K), qh[32], qs[128]. Sub-block pair i reads
 * qs[32i ..] nibbles and bits 2i (low nibbles) and 2i + 1 (high nibbles) of qh[l] as fifth bits.
 */
const Q5_K: GgmlShader = {
  blockValues: 256,
  blockDot: /* wgsl */ `${SCALE_MIN_K4}
fn blockDot(b: u32, xi: u32) -> vec4<f32> {
  let d = f16At(b);
  let dmin = f16At(b + 2u);
  var s = vec4<f32>(0.0);
  for (var i = 0u; i < 4u; i++) {
    let lo = scaleMinK4(b, 2u * i);
    let hi = scaleMinK4(b, 2u * i + 1u);
    let d1 = d * lo.x; let m1 = dmin * lo.y;
    let d2 = d * hi.x; let m2 = dmin * hi.y;
    let q = b + 48u + 32u * i;
    let xo = xi + 64u * i;
    for (var l = 0u; l < 32u; l++) {
      let h = u8At(b + 16u + l);
      s = s + (d1 * f32((u8At(q + l) & 15u) | (((h >> (2u * i)) & 1u) << 4u)) - m1) * xv(xo + l);
    }
    for (var l = 0u; l < 32u; l++) {
      let h = u8At(b + 16u + l);
      s = s + (d2 * f32((u8At(q + l) >> 4u) | (((h >> (2u * i + 1u)) & 1u) << 4u)) - m2) * xv(xo + 32u + l);
    }
  }
  return s;
}`,
};

/**
 * block_q2_K: scales[16] (scale | min << 4), qs[64], f16 d, f16 dmin. Half n (128 values) reads
 * qs[32n ..]; its 32-value group j takes bits 2j of those bytes, sub-block (16 values) 8n + 2j + h
 * scale d * (sc & 15) and min dmin * (sc >> 4).
 */
const Q2_K: GgmlShader = {
  blockValues: 256,
  blockDot: /* wgsl */ `
fn blockDot(b: u32, xi: u32) -> vec4<f32> {
  let d = f16At(b + 80u);
  let dmin = f16At(b + 82u);
  var s = vec4<f32>(0.0);
  for (var n = 0u; n < 2u; n++) {
    for (var j = 0u; j < 4u; j++) {
      let sc0 = u8At(b + 8u * n + 2u * j);
      let sc1 = u8At(b + 8u * n + 2u * j + 1u);
      let dl = vec2<f32>(d * f32(sc0 & 15u), d * f32(sc1 & 15u));
      let ml = vec2<f32>(dmin * f32(sc0 >> 4u), dmin * f32(sc1 >> 4u));
      for (var l = 0u; l < 32u; l++) {
        let q = (u8At(b + 16u + 32u * n + l) >> (2u * j)) & 3u;
        s = s + (dl[l / 16u] * f32(q) - ml[l / 16u]) * xv(xi + 128u * n + 32u * j + l);
      }
    }
  }
  return s;
}`,
};

/** Scale j (0..15) of block_q3_K: six bits stored plus 32 in scales[12] at byte b + 96. */
export const SCALE_Q3_K = /* wgsl */ `
fn scaleQ3K(b: u32, j: u32) -> i32 {
  let q = b + 96u;
  var low: u32;
  if (j < 8u) { low = u8At(q + j) & 15u; } else { low = u8At(q + j - 8u) >> 4u; }
  let high = (u8At(q + 8u + (j & 3u)) >> (2u * (j >> 2u))) & 3u;
  return i32(low | (high << 4u)) - 32;
}`;

/**
 * block_q3_K: hmask[32], qs[64], scales[12] (sixteen 6-bit scales, stored plus 32), f16 d. As
 * Q2_K's layout of qs; value l of group j in half n subtracts 4 unless bit 4n + j of hmask[l] is set.
 */
const Q3_K: GgmlShader = {
  blockValues: 256,
  blockDot: /* wgsl */ `${SCALE_Q3_K}
fn blockDot(b: u32, xi: u32) -> vec4<f32> {
  let d = f16At(b + 108u);
  var s = vec4<f32>(0.0);
  for (var n = 0u; n < 2u; n++) {
    for (var j = 0u; j < 4u; j++) {
      let dl = vec2<f32>(d * f32(scaleQ3K(b, 8u * n + 2u * j)), d * f32(scaleQ3K(b, 8u * n + 2u * j + 1u)));
      for (var l = 0u; l < 32u; l++) {
        let q = i32((u8At(b + 32u + 32u * n + l) >> (2u * j)) & 3u);
        let high = (u8At(b + l) >> (4u * n + j)) & 1u;
        s = s + (dl[l / 16u] * f32(q - select(4, 0, high != 0u))) * xv(xi + 128u * n + 32u * j + l);
      }
    }
  }
  return s;
}`,
};

/**
 * block_mxfp4: an E8M0 byte e, qs[16] (4-bit codes, as Q4_0's nibbles); value j = 2^(e - 128) *
 * kvalues_mxfp4[code] (E2M1 doubled: 0 1 2 3 4 6 8 12, negated for codes 8..15).
 */
export const MXFP4_READERS = /* wgsl */ `
var<private> mxfp4Values: array<f32, 16> = array<f32, 16>(0.0, 1.0, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0, 0.0, -1.0, -2.0, -3.0, -4.0, -6.0, -8.0, -12.0);
// GGML_E8M0_TO_FP32_HALF: the bits ggml writes (subnormal for e < 2).
fn e8m0Half(e: u32) -> f32 { return bitcast<f32>(select((e - 1u) << 23u, 0x00200000u << e, e < 2u)); }`;

const MXFP4: GgmlShader = {
  blockValues: 32,
  blockDot: /* wgsl */ `${MXFP4_READERS}
fn blockDot(b: u32, xi: u32) -> vec4<f32> {
  let d = e8m0Half(u8At(b));
  var s = vec4<f32>(0.0);
  for (var j = 0u; j < 32u; j++) { s = s + (d * mxfp4Values[nibble(b + 1u, j)]) * xv(xi + j); }
  return s;
}`,
};

/** ggml type codes with a WGSL product, and their shaders (the codes of src/model/gguf.ts GGML_TYPES). */
export const GGML_SHADERS: ReadonlyMap<number, GgmlShader & { name: string; blockBytes: number }> = new Map([
  [1, { ...F16, name: "F16", blockBytes: 4 }],
  [30, { ...BF16, name: "BF16", blockBytes: 4 }],
  [2, { ...Q4_0, name: "Q4_0", blockBytes: 18 }],
  [3, { ...Q4_1, name: "Q4_1", blockBytes: 20 }],
  [6, { ...Q5_0, name: "Q5_0", blockBytes: 22 }],
  [7, { ...Q5_1, name: "Q5_1", blockBytes: 24 }],
  [39, { ...MXFP4, name: "MXFP4", blockBytes: 17 }],
  [10, { ...Q2_K, name: "Q2_K", blockBytes: 84 }],
  [11, { ...Q3_K, name: "Q3_K", blockBytes: 110 }],
  [13, { ...Q5_K, name: "Q5_K", blockBytes: 176 }],
  [8, { ...Q8_0, name: "Q8_0", blockBytes: 34 }],
  [12, { ...Q4_K, name: "Q4_K", blockBytes: 144 }],
  [14, { ...Q6_K, name: "Q6_K", blockBytes: 210 }],
]);

/** The product over one ggml type: lane i takes blocks i, i + 8, ... of the row. */
export function matmulGgmlWgsl(type: number): string {
  const shader = GGML_SHADERS.get(type);
  if (shader === undefined) throw new Error(`no WGSL product for ggml type ${type}`);
  return blockProductWgsl(MATMUL_HEAD, shader.blockDot, shader);
}

/**
 * A product over blocks of `shader`'s layout: `head` declares the activations and their readers,
 * `blockDot` the dot of one block with the 4 token rows (f32 here, f16 in wgsl-matmul-f16.ts).
 */
export function blockProductWgsl(head: string, blockDot: string, shader: { blockValues: number; blockBytes: number }): string {
  return /* wgsl */ `
${head}
${BYTE_READERS}
${blockDot}
${MATMUL_ENTRY}
${blockRowLoop("r", shader)}
${REDUCE_AND_STORE}
}`;
}

/** Lane `lane`'s sum over blocks lane, lane + 8, ... of weight row `row` (nothing unless `live`). */
export function blockRowLoop(row: string, shader: { blockValues: number; blockBytes: number }): string {
  return /* wgsl */ `
  let blocks = select(0u, p.cols / ${shader.blockValues}u, live);
  var s = vec4<f32>(0.0);
  for (var bi = lane; bi < blocks; bi += ${LANES}u) {
    s = s + blockDot(${row} * p.rowBytes + bi * ${shader.blockBytes}u, bi * ${shader.blockValues}u);
  }`;
}
