// ============================================================================================
// f32 matrix products over weights packed in 4-row panels
// ============================================================================================
//
// A weight matrix W[n][d] (out = W·x, one output per row) is stored packed:
//
//   panel p (rows 4p..4p+3), for p < n/4:
//     chunk c = 0 .. d/4-1 :  [row 4p+0: W[.][4c..4c+3]] [row 4p+1: ...] [row 4p+2] [row 4p+3]   (64 bytes)
//     column tail          :  [row 4p+0: W[.][d4..d-1]] [row 4p+1] [row 4p+2] [row 4p+3]       (4*(d%4) floats)
//   remainder rows 4*(n/4) .. n-1: plain row-major, d floats each.
//
// Why: a matrix-vector product that walks four rows at once then reads one sequential stream,
// which streams at the machine's memory bandwidth, while four row-major streams reach about half
// of it (measured: 27.5 GB/s vs 12 GB/s on a 440 MB model under Bun).
//
// Determinism: every output element is reduced in exactly one order, whatever the tile shape,
// the number of tokens in the batch or the rows a thread was given:
//   acc (f32x4) = sum over chunks c, in order, of w[4c..4c+3] * x[4c..4c+3]   (mul, then add)
//   s = (acc0 + acc1) + (acc2 + acc3)
//   s = s + w[j] * x[j] for each tail column j in order
// The 1-token path, the k-blocked token-pair path and the remainder-row path all follow it, so a
// token's result never depends on what else is in the batch.

@inline function hsum(v: v128): f32 {
  return (f32x4.extract_lane(v, 0) + f32x4.extract_lane(v, 1)) + (f32x4.extract_lane(v, 2) + f32x4.extract_lane(v, 3));
}

/** Bytes of one packed panel of 4 rows of width d. */
@inline function panelBytes(d: i32): usize {
  return <usize>d << 4;
}

/** Rearrange a row-major matrix src[rows][d] into packed layout at dst. rows is the full n. */
export function packF32(dst: usize, src: usize, n: i32, d: i32): void {
  const d4 = d & ~3;
  const dt = d - d4;
  const rowBytes = <usize>d << 2;
  const panels = n >> 2;
  for (let p = 0; p < panels; p++) {
    const panel = dst + <usize>p * panelBytes(d);
    const r0 = src + <usize>(p << 2) * rowBytes;
    for (let c = 0; c < d4; c += 4) {
      const o = panel + (<usize>c << 4);
      const s = <usize>c << 2;
      v128.store(o, v128.load(r0 + s));
      v128.store(o, v128.load(r0 + rowBytes + s), 16);
      v128.store(o, v128.load(r0 + 2 * rowBytes + s), 32);
      v128.store(o, v128.load(r0 + 3 * rowBytes + s), 48);
    }
    const tail = panel + (<usize>d4 << 4);
    for (let r = 0; r < 4; r++) {
      for (let j = 0; j < dt; j++) {
        store<f32>(tail + (<usize>(r * dt + j) << 2), load<f32>(r0 + <usize>r * rowBytes + (<usize>(d4 + j) << 2)));
      }
    }
  }
  const rest = <usize>(panels << 2) * rowBytes;
  memory.copy(dst + rest, src + rest, <usize>(n - (panels << 2)) * rowBytes);
}

/** Copy row r of a packed matrix W[n][d] into out[d] (the embedding lookup of a packed table). */
export function unpackRowF32(out: usize, w: usize, n: i32, d: i32, r: i32): void {
  const panels = n >> 2;
  if (r >= panels << 2) {
    memory.copy(out, w + <usize>r * (<usize>d << 2), <usize>d << 2);
    return;
  }
  const d4 = d & ~3;
  const dt = d - d4;
  const lane = <usize>(r & 3);
  const panel = w + <usize>(r >> 2) * panelBytes(d);
  for (let c = 0; c < d4; c += 4) {
    v128.store(out + (<usize>c << 2), v128.load(panel + (<usize>c << 4) + (lane << 4)));
  }
  const tail = panel + (<usize>d4 << 4) + lane * (<usize>dt << 2);
  for (let j = 0; j < dt; j++) store<f32>(out + (<usize>(d4 + j) << 2), load<f32>(tail + (<usize>j << 2)));
}

/** Embedding lookup for a batch: out[t][d] = row tokens[t] of the packed table. */
export function embedF32(out: usize, w: usize, tokens: usize, T: i32, n: i32, d: i32): void {
  for (let t = 0; t < T; t++) {
    unpackRowF32(out + <usize>t * (<usize>d << 2), w, n, d, load<i32>(tokens + (<usize>t << 2)));
  }
}

/** Tokens whose partial sums a k-blocked pass keeps in the per-thread scratch. */
const TOKEN_BLOCK: i32 = 16;
/**
 * k-blocks end where the panel's address crosses a multiple of this (128 columns of 4 rows).
 * Aligned by address, not counted from the panel start: a block that straddles a 4 KiB page makes
 * the hardware prefetcher start over mid-block. Counted from the panel start, matrices placed at
 * other offsets ran at 26-30 instead of 33 GFLOP/s (16 tokens, weights beyond the cache, one core).
 */
const K_BLOCK_BYTES: usize = 2048;

/** Bytes of per-thread scratch matmulF32 needs: 4 rows x f32x4 partial sums per token of a block. */
export function matmulScratchBytes(): i32 {
  return TOKEN_BLOCK << 6;
}

/**
 * out[t][i] = W[i] · x[t] for t in [0, T) and rows i in [rowStart, rowEnd).
 * x is [T][d] with rows of d floats; out rows are outStride floats apart; acc is this thread's
 * matmulScratchBytes() of scratch.
 * rowStart must be a multiple of 4 (a panel boundary) unless it lies in the remainder rows;
 * the thread pool splits work on panel boundaries.
 *
 * One token streams each panel once (panelTile1). Several tokens go through a panel k-block by
 * k-block, every token pair per k-block (panelBlock): the first pair pulls the block's (up to) 2 KiB
 * from memory and the other pairs reuse it from L1, so memory is read a little at a time all
 * through the arithmetic, where the hardware prefetcher keeps ahead of it. Looping token pairs
 * over the whole 12 KiB panel instead read it in one burst and then left memory idle: 17 against
 * 30 GFLOP/s at 4 tokens with weights beyond the cache, on one core.
 */
export function matmulF32(
  out: usize, x: usize, w: usize, T: i32, n: i32, d: i32, outStride: i32, acc: usize, rowStart: i32, rowEnd: i32,
): void {
  const packedRows = (n >> 2) << 2;
  const panelEnd = min(rowEnd, packedRows);
  for (let i = rowStart; i < panelEnd; i += 4) {
    const panel = w + <usize>(i >> 2) * panelBytes(d);
    if (T == 1) {
      panelTile1(out, x, panel, i, d);
      continue;
    }
    for (let t = 0; t < T; t += TOKEN_BLOCK) panelBlock(out, x, panel, acc, t, min(T, t + TOKEN_BLOCK), i, d, outStride);
  }
  for (let i = max(rowStart, packedRows); i < rowEnd; i++) {
    const row = w + <usize>i * (<usize>d << 2);
    for (let t = 0; t < T; t++) {
      const xt = x + <usize>t * (<usize>d << 2);
      store<f32>(out + (<usize>(t * outStride + i) << 2), rowDot(row, xt, d));
    }
  }
}

/** One remainder row against one token, in the canonical order. */
@inline function rowDot(row: usize, x: usize, d: i32): f32 {
  const d4 = d & ~3;
  let acc = f32x4.splat(0);
  for (let c = 0; c < d4; c += 4) {
    const o = <usize>c << 2;
    acc = f32x4.add(acc, f32x4.mul(v128.load(row + o), v128.load(x + o)));
  }
  let s = hsum(acc);
  for (let j = d4; j < d; j++) s += load<f32>(row + (<usize>j << 2)) * load<f32>(x + (<usize>j << 2));
  return s;
}

/** The column tail of one panel row r against token x: s += w[j] * x[j] in order. */
@inline function tailDot(s: f32, panel: usize, x: usize, d: i32, r: i32): f32 {
  const d4 = d & ~3;
  const dt = d - d4;
  const tail = panel + (<usize>d4 << 4) + (<usize>(r * dt) << 2);
  for (let j = 0; j < dt; j++) s += load<f32>(tail + (<usize>j << 2)) * load<f32>(x + (<usize>(d4 + j) << 2));
  return s;
}

/** 4 rows of one panel against the one token x: a single sequential read of the panel. */
@inline function panelTile1(out: usize, x: usize, panel: usize, i: i32, d: i32): void {
  const end = x + (<usize>(d & ~3) << 2);
  let a0 = f32x4.splat(0), a1 = f32x4.splat(0), a2 = f32x4.splat(0), a3 = f32x4.splat(0);
  let p = panel;
  for (let xp = x; xp < end; xp += 16, p += 64) {
    const xv = v128.load(xp);
    a0 = f32x4.add(a0, f32x4.mul(v128.load(p), xv));
    a1 = f32x4.add(a1, f32x4.mul(v128.load(p, 16), xv));
    a2 = f32x4.add(a2, f32x4.mul(v128.load(p, 32), xv));
    a3 = f32x4.add(a3, f32x4.mul(v128.load(p, 48), xv));
  }
  const o = out + (<usize>i << 2);
  store<f32>(o, tailDot(hsum(a0), panel, x, d, 0));
  store<f32>(o, tailDot(hsum(a1), panel, x, d, 1), 4);
  store<f32>(o, tailDot(hsum(a2), panel, x, d, 2), 8);
  store<f32>(o, tailDot(hsum(a3), panel, x, d, 3), 12);
}

/**
 * 4 rows of one panel against tokens [tStart, tEnd) (at most TOKEN_BLOCK), k-block by k-block.
 * acc holds each token's four f32x4 sums between k-blocks (64 bytes per token), starting from
 * zero, so every lane still adds its chunks in order from 0, as panelTile1 does.
 */
function panelBlock(
  out: usize, x: usize, panel: usize, acc: usize, tStart: i32, tEnd: i32, i: i32, d: i32, outStride: i32,
): void {
  const d4 = d & ~3;
  const rowBytes = <usize>d << 2;
  memory.fill(acc, 0, <usize>(tEnd - tStart) << 6);
  for (let kb = 0; kb < d4; ) {
    const w = panel + (<usize>kb << 4);
    // Whole 4-column chunks up to the next boundary; at least one, for a misaligned matrix.
    const chunksToBoundary = <i32>((K_BLOCK_BYTES - (w & (K_BLOCK_BYTES - 1))) >> 6);
    const kEnd = min(d4, kb + (max(chunksToBoundary, 1) << 2));
    const bytes = <usize>(kEnd - kb) << 2;
    let t = tStart;
    for (; t + 2 <= tEnd; t += 2) {
      const x0 = x + <usize>t * rowBytes + (<usize>kb << 2);
      kBlock2(acc + (<usize>(t - tStart) << 6), w, x0, x0 + rowBytes, bytes);
    }
    if (t < tEnd) kBlock1(acc + (<usize>(t - tStart) << 6), w, x + <usize>t * rowBytes + (<usize>kb << 2), bytes);
    kb = kEnd;
  }
  for (let t = tStart; t < tEnd; t++) {
    const a = acc + (<usize>(t - tStart) << 6);
    const xt = x + <usize>t * rowBytes;
    const o = out + (<usize>(t * outStride + i) << 2);
    store<f32>(o, tailDot(hsum(v128.load(a)), panel, xt, d, 0));
    store<f32>(o, tailDot(hsum(v128.load(a, 16)), panel, xt, d, 1), 4);
    store<f32>(o, tailDot(hsum(v128.load(a, 32)), panel, xt, d, 2), 8);
    store<f32>(o, tailDot(hsum(v128.load(a, 48)), panel, xt, d, 3), 12);
  }
}

/** acc (two tokens' sums, 128 bytes) += one k-block of the panel (at w, `bytes` of x) against x0 and x1. */
@inline function kBlock2(acc: usize, w: usize, x0: usize, x1: usize, bytes: usize): void {
  let a0 = v128.load(acc), a1 = v128.load(acc, 16), a2 = v128.load(acc, 32), a3 = v128.load(acc, 48);
  let b0 = v128.load(acc, 64), b1 = v128.load(acc, 80), b2 = v128.load(acc, 96), b3 = v128.load(acc, 112);
  let p = w;
  for (let o: usize = 0; o < bytes; o += 16, p += 64) {
    const w0 = v128.load(p), w1 = v128.load(p, 16), w2 = v128.load(p, 32), w3 = v128.load(p, 48);
    const xv = v128.load(x0 + o);
    a0 = f32x4.add(a0, f32x4.mul(w0, xv));
    a1 = f32x4.add(a1, f32x4.mul(w1, xv));
    a2 = f32x4.add(a2, f32x4.mul(w2, xv));
    a3 = f32x4.add(a3, f32x4.mul(w3, xv));
    const xw = v128.load(x1 + o);
    b0 = f32x4.add(b0, f32x4.mul(w0, xw));
    b1 = f32x4.add(b1, f32x4.mul(w1, xw));
    b2 = f32x4.add(b2, f32x4.mul(w2, xw));
    b3 = f32x4.add(b3, f32x4.mul(w3, xw));
  }
  v128.store(acc, a0); v128.store(acc, a1, 16); v128.store(acc, a2, 32); v128.store(acc, a3, 48);
  v128.store(acc, b0, 64); v128.store(acc, b1, 80); v128.store(acc, b2, 96); v128.store(acc, b3, 112);
}

/** acc (one token's sums, 64 bytes) += one k-block of the panel against x0. */
@inline function kBlock1(acc: usize, w: usize, x0: usize, bytes: usize): void {
  let a0 = v128.load(acc), a1 = v128.load(acc, 16), a2 = v128.load(acc, 32), a3 = v128.load(acc, 48);
  let p = w;
  for (let o: usize = 0; o < bytes; o += 16, p += 64) {
    const xv = v128.load(x0 + o);
    a0 = f32x4.add(a0, f32x4.mul(v128.load(p), xv));
    a1 = f32x4.add(a1, f32x4.mul(v128.load(p, 16), xv));
    a2 = f32x4.add(a2, f32x4.mul(v128.load(p, 32), xv));
    a3 = f32x4.add(a3, f32x4.mul(v128.load(p, 48), xv));
  }
  v128.store(acc, a0); v128.store(acc, a1, 16); v128.store(acc, a2, 32); v128.store(acc, a3, 48);
}

/**
 * The plain scalar loop (row-major W, one row at a time), kept as the baseline that
 * `pagellm bench kernels` measures the SIMD kernel against, and as the tests' oracle.
 */
export function matvecScalarF32(out: usize, x: usize, w: usize, n: i32, d: i32): void {
  for (let i = 0; i < n; i++) {
    const row = w + <usize>i * (<usize>d << 2);
    let s: f32 = 0;
    for (let j = 0; j < d; j++) s += load<f32>(row + (<usize>j << 2)) * load<f32>(x + (<usize>j << 2));
    store<f32>(out + (<usize>i << 2), s);
  }
}

/**
 * Sum of x[start..end) f32 with four accumulators, stored at out: a plain streaming read, the
 * memory-bandwidth yardstick `pagellm bench` measures the model against, split across threads
 * like a matrix product (each thread stores to its own slot; the sum only keeps the read alive).
 */
export function streamSumF32(out: usize, x: usize, start: i32, end: i32): void {
  let a0 = f32x4.splat(0), a1 = f32x4.splat(0), a2 = f32x4.splat(0), a3 = f32x4.splat(0);
  let p = x + (<usize>start << 2);
  const stop = x + (<usize>(start + ((end - start) & ~15)) << 2);
  for (; p < stop; p += 64) {
    a0 = f32x4.add(a0, v128.load(p));
    a1 = f32x4.add(a1, v128.load(p, 16));
    a2 = f32x4.add(a2, v128.load(p, 32));
    a3 = f32x4.add(a3, v128.load(p, 48));
  }
  let s = hsum(f32x4.add(f32x4.add(a0, a1), f32x4.add(a2, a3)));
  for (let i = start + ((end - start) & ~15); i < end; i++) s += load<f32>(x + (<usize>i << 2));
  store<f32>(out, s);
}

/** i32 fields of one segment of matmulF32Multi's table. */
export const MULTI_SEGMENT_INTS: i32 = 5;

/**
 * Several products that share their input x (q, k and v; gate and up) as one call, so the thread
 * pool splits them with one dispatch. table holds `count` segments of MULTI_SEGMENT_INTS i32:
 * weight address, output address, rows n, output row stride, and the segment's first row in a
 * shared row space where every segment starts on a multiple of 4. Rows [rowStart, rowEnd) of that
 * space are computed, each exactly as matmulF32 computes it.
 */
export function matmulF32Multi(table: usize, count: i32, x: usize, T: i32, d: i32, acc: usize, rowStart: i32, rowEnd: i32): void {
  for (let s = 0; s < count; s++) {
    const seg = table + (<usize>(s * MULTI_SEGMENT_INTS) << 2);
    const n = load<i32>(seg, 8);
    const first = load<i32>(seg, 16);
    const lo = max(rowStart, first) - first;
    const hi = min(rowEnd - first, n);
    if (lo < hi) matmulF32(load<i32>(seg, 4), x, load<i32>(seg), T, n, d, load<i32>(seg, 12), acc, lo, hi);
  }
}

