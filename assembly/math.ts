// ============================================================================================
// exp for softmax and SiLU, four lanes at a time
// ============================================================================================
//
// exp(x) = 2^n * exp(r), n = round(x / ln 2), r = x - n ln 2 (ln 2 split in two parts so r is
// exact), exp(r) by a degree-7 polynomial on |r| <= ln2/2 (Cephes' coefficients): about 1 ulp.
// The scalar and the SIMD versions perform the same f32 operations in the same order, so an
// element's result never depends on whether it fell in a vector or in a tail: kernels built on
// them stay batch-invariant.

const LOG2E: f32 = 1.44269504088896341;
const LN2_HI: f32 = 0.693359375;
const LN2_LO: f32 = -2.12194440e-4;
const P0: f32 = 1.9875691500e-4;
const P1: f32 = 1.3981999507e-3;
const P2: f32 = 8.3334519073e-3;
const P3: f32 = 4.1665795894e-2;
const P4: f32 = 1.6666665459e-1;
const P5: f32 = 5.0000001201e-1;
/** Below this exp underflows to zero (2^-126 is the smallest normal scale built below). */
const X_MIN: f32 = -87.33654;
/** Above this exp overflows to infinity. */
const X_MAX: f32 = 88.72283;

@inline export function expScalar(x: f32): f32 {
  if (x < X_MIN) return 0;
  if (x > X_MAX) return Infinity;
  const n = nearest<f32>(x * LOG2E);
  const r = (x - n * LN2_HI) - n * LN2_LO;
  const r2 = r * r;
  let y = ((((P0 * r + P1) * r + P2) * r + P3) * r + P4) * r + P5;
  y = (y * r2 + r) + 1;
  // n in [-126, 128]: 2^n as f32 bits; 2^128 is split as 2^127 * 2 to stay representable.
  const ni = <i32>n; // saturating: nontrapping-f2i is on by default
  if (ni > 127) return y * reinterpret<f32>(254 << 23) * 2;
  return y * reinterpret<f32>((ni + 127) << 23);
}

@inline export function exp4(x: v128): v128 {
  const xc = f32x4.min(f32x4.max(x, f32x4.splat(X_MIN)), f32x4.splat(X_MAX));
  const n = f32x4.nearest(f32x4.mul(xc, f32x4.splat(LOG2E)));
  const r = f32x4.sub(f32x4.sub(xc, f32x4.mul(n, f32x4.splat(LN2_HI))), f32x4.mul(n, f32x4.splat(LN2_LO)));
  const r2 = f32x4.mul(r, r);
  let y = f32x4.add(f32x4.mul(f32x4.splat(P0), r), f32x4.splat(P1));
  y = f32x4.add(f32x4.mul(y, r), f32x4.splat(P2));
  y = f32x4.add(f32x4.mul(y, r), f32x4.splat(P3));
  y = f32x4.add(f32x4.mul(y, r), f32x4.splat(P4));
  y = f32x4.add(f32x4.mul(y, r), f32x4.splat(P5));
  y = f32x4.add(f32x4.add(f32x4.mul(y, r2), r), f32x4.splat(1));
  const ni = i32x4.trunc_sat_f32x4_s(n);
  // Lanes with n = 128 use 2^127 * 2, like the scalar path.
  const big = i32x4.gt_s(ni, i32x4.splat(127));
  const e = i32x4.shl(i32x4.add(i32x4.min_s(ni, i32x4.splat(127)), i32x4.splat(127)), 23);
  let res = f32x4.mul(y, e);
  res = v128.bitselect(f32x4.mul(res, f32x4.splat(2)), res, big);
  // Saturated lanes: exactly 0 below X_MIN, infinity above X_MAX.
  res = v128.bitselect(f32x4.splat(0), res, f32x4.lt(x, f32x4.splat(X_MIN)));
  return v128.bitselect(f32x4.splat(Infinity), res, f32x4.gt(x, f32x4.splat(X_MAX)));
}

/** out[i] = exp(x[i]) for n elements (SIMD body, scalar tail); exported for tests. */
export function expF32(out: usize, x: usize, n: i32): void {
  const n4 = n & ~3;
  for (let i = 0; i < n4; i += 4) v128.store(out + (<usize>i << 2), exp4(v128.load(x + (<usize>i << 2))));
  for (let i = n4; i < n; i++) store<f32>(out + (<usize>i << 2), expScalar(load<f32>(x + (<usize>i << 2))));
}
