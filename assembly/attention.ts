// ============================================================================================
// Paged KV cache: writing new keys/values, and attention that walks block tables
// ============================================================================================
//
// The K and V arenas of one layer are [kvHead][block][blockSize] rows of rowBytes each (a row is
// one head's headDim values in the cache's element type: f32, f16 or q8_0, see kv-types.ts): the rows of one
// head in consecutive blocks are adjacent, so a sequence whose blocks were handed out in order
// (the common case) reads each head's keys as one stream, which the hardware prefetcher follows;
// with [block][kvHead] they came in 4 KiB pieces 48 KiB apart and decode attention ran at a
// quarter of the memory bandwidth. A sequence's block table lists its physical block ids in
// logical order: the token at position p lives in block table[p / blockSize], row p % blockSize.
//
// A batch describes each sequence with four i32 (SEQ_INFO_INTS):
//   queryStart   index of its first new token in the batch (rows of q and out)
//   queryCount   number of new tokens (1 for decode, a chunk for prefill)
//   contextLen   tokens in the cache once this step's keys are written (last position + 1)
//   blockTable   address of its i32 block table

import { exp4, expScalar } from "./math";
import { HALF_SCALE, KV_F16, KV_F32, halfRowScaled, kvRowToF32, storeKVRow } from "./kv-types";

export const SEQ_INFO_INTS: i32 = 4;
/**
 * Positions per step of the online softmax. Fixed, and independent of the KV block size, so the
 * rounding of attention (and therefore the output) is the same whatever block size the cache uses.
 */
export const ATTN_TILE: i32 = 16;

/**
 * Scatter this step's keys and values into their cache slots (slot = block * blockSize + row),
 * converted to the cache's element type on the way (storeKVRow).
 */
export function writeKV(
  kLayer: usize, vLayer: usize, k: usize, v: usize, slots: usize,
  T: i32, nKvHeads: i32, headDim: i32, blockSize: i32, numBlocks: i32, kvType: i32, rowBytes: i32,
): void {
  const kvDim = nKvHeads * headDim;
  for (let t = 0; t < T; t++) {
    const slot = load<i32>(slots + (<usize>t << 2));
    const block = slot / blockSize;
    const row = slot - block * blockSize;
    for (let h = 0; h < nKvHeads; h++) {
      const dst = <usize>((h * numBlocks + block) * blockSize + row) * <usize>rowBytes;
      const src = <usize>(t * kvDim + h * headDim) << 2;
      storeKVRow(kLayer + dst, k + src, headDim, kvType);
      storeKVRow(vLayer + dst, v + src, headDim, kvType);
    }
  }
}

@inline function hsum(v: v128): f32 {
  return (f32x4.extract_lane(v, 0) + f32x4.extract_lane(v, 1)) + (f32x4.extract_lane(v, 2) + f32x4.extract_lane(v, 3));
}

/** q · k over n floats in the canonical order: one f32x4 accumulator, fixed lane sum, scalar tail. */
@inline function dot(q: usize, k: usize, n: i32): f32 {
  const n4 = n & ~3;
  let acc = f32x4.splat(0);
  for (let j = 0; j < n4; j += 4) {
    const o = <usize>j << 2;
    acc = f32x4.add(acc, f32x4.mul(v128.load(q + o), v128.load(k + o)));
  }
  let s = hsum(acc);
  for (let j = n4; j < n; j++) s += load<f32>(q + (<usize>j << 2)) * load<f32>(k + (<usize>j << 2));
  return s;
}

/**
 * Scores of q against the tile's keys [0, n) (their row addresses in rows[]), scaled, into
 * scores[]; returns their max. Four keys at a time share each load of q; every score is still
 * computed in dot()'s order.
 */
@inline function tileScores(scores: usize, q: usize, rows: usize, n: i32, headDim: i32, scale: f32): f32 {
  const n4 = headDim & ~3;
  let blockMax: f32 = -Infinity;
  let j = 0;
  for (; j + 4 <= n; j += 4) {
    const r = rows + (<usize>j << 2);
    const k0 = <usize>load<i32>(r), k1 = <usize>load<i32>(r, 4), k2 = <usize>load<i32>(r, 8), k3 = <usize>load<i32>(r, 12);
    let a0 = f32x4.splat(0), a1 = f32x4.splat(0), a2 = f32x4.splat(0), a3 = f32x4.splat(0);
    for (let c = 0; c < n4; c += 4) {
      const o = <usize>c << 2;
      const qv = v128.load(q + o);
      a0 = f32x4.add(a0, f32x4.mul(qv, v128.load(k0 + o)));
      a1 = f32x4.add(a1, f32x4.mul(qv, v128.load(k1 + o)));
      a2 = f32x4.add(a2, f32x4.mul(qv, v128.load(k2 + o)));
      a3 = f32x4.add(a3, f32x4.mul(qv, v128.load(k3 + o)));
    }
    let s0 = hsum(a0), s1 = hsum(a1), s2 = hsum(a2), s3 = hsum(a3);
    for (let c = n4; c < headDim; c++) {
      const qc = load<f32>(q + (<usize>c << 2));
      const o = <usize>c << 2;
      s0 += qc * load<f32>(k0 + o);
      s1 += qc * load<f32>(k1 + o);
      s2 += qc * load<f32>(k2 + o);
      s3 += qc * load<f32>(k3 + o);
    }
    s0 *= scale; s1 *= scale; s2 *= scale; s3 *= scale;
    const out = scores + (<usize>j << 2);
    store<f32>(out, s0);
    store<f32>(out, s1, 4);
    store<f32>(out, s2, 8);
    store<f32>(out, s3, 12);
    blockMax = max(blockMax, max(max(s0, s1), max(s2, s3)));
  }
  for (; j < n; j++) {
    const s = dot(q, <usize>load<i32>(rows + (<usize>j << 2)), headDim) * scale;
    store<f32>(scores + (<usize>j << 2), s);
    blockMax = max(blockMax, s);
  }
  return blockMax;
}

/** p[j] = exp(scores[j] - m) in place for j < n; four at a time, same values as one at a time. */
@inline function expShifted(scores: usize, n: i32, m: f32): void {
  const mv = f32x4.splat(m);
  let j = 0;
  for (; j + 4 <= n; j += 4) {
    const p = scores + (<usize>j << 2);
    v128.store(p, exp4(f32x4.sub(v128.load(p), mv)));
  }
  for (; j < n; j++) {
    const p = scores + (<usize>j << 2);
    store<f32>(p, expScalar(load<f32>(p) - m));
  }
}

/** acc[0..n) *= s. */
@inline function scaleRow(acc: usize, s: f32, n: i32): void {
  const n4 = n & ~3;
  const sv = f32x4.splat(s);
  for (let j = 0; j < n4; j += 4) v128.store(acc + (<usize>j << 2), f32x4.mul(v128.load(acc + (<usize>j << 2)), sv));
  for (let j = n4; j < n; j++) store<f32>(acc + (<usize>j << 2), load<f32>(acc + (<usize>j << 2)) * s);
}

/**
 * acc[0..headDim) = acc * alpha (when rescale) + sum over j < n of p[j] * v[j], the adds in j
 * order for every element; value row j is at rows[j] + vOffset. Sixteen columns at a time stay in
 * registers across all the tile's keys, so acc is loaded and stored once per tile, not per key.
 */
@inline function accumulateValues(acc: usize, p: usize, rows: usize, vOffset: usize, n: i32, headDim: i32, rescale: bool, alpha: f32): void {
  const av = f32x4.splat(alpha);
  let c = 0;
  for (; c + 16 <= headDim; c += 16) {
    const a = acc + (<usize>c << 2);
    let a0 = v128.load(a), a1 = v128.load(a, 16), a2 = v128.load(a, 32), a3 = v128.load(a, 48);
    if (rescale) {
      a0 = f32x4.mul(a0, av); a1 = f32x4.mul(a1, av); a2 = f32x4.mul(a2, av); a3 = f32x4.mul(a3, av);
    }
    const col = vOffset + (<usize>c << 2);
    for (let j = 0; j < n; j++) {
      const pj = v128.load32_splat(p + (<usize>j << 2));
      const vr = <usize>load<i32>(rows + (<usize>j << 2)) + col;
      a0 = f32x4.add(a0, f32x4.mul(pj, v128.load(vr)));
      a1 = f32x4.add(a1, f32x4.mul(pj, v128.load(vr, 16)));
      a2 = f32x4.add(a2, f32x4.mul(pj, v128.load(vr, 32)));
      a3 = f32x4.add(a3, f32x4.mul(pj, v128.load(vr, 48)));
    }
    v128.store(a, a0); v128.store(a, a1, 16); v128.store(a, a2, 32); v128.store(a, a3, 48);
  }
  for (; c + 4 <= headDim; c += 4) {
    const a = acc + (<usize>c << 2);
    let a0 = v128.load(a);
    if (rescale) a0 = f32x4.mul(a0, av);
    const col = vOffset + (<usize>c << 2);
    for (let j = 0; j < n; j++) {
      const vr = <usize>load<i32>(rows + (<usize>j << 2)) + col;
      a0 = f32x4.add(a0, f32x4.mul(v128.load32_splat(p + (<usize>j << 2)), v128.load(vr)));
    }
    v128.store(a, a0);
  }
  for (; c < headDim; c++) {
    const a = acc + (<usize>c << 2);
    let a0 = load<f32>(a);
    if (rescale) a0 *= alpha;
    const col = vOffset + (<usize>c << 2);
    for (let j = 0; j < n; j++) a0 += load<f32>(p + (<usize>j << 2)) * load<f32>(<usize>load<i32>(rows + (<usize>j << 2)) + col);
    store<f32>(a, a0);
  }
}

/**
 * One step of the online softmax for one (query, head): the tile's keys [0, n). state holds the
 * running max m and the running sum l; acc (the output row) the unnormalised weighted sum of
 * values.
 */
@inline function onlineTile(
  acc: usize, state: usize, q: usize, rows: usize, vOffset: usize, n: i32, headDim: i32, scale: f32, scores: usize, valueScale: f32,
): void {
  const tileMax = tileScores(scores, q, rows, n, headDim, scale);
  const mOld = load<f32>(state);
  const mNew = max(mOld, tileMax);
  let l = load<f32>(state, 4);
  // When the max rises, the sum and the accumulator are rescaled by exp(m_old - m_new) first;
  // exp(-inf) = 0 on the first tile, so the empty accumulator stays zero.
  const rescale = mNew > mOld;
  const alpha = rescale ? expScalar(mOld - mNew) : <f32>1;
  if (rescale) l *= alpha;
  expShifted(scores, n, mNew);
  for (let j = 0; j < n; j++) l += load<f32>(scores + (<usize>j << 2));
  // Values stored scaled by 1 / valueScale (halfRowScaled): the weights take valueScale, so every
  // product p * v is the same real number, the same f32.
  if (valueScale != 1) scaleRow(scores, valueScale, n);
  accumulateValues(acc, scores, rows, vOffset, n, headDim, rescale, alpha);
  store<f32>(state, mNew);
  store<f32>(state, l, 4);
}

/**
 * Addresses of the K rows of positions [start, end) into rows[], walked with a (block, row)
 * cursor: one division per tile, not two per position.
 */
@inline function tileRows(
  rows: usize, table: usize, headRows: usize, start: i32, end: i32, blockSize: i32, blockBytes: usize, rowBytes: usize,
): void {
  let logical = start / blockSize;
  let row = start - logical * blockSize;
  let rowAddr = headRows + <usize>load<i32>(table + (<usize>logical << 2)) * blockBytes + <usize>row * rowBytes;
  for (let j = 0; j < end - start; j++) {
    store<i32>(rows + (<usize>j << 2), <i32>rowAddr);
    rowAddr += rowBytes;
    if (++row == blockSize) {
      row = 0;
      logical++;
      if (start + j + 1 < end) rowAddr = headRows + <usize>load<i32>(table + (<usize>logical << 2)) * blockBytes;
    }
  }
}

/** Loads kept alive by touchRows (a global store is a side effect the compiler must keep). */
let touchSink: i32 = 0;

/** Read one word of every 64-byte line of n K rows and their V rows, to start fetching them. */
@inline function touchRows(rows: usize, n: i32, rowBytes: usize, vOffset: usize): void {
  let s = 0;
  for (let j = 0; j < n; j++) {
    const k = <usize>load<i32>(rows + (<usize>j << 2));
    for (let o: usize = 0; o < rowBytes; o += 64) s |= load<i32>(k + o) | load<i32>(k + vOffset + o);
  }
  touchSink |= s;
}

/** Byte offset of head h of batch row t in a [T][qStride] array. */
@inline function headOffset(t: i32, h: i32, qStride: i32, headDim: i32): usize {
  return <usize>(t * qStride + h * headDim) << 2;
}

/**
 * The n K rows at rows[] and their V rows (vOffset after each) widened to f32 into the tile
 * buffer (kTile, and vTile = kTile + vTileOffset), once per tile: every query of the chunk and every
 * query head of the group then reads the tile from L1 as f32 (exact, so the bits are those of
 * converting in registers, without converting once per query head).
 */
@inline function widenTile(
  kTile: usize, vTileOffset: usize, rows: usize, n: i32, vOffset: usize, headDim: i32, kvType: i32, scaledHalves: bool,
): void {
  const headBytes = <usize>headDim << 2;
  for (let j = 0; j < n; j++) {
    const k = <usize>load<i32>(rows + (<usize>j << 2));
    const dst = kTile + <usize>j * headBytes;
    if (scaledHalves) {
      halfRowScaled(dst, k, headDim);
      halfRowScaled(dst + vTileOffset, k + vOffset, headDim);
    } else {
      kvRowToF32(dst, k, headDim, kvType);
      kvRowToF32(dst + vTileOffset, k + vOffset, headDim, kvType);
    }
  }
}

/** Largest |q| below which q * 2^112 is finite with room to spare (the fast f16 path's bound). */
const SCALED_QUERY_LIMIT: f32 = 32768;

/** Whether every query row of the item is below SCALED_QUERY_LIMIT in magnitude. */
@inline function queriesScalable(q: usize, queryStart: i32, queryCount: i32, kvHead: i32, group: i32, qStride: i32, headDim: i32): bool {
  let m: f32 = 0;
  for (let i = 0; i < queryCount; i++) {
    for (let g = 0; g < group; g++) {
      const row = q + headOffset(queryStart + i, kvHead * group + g, qStride, headDim);
      for (let c = 0; c < headDim; c++) m = max(m, Mathf.abs(load<f32>(row + (<usize>c << 2))));
    }
  }
  return m < SCALED_QUERY_LIMIT; // false for NaN too
}

/** The item's query rows times s in place (2^112, then 2^-112 back: both exact below the limit). */
@inline function scaleQueries(q: usize, queryStart: i32, queryCount: i32, kvHead: i32, group: i32, qStride: i32, headDim: i32, s: f32): void {
  for (let i = 0; i < queryCount; i++) {
    for (let g = 0; g < group; g++) scaleRow(q + headOffset(queryStart + i, kvHead * group + g, qStride, headDim), s, headDim);
  }
}

/**
 * Attention for every new token of every sequence in the batch, with the causal mask: the token
 * at position p sees keys 0..p, which includes the earlier tokens of its own chunk (their keys
 * were written by writeKV before this call). Query head h reads kv head h / (nHeads / nKvHeads).
 *
 * Work items are (sequence, kv head) pairs, item = seq * nKvHeads + kvHead; a thread computes
 * items [itemStart, itemEnd) and every output element is computed by exactly one item. Within an
 * item, tiles of ATTN_TILE positions are the outer loop and the chunk's queries the inner one, so
 * the tile's K/V rows are read from memory once for the whole chunk. Each (query, head) sees the
 * tiles in order with the same arithmetic, whatever chunk it came in, whatever other sequences
 * share the step and whatever the block size: its result is always the same bits.
 *
 * The cache holds rows of rowBytes in kvType (kv-types.ts). An f32 cache is read in place; an f16
 * or q8_0 one is widened tile by tile into f32 (widenTile), so the result is exactly f32 attention
 * over the cache's values. f16 rows are widened without their 2^112 rebias (halfRowScaled, half the
 * work), the item's query rows and each tile's softmax weights carrying the 2^112 instead: every
 * product q * k and p * v is then the same real number as over the rebiased values, the same f32.
 * (Queries of 32768 or more, which would overflow, take the full widening; q is scaled in place
 * and restored exactly, its rows being this item's alone.)
 *
 * q and out are [T][qStride] floats. scratch (per thread, src/backend/kernels.ts
 * attentionScratchBytes): ATTN_TILE floats of scores, three arrays of ATTN_TILE i32 row addresses
 * (this tile, the next, the widened tile), the widened K and V tiles (ATTN_TILE x headDim f32
 * each), then (m, l) pairs for queryCount * (nHeads / nKvHeads) rows.
 */
export function pagedAttention(
  out: usize, q: usize, kLayer: usize, vLayer: usize, seqInfo: usize,
  nHeads: i32, nKvHeads: i32, headDim: i32, blockSize: i32, numBlocks: i32, qStride: i32, kvType: i32, rowBytes: i32,
  scratch: usize, itemStart: i32, itemEnd: i32,
): void {
  const group = nHeads / nKvHeads;
  const headBytes = <usize>headDim << 2;
  const blockBytes = <usize>blockSize * <usize>rowBytes;
  const vOffset = vLayer - kLayer;
  const scale: f32 = 1.0 / Mathf.sqrt(<f32>headDim);
  const scores = scratch;
  const rowsA = scratch + (<usize>ATTN_TILE << 2);
  const rowsB = rowsA + (<usize>ATTN_TILE << 2);
  const wideRows = rowsB + (<usize>ATTN_TILE << 2);
  const kTile = wideRows + (<usize>ATTN_TILE << 2);
  const vTileOffset = <usize>ATTN_TILE * headBytes;
  const states = kTile + 2 * vTileOffset;
  const widen = kvType != KV_F32;
  for (let j = 0; j < ATTN_TILE; j++) store<i32>(wideRows + (<usize>j << 2), <i32>(kTile + <usize>j * headBytes));
  for (let item = itemStart; item < itemEnd; item++) {
    const seq = item / nKvHeads;
    const kvHead = item - seq * nKvHeads;
    const info = seqInfo + (<usize>(seq * SEQ_INFO_INTS) << 2);
    const queryStart = load<i32>(info);
    const queryCount = load<i32>(info, 4);
    const contextLen = load<i32>(info, 8);
    const table = <usize>load<i32>(info, 12);
    const firstPos = contextLen - queryCount;
    const headRows = kLayer + <usize>(kvHead * numBlocks) * blockBytes;
    const scaledHalves = kvType == KV_F16 && queriesScalable(q, queryStart, queryCount, kvHead, group, qStride, headDim);
    const valueScale: f32 = scaledHalves ? HALF_SCALE : 1;
    if (scaledHalves) scaleQueries(q, queryStart, queryCount, kvHead, group, qStride, headDim, HALF_SCALE);

    for (let i = 0; i < queryCount; i++) {
      for (let g = 0; g < group; g++) {
        memory.fill(out + headOffset(queryStart + i, kvHead * group + g, qStride, headDim), 0, headBytes);
        const state = states + (<usize>(i * group + g) << 3);
        store<f32>(state, -Infinity);
        store<f32>(state, 0, 4);
      }
    }
    // The tiles' K-row addresses, double-buffered: while a tile is computed, the next tile's K and
    // V lines are already requested (touchRows), so the loads of a cold cache overlap the
    // arithmetic instead of each tile waiting for memory in turn.
    let rows = rowsA;
    let nextRows = rowsB;
    tileRows(rows, table, headRows, 0, min(contextLen, ATTN_TILE), blockSize, blockBytes, rowBytes);
    for (let tileStart = 0; tileStart < contextLen; tileStart += ATTN_TILE) {
      const nextStart = tileStart + ATTN_TILE;
      if (nextStart < contextLen) {
        const nextEnd = min(contextLen, nextStart + ATTN_TILE);
        tileRows(nextRows, table, headRows, nextStart, nextEnd, blockSize, blockBytes, rowBytes);
        touchRows(nextRows, nextEnd - nextStart, rowBytes, vOffset);
      }
      let keyRows = rows;
      let valueOffset = vOffset;
      if (widen) {
        widenTile(kTile, vTileOffset, rows, min(ATTN_TILE, contextLen - tileStart), vOffset, headDim, kvType, scaledHalves);
        keyRows = wideRows;
        valueOffset = vTileOffset;
      }
      for (let i = max(0, tileStart - firstPos); i < queryCount; i++) {
        const n = min(ATTN_TILE, firstPos + i + 1 - tileStart);
        for (let g = 0; g < group; g++) {
          const off = headOffset(queryStart + i, kvHead * group + g, qStride, headDim);
          onlineTile(out + off, states + (<usize>(i * group + g) << 3), q + off, keyRows, valueOffset, n, headDim, scale, scores, valueScale);
        }
      }
      const done = rows;
      rows = nextRows;
      nextRows = done;
    }
    if (scaledHalves) scaleQueries(q, queryStart, queryCount, kvHead, group, qStride, headDim, <f32>1 / HALF_SCALE);
    for (let i = 0; i < queryCount; i++) {
      for (let g = 0; g < group; g++) {
        const inv: f32 = 1.0 / load<f32>(states + (<usize>(i * group + g) << 3), 4);
        scaleRow(out + headOffset(queryStart + i, kvHead * group + g, qStride, headDim), inv, headDim);
      }
    }
  }
}
