/**
 * Paged attention in WGSL over the same K/V arena layout, block tables and sequence records as
 * assembly/attention.ts: the arena of a layer is [kvHead][block][blockSize] rows of headDim values
 * in the cache's type (f32, or f16 / q8_0 read through wgsl-kv-types.ts, widened per value), and a
 * sequence record is four i32 (queryStart, queryCount, contextLen, blockTable). The one difference:
 * blockTable is an element index into the block-table buffer (the GPU has no linear memory to
 * point into), where the WebAssembly record holds a byte address.
 *
 * One workgroup per (sequence, query head, query of the chunk). The query at position p sees keys
 * 0..p (causal within its chunk), or with a sliding window (`window` > 0) keys p - window + 1..p,
 * reading nothing before them (a sliding-window group's blocks there may be freed): it starts at
 * the tile that holds its window's first key, and in that tile at the key. Keys are visited in fixed tiles of ATTN_TILE positions with the
 * online softmax, in order; scores of a tile are each one invocation's dot product in element
 * order; every invocation then derives the tile max, exp weights and running sum in the same
 * order, and accumulates its own output elements over the tile's keys in order. So a (query,
 * head)'s result depends neither on the chunk it came in nor on the other sequences of the step,
 * nor on the block size. No atomics. With sinks (gpt-oss: one logit per query head that takes
 * softmax weight and gives no value), the online softmax starts from the head's sink (max = sink,
 * sum = 1) instead of from its first tile; only the f32-output kernels read sinks (the f16-form
 * ones would need a ninth storage buffer, one more than a stage may bind).
 *
 * ATTENTION_HALF_WGSL (heads of whole 32-value blocks, feeding f16 products) also writes the
 * output in the f16 form of wgsl-half.ts: the head's row goes through workgroup memory, and one
 * invocation per 32-value block converts it. The f32 output is the same bits.
 */
import { ATTN_TILE } from "../wasm/kernels.ts";
import { WORKGROUP } from "./wgsl-elementwise.ts";
import { HALF_BLOCK, halfStoreWgsl } from "./wgsl-half.ts";
import { kvArenaElement, kvReaderWgsl } from "./wgsl-kv-types.ts";
import type { KVType } from "../../kv/kv-layout.ts";

/** Largest head dimension: each invocation keeps MAX_HEAD_DIM / WORKGROUP output elements. */
export const MAX_HEAD_DIM = 256;
const PER_INVOCATION = MAX_HEAD_DIM / WORKGROUP;

/** Grid: x = sequences * query heads, y = the longest query count of the step. */
export function attentionGrid(numSeqs: number, nHeads: number, maxQueryCount: number): [number, number, number] {
  return [numSeqs * nHeads, maxQueryCount, 1];
}

/** Attention over an arena of `kvType` (wgsl-kv-types.ts readers); `toHalf`: also write the f16 form. */
export function attentionWgsl(toHalf: boolean, kvType: KVType): string {
  const store = toHalf
    ? /* wgsl */ `for (var e = 0u; e < ${PER_INVOCATION}u; e++) {
    let c = lid + e * ${WORKGROUP}u;
    if (c < p.headDim) {
      let o = acc[e] * inv;
      out[qOff + c] = o;
      headOut[c] = o;
    }
  }
  workgroupBarrier();
  if (lid < p.headDim / ${HALF_BLOCK}u) {
    var v: array<f32, ${HALF_BLOCK}>;
    for (var j = 0u; j < ${HALF_BLOCK}u; j++) { v[j] = headOut[lid * ${HALF_BLOCK}u + j]; }
    storeHalfBlock(&v, qOff / ${HALF_BLOCK}u + lid);
  }`
    : /* wgsl */ `for (var e = 0u; e < ${PER_INVOCATION}u; e++) {
    let c = lid + e * ${WORKGROUP}u;
    if (c < p.headDim) { out[qOff + c] = acc[e] * inv; }
  }`;
  return /* wgsl */ `${toHalf ? "enable f16;" : ""}
struct Params { nHeads: u32, nKvHeads: u32, headDim: u32, blockSize: u32, numBlocks: u32, qStride: u32, rowStride: u32, scale: f32, window: u32, hasSinks: u32 }
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> out: array<f32>;
@group(0) @binding(2) var<storage, read> q: array<f32>;
@group(0) @binding(3) var<storage, read> kArena: array<${kvArenaElement(kvType)}>;
@group(0) @binding(4) var<storage, read> vArena: array<${kvArenaElement(kvType)}>;
${kvReaderWgsl("kAt", "kArena", kvType)}
${kvReaderWgsl("vAt", "vArena", kvType)}
@group(0) @binding(5) var<storage, read> seqInfo: array<i32>;
@group(0) @binding(6) var<storage, read> tables: array<i32>;
${toHalf ? "" : "@group(0) @binding(7) var<storage, read> sinks: array<f32>;"}
var<workgroup> scores: array<f32, ${ATTN_TILE}>;
var<workgroup> rowBase: array<u32, ${ATTN_TILE}>;
${toHalf ? `${halfStoreWgsl(7)}
var<workgroup> headOut: array<f32, ${MAX_HEAD_DIM}>;` : ""}

@compute @workgroup_size(${WORKGROUP})
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
  let seq = wg.x / p.nHeads;
  let h = wg.x % p.nHeads;
  let i = wg.y;
  let queryStart = u32(seqInfo[4u * seq]);
  let queryCount = u32(seqInfo[4u * seq + 1u]);
  let contextLen = u32(seqInfo[4u * seq + 2u]);
  let table = u32(seqInfo[4u * seq + 3u]);
  if (i >= queryCount) { return; }
  let kvHead = h / (p.nHeads / p.nKvHeads);
  let keys = contextLen - queryCount + i + 1u;
  let qOff = (queryStart + i) * p.qStride + h * p.headDim;
  let headRows = kvHead * p.numBlocks;

  var acc: array<f32, ${PER_INVOCATION}>;
  for (var e = 0u; e < ${PER_INVOCATION}u; e++) { acc[e] = 0.0; }
  var m = 0.0; // the running max, set by the sink or the first tile
  var started = false;
  var l = 0.0;
  ${toHalf ? "" : `if (p.hasSinks != 0u) {
    m = sinks[h];
    started = true;
    l = 1.0;
  }`}
  // The query's first key (its window's) and that key's tile; in that tile, keys from lo on.
  let firstKey = select(0u, keys - min(keys, p.window), p.window > 0u);
  for (var tile = firstKey - firstKey % ${ATTN_TILE}u; tile < keys; tile += ${ATTN_TILE}u) {
    let n = min(${ATTN_TILE}u, keys - tile);
    let lo = select(0u, firstKey - tile, firstKey > tile);
    if (lid >= lo && lid < n) {
      let pos = tile + lid;
      let block = u32(tables[table + pos / p.blockSize]);
      let base = ((headRows + block) * p.blockSize + pos % p.blockSize) * p.rowStride;
      var s = 0.0;
      for (var c = 0u; c < p.headDim; c++) { s = s + q[qOff + c] * kAt(base, c); }
      scores[lid] = s * p.scale;
      rowBase[lid] = base;
    }
    workgroupBarrier();
    var tileMax = scores[lo];
    for (var j = lo + 1u; j < n; j++) { tileMax = max(tileMax, scores[j]); }
    // The first tile sets the max; later tiles rescale the sum and accumulator when it rises.
    let mNew = select(tileMax, max(m, tileMax), started);
    let rescale = started && mNew > m;
    let alpha = select(1.0, exp(m - mNew), rescale);
    if (rescale) { l = l * alpha; }
    var w: array<f32, ${ATTN_TILE}>;
    for (var j = lo; j < n; j++) {
      w[j] = exp(scores[j] - mNew);
      l = l + w[j];
    }
    for (var e = 0u; e < ${PER_INVOCATION}u; e++) {
      let c = lid + e * ${WORKGROUP}u;
      if (c < p.headDim) {
        var a = acc[e];
        if (rescale) { a = a * alpha; }
        for (var j = lo; j < n; j++) { a = a + w[j] * vAt(rowBase[j], c); }
        acc[e] = a;
      }
    }
    m = mNew;
    started = true;
    workgroupBarrier();
  }
  let inv = 1.0 / l;
  ${store}
}`;
}

export const ATTENTION_WGSL = attentionWgsl(false, "f32");
export const ATTENTION_HALF_WGSL = attentionWgsl(true, "f32");
