// ============================================================================================
// Element-wise kernels: SwiGLU, GeGLU, residual add, scaling, softmax
// ============================================================================================

import { exp4, expScalar } from "./math";

/** a[i] = silu(a[i]) * b[i] for n elements (the SwiGLU gate of the feed-forward layer). */
export function swiglu(a: usize, b: usize, n: i32): void {
  const n4 = n & ~3;
  const one = f32x4.splat(1);
  for (let i = 0; i < n4; i += 4) {
    const p = <usize>i << 2;
    const v = v128.load(a + p);
    const silu = f32x4.mul(v, f32x4.div(one, f32x4.add(one, exp4(f32x4.neg(v)))));
    v128.store(a + p, f32x4.mul(silu, v128.load(b + p)));
  }
  for (let i = n4; i < n; i++) {
    const p = <usize>i << 2;
    let v = load<f32>(a + p);
    v *= <f32>1.0 / (<f32>1.0 + expScalar(-v));
    store<f32>(a + p, v * load<f32>(b + p));
  }
}

/** 2 sqrt(2/pi) and 2 sqrt(2/pi) * 0.044715: tanh GELU's inner polynomial, doubled (see geglu). */
const GELU_C1: f32 = 1.5957691216057308;
const GELU_C2: f32 = 0.07135481627159173;

/**
 * a[i] = gelu(a[i]) * b[i] for n elements (GeGLU, gemma3's feed-forward), with the tanh GELU of
 * llama.cpp and PyTorch's approximate="tanh": 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3),
 * computed as x * sigmoid(2u) = x / (1 + exp(-2u)) (the same number: 0.5 (1 + tanh u) = sigmoid(2u)),
 * so it reuses exp and never overflows: exp(-2u) = inf below x = -8.9 gives -0, as gelu's limit.
 */
export function geglu(a: usize, b: usize, n: i32): void {
  const n4 = n & ~3;
  const one = f32x4.splat(1);
  const c1 = f32x4.splat(GELU_C1);
  const c2 = f32x4.splat(GELU_C2);
  for (let i = 0; i < n4; i += 4) {
    const p = <usize>i << 2;
    const v = v128.load(a + p);
    const inner = f32x4.mul(v, f32x4.add(c1, f32x4.mul(c2, f32x4.mul(v, v))));
    const gelu = f32x4.mul(v, f32x4.div(one, f32x4.add(one, exp4(f32x4.neg(inner)))));
    v128.store(a + p, f32x4.mul(gelu, v128.load(b + p)));
  }
  for (let i = n4; i < n; i++) {
    const p = <usize>i << 2;
    const v = load<f32>(a + p);
    const inner = v * (GELU_C1 + GELU_C2 * (v * v));
    const gelu = v * (<f32>1.0 / (<f32>1.0 + expScalar(-inner)));
    store<f32>(a + p, gelu * load<f32>(b + p));
  }
}

/** gpt-oss's SwiGLU: sigmoid(1.702 g) gates, g = min(gate, 7), and the up side is clamped to [-7, 7] then shifted by 1. */
const OAI_ALPHA: f32 = 1.702;
const OAI_LIMIT: f32 = 7;

/**
 * a[i] = g * sigmoid(1.702 g) * (clamp(b[i], -7, 7) + 1), g = min(a[i], 7), for n elements: gpt-oss's
 * clamped SwiGLU (ggml's swiglu_oai), the same operations in the SIMD part and the tail.
 */
export function swigluOai(a: usize, b: usize, n: i32): void {
  const n4 = n & ~3;
  const one = f32x4.splat(1);
  const alpha = f32x4.splat(OAI_ALPHA);
  const limit = f32x4.splat(OAI_LIMIT);
  const low = f32x4.splat(-OAI_LIMIT);
  for (let i = 0; i < n4; i += 4) {
    const p = <usize>i << 2;
    const g = f32x4.pmin(limit, v128.load(a + p));
    const u = f32x4.pmin(limit, f32x4.pmax(low, v128.load(b + p)));
    const glu = f32x4.mul(g, f32x4.div(one, f32x4.add(one, exp4(f32x4.neg(f32x4.mul(alpha, g))))));
    v128.store(a + p, f32x4.mul(glu, f32x4.add(u, one)));
  }
  for (let i = n4; i < n; i++) {
    const p = <usize>i << 2;
    const v = load<f32>(a + p);
    // pmin and pmax's own comparisons, so a NaN comes out as in the SIMD part.
    const g = v < OAI_LIMIT ? v : OAI_LIMIT;
    const w = load<f32>(b + p);
    const above = -OAI_LIMIT < w ? w : -OAI_LIMIT;
    const u = above < OAI_LIMIT ? above : OAI_LIMIT;
    const glu = g * (<f32>1.0 / (<f32>1.0 + expScalar(-(OAI_ALPHA * g))));
    store<f32>(a + p, glu * (u + <f32>1.0));
  }
}

/** x[i] *= s for n elements (gemma3's embedding times sqrt(dim)). */
export function scaleInPlace(x: usize, s: f32, n: i32): void {
  const n4 = n & ~3;
  const sv = f32x4.splat(s);
  for (let i = 0; i < n4; i += 4) {
    const p = <usize>i << 2;
    v128.store(x + p, f32x4.mul(v128.load(x + p), sv));
  }
  for (let i = n4; i < n; i++) {
    const p = <usize>i << 2;
    store<f32>(x + p, load<f32>(x + p) * s);
  }
}

/** x[i] += y[i] for n elements (the residual connection). */
export function addInPlace(x: usize, y: usize, n: i32): void {
  const n4 = n & ~3;
  for (let i = 0; i < n4; i += 4) {
    const p = <usize>i << 2;
    v128.store(x + p, f32x4.add(v128.load(x + p), v128.load(y + p)));
  }
  for (let i = n4; i < n; i++) {
    const p = <usize>i << 2;
    store<f32>(x + p, load<f32>(x + p) + load<f32>(y + p));
  }
}

/** x[t][i] += bias[i] for T rows of n elements (a projection's bias). */
export function addRows(x: usize, bias: usize, T: i32, n: i32): void {
  for (let t = 0; t < T; t++) addInPlace(x + (<usize>(t * n) << 2), bias, n);
}

/** In-place softmax of x[0..n): exp(x - max) / sum, summed left to right. */
export function softmax(x: usize, n: i32): void {
  if (n <= 0) return;
  let m = load<f32>(x);
  for (let i = 1; i < n; i++) m = max(m, load<f32>(x + (<usize>i << 2)));
  let sum: f32 = 0;
  for (let i = 0; i < n; i++) {
    const p = x + (<usize>i << 2);
    const e = expScalar(load<f32>(p) - m);
    store<f32>(p, e);
    sum += e;
  }
  for (let i = 0; i < n; i++) {
    const p = x + (<usize>i << 2);
    store<f32>(p, load<f32>(p) / sum);
  }
}

/** out[r][.] = src[rows[r]][.] for R rows of n floats: gathers the rows that need logits. */
export function gatherRows(out: usize, src: usize, rows: usize, R: i32, n: i32): void {
  const rowBytes = <usize>n << 2;
  for (let r = 0; r < R; r++) {
    memory.copy(out + <usize>r * rowBytes, src + <usize>load<i32>(rows + (<usize>r << 2)) * rowBytes, rowBytes);
  }
}

/**
 * out[t][.] = sum over r < k of weights[t*k + r] * src[rows[t*k + r]][.], for T rows of n floats:
 * a token's mixture of its k experts' outputs, added in rank order (w0 s0, then + w1 s1, ...),
 * the same operations per element in the SIMD part and the tail.
 */
export function weightedRowSum(out: usize, src: usize, rows: usize, weights: usize, T: i32, k: i32, n: i32): void {
  const n4 = n & ~3;
  const rowBytes = <usize>n << 2;
  for (let t = 0; t < T; t++) {
    const o = out + <usize>t * rowBytes;
    const first = (<usize>(t * k)) << 2;
    const w0 = load<f32>(weights + first);
    const s0 = src + <usize>load<i32>(rows + first) * rowBytes;
    for (let i = 0; i < n4; i += 4) v128.store(o + (<usize>i << 2), f32x4.mul(f32x4.splat(w0), v128.load(s0 + (<usize>i << 2))));
    for (let i = n4; i < n; i++) store<f32>(o + (<usize>i << 2), w0 * load<f32>(s0 + (<usize>i << 2)));
    for (let r = 1; r < k; r++) {
      const at = (<usize>(t * k + r)) << 2;
      const w = load<f32>(weights + at);
      const s = src + <usize>load<i32>(rows + at) * rowBytes;
      for (let i = 0; i < n4; i += 4) {
        const p = <usize>i << 2;
        v128.store(o + p, f32x4.add(v128.load(o + p), f32x4.mul(f32x4.splat(w), v128.load(s + p))));
      }
      for (let i = n4; i < n; i++) {
        const p = <usize>i << 2;
        store<f32>(o + p, load<f32>(o + p) + w * load<f32>(s + p));
      }
    }
  }
}
