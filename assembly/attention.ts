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
//   queryCount   number of new tokens (1 for decode, a chunk for prefill); negative, -n: n tokens
//                that attend in both directions among themselves (an image's tokens in Gemma 3):
//                each sees every key up to contextLen, not only those up to its own position
//   contextLen   tokens in the cache once this step's keys are written (last position + 1)
//   blockTable   address of its i32 block table

import { ATTN_TILE, HEAD_BATCH, scaleRow, tileStep } from "./attention-tile";
import { HALF_SCALE, KV_F16, KV_F32, halfRowScaled, kvRowToF32, storeKVRow } from "./kv-types";

export const SEQ_INFO_INTS: i32 = 4;

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

/**
 * Whether the n rows at rows[] continue the stream that ended at row address `last`, one row after
 * another: then the hardware prefetcher is already fetching them, and touching them only adds
 * loads that wait for memory (measured: decode attention over blocks handed out in order took
 * 15-25% longer with every tile touched; over shuffled blocks 20% less).
 */
@inline function continuesStream(rows: usize, n: i32, last: usize, rowBytes: usize): bool {
  let expected = last + rowBytes;
  for (let j = 0; j < n; j++) {
    if (<usize>load<i32>(rows + (<usize>j << 2)) != expected) return false;
    expected += rowBytes;
  }
  return true;
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
 * were written by writeKV before this call), or with a sliding window (`window` > 0: gemma3's and
 * gpt-oss's local layers) keys p - window + 1..p, itself included. Query head h reads kv head
 * h / (nHeads / nKvHeads). Scores are q · k times `scale` (1/sqrt(headDim) for most models).
 * With `sinks` (an address of nHeads f32, gpt-oss's attention sinks; 0: none) each query head's
 * softmax has one more logit, its sink, that takes weight and gives no value: the online softmax
 * starts from it (max = sink, sum = 1) instead of from nothing (max = -inf, sum = 0).
 *
 * A windowed query reads no key, and no block-table entry, before its window: the blocks a
 * sliding-window KV group frees as they fall out of the window may hold anything. It visits the
 * same 16-position tiles as without a window, from the one holding its window's first key, and in
 * that tile only the keys from there on, so its bits do not depend on the chunk either.
 *
 * A record of -n queries (bidirectional) is the same but for the causal limit: each of its
 * queries sees the keys up to contextLen (the later ones of the record included), still from its
 * own window's first key; a prompt holding one is described as several records (the tokens before,
 * the bidirectional span, the tokens after), each causal but the span.
 *
 * Work items are (sequence, kv head) pairs, item = seq * nKvHeads + kvHead; a thread computes
 * items [itemStart, itemEnd) and every output element is computed by exactly one item. Within an
 * item, tiles of ATTN_TILE positions are the outer loop and the chunk's queries the inner one, so
 * the tile's K/V rows are read from memory once for the whole chunk; for each query the group's
 * heads go through the tile HEAD_BATCH at a time (attention-tile.ts tileStep). Each (query, head)
 * sees the tiles in order with the same arithmetic, whatever chunk it came in, whatever other
 * sequences share the step and whatever the block size: its result is always the same bits.
 *
 * The cache holds rows of rowBytes in kvType (kv-types.ts); the result is exactly f32 attention
 * over the cache's values. An f32 cache is read in place. f16 rows are read as value * 2^-112
 * (halfRowScaled's bits, two integer operations per value, no rebias), the item's query rows and
 * each tile's softmax weights carrying the 2^112 instead: every product q * k and p * v is then the
 * same real number as over the rebiased values, the same f32. A decode step (one query) reads them
 * in place, converting in registers once per batch of heads; a chunk of queries widens each tile
 * once into f32 (widenTile) for all its queries. q8_0 rows, and f16 ones under queries of 32768 or
 * more (which would overflow at 2^112), are widened exactly. q is scaled in place and restored
 * exactly, its rows being this item's alone.
 *
 * q and out are [T][qStride] floats. scratch (per thread, src/backend/wasm/kernels.ts
 * attentionScratchBytes): HEAD_BATCH x ATTN_TILE floats of scores and HEAD_BATCH rescale factors,
 * three arrays of ATTN_TILE i32 row addresses (this tile, the next, the widened tile), the widened K
 * and V tiles (ATTN_TILE x headDim f32 each), then (m, l) pairs for queryCount * (nHeads / nKvHeads)
 * rows.
 */
export function pagedAttention(
  out: usize, q: usize, kLayer: usize, vLayer: usize, seqInfo: usize,
  nHeads: i32, nKvHeads: i32, headDim: i32, blockSize: i32, numBlocks: i32, qStride: i32, kvType: i32, rowBytes: i32,
  scale: f32, window: i32, sinks: usize, scratch: usize, itemStart: i32, itemEnd: i32,
): void {
  const group = nHeads / nKvHeads;
  const headBytes = <usize>headDim << 2;
  const blockBytes = <usize>blockSize * <usize>rowBytes;
  const vOffset = vLayer - kLayer;
  const scores = scratch;
  const alphas = scores + (<usize>(HEAD_BATCH * ATTN_TILE) << 2);
  const rowsA = alphas + (<usize>HEAD_BATCH << 2);
  const rowsB = rowsA + (<usize>ATTN_TILE << 2);
  const wideRows = rowsB + (<usize>ATTN_TILE << 2);
  const kTile = wideRows + (<usize>ATTN_TILE << 2);
  const vTileOffset = <usize>ATTN_TILE * headBytes;
  const states = kTile + 2 * vTileOffset;
  for (let j = 0; j < ATTN_TILE; j++) store<i32>(wideRows + (<usize>j << 2), <i32>(kTile + <usize>j * headBytes));
  for (let item = itemStart; item < itemEnd; item++) {
    const seq = item / nKvHeads;
    const kvHead = item - seq * nKvHeads;
    const info = seqInfo + (<usize>(seq * SEQ_INFO_INTS) << 2);
    const queryStart = load<i32>(info);
    const countField = load<i32>(info, 4);
    const bidirectional = countField < 0;
    const queryCount = bidirectional ? -countField : countField;
    const contextLen = load<i32>(info, 8);
    const table = <usize>load<i32>(info, 12);
    const firstPos = contextLen - queryCount;
    const headRows = kLayer + <usize>(kvHead * numBlocks) * blockBytes;
    const scaledHalves = kvType == KV_F16 && queriesScalable(q, queryStart, queryCount, kvHead, group, qStride, headDim);
    const valueScale: f32 = scaledHalves ? HALF_SCALE : 1;
    if (scaledHalves) scaleQueries(q, queryStart, queryCount, kvHead, group, qStride, headDim, HALF_SCALE);
    const halvesInPlace = scaledHalves && queryCount == 1;
    const widen = kvType != KV_F32 && !halvesInPlace;

    for (let i = 0; i < queryCount; i++) {
      for (let g = 0; g < group; g++) {
        memory.fill(out + headOffset(queryStart + i, kvHead * group + g, qStride, headDim), 0, headBytes);
        const state = states + (<usize>(i * group + g) << 3);
        store<f32>(state, sinks != 0 ? load<f32>(sinks + (<usize>(kvHead * group + g) << 2)) : -Infinity);
        store<f32>(state, sinks != 0 ? 1 : 0, 4);
      }
    }
    // The tiles' K-row addresses, double-buffered: while a tile is computed, the next tile's K and
    // V lines are already requested (touchRows) when they do not simply continue this tile's rows
    // (a new, non-adjacent block), so the loads of a cold cache overlap the arithmetic instead of
    // each tile waiting for memory in turn.
    // The first key any query of the chunk sees (its first query's window start), and its tile:
    // rows before it are neither addressed nor read.
    const firstKey = window > 0 ? max(0, firstPos - window + 1) : 0;
    const firstTile = firstKey - firstKey % ATTN_TILE;
    let rows = rowsA;
    let nextRows = rowsB;
    const skipped = firstKey - firstTile;
    tileRows(rows + (<usize>skipped << 2), table, headRows, firstKey, min(contextLen, firstTile + ATTN_TILE), blockSize, blockBytes, rowBytes);
    for (let tileStart = firstTile; tileStart < contextLen; tileStart += ATTN_TILE) {
      const nextStart = tileStart + ATTN_TILE;
      if (nextStart < contextLen) {
        const nextEnd = min(contextLen, nextStart + ATTN_TILE);
        tileRows(nextRows, table, headRows, nextStart, nextEnd, blockSize, blockBytes, rowBytes);
        const lastRow = <usize>load<i32>(rows + (<usize>(ATTN_TILE - 1) << 2));
        if (!continuesStream(nextRows, nextEnd - nextStart, lastRow, rowBytes)) touchRows(nextRows, nextEnd - nextStart, rowBytes, vOffset);
      }
      // Rows of this tile before firstKey (the first tile only) were not filled in.
      const from = max(0, firstKey - tileStart);
      let keyRows = rows;
      let valueOffset = vOffset;
      if (widen) {
        const n = min(ATTN_TILE, contextLen - tileStart) - from;
        widenTile(kTile + <usize>from * headBytes, vTileOffset, rows + (<usize>from << 2), n, vOffset, headDim, kvType, scaledHalves);
        keyRows = wideRows;
        valueOffset = vTileOffset;
      }
      // Queries at or after the tile's start (any, when bidirectional) whose window reaches into it.
      const lastQuery = window > 0 ? min(queryCount, tileStart + ATTN_TILE - 1 + window - firstPos) : queryCount;
      for (let i = bidirectional ? 0 : max(0, tileStart - firstPos); i < lastQuery; i++) {
        const pos = firstPos + i;
        const lo = window > 0 ? max(tileStart, pos - window + 1) - tileStart : 0;
        const n = min(ATTN_TILE, (bidirectional ? contextLen : pos + 1) - tileStart) - lo;
        const tileKeys = keyRows + (<usize>lo << 2);
        for (let g = 0; g < group; g += HEAD_BATCH) {
          const off = headOffset(queryStart + i, kvHead * group + g, qStride, headDim);
          const state = states + (<usize>(i * group + g) << 3);
          tileStep(out + off, state, q + off, headBytes, tileKeys, valueOffset, n, headDim, scale, scores, alphas, valueScale, min(HEAD_BATCH, group - g), halvesInPlace);
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
