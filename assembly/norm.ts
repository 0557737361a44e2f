// ============================================================================================
// RMSNorm
// ============================================================================================

/** Sum of squares of x[0..n) in the canonical order: one f32x4 accumulator, fixed lane sum, scalar tail. */
@inline function sumSquares(x: usize, n: i32): f32 {
  const n4 = n & ~3;
  let acc = f32x4.splat(0);
  for (let j = 0; j < n4; j += 4) {
    const v = v128.load(x + (<usize>j << 2));
    acc = f32x4.add(acc, f32x4.mul(v, v));
  }
  let s = (f32x4.extract_lane(acc, 0) + f32x4.extract_lane(acc, 1)) + (f32x4.extract_lane(acc, 2) + f32x4.extract_lane(acc, 3));
  for (let j = n4; j < n; j++) {
    const v = load<f32>(x + (<usize>j << 2));
    s += v * v;
  }
  return s;
}

/** out[t] = w * (x[t] / rms(x[t])) for T rows of n floats; out may alias x. */
export function rmsnorm(out: usize, x: usize, w: usize, T: i32, n: i32, eps: f32): void {
  const n4 = n & ~3;
  for (let t = 0; t < T; t++) {
    const xt = x + (<usize>(t * n) << 2);
    const ot = out + (<usize>(t * n) << 2);
    const inv: f32 = 1.0 / Mathf.sqrt(sumSquares(xt, n) / <f32>n + eps);
    const vinv = f32x4.splat(inv);
    for (let j = 0; j < n4; j += 4) {
      const o = <usize>j << 2;
      v128.store(ot + o, f32x4.mul(v128.load(w + o), f32x4.mul(vinv, v128.load(xt + o))));
    }
    for (let j = n4; j < n; j++) {
      const o = <usize>j << 2;
      store<f32>(ot + o, load<f32>(w + o) * (inv * load<f32>(xt + o)));
    }
  }
}
