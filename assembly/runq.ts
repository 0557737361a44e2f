// ============================================================================================
// "runq" numerics: llama2.c's runq.c forward pass, bit for bit
// ============================================================================================
//
// runq quantizes activations to int8 before every matmul, so a one-ulp difference anywhere
// upstream can flip an int8 value and change the generated text. These kernels reproduce the
// float arithmetic of runq.c as gcc 12 -Ofast -march=native compiles it for AMD Zen 4/5 (AVX-512)
// and runs it against glibc 2.36, read from its disassembly:
//
//   reductions      gcc vectorizes `s += a[i] * b[i]` into a 16-lane FMA accumulator, folds
//                   it to 8 lanes, takes an 8-lane FMA step when 8 or more elements remain,
//                   folds 8 -> 4 -> 2 -> 1, then finishes with scalar FMAs (gccDot)
//   rmsnorm         1/sqrt by rsqrtss plus a Newton step; mean by an FMA with 1/n inside the
//                   layers, by a division in the final norm; the scale multiplies are associated
//                   differently in the 16-lane body than in the 8-lane and scalar tails
//   quantize        scale = max * (1/127), q = trunc(x * (127/max) +- 0.49999997)
//   matmul          val += (w_scale * x_scale) * ival, in group order
//   softmax         first and trailing exps by glibc expf, the 16- and 8-lane blocks by
//                   libmvec; the sum follows the same lane folding; weights = e * (1/sum)
//   attention mix   xb[i] = fma(a, v[i], xb[i]) over positions in order
//   SwiGLU          16-lane blocks: libmvec exp, vrcp14ps + Newton, (r * x) * up; an 8-lane
//                   block: libmvec exp, rcpps + Newton, r * (x * up); the rest: glibc expf,
//                   a true division, r * (x * up)
//   RoPE            freq = expf(-(2k * (1/head_size)) * f32(ln 10000)), sincosf(pos * freq)
//
// Everything runs under FTZ (crtfastmath.o). Every kernel computes each output row in a fixed
// order that does not depend on the batch, so batching and prefill chunks do not change results.

import {
  fma32, fma32x4, glibcExpf, glibcSincosf, mulFtz, mvecExpf, rcp12, rcp14, recipNewton, roundFtz, rsqrt12, rsqrtNewton, sincosCos, sincosSin,
} from "./runq-math";
import { SEQ_INFO_INTS } from "./attention";
import { matmulQ8Rows } from "./quant";

// ---------------------------------------------------------------------------------------------
// The vectorized reduction
// ---------------------------------------------------------------------------------------------

/** gcc's 8 -> 1 fold of lanes lo (0..3) and hi (4..7): 4 = lo + hi, 2 = [0]+[2], [1]+[3], then their sum. */
@inline function fold8(lo: v128, hi: v128): f32 {
  const v = f32x4.add(lo, hi);
  return (f32x4.extract_lane(v, 0) + f32x4.extract_lane(v, 2)) + (f32x4.extract_lane(v, 1) + f32x4.extract_lane(v, 3));
}

/**
 * sum of a[i] * b[i], i < n, in gcc's order: zmm accumulator (four v128, lanes 0..15) over
 * 16-element blocks, folded to 8 lanes (lane j + lane j+8), one 8-lane FMA step if 8 or more
 * elements remain, the 8 -> 1 fold, then scalar FMAs for the rest.
 */
function gccDot(a: usize, b: usize, n: i32): f32 {
  let acc0 = f32x4.splat(0), acc1 = f32x4.splat(0), acc2 = f32x4.splat(0), acc3 = f32x4.splat(0);
  let i = 0;
  for (; i + 16 <= n; i += 16) {
    const o = <usize>i << 2;
    acc0 = fma32x4(v128.load(a + o), v128.load(b + o), acc0);
    acc1 = fma32x4(v128.load(a + o, 16), v128.load(b + o, 16), acc1);
    acc2 = fma32x4(v128.load(a + o, 32), v128.load(b + o, 32), acc2);
    acc3 = fma32x4(v128.load(a + o, 48), v128.load(b + o, 48), acc3);
  }
  let lo = f32x4.add(acc0, acc2);
  let hi = f32x4.add(acc1, acc3);
  if (n - i >= 8) {
    const o = <usize>i << 2;
    lo = fma32x4(v128.load(a + o), v128.load(b + o), lo);
    hi = fma32x4(v128.load(a + o, 16), v128.load(b + o, 16), hi);
    i += 8;
  }
  let s = fold8(lo, hi);
  for (; i < n; i++) s = fma32(load<f32>(a + (<usize>i << 2)), load<f32>(b + (<usize>i << 2)), s);
  return s;
}

// ---------------------------------------------------------------------------------------------
// RMSNorm
// ---------------------------------------------------------------------------------------------

/**
 * out[t] = rmsnorm(x[t]) * w for T rows of n floats; out may alias x.
 * final = 0: a layer norm (runq's inlined copies): ms = fma(sumsq, 1/n, 1e-5), and
 *   out = (w * x) * inv in the 16-lane body, (inv * x) * w in the 8-lane and scalar tails
 *   (n < 8: all (w * x) * inv).
 * final = 1: the last norm: ms = sumsq / n + 1e-5, out = (w * x) * inv everywhere.
 */
export function rmsnormRunq(out: usize, x: usize, w: usize, T: i32, n: i32, eps: f32, final: i32): void {
  const invN: f32 = <f32>1.0 / <f32>n;
  const body = final != 0 || n < 8 ? n : n & ~15;
  for (let t = 0; t < T; t++) {
    const xt = x + (<usize>(t * n) << 2);
    const ot = out + (<usize>(t * n) << 2);
    const ss = gccDot(xt, xt, n);
    const ms = final != 0 ? ss / <f32>n + eps : fma32(ss, invN, eps);
    const inv = rsqrtNewton(ms);
    const b4 = body & ~3;
    const vinv = f32x4.splat(inv);
    for (let j = 0; j < b4; j += 4) {
      const o = <usize>j << 2;
      v128.store(ot + o, f32x4.mul(f32x4.mul(v128.load(w + o), v128.load(xt + o)), vinv));
    }
    for (let j = b4; j < body; j++) {
      const o = <usize>j << 2;
      store<f32>(ot + o, (load<f32>(w + o) * load<f32>(xt + o)) * inv);
    }
    for (let j = body; j < n; j++) {
      const o = <usize>j << 2;
      store<f32>(ot + o, (inv * load<f32>(xt + o)) * load<f32>(w + o));
    }
  }
}

// ---------------------------------------------------------------------------------------------
// int8 quantization and matmul
// ---------------------------------------------------------------------------------------------

const INV_Q_MAX: f32 = reinterpret<f32>(0x3c010204); // f32(1/127)
const ROUND_HALF: f32 = reinterpret<f32>(0x3effffff); // 0.49999997, gcc's inline round()

/**
 * Quantize each row of x[T][d] into xq (int8) and xs (one scale per group of gs), floor(d/gs)
 * groups per row, values past the last whole group left zero (like quantizeQ8).
 */
export function quantizeQ8Runq(xq: usize, xs: usize, x: usize, T: i32, d: i32, gs: i32): void {
  const groups = d / gs;
  for (let t = 0; t < T; t++) {
    memory.fill(xq + <usize>(t * d), 0, <usize>d);
    for (let g = 0; g < groups; g++) {
      const src = x + (<usize>(t * d + g * gs) << 2);
      let wmax: f32 = 0;
      for (let i = 0; i < gs; i++) wmax = max(wmax, Mathf.abs(load<f32>(src + (<usize>i << 2))));
      store<f32>(xs + (<usize>(t * groups + g) << 2), mulFtz(wmax, INV_Q_MAX));
      // All zeros: runq computes 0 * inf = NaN, which converts to 0x80000000, whose low byte is 0.
      if (wmax == 0) continue;
      const inv: f32 = <f32>127.0 / wmax;
      const dst = xq + <usize>(t * d + g * gs);
      for (let i = 0; i < gs; i++) {
        const v = load<f32>(src + (<usize>i << 2)) * inv;
        store<i8>(dst + <usize>i, <i8>(<i32>(v + copysign<f32>(ROUND_HALF, v))));
      }
    }
  }
}


/**
 * out[t][i] = W[i] . x[t] for rows i in [rowStart, rowEnd), as matmulQ8 but with runq's -Ofast
 * association: val += (w_scale * x_scale) * f32(ival), groups in order.
 */
export function matmulQ8Runq(
  out: usize, xq: usize, xs: usize, wq: usize, ws: usize,
  T: i32, d: i32, gs: i32, outStride: i32, rowStart: i32, rowEnd: i32,
): void {
  matmulQ8Rows(out, xq, xs, wq, ws, T, d, gs, outStride, rowStart, rowEnd, true);
}

// ---------------------------------------------------------------------------------------------
// SwiGLU
// ---------------------------------------------------------------------------------------------

/**
 * a[t][i] = silu(a[t][i]) * b[t][i] for T rows of n, with runq's split of each row: elements
 * below n & ~15 take the 16-lane path, the next 8 (if 8 remain) the 8-lane path, the rest the
 * scalar loop; rows shorter than 8 take gcc's unvectorized loop.
 */
export function swigluRunq(a: usize, b: usize, T: i32, n: i32): void {
  const n16 = n < 8 ? 0 : n & ~15;
  const n8 = n < 8 ? 0 : n16 + ((n - n16) >= 8 ? 8 : 0);
  for (let t = 0; t < T; t++) {
    const at = a + (<usize>(t * n) << 2);
    const bt = b + (<usize>(t * n) << 2);
    for (let i = 0; i < n; i++) {
      const p = <usize>i << 2;
      const x = load<f32>(at + p);
      const up = load<f32>(bt + p);
      let y: f32;
      if (i < n16) {
        const den = mvecExpf(-x) + 1;
        y = mulFtz(mulFtz(recipNewton(rcp14(den), den), x), up);
      } else if (i < n8) {
        const den = mvecExpf(-x) + 1;
        y = mulFtz(recipNewton(rcp12(den), den), mulFtz(x, up));
      } else if (n >= 8) {
        const r = roundFtz(<f64>1.0 / <f64>(glibcExpf(-x) + 1));
        y = mulFtz(r, mulFtz(x, up));
      } else {
        const r = roundFtz(<f64>1.0 / <f64>(glibcExpf(-x) + 1));
        y = mulFtz(mulFtz(r, x), up);
      }
      store<f32>(at + p, y);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// RoPE tables
// ---------------------------------------------------------------------------------------------

/**
 * cos/sin tables [seqLen][headDim/2] as runq computes them per call: gcc turns
 * 1/powf(10000, hd/hs) into expf(-(hd * (1/hs)) * f32(ln 10000)); angle = freq * f32(pos); sincosf.
 * lnTheta is f32(ln theta) (runq hardcodes theta = 10000).
 */
export function ropeTablesRunq(cosTab: usize, sinTab: usize, seqLen: i32, headDim: i32, lnTheta: f32): void {
  const half = headDim >> 1;
  const invHs: f32 = <f32>1.0 / <f32>headDim;
  for (let k = 0; k < half; k++) {
    const hd = <f32>(k << 1);
    const freq = k == 0 ? <f32>1.0 : glibcExpf(-(hd * invHs) * lnTheta);
    for (let pos = 0; pos < seqLen; pos++) {
      glibcSincosf(freq * <f32>pos);
      const o = <usize>(pos * half + k) << 2;
      store<f32>(cosTab + o, sincosCos);
      store<f32>(sinTab + o, sincosSin);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Attention over the paged KV cache, with runq's exact two-pass softmax
// ---------------------------------------------------------------------------------------------

/**
 * runq's softmax of s[0..len) in place. Element 0 and the elements after the vector blocks use
 * glibc expf, elements 1..m use libmvec (m = 16-lane blocks of the len-1 after the first, plus
 * one 8-lane block if 8 remain). The sum: 16 lane partial sums folded like gccDot, plus e0,
 * then the scalar tail in order. Weights are e * (1/sum).
 */
function softmaxRunq(s: usize, len: i32): void {
  let mx = load<f32>(s);
  for (let j = 1; j < len; j++) mx = max(mx, load<f32>(s + (<usize>j << 2)));
  const e0 = glibcExpf(load<f32>(s) - mx);
  store<f32>(s, e0);
  const rest = len - 1;
  const m16 = rest & ~15;
  const m8 = m16 + ((rest - m16) >= 8 ? 8 : 0);
  for (let j = 1; j < len; j++) {
    const p = s + (<usize>j << 2);
    const v = load<f32>(p) - mx;
    store<f32>(p, j <= m8 ? mvecExpf(v) : glibcExpf(v));
  }
  let acc0 = f32x4.splat(0), acc1 = f32x4.splat(0), acc2 = f32x4.splat(0), acc3 = f32x4.splat(0);
  const base = s + 4; // the vector blocks start at element 1
  for (let j = 0; j < m16; j += 16) {
    const o = <usize>j << 2;
    acc0 = f32x4.add(acc0, v128.load(base + o));
    acc1 = f32x4.add(acc1, v128.load(base + o, 16));
    acc2 = f32x4.add(acc2, v128.load(base + o, 32));
    acc3 = f32x4.add(acc3, v128.load(base + o, 48));
  }
  let lo = f32x4.add(acc0, acc2);
  let hi = f32x4.add(acc1, acc3);
  if (m8 > m16) {
    const o = <usize>m16 << 2;
    lo = f32x4.add(lo, v128.load(base + o));
    hi = f32x4.add(hi, v128.load(base + o, 16));
  }
  let sum = e0 + fold8(lo, hi);
  for (let j = m8 + 1; j < len; j++) sum += load<f32>(s + (<usize>j << 2));
  const inv: f32 = <f32>1.0 / sum;
  for (let j = 0; j < len; j++) {
    const p = s + (<usize>j << 2);
    store<f32>(p, mulFtz(load<f32>(p), inv));
  }
}

/** Byte offset, within a layer's [kvHead][block] arena, of kv head kvHead's first row in logical block b. */
@inline function blockBase(table: usize, b: i32, kvHead: i32, numBlocks: i32, blockSize: i32, headBytes: usize): usize {
  return <usize>((kvHead * numBlocks + load<i32>(table + (<usize>b << 2))) * blockSize) * headBytes;
}

/**
 * Same contract as pagedAttention (work items are (sequence, kv head) pairs, causal within a
 * chunk), with runq's arithmetic: score = gccDot(q, k) * rsqrtNewton(headDim), softmax over all
 * positions 0..pos (scores: scratch of at least pos + 1 floats for this thread), then
 * out[i] = fma(a_t, v_t[i], out[i]) for t = 0..pos in order.
 */
export function pagedAttentionRunq(
  out: usize, q: usize, kLayer: usize, vLayer: usize, seqInfo: usize,
  nHeads: i32, nKvHeads: i32, headDim: i32, blockSize: i32, numBlocks: i32, qStride: i32,
  scores: usize, itemStart: i32, itemEnd: i32,
): void {
  const group = nHeads / nKvHeads;
  const headBytes = <usize>headDim << 2;
  const scale = rsqrtNewton(<f32>headDim);
  for (let item = itemStart; item < itemEnd; item++) {
    const seq = item / nKvHeads;
    const kvHead = item - seq * nKvHeads;
    const info = seqInfo + (<usize>(seq * SEQ_INFO_INTS) << 2);
    const queryStart = load<i32>(info);
    const queryCount = load<i32>(info, 4);
    const contextLen = load<i32>(info, 8);
    const table = <usize>load<i32>(info, 12);
    for (let i = 0; i < queryCount; i++) {
      const tok = queryStart + i;
      const pos = contextLen - queryCount + i;
      for (let h = kvHead * group; h < (kvHead + 1) * group; h++) {
        const off = <usize>(tok * qStride + h * headDim) << 2;
        const qh = q + off;
        // Positions 0..pos, walked block by block through the table.
        for (let p0 = 0, b = 0; p0 <= pos; p0 += blockSize, b++) {
          let k = kLayer + blockBase(table, b, kvHead, numBlocks, blockSize, headBytes);
          const p1 = min(p0 + blockSize, pos + 1);
          for (let p = p0; p < p1; p++, k += headBytes) store<f32>(scores + (<usize>p << 2), gccDot(qh, k, headDim) * scale);
        }
        softmaxRunq(scores, pos + 1);
        const oh = out + off;
        memory.fill(oh, 0, headBytes);
        for (let p = 0; p <= pos; p++) {
          const v = vLayer + blockBase(table, p / blockSize, kvHead, numBlocks, blockSize, headBytes) + <usize>(p % blockSize) * headBytes;
          const a = load<f32>(scores + (<usize>p << 2));
          const va = f32x4.splat(a);
          let j = 0;
          for (; j + 4 <= headDim; j += 4) {
            const o = <usize>j << 2;
            v128.store(oh + o, fma32x4(va, v128.load(v + o), v128.load(oh + o)));
          }
          for (; j < headDim; j++) {
            const o = <usize>j << 2;
            store<f32>(oh + o, fma32(a, load<f32>(v + o), load<f32>(oh + o)));
          }
        }
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Scalar probes, for tests against values captured from glibc, libmvec and the CPU
// ---------------------------------------------------------------------------------------------

/** f(x) for the emulated primitive `which`: 0 glibc expf, 1 libmvec expf, 2 sinf, 3 cosf, 4 rcp14, 5 rcpps, 6 rsqrtss, 7 rsqrt + Newton. */
export function runqMath(which: i32, x: f32): f32 {
  switch (which) {
    case 0: return glibcExpf(x);
    case 1: return mvecExpf(x);
    case 2: glibcSincosf(x); return sincosSin;
    case 3: glibcSincosf(x); return sincosCos;
    case 4: return rcp14(x);
    case 5: return rcp12(x);
    case 6: return rsqrt12(x);
    case 7: return rsqrtNewton(x);
    default: return <f32>NaN;
  }
}

/** Exact f32 fused multiply-add under FTZ (test probe). */
export function runqFma(a: f32, b: f32, c: f32): f32 {
  return fma32(a, b, c);
}
