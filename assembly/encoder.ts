// ============================================================================================
// Encoder kernels: LayerNorm with bias (BERT's norms) and attention in both directions within
// each sequence of a step (no KV cache, no causal mask).
// ============================================================================================

import { expScalar } from "./math";

/**
 * The mean of row x[0..n), and then 1/sqrt(variance + eps), as ggml_norm: both sums in f64, left
 * to right, the squares of the centred values in f32. Shared by the SIMD kernel and its
 * reference, so the two differ only in how the affine step is vectorised (the same f32
 * operations per element).
 */
@inline function rowMean(x: usize, n: i32): f32 {
  let sum: f64 = 0;
  for (let j = 0; j < n; j++) sum += <f64>load<f32>(x + (<usize>j << 2));
  return <f32>(sum / <f64>n);
}

@inline function rowInvStd(x: usize, n: i32, mean: f32, eps: f32): f32 {
  let sum2: f64 = 0;
  for (let j = 0; j < n; j++) {
    const c = load<f32>(x + (<usize>j << 2)) - mean;
    sum2 += <f64>(c * c);
  }
  return <f32>1.0 / Mathf.sqrt(<f32>(sum2 / <f64>n) + eps);
}

/** out[t] = ((x[t] - mean) * inv) * w + b for T rows of n floats (LayerNorm with bias); out may alias x. */
export function layerNorm(out: usize, x: usize, w: usize, b: usize, T: i32, n: i32, eps: f32): void {
  const n4 = n & ~3;
  for (let t = 0; t < T; t++) {
    const xt = x + (<usize>(t * n) << 2);
    const ot = out + (<usize>(t * n) << 2);
    const mean = rowMean(xt, n);
    const inv = rowInvStd(xt, n, mean, eps);
    const vmean = f32x4.splat(mean);
    const vinv = f32x4.splat(inv);
    for (let j = 0; j < n4; j += 4) {
      const o = <usize>j << 2;
      const c = f32x4.mul(f32x4.sub(v128.load(xt + o), vmean), vinv);
      v128.store(ot + o, f32x4.add(f32x4.mul(c, v128.load(w + o)), v128.load(b + o)));
    }
    for (let j = n4; j < n; j++) {
      const o = <usize>j << 2;
      store<f32>(ot + o, ((load<f32>(xt + o) - mean) * inv) * load<f32>(w + o) + load<f32>(b + o));
    }
  }
}

/** layerNorm's scalar reference: the same numbers, one element at a time. */
export function layerNormRef(out: usize, x: usize, w: usize, b: usize, T: i32, n: i32, eps: f32): void {
  for (let t = 0; t < T; t++) {
    const xt = x + (<usize>(t * n) << 2);
    const ot = out + (<usize>(t * n) << 2);
    const mean = rowMean(xt, n);
    const inv = rowInvStd(xt, n, mean, eps);
    for (let j = 0; j < n; j++) {
      const o = <usize>j << 2;
      store<f32>(ot + o, ((load<f32>(xt + o) - mean) * inv) * load<f32>(w + o) + load<f32>(b + o));
    }
  }
}

/** The fixed reduction of four lanes: (l0 + l1) + (l2 + l3). */
@inline function laneSum(v: v128): f32 {
  return (f32x4.extract_lane(v, 0) + f32x4.extract_lane(v, 1)) + (f32x4.extract_lane(v, 2) + f32x4.extract_lane(v, 3));
}

/** a · b over n floats: one f32x4 accumulator, a fixed lane sum, then the scalar tail. */
@inline function dot(a: usize, b: usize, n: i32): f32 {
  const n4 = n & ~3;
  let acc = f32x4.splat(0);
  for (let j = 0; j < n4; j += 4) acc = f32x4.add(acc, f32x4.mul(v128.load(a + (<usize>j << 2)), v128.load(b + (<usize>j << 2))));
  let s = laneSum(acc);
  for (let j = n4; j < n; j++) s += load<f32>(a + (<usize>j << 2)) * load<f32>(b + (<usize>j << 2));
  return s;
}

/** o[0..n) += p * v[0..n). */
@inline function axpy(o: usize, p: f32, v: usize, n: i32): void {
  const n4 = n & ~3;
  const vp = f32x4.splat(p);
  for (let j = 0; j < n4; j += 4) {
    const at = <usize>j << 2;
    v128.store(o + at, f32x4.add(v128.load(o + at), f32x4.mul(vp, v128.load(v + at))));
  }
  for (let j = n4; j < n; j++) {
    const at = <usize>j << 2;
    store<f32>(o + at, load<f32>(o + at) + p * load<f32>(v + at));
  }
}

/** Four dots q · k0..k3 at once (four independent chains), each the same operations as dot(q, kj, n). */
@inline function dot4(q: usize, k0: usize, k1: usize, k2: usize, k3: usize, n: i32, scale: f32, dst: usize): void {
  const n4 = n & ~3;
  let a0 = f32x4.splat(0), a1 = f32x4.splat(0), a2 = f32x4.splat(0), a3 = f32x4.splat(0);
  for (let j = 0; j < n4; j += 4) {
    const o = <usize>j << 2;
    const qv = v128.load(q + o);
    a0 = f32x4.add(a0, f32x4.mul(qv, v128.load(k0 + o)));
    a1 = f32x4.add(a1, f32x4.mul(qv, v128.load(k1 + o)));
    a2 = f32x4.add(a2, f32x4.mul(qv, v128.load(k2 + o)));
    a3 = f32x4.add(a3, f32x4.mul(qv, v128.load(k3 + o)));
  }
  let s0 = laneSum(a0);
  let s1 = laneSum(a1);
  let s2 = laneSum(a2);
  let s3 = laneSum(a3);
  for (let j = n4; j < n; j++) {
    const o = <usize>j << 2;
    const qj = load<f32>(q + o);
    s0 += qj * load<f32>(k0 + o);
    s1 += qj * load<f32>(k1 + o);
    s2 += qj * load<f32>(k2 + o);
    s3 += qj * load<f32>(k3 + o);
  }
  store<f32>(dst, s0 * scale);
  store<f32>(dst, s1 * scale, 4);
  store<f32>(dst, s2 * scale, 8);
  store<f32>(dst, s3 * scale, 12);
}

/** o[0..n) += p0 * v0, then p1 * v1, p2 * v2, p3 * v3, per element in that order: four axpy calls' bits, o read and written once. */
@inline function axpy4(o: usize, p: usize, v0: usize, v1: usize, v2: usize, v3: usize, n: i32): void {
  const n4 = n & ~3;
  const p0 = f32x4.splat(load<f32>(p)), p1 = f32x4.splat(load<f32>(p, 4)), p2 = f32x4.splat(load<f32>(p, 8)), p3 = f32x4.splat(load<f32>(p, 12));
  for (let j = 0; j < n4; j += 4) {
    const at = <usize>j << 2;
    let acc = v128.load(o + at);
    acc = f32x4.add(acc, f32x4.mul(p0, v128.load(v0 + at)));
    acc = f32x4.add(acc, f32x4.mul(p1, v128.load(v1 + at)));
    acc = f32x4.add(acc, f32x4.mul(p2, v128.load(v2 + at)));
    acc = f32x4.add(acc, f32x4.mul(p3, v128.load(v3 + at)));
    v128.store(o + at, acc);
  }
  for (let j = n4; j < n; j++) {
    const at = <usize>j << 2;
    let acc = load<f32>(o + at);
    acc += load<f32>(p) * load<f32>(v0 + at);
    acc += load<f32>(p, 4) * load<f32>(v1 + at);
    acc += load<f32>(p, 8) * load<f32>(v2 + at);
    acc += load<f32>(p, 12) * load<f32>(v3 + at);
    store<f32>(o + at, acc);
  }
}

/**
 * Attention in both directions for items [itemStart, itemEnd) of (sequence, query head), item =
 * s * nHeads + h: each query token of sequence s (tokens seqStarts[s] .. seqStarts[s+1]) attends
 * to every token of s and no other, softmax(scale q·k) in two passes (max, then exp and sum left
 * to right) over the keys in order, the values summed in that order, then divided by the sum.
 * An item reads only its own sequence, so its output is the same bits whatever else the step
 * holds and whichever thread runs it. q and out rows are qStride floats apart, k and v rows
 * kvStride; `scores` is this thread's scratch of the longest sequence's floats.
 */
export function encoderAttention(
  out: usize, q: usize, k: usize, v: usize, seqStarts: usize,
  nHeads: i32, nKvHeads: i32, headDim: i32, qStride: i32, kvStride: i32, scale: f32,
  scores: usize, itemStart: i32, itemEnd: i32,
): void {
  const group = nHeads / nKvHeads;
  for (let item = itemStart; item < itemEnd; item++) {
    const s = item / nHeads;
    const h = item % nHeads;
    const kvHead = h / group;
    const start = load<i32>(seqStarts + (<usize>s << 2));
    const n = load<i32>(seqStarts + (<usize>(s + 1) << 2)) - start;
    for (let i = start; i < start + n; i++) {
      const qi = q + (<usize>(i * qStride + h * headDim) << 2);
      // Keys four at a time (independent chains, each key's dot as dot's), then one at a time.
      const kh = k + (<usize>(start * kvStride + kvHead * headDim) << 2);
      const kRow = <usize>kvStride << 2;
      let j = 0;
      for (; j + 4 <= n; j += 4) {
        const kj = kh + <usize>j * kRow;
        dot4(qi, kj, kj + kRow, kj + 2 * kRow, kj + 3 * kRow, headDim, scale, scores + (<usize>j << 2));
      }
      for (; j < n; j++) store<f32>(scores + (<usize>j << 2), dot(qi, kh + <usize>j * kRow, headDim) * scale);
      let m: f32 = -Infinity;
      for (j = 0; j < n; j++) m = max(m, load<f32>(scores + (<usize>j << 2)));
      let sum: f32 = 0;
      for (j = 0; j < n; j++) {
        const p = scores + (<usize>j << 2);
        const e = expScalar(load<f32>(p) - m);
        store<f32>(p, e);
        sum += e;
      }
      const o = out + (<usize>(i * qStride + h * headDim) << 2);
      memory.fill(o, 0, <usize>headDim << 2);
      const vh = v + (<usize>(start * kvStride + kvHead * headDim) << 2);
      for (j = 0; j + 4 <= n; j += 4) {
        const vj = vh + <usize>j * kRow;
        axpy4(o, scores + (<usize>j << 2), vj, vj + kRow, vj + 2 * kRow, vj + 3 * kRow, headDim);
      }
      for (; j < n; j++) axpy(o, load<f32>(scores + (<usize>j << 2)), vh + <usize>j * kRow, headDim);
      const inv: f32 = <f32>1.0 / sum;
      for (let d = 0; d < headDim; d++) store<f32>(o + (<usize>d << 2), load<f32>(o + (<usize>d << 2)) * inv);
    }
  }
}
