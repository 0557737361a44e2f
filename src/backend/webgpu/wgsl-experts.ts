/**
 * WGSL kernels of a mixture-of-experts feed-forward, as src/backend/wasm/experts.ts computes it on the
 * CPU, without a read-back: the routing, the grouping of a step's slots by expert and the mixture
 * all run on the GPU.
 *
 *   route        one invocation per token: the `used` largest router logits (ties: the lower
 *                index), best first, and their weights (softmax over all or over the chosen,
 *                renormalized when asked), in f32
 *   group        one invocation: the step's T x used slots ordered by expert (tokens in order
 *                within one), and work groups of up to 4 slots of one expert:
 *                groups[0] = how many, then per group (expert, slot0..slot3), a missing slot NONE
 *   expert product  a matrix product (wgsl-matmul.ts's lanes, reduction and block dots) whose
 *                workgroup takes 8 rows of one expert for one group: the expert's rows are read
 *                once for its 4 slots, each slot's row reduced in the same fixed order as every
 *                other product's, so a slot's result does not depend on the other slots of its group
 *   mix          out[t] = sum over rank r of weight[t][r] * down[slot of (t, r)], in rank order
 *
 * The grid of the expert products has room for the most groups a step can have (expertGroupsBound);
 * a workgroup past the step's count computes nothing.
 */
import { ELEMENT_ENTRY, ELEMENT_INDEX, WORKGROUP } from "./wgsl-elementwise.ts";
import { BYTE_READERS, blockRowLoop, F32_ACTIVATIONS, F32_WEIGHTS, f32RowLoop, GGML_SHADERS, GROUPS_PER_Z, LANES, PRODUCT_STATE, ROWS_PER_GROUP, TOKENS_PER_GROUP } from "./wgsl-matmul.ts";
import { HALF_ACTIVATIONS, halfBlockDot } from "./wgsl-matmul-f16.ts";

/** u32 words of one group record: the expert, then up to 4 slots. */
export const GROUP_WORDS = 1 + TOKENS_PER_GROUP;
const NONE = "0xffffffffu";

/**
 * The most groups a step of T tokens can make: each expert that some slot chose rounds its slots
 * up to a multiple of 4, and at most min(count, T x used) experts are chosen.
 */
export function expertGroupsBound(T: number, used: number, count: number): number {
  const slots = T * used;
  return Math.ceil((slots + (TOKENS_PER_GROUP - 1) * Math.min(count, slots)) / TOKENS_PER_GROUP);
}

/** Routing of T tokens: logits [T][count] (a router's bias already added by its product) to chosen [T][used] and weights [T][used]. */
export const ROUTE_WGSL = /* wgsl */ `
struct Params { T: u32, count: u32, used: u32, softmaxOfChosen: u32, normalize: u32 }
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> logits: array<f32>;
@group(0) @binding(2) var<storage, read_write> chosen: array<u32>;
@group(0) @binding(3) var<storage, read_write> weights: array<f32>;
fn logit(t: u32, j: u32) -> f32 { return logits[t * p.count + j]; }
${ELEMENT_INDEX}
${ELEMENT_ENTRY} {
  let t = elementIndex(wg, nwg, lid);
  if (t >= p.T) { return; }
  let at = t * p.used;
  for (var r = 0u; r < p.used; r++) {
    var best = ${NONE};
    var bestValue = 0.0;
    for (var j = 0u; j < p.count; j++) {
      var taken = false;
      for (var q = 0u; q < r; q++) { taken = taken || chosen[at + q] == j; }
      let v = logit(t, j);
      // The first untaken index, then any larger value (a NaN logit is never larger).
      if (!taken && (best == ${NONE} || v > bestValue)) { best = j; bestValue = v; }
    }
    chosen[at + r] = best;
  }
  let top = logit(t, chosen[at]);
  var total = 0.0;
  if (p.softmaxOfChosen != 0u) {
    for (var r = 0u; r < p.used; r++) { total = total + exp(logit(t, chosen[at + r]) - top); }
  } else {
    for (var j = 0u; j < p.count; j++) { total = total + exp(logit(t, j) - top); }
  }
  var sum = 0.0;
  for (var r = 0u; r < p.used; r++) {
    let w = exp(logit(t, chosen[at + r]) - top) / total;
    weights[at + r] = w;
    sum = sum + w;
  }
  if (p.normalize != 0u) {
    for (var r = 0u; r < p.used; r++) { weights[at + r] = weights[at + r] / max(sum, 6.103515625e-5); }
  }
}`;

/** The slots of T tokens grouped by expert (one invocation; counts: [count] scratch). */
export const GROUP_WGSL = /* wgsl */ `
struct Params { T: u32, used: u32, count: u32 }
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> chosen: array<u32>;
@group(0) @binding(2) var<storage, read_write> groups: array<u32>;
@group(0) @binding(3) var<storage, read_write> slotToken: array<u32>;
@group(0) @binding(4) var<storage, read_write> tokenSlots: array<u32>;
@group(0) @binding(5) var<storage, read_write> next: array<u32>;
@compute @workgroup_size(1)
fn main() {
  let slots = p.T * p.used;
  for (var e = 0u; e < p.count; e++) { next[e] = 0u; }
  for (var i = 0u; i < slots; i++) { next[chosen[i]] = next[chosen[i]] + 1u; }
  // Each expert's first slot, and its groups of up to 4 slots.
  var at = 0u;
  var g = 0u;
  for (var e = 0u; e < p.count; e++) {
    let n = next[e];
    next[e] = at;
    for (var j = 0u; j < n; j += ${TOKENS_PER_GROUP}u) {
      let rec = 1u + ${GROUP_WORDS}u * g;
      groups[rec] = e;
      for (var k = 0u; k < ${TOKENS_PER_GROUP}u; k++) { groups[rec + 1u + k] = select(${NONE}, at + j + k, j + k < n); }
      g++;
    }
    at += n;
  }
  groups[0] = g;
  for (var i = 0u; i < slots; i++) {
    let slot = next[chosen[i]];
    next[chosen[i]] = slot + 1u;
    slotToken[slot] = i / p.used;
    tokenSlots[i] = slot;
  }
}`;

/** out[t] = sum over r of weights[t][r] * down[tokenSlots[t][r]], rows of n, in rank order. */
export const MIX_WGSL = /* wgsl */ `
struct Params { T: u32, used: u32, n: u32 }
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> out: array<f32>;
@group(0) @binding(2) var<storage, read> down: array<f32>;
@group(0) @binding(3) var<storage, read> tokenSlots: array<u32>;
@group(0) @binding(4) var<storage, read> weights: array<f32>;
${ELEMENT_INDEX}
${ELEMENT_ENTRY} {
  let i = elementIndex(wg, nwg, lid);
  if (i >= p.T * p.n) { return; }
  let t = i / p.n;
  let c = i % p.n;
  let at = t * p.used;
  var acc = weights[at] * down[tokenSlots[at] * p.n + c];
  for (var r = 1u; r < p.used; r++) { acc = acc + weights[at + r] * down[tokenSlots[at + r] * p.n + c]; }
  out[i] = acc;
}`;

/**
 * The expert product's parameters and bindings: rows and rowBytes of one expert, the experts
 * [firstExpert, firstExpert + experts) of this part of the stack, whether the input rows are the
 * slots' (bySlot: the down product) or their tokens' (gate and up), a bias per expert row.
 * Bindings: 1 weights, 2 activations (and 4 their scales in f16 products), 3 out [slots][rows],
 * then from `at` (4, or 5 in f16 products): groups, slotToken, bias [experts][rows].
 */
function expertHead(at: number): string {
  return /* wgsl */ `
struct Params { rows: u32, cols: u32, rowBytes: u32, firstExpert: u32, experts: u32, bySlot: u32, hasBias: u32 }
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;
@group(0) @binding(${at}) var<storage, read> groups: array<u32>;
@group(0) @binding(${at + 1}) var<storage, read> slotToken: array<u32>;
@group(0) @binding(${at + 2}) var<storage, read> bias: array<f32>;
${PRODUCT_STATE}`;
}

/** Row r of group wg.y's expert; `live` when the group exists, its expert is in this part and r is a row. */
const EXPERT_ENTRY = /* wgsl */ `
@compute @workgroup_size(${WORKGROUP})
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
  let r = (wg.x + wg.z * ${GROUPS_PER_Z}u) * ${ROWS_PER_GROUP}u + lid / ${LANES}u;
  let lane = lid % ${LANES}u;
  var e = ${NONE};
  var slots = vec4<u32>(0u);
  if (wg.y < groups[0]) {
    let rec = 1u + ${GROUP_WORDS}u * wg.y;
    e = groups[rec];
    slots = vec4<u32>(groups[rec + 1u], groups[rec + 2u], groups[rec + 3u], groups[rec + 4u]);
  }
  let live = r < p.rows && e >= p.firstExpert && e < p.firstExpert + p.experts;
  // A missing slot repeats the first: computed, never stored.
  let filled = select(slots, vec4<u32>(slots.x), slots == vec4<u32>(${NONE}));
  let tokens = vec4<u32>(slotToken[filled.x], slotToken[filled.y], slotToken[filled.z], slotToken[filled.w]);
  xRows = select(tokens, filled, p.bySlot != 0u) * p.cols;
  let wr = select(0u, (e - p.firstExpert) * p.rows + r, live);`;

const EXPERT_STORE = /* wgsl */ `
  partial[lid] = s;
  workgroupBarrier();
  if (live && lane == 0u) {
    var sum = partial[lid];
    for (var k = 1u; k < ${LANES}u; k++) { sum = sum + partial[lid + k]; }
    for (var k = 0u; k < ${TOKENS_PER_GROUP}u; k++) {
      if (slots[k] != ${NONE}) {
        var v = sum[k];
        if (p.hasBias != 0u) { v = v + bias[e * p.rows + r]; }
        out[slots[k] * p.rows + r] = v;
      }
    }
  }
}`;

/**
 * The expert product over weights of ggml type `type` (0: f32 rows), in f32 or (`half`) in the
 * f16 arithmetic of wgsl-matmul-f16.ts.
 */
export function expertProductWgsl(type: number, half: boolean): string {
  if (type === 0) return `${expertHead(4)}\n${F32_ACTIVATIONS}\n${F32_WEIGHTS}\n${EXPERT_ENTRY}\n${f32RowLoop("wr")}\n${EXPERT_STORE}`;
  const shader = GGML_SHADERS.get(type);
  const blockDot = half ? halfBlockDot(type) : shader?.blockDot;
  if (shader === undefined || blockDot === undefined) throw new Error(`no ${half ? "f16 " : ""}WGSL expert product for ggml type ${type}`);
  const activations = half ? `enable f16;\n${expertHead(5)}\n${HALF_ACTIVATIONS}` : `${expertHead(4)}\n${F32_ACTIVATIONS}`;
  return `${activations}\n${BYTE_READERS}\n${blockDot}\n${EXPERT_ENTRY}\n${blockRowLoop("wr", shader)}\n${EXPERT_STORE}`;
}
