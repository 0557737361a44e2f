// ============================================================================================
// int8 group-quantized weights (llama2.c version-2 checkpoints, run by runq.c)
// ============================================================================================
//
// A tensor W[n][d] is stored as int8 values q[n*d] followed by one f32 scale per group of gs
// consecutive values (s[n*d/gs]); W[i][j] ~= q[i*d+j] * s[(i*d+j)/gs]. Activations are quantized
// the same way before each product, and the product is computed in integers within a group:
//   out[i] = sum over groups g, in order, of f32(sum_k xq[k]*wq[k]) * ws[g] * xs[g]
// Integer sums are exact, so only the float part has an order, the one runq.c uses.

const Q_MAX: f32 = 127.0;

/** Round half away from zero, as C's round(); exact for any f32 because f64 holds |v| + 0.5 exactly. */
@inline function roundAway(v: f32): f32 {
  const r = <f32>Math.floor(<f64>Mathf.abs(v) + 0.5);
  return v < 0 ? -r : r;
}

/**
 * Quantize each row of x[T][d] into xq[T][d] (int8) and xs[T][d/gs] (scales). Like runq.c, a row
 * has floor(d/gs) groups; when gs does not divide d the last d % gs values are left unquantized
 * (zero) and the product below never reads them.
 */
export function quantizeQ8(xq: usize, xs: usize, x: usize, T: i32, d: i32, gs: i32): void {
  const groups = d / gs;
  for (let t = 0; t < T; t++) {
    memory.fill(xq + <usize>(t * d), 0, <usize>d);
    for (let g = 0; g < groups; g++) {
      const src = x + (<usize>(t * d + g * gs) << 2);
      let wmax: f32 = 0;
      for (let i = 0; i < gs; i++) wmax = max(wmax, Mathf.abs(load<f32>(src + (<usize>i << 2))));
      const scale = wmax / Q_MAX;
      store<f32>(xs + (<usize>(t * groups + g) << 2), scale);
      const dst = xq + <usize>(t * d + g * gs);
      for (let i = 0; i < gs; i++) {
        // A group of zeros has scale 0: keep it zero rather than dividing by zero.
        const q = scale == 0 ? <f32>0 : roundAway(load<f32>(src + (<usize>i << 2)) / scale);
        store<i8>(dst + <usize>i, <i8>(<i32>q));
      }
    }
  }
}

/** Integer dot product of gs int8 pairs: SIMD over 16 at a time, scalar tail (exact, so any order does). */
@inline export function groupDot(a: usize, b: usize, gs: i32): i32 {
  let sum = 0;
  let k = 0;
  if (gs >= 16) {
    let acc = i32x4.splat(0);
    for (; k + 16 <= gs; k += 16) {
      const va = v128.load(a + <usize>k);
      const vb = v128.load(b + <usize>k);
      acc = i32x4.add(acc, i32x4.dot_i16x8_s(i16x8.extend_low_i8x16_s(va), i16x8.extend_low_i8x16_s(vb)));
      acc = i32x4.add(acc, i32x4.dot_i16x8_s(i16x8.extend_high_i8x16_s(va), i16x8.extend_high_i8x16_s(vb)));
    }
    sum = i32x4.extract_lane(acc, 0) + i32x4.extract_lane(acc, 1) + i32x4.extract_lane(acc, 2) + i32x4.extract_lane(acc, 3);
  }
  for (; k < gs; k++) sum += <i32>load<i8>(a + <usize>k) * <i32>load<i8>(b + <usize>k);
  return sum;
}

/**
 * out[t][i] = W[i] · x[t] for rows i in [rowStart, rowEnd), W and x group-quantized.
 * xq/xs: [T][d] int8 and [T][d/gs] scales; wq/ws: [n][d] int8 and one scale per gs values of the
 * flattened tensor. Row i's group g covers columns [g*gs, (g+1)*gs) and takes the scale of the
 * flattened group that holds its first element, (i*d + g*gs) / gs: runq.c's exact arithmetic,
 * which matters when gs does not divide d and groups straddle rows. Groups are summed in order as
 * f32(ival) * w_scale * x_scale (runq.c's source), or, with `scalesFirst`, as
 * (w_scale * x_scale) * f32(ival), the association gcc -Ofast compiles it to (assembly/runq.ts).
 */
@inline export function matmulQ8Rows(
  out: usize, xq: usize, xs: usize, wq: usize, ws: usize,
  T: i32, d: i32, gs: i32, outStride: i32, rowStart: i32, rowEnd: i32, scalesFirst: bool,
): void {
  const groups = d / gs;
  for (let i = rowStart; i < rowEnd; i++) {
    const rowBase = i * d;
    const wRow = wq + <usize>rowBase;
    for (let t = 0; t < T; t++) {
      const xRow = xq + <usize>(t * d);
      const xScales = xs + (<usize>(t * groups) << 2);
      let val: f32 = 0;
      for (let g = 0; g < groups; g++) {
        const col = g * gs;
        const ival = <f32>groupDot(xRow + <usize>col, wRow + <usize>col, gs);
        const wScale = load<f32>(ws + (<usize>((rowBase + col) / gs) << 2));
        const xScale = load<f32>(xScales + (<usize>g << 2));
        val += scalesFirst ? (wScale * xScale) * ival : ival * wScale * xScale;
      }
      store<f32>(out + (<usize>(t * outStride + i) << 2), val);
    }
  }
}

/** matmulQ8Rows in runq.c's source order. */
export function matmulQ8(
  out: usize, xq: usize, xs: usize, wq: usize, ws: usize,
  T: i32, d: i32, gs: i32, outStride: i32, rowStart: i32, rowEnd: i32,
): void {
  matmulQ8Rows(out, xq, xs, wq, ws, T, d, gs, outStride, rowStart, rowEnd, false);
}

/** Embedding lookup from a quantized table: out[t][j] = q[r][j] * s[(r*d+j)/gs], r = tokens[t]. */
export function embedQ8(out: usize, wq: usize, ws: usize, tokens: usize, T: i32, d: i32, gs: i32): void {
  for (let t = 0; t < T; t++) {
    const r = load<i32>(tokens + (<usize>t << 2));
    const base = r * d;
    const dst = out + (<usize>(t * d) << 2);
    for (let j = 0; j < d; j++) {
      store<f32>(dst + (<usize>j << 2), <f32>load<i8>(wq + <usize>(base + j)) * load<f32>(ws + (<usize>((base + j) / gs) << 2)));
    }
  }
}
