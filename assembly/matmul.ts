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
// The 1-token path, the 2-token tile and the remainder-row path all follow it, so a token's
// result never depends on what else is in the batch.

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

/**
 * out[t][i] = W[i] · x[t] for t in [0, T) and rows i in [rowStart, rowEnd).
 * x is [T][d] with rows of d floats; out rows are outStride floats apart.
 * rowStart must be a multiple of 4 (a panel boundary) unless it lies in the remainder rows;
 * the thread pool splits work on panel boundaries.
 */
export function matmulF32(
  out: usize, x: usize, w: usize, T: i32, n: i32, d: i32, outStride: i32, rowStart: i32, rowEnd: i32,
): void {
  const packedRows = (n >> 2) << 2;
  const panelEnd = min(rowEnd, packedRows);
  for (let i = rowStart; i < panelEnd; i += 4) {
    const panel = w + <usize>(i >> 2) * panelBytes(d);
    let t = 0;
    for (; t + 2 <= T; t += 2) panelTile2(out, x, panel, t, i, d, outStride);
    if (t < T) panelTile1(out, x, panel, t, i, d, outStride);
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

/** 4 rows of one panel against token t: a single sequential read of the panel. */
@inline function panelTile1(out: usize, x: usize, panel: usize, t: i32, i: i32, d: i32, outStride: i32): void {
  const xt = x + <usize>t * (<usize>d << 2);
  const end = xt + (<usize>(d & ~3) << 2);
  let a0 = f32x4.splat(0), a1 = f32x4.splat(0), a2 = f32x4.splat(0), a3 = f32x4.splat(0);
  let p = panel;
  for (let xp = xt; xp < end; xp += 16, p += 64) {
    const xv = v128.load(xp);
    a0 = f32x4.add(a0, f32x4.mul(v128.load(p), xv));
    a1 = f32x4.add(a1, f32x4.mul(v128.load(p, 16), xv));
    a2 = f32x4.add(a2, f32x4.mul(v128.load(p, 32), xv));
    a3 = f32x4.add(a3, f32x4.mul(v128.load(p, 48), xv));
  }
  const o = out + (<usize>(t * outStride + i) << 2);
  store<f32>(o, tailDot(hsum(a0), panel, xt, d, 0));
  store<f32>(o, tailDot(hsum(a1), panel, xt, d, 1), 4);
  store<f32>(o, tailDot(hsum(a2), panel, xt, d, 2), 8);
  store<f32>(o, tailDot(hsum(a3), panel, xt, d, 3), 12);
}

/** 4 rows of one panel against tokens t and t+1: each weight vector loaded once feeds two tokens. */
@inline function panelTile2(out: usize, x: usize, panel: usize, t: i32, i: i32, d: i32, outStride: i32): void {
  const rowBytes = <usize>d << 2;
  const x0 = x + <usize>t * rowBytes;
  const x1 = x0 + rowBytes;
  const chunkBytes = <usize>(d & ~3) << 2;
  let a0 = f32x4.splat(0), a1 = f32x4.splat(0), a2 = f32x4.splat(0), a3 = f32x4.splat(0);
  let b0 = f32x4.splat(0), b1 = f32x4.splat(0), b2 = f32x4.splat(0), b3 = f32x4.splat(0);
  let p = panel;
  for (let o: usize = 0; o < chunkBytes; o += 16, p += 64) {
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
  const o0 = out + (<usize>(t * outStride + i) << 2);
  store<f32>(o0, tailDot(hsum(a0), panel, x0, d, 0));
  store<f32>(o0, tailDot(hsum(a1), panel, x0, d, 1), 4);
  store<f32>(o0, tailDot(hsum(a2), panel, x0, d, 2), 8);
  store<f32>(o0, tailDot(hsum(a3), panel, x0, d, 3), 12);
  const o1 = o0 + (<usize>outStride << 2);
  store<f32>(o1, tailDot(hsum(b0), panel, x1, d, 0));
  store<f32>(o1, tailDot(hsum(b1), panel, x1, d, 1), 4);
  store<f32>(o1, tailDot(hsum(b2), panel, x1, d, 2), 8);
  store<f32>(o1, tailDot(hsum(b3), panel, x1, d, 3), 12);
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
export function matmulF32Multi(table: usize, count: i32, x: usize, T: i32, d: i32, rowStart: i32, rowEnd: i32): void {
  for (let s = 0; s < count; s++) {
    const seg = table + (<usize>(s * MULTI_SEGMENT_INTS) << 2);
    const n = load<i32>(seg, 8);
    const first = load<i32>(seg, 16);
    const lo = max(rowStart, first) - first;
    const hi = min(rowEnd - first, n);
    if (lo < hi) matmulF32(load<i32>(seg, 4), x, load<i32>(seg), T, n, d, load<i32>(seg, 12), lo, hi);
  }
}
