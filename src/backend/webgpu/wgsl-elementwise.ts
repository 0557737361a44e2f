/**
 * WGSL kernels that touch each element once or reduce one row: RMSNorm, SwiGLU and GeGLU, scaling, the residual
 * add, RoPE with writing K/V into the paged arena, embedding rows and gathering rows; and the
 * conversion of a product's activations to the f16 form of wgsl-half.ts, alone or fused into the
 * RMSNorm or SwiGLU that computes them. Binding 0 is
 * always the parameter block (see GpuRunner.dispatch); the storage buffers follow in order.
 *
 * Element-wise kernels run 64 invocations per workgroup over a 2-D grid of workgroups (WebGPU
 * allows at most 65,535 per dimension): element = (wg.y * gridWidth + wg.x) * 64 + local index.
 */

import { HALF_BLOCK, halfStoreWgsl } from "./wgsl-half.ts";
import { kvArenaElement, kvRowWriterWgsl } from "./wgsl-kv-types.ts";
import type { KVType } from "../../kv/kv-layout.ts";

/** Invocations per workgroup of every kernel here (the default limit allows 256). */
export const WORKGROUP = 64;
/** Most workgroups per grid dimension (WebGPU's default maxComputeWorkgroupsPerDimension). */
export const MAX_GRID = 65535;

/** Workgroup grid covering n invocations of WORKGROUP each. */
export function elementGrid(n: number): [number, number, number] {
  const groups = Math.ceil(n / WORKGROUP);
  const x = Math.min(groups, MAX_GRID);
  return [x, Math.ceil(groups / Math.max(x, 1)), 1];
}

export const ELEMENT_INDEX = /* wgsl */ `
fn elementIndex(wg: vec3<u32>, nwg: vec3<u32>, lid: u32) -> u32 {
  return (wg.y * nwg.x + wg.x) * ${WORKGROUP}u + lid;
}`;

export const ELEMENT_ENTRY = `@compute @workgroup_size(${WORKGROUP})
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) lid: u32)`;

/** x[i] += y[i] for i < n. */
export const ADD_WGSL = /* wgsl */ `
struct Params { n: u32 }
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> x: array<f32>;
@group(0) @binding(2) var<storage, read> y: array<f32>;
${ELEMENT_INDEX}
${ELEMENT_ENTRY} {
  let i = elementIndex(wg, nwg, lid);
  if (i < p.n) { x[i] = x[i] + y[i]; }
}`;

/** The gated activations of the feed-forward: act(gate) * up. */
export type GatedActivation = "silu" | "gelu" | "silu-oai";

/**
 * silu(gate) * up, silu(v) = v / (1 + exp(-v)) as in assembly/activation.ts swiglu; gelu(gate) *
 * up with the tanh GELU as x / (1 + exp(-2u)) as assembly/activation.ts geglu computes it.
 */
const GATED_FN: Record<GatedActivation, string> = {
  silu: /* wgsl */ `
fn gatedAt(g: f32, u: f32) -> f32 { return (g * (1.0 / (1.0 + exp(-g)))) * u; }`,
  gelu: /* wgsl */ `
fn gatedAt(g: f32, u: f32) -> f32 {
  let inner = g * (1.5957691216057308 + 0.07135481627159173 * (g * g));
  return (g * (1.0 / (1.0 + exp(-inner)))) * u;
}`,
  // gpt-oss's clamped SwiGLU, as assembly/activation.ts swigluOai (its pmin/pmax comparisons).
  "silu-oai": /* wgsl */ `
fn gatedAt(gate: f32, up: f32) -> f32 {
  let g = select(7.0, gate, gate < 7.0);
  let above = select(-7.0, up, -7.0 < up);
  let u = select(7.0, above, above < 7.0);
  return (g * (1.0 / (1.0 + exp(-(1.702 * g))))) * (u + 1.0);
}`,
};

/** gate[i] = act(gate[i]) * up[i] for i < n. */
function gatedWgsl(act: GatedActivation): string {
  return /* wgsl */ `
struct Params { n: u32 }
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> gate: array<f32>;
@group(0) @binding(2) var<storage, read> up: array<f32>;
${GATED_FN[act]}
${ELEMENT_INDEX}
${ELEMENT_ENTRY} {
  let i = elementIndex(wg, nwg, lid);
  if (i < p.n) { gate[i] = gatedAt(gate[i], up[i]); }
}`;
}

/** gatedWgsl over `blocks` blocks of 32 values, one invocation each, also writing them in f16 form (wgsl-half.ts). */
function gatedHalfWgsl(act: GatedActivation): string {
  return /* wgsl */ `
enable f16;
struct Params { blocks: u32 }
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> gate: array<f32>;
@group(0) @binding(2) var<storage, read> up: array<f32>;
${halfStoreWgsl(3)}
${GATED_FN[act]}
${ELEMENT_INDEX}
${ELEMENT_ENTRY} {
  let k = elementIndex(wg, nwg, lid);
  if (k >= p.blocks) { return; }
  var v: array<f32, ${HALF_BLOCK}>;
  for (var j = 0u; j < ${HALF_BLOCK}u; j++) {
    let i = k * ${HALF_BLOCK}u + j;
    v[j] = gatedAt(gate[i], up[i]);
    gate[i] = v[j];
  }
  storeHalfBlock(&v, k);
}`;
}

export const SWIGLU_WGSL = gatedWgsl("silu");
export const SWIGLU_HALF_WGSL = gatedHalfWgsl("silu");
export const GEGLU_WGSL = gatedWgsl("gelu");
export const GEGLU_HALF_WGSL = gatedHalfWgsl("gelu");
export const SWIGLU_OAI_WGSL = gatedWgsl("silu-oai");
export const SWIGLU_OAI_HALF_WGSL = gatedHalfWgsl("silu-oai");

/** x[i] *= s for i < n (gemma3's embedding times sqrt(dim)). */
export const SCALE_WGSL = /* wgsl */ `
struct Params { n: u32, s: f32 }
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> x: array<f32>;
${ELEMENT_INDEX}
${ELEMENT_ENTRY} {
  let i = elementIndex(wg, nwg, lid);
  if (i < p.n) { x[i] = x[i] * p.s; }
}`;

/** The f16 form (wgsl-half.ts) of x's `blocks` blocks of 32 values, one invocation each. */
export const HALF_ACTIVATIONS_WGSL = /* wgsl */ `
enable f16;
struct Params { blocks: u32 }
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
${halfStoreWgsl(2)}
${ELEMENT_INDEX}
${ELEMENT_ENTRY} {
  let k = elementIndex(wg, nwg, lid);
  if (k >= p.blocks) { return; }
  var v: array<f32, ${HALF_BLOCK}>;
  for (var j = 0u; j < ${HALF_BLOCK}u; j++) { v[j] = x[k * ${HALF_BLOCK}u + j]; }
  storeHalfBlock(&v, k);
}`;

/**
 * The sum of a workgroup's partial sums (each invocation's s): a fixed pairwise tree, so one order
 * whatever else the dispatch holds; every invocation gets the total, and may call it again.
 */
const ROW_SUM_WGSL = /* wgsl */ `
var<workgroup> partial: array<f32, ${WORKGROUP}>;
fn rowSum(lid: u32, s: f32) -> f32 {
  partial[lid] = s;
  workgroupBarrier();
  for (var k = ${WORKGROUP / 2}u; k > 0u; k = k >> 1u) {
    if (lid < k) { partial[lid] = partial[lid] + partial[lid + k]; }
    workgroupBarrier();
  }
  let total = partial[0];
  workgroupBarrier();
  return total;
}`;

/**
 * RMSNorm of T rows of n floats, one workgroup per row: out[t] = w * (x[t] * inv_rms(x[t])); out
 * is not x. Each invocation sums the squares of elements lid, lid + 64, ... in order, then a fixed
 * pairwise tree adds the 64 partial sums: one order for a row, whatever T is. With `addFirst`
 * (the residual add and the next norm in one dispatch) x[t] += y[t] first, element by element,
 * by the invocation that then squares and reads it back: the same operations in the same order
 * as ADD then RMSNORM, so the same bits. With `toHalf` (the norm feeds f16 products; n a multiple
 * of 32) the row is also written in the f16 form of wgsl-half.ts, invocation i taking blocks i,
 * i + 64, ...: each output element is the same expression, so the same bits as without.
 */
function rmsnormWgsl(addFirst: boolean, toHalf: boolean): string {
  const inputs = addFirst
    ? `@group(0) @binding(2) var<storage, read_write> x: array<f32>;
@group(0) @binding(3) var<storage, read> y: array<f32>;
@group(0) @binding(4) var<storage, read> w: array<f32>;`
    : `@group(0) @binding(2) var<storage, read> x: array<f32>;
@group(0) @binding(3) var<storage, read> w: array<f32>;`;
  const load = addFirst ? "let v = x[base + j] + y[base + j];\n    x[base + j] = v;" : "let v = x[base + j];";
  const store = toHalf
    ? /* wgsl */ `let blocks = p.n / ${HALF_BLOCK}u;
  for (var k = lid; k < blocks; k += ${WORKGROUP}u) {
    var v: array<f32, ${HALF_BLOCK}>;
    for (var j = 0u; j < ${HALF_BLOCK}u; j++) {
      let i = k * ${HALF_BLOCK}u + j;
      v[j] = w[i] * (inv * x[base + i]);
      out[base + i] = v[j];
    }
    storeHalfBlock(&v, wg.x * blocks + k);
  }`
    : /* wgsl */ `for (var j = lid; j < p.n; j += ${WORKGROUP}u) {
    out[base + j] = w[j] * (inv * x[base + j]);
  }`;
  return /* wgsl */ `${toHalf ? "enable f16;" : ""}
struct Params { n: u32, eps: f32 }
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> out: array<f32>;
${inputs}
${toHalf ? halfStoreWgsl(addFirst ? 5 : 4) : ""}
${ROW_SUM_WGSL}
@compute @workgroup_size(${WORKGROUP})
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
  let base = wg.x * p.n;
  var s = 0.0;
  for (var j = lid; j < p.n; j += ${WORKGROUP}u) {
    ${load}
    s = s + v * v;
  }
  let inv = 1.0 / sqrt(rowSum(lid, s) / f32(p.n) + p.eps);
  ${store}
}`;
}

export const RMSNORM_WGSL = rmsnormWgsl(false, false);
/** x[t] += y[t], then out[t] = w * (x[t] * inv_rms(x[t])): ADD and RMSNORM in one dispatch. */
export const ADD_RMSNORM_WGSL = rmsnormWgsl(true, false);
/** RMSNORM_WGSL and ADD_RMSNORM_WGSL also writing their output in f16 form (wgsl-half.ts). */
export const RMSNORM_HALF_WGSL = rmsnormWgsl(false, true);
export const ADD_RMSNORM_HALF_WGSL = rmsnormWgsl(true, true);

/**
 * RoPE on q and k, and k (rotated) and v written into their slots of one layer's arena, in one
 * dispatch. Pair k < ropeDim / 2 of a head is the elements k * pairStride and k * pairStride +
 * partner: (2k, 2k + 1) interleaved, (k, k + ropeDim / 2) neox; elements past ropeDim pass
 * through. The table holds cos then sin, each [position][ropeDim / 2]; slot = block * blockSize +
 * row, and the arena is [kvHead][block][blockSize][headDim] as in assembly/attention.ts.
 * Invocations: first one per (token, query head, pair), rotating q in place; then one per
 * (token, kv head, pair or pass-through element), writing k rotated and v. (k itself is left
 * as it was: attention reads the arena.)
 */
export const ROPE_WRITE_KV_WGSL = ropeWriteKVWgsl("f32");

/**
 * ROPE_WRITE_KV_WGSL for an arena of `type`. An f16 or q8_0 arena (wgsl-kv-types.ts) is written a
 * whole row per invocation: after the q pairs, one invocation per (token, kv head) rotates its k
 * row element by element (the same products as the f32 kernel) and stores it and its v row.
 */
export function ropeWriteKVWgsl(type: KVType): string {
  const typed = type !== "f32";
  const kvPart = typed
    ? /* wgsl */ `let j = i - qPairs;
  if (j >= p.T * p.nKvHeads) { return; }
  let h = j % p.nKvHeads;
  let t = j / p.nKvHeads;
  let row = t * p.kvStride + h * p.headDim;
  let slot = u32(slots[t]);
  let dst = ((h * p.numBlocks + slot / p.blockSize) * p.blockSize + slot % p.blockSize) * p.rowWords;
  storeKVRow(false, dst, 0u, row, t);
  storeKVRow(true, dst, 1u, row, t);`
    : /* wgsl */ `let j = i - qPairs;
  let items = half + p.headDim - p.ropeDim;
  if (j >= p.T * p.nKvHeads * items) { return; }
  let item = j % items;
  let h = (j / items) % p.nKvHeads;
  let t = j / (items * p.nKvHeads);
  let row = t * p.kvStride + h * p.headDim;
  let slot = u32(slots[t]);
  let dst = ((h * p.numBlocks + slot / p.blockSize) * p.blockSize + slot % p.blockSize) * p.headDim;
  if (item < half) {
    let at = u32(positions[t]) * half + item;
    let c = ropeTable[at];
    let s = ropeTable[p.sinAt + at];
    let e0 = item * p.pairStride;
    let e1 = e0 + p.partner;
    let v0 = k[row + e0];
    let v1 = k[row + e1];
    kArena[dst + e0] = v0 * c - v1 * s;
    kArena[dst + e1] = v0 * s + v1 * c;
    vArena[dst + e0] = v[row + e0];
    vArena[dst + e1] = v[row + e1];
  } else {
    let e = p.ropeDim + item - half;
    kArena[dst + e] = k[row + e];
    vArena[dst + e] = v[row + e];
  }`;
  // Element e of token t's k row rotated (src 0), or of its v row (src 1), for the typed writer.
  const typedValue = /* wgsl */ `
fn value(src: u32, row: u32, t: u32, e: u32) -> f32 {
  if (src == 1u) { return v[row + e]; }
  if (e >= p.ropeDim) { return k[row + e]; }
  let half = p.ropeDim / 2u;
  let item = select(e / 2u, e % half, p.pairStride == 1u);
  let second = select((e & 1u) == 1u, e >= half, p.pairStride == 1u);
  let at = u32(positions[t]) * half + item;
  let c = ropeTable[at];
  let s = ropeTable[p.sinAt + at];
  let e0 = item * p.pairStride;
  let v0 = k[row + e0];
  let v1 = k[row + e0 + p.partner];
  return select(v0 * c - v1 * s, v0 * s + v1 * c, second);
}
${kvRowWriterWgsl(type as Exclude<KVType, "f32">)}`;
  const arena = kvArenaElement(type);
  return /* wgsl */ `
struct Params {
  T: u32, nHeads: u32, nKvHeads: u32, headDim: u32, ropeDim: u32, qStride: u32, kvStride: u32,
  pairStride: u32, partner: u32, blockSize: u32, numBlocks: u32, sinAt: u32, rowWords: u32,
}
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> q: array<f32>;
@group(0) @binding(2) var<storage, read> k: array<f32>;
@group(0) @binding(3) var<storage, read> v: array<f32>;
@group(0) @binding(4) var<storage, read_write> kArena: array<${arena}>;
@group(0) @binding(5) var<storage, read_write> vArena: array<${arena}>;
@group(0) @binding(6) var<storage, read> positions: array<i32>;
@group(0) @binding(7) var<storage, read> slots: array<i32>;
@group(0) @binding(8) var<storage, read> ropeTable: array<f32>;
${typed ? typedValue : ""}
${ELEMENT_INDEX}
${ELEMENT_ENTRY} {
  let i = elementIndex(wg, nwg, lid);
  let half = p.ropeDim / 2u;
  let qPairs = p.T * p.nHeads * half;
  if (i < qPairs) {
    let pair = i % half;
    let h = (i / half) % p.nHeads;
    let t = i / (half * p.nHeads);
    let at = u32(positions[t]) * half + pair;
    let c = ropeTable[at];
    let s = ropeTable[p.sinAt + at];
    let p0 = t * p.qStride + h * p.headDim + pair * p.pairStride;
    let p1 = p0 + p.partner;
    let v0 = q[p0];
    let v1 = q[p1];
    q[p0] = v0 * c - v1 * s;
    q[p1] = v0 * s + v1 * c;
    return;
  }
  ${kvPart}
}`;
}

/** out[r] = src[rows[r]] for R rows of n floats (embedding look-up and the classifier's rows). */
export const GATHER_ROWS_WGSL = /* wgsl */ `
struct Params { R: u32, n: u32, firstRow: u32, rowCount: u32 }
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> out: array<f32>;
@group(0) @binding(2) var<storage, read> src: array<f32>;
@group(0) @binding(3) var<storage, read> rows: array<i32>;
${ELEMENT_INDEX}
${ELEMENT_ENTRY} {
  let i = elementIndex(wg, nwg, lid);
  if (i >= p.R * p.n) { return; }
  let r = i / p.n;
  let row = u32(rows[r]);
  // A table split across buffers: this call copies only the rows its part holds.
  if (row < p.firstRow || row >= p.firstRow + p.rowCount) { return; }
  out[i] = src[(row - p.firstRow) * p.n + i % p.n];
}`;

/** x[i] = gelu(x[i]) for i < n: the tanh GELU of GEGLU_WGSL with an up of 1 (an encoder's feed-forward, as the WebAssembly one's geglu against ones). */
export const GELU_WGSL = /* wgsl */ `
struct Params { n: u32 }
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> x: array<f32>;
${GATED_FN.gelu}
${ELEMENT_INDEX}
${ELEMENT_ENTRY} {
  let i = elementIndex(wg, nwg, lid);
  if (i < p.n) { x[i] = gatedAt(x[i], 1.0); }
}`;

/**
 * LayerNorm with bias of T rows of n floats in place, one workgroup per row: x[t] = ((x[t] -
 * mean) * inv) * w + b, inv = 1 / sqrt(variance + eps) (ggml_norm's formula). With `addFirst`
 * x[t] += y[t] first (an encoder's post-norm residual). Invocation lid owns elements lid, lid +
 * 64, ...: it alone writes and reads them back, so in place needs no barrier between the
 * passes over the row; each of the mean and the variance is its invocations' partial sums in
 * element order then a fixed pairwise tree, one order for a row whatever T is.
 */
function layerNormWgsl(addFirst: boolean): string {
  const load = addFirst ? "let v = x[base + j] + y[base + j];\n    x[base + j] = v;" : "let v = x[base + j];";
  return /* wgsl */ `
struct Params { n: u32, eps: f32 }
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> x: array<f32>;
@group(0) @binding(2) var<storage, read> w: array<f32>;
@group(0) @binding(3) var<storage, read> b: array<f32>;
${addFirst ? "@group(0) @binding(4) var<storage, read> y: array<f32>;" : ""}
${ROW_SUM_WGSL}

@compute @workgroup_size(${WORKGROUP})
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
  let base = wg.x * p.n;
  var s = 0.0;
  for (var j = lid; j < p.n; j += ${WORKGROUP}u) {
    ${load}
    s = s + v;
  }
  let mean = rowSum(lid, s) / f32(p.n);
  var s2 = 0.0;
  for (var j = lid; j < p.n; j += ${WORKGROUP}u) {
    let c = x[base + j] - mean;
    s2 = s2 + c * c;
  }
  let inv = 1.0 / sqrt(rowSum(lid, s2) / f32(p.n) + p.eps);
  for (var j = lid; j < p.n; j += ${WORKGROUP}u) {
    x[base + j] = ((x[base + j] - mean) * inv) * w[j] + b[j];
  }
}`;
}

export const LAYER_NORM_WGSL = layerNormWgsl(false);
/** x[t] += y[t], then LAYER_NORM_WGSL's x[t] = LayerNorm(x[t]) * w + b, in one dispatch. */
export const ADD_LAYER_NORM_WGSL = layerNormWgsl(true);
