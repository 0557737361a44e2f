// ============================================================================================
// Bit-exact emulation of the floating-point primitives runq.c uses when gcc -Ofast -march=native
// compiles it on AMD Zen 4/5 against glibc 2.36
// ============================================================================================
//
// WebAssembly has no fused multiply-add, no approximate reciprocals and runs without
// flush-to-zero, so each primitive is rebuilt from exact pieces:
//
//   fma32, fma64   fused multiply-add, correctly rounded (exact product, sum rounded to odd, then
//                  one final rounding; Boldo and Melquiond's proof covers the f64 case)
//   roundFtz       f64 -> f32 rounding under MXCSR.FTZ: a result that is tiny after rounding to
//                  24 bits with an unbounded exponent becomes a signed zero (crtfastmath.o, linked
//                  by -Ofast, sets FTZ and DAZ)
//   glibcExpf      glibc's scalar expf as its FMA variant computes it (ARM optimized-routines
//                  algorithm: 32-entry 2^(i/32) table, cubic polynomial in f64)
//   mvecExpf       one lane of libmvec's _ZGVeN16v_expf / _ZGVdN8v_expf (both run the same f32
//                  code: range reduction by ln2 in two parts, degree-5 polynomial, FMA throughout);
//                  lanes with |x| > 87.3365 fall back to scalar expf, as libmvec does
//   glibcSincosf   glibc's sincosf (FMA variant): direct polynomial below pi/4, fast reduction
//                  below 120, 4/pi bit-table reduction above
//   rcp12, rsqrt12 AMD's RCPPS and RSQRTSS (measured tables, see runq-tables.ts)
//   rcp14          VRCP14PS (64 linear segments)
//
// Each was checked against the real instruction or library function on every one of the 2^32
// f32 inputs (NaN payloads aside), with MXCSR.FTZ|DAZ set as in runq.

import { EXP2F_TABLE, INV_PIO4, RCP12_TABLE, RCP14_COEFFS, RSQRT12_TABLE, SINCOSF_POLY } from "./runq-tables";

const F32_MIN_NORMAL: f64 = 1.1754943508222875e-38; // 2^-126
// 2^-126 - 2^-151: the smallest value that rounds to 2^-126 at 24 bits (ties go to the even 2^-126).
const F32_FTZ_CUTOFF: f64 = F32_MIN_NORMAL - 3.5032461608120427e-46;
const VELTKAMP: f64 = 134217729.0; // 2^27 + 1

// ---------------------------------------------------------------------------------------------
// Fused multiply-add and flush-to-zero rounding
// ---------------------------------------------------------------------------------------------

/** a + b rounded to odd: the nearest double whose last bit is 1 when the sum is inexact. */
@inline function addRoundOdd(a: f64, b: f64): f64 {
  let s = a + b;
  const bb = s - a;
  const err = (a - (s - bb)) + (b - bb); // exact: s + err == a + b (TwoSum)
  if (err != 0) {
    let u = reinterpret<u64>(s);
    if ((u & 1) == 0) {
      // Step one ulp toward the exact value: up in magnitude when err has s's sign.
      u = (err > 0) == (s > 0) ? u + 1 : u - 1;
      s = reinterpret<f64>(u);
    }
  }
  return s;
}

/** a * b + c with one rounding, for finite operands whose partial products neither overflow nor underflow. */
export function fma64(a: f64, b: f64, c: f64): f64 {
  const p = a * b;
  let t = VELTKAMP * a;
  const ah = t - (t - a);
  const al = a - ah;
  t = VELTKAMP * b;
  const bh = t - (t - b);
  const bl = b - bh;
  const pl = ((ah * bh - p) + ah * bl + al * bh) + al * bl; // exact: p + pl == a * b (Dekker)
  const th = c + p;
  const bb = th - c;
  const tl = (c - (th - bb)) + (p - bb); // exact: th + tl == c + p
  return th + addRoundOdd(tl, pl);
}

/** Round a double to f32 as SSE does with MXCSR.FTZ: results tiny after rounding become signed zeros. */
@inline export function roundFtz(s: f64): f32 {
  const a = Math.abs(s);
  if (a >= F32_MIN_NORMAL) return <f32>s;
  const neg = reinterpret<i64>(s) < 0;
  if (a >= F32_FTZ_CUTOFF) return neg ? -<f32>F32_MIN_NORMAL : <f32>F32_MIN_NORMAL;
  return neg ? <f32>-0.0 : <f32>0.0;
}

/** f32 fused multiply-add under FTZ: the f64 product is exact, the rounded-to-odd sum rounds once more exactly. */
@inline export function fma32(a: f32, b: f32, c: f32): f32 {
  return roundFtz(addRoundOdd(<f64>a * <f64>b, <f64>c));
}

/** Two lanes of addRoundOdd(a * b, c) on f64x2 (a, b promoted from f32, so the products are exact). */
@inline function mulAddRoundOdd2(a: v128, b: v128, c: v128): v128 {
  const p = f64x2.mul(a, b);
  const s = f64x2.add(p, c);
  const bb = f64x2.sub(s, p);
  const err = f64x2.add(f64x2.sub(p, f64x2.sub(s, bb)), f64x2.sub(c, bb));
  const one = i64x2.splat(1);
  // Inexact lanes whose last bit is even step by +1 (err has s's sign) or -1 (it has not).
  const fix = v128.and(f64x2.ne(err, f64x2.splat(0)), i64x2.eq(v128.and(s, one), i64x2.splat(0)));
  const step = v128.or(i64x2.shr_s(v128.xor(err, s), 63), one);
  return i64x2.add(s, v128.and(fix, step));
}

/** roundFtz's flush on two f64 lanes, before they are narrowed to f32. */
@inline function flushTiny2(s: v128): v128 {
  const a = f64x2.abs(s);
  const tiny = f64x2.lt(a, f64x2.splat(F32_MIN_NORMAL));
  const up = v128.and(f64x2.ge(a, f64x2.splat(F32_FTZ_CUTOFF)), f64x2.splat(F32_MIN_NORMAL));
  const flushed = v128.or(v128.and(s, i64x2.splat(0x8000000000000000)), up);
  return v128.bitselect(flushed, s, tiny);
}

/** Four lanes of fma32: the same bits as fma32 on each lane. */
@inline export function fma32x4(a: v128, b: v128, c: v128): v128 {
  const lo = flushTiny2(mulAddRoundOdd2(f64x2.promote_low_f32x4(a), f64x2.promote_low_f32x4(b), f64x2.promote_low_f32x4(c)));
  const ah = v128.shuffle<i32>(a, a, 2, 3, 2, 3);
  const bh = v128.shuffle<i32>(b, b, 2, 3, 2, 3);
  const ch = v128.shuffle<i32>(c, c, 2, 3, 2, 3);
  const hi = flushTiny2(mulAddRoundOdd2(f64x2.promote_low_f32x4(ah), f64x2.promote_low_f32x4(bh), f64x2.promote_low_f32x4(ch)));
  return v128.shuffle<i32>(f32x4.demote_f64x2_zero(lo), f32x4.demote_f64x2_zero(hi), 0, 1, 4, 5);
}

/** f32 product under FTZ (the f64 product is exact). */
@inline export function mulFtz(a: f32, b: f32): f32 {
  return roundFtz(<f64>a * <f64>b);
}

// ---------------------------------------------------------------------------------------------
// expf: glibc scalar and libmvec vector lane
// ---------------------------------------------------------------------------------------------

const EXPF_INV_LN2_N: f64 = reinterpret<f64>(0x40471547652b82fe); // 32 / ln 2
const EXPF_SHIFT: f64 = reinterpret<f64>(0x4338000000000000); // 1.5 * 2^52: rounds to integers
const EXPF_C0: f64 = reinterpret<f64>(0x3ebc6af84b912394);
const EXPF_C1: f64 = reinterpret<f64>(0x3f2ebfce50fac4f3);
const EXPF_C2: f64 = reinterpret<f64>(0x3f962e42ff0c52d6);

/** glibc 2.36 expf (its FMA build, which the ifunc picks on this CPU), with the FTZ result rounding. */
export function glibcExpf(x: f32): f32 {
  const ix = reinterpret<u32>(x);
  const abstop = (ix >> 20) & 0x7ff;
  if (abstop > 0x42a) {
    // |x| >= 88: the special cases, in glibc's order.
    if (ix == 0xff800000) return 0;
    if (abstop > 0x7f7) return x + x;
    if (x > reinterpret<f32>(0x42b17217)) return <f32>Infinity;
    // Below -103.28 glibc returns 0 or a denormal; FTZ makes both zero.
    if (x < reinterpret<f32>(0xc2ce8ecf)) return 0;
  }
  const xd = <f64>x;
  const kdShifted = fma64(EXPF_INV_LN2_N, xd, EXPF_SHIFT);
  const ki = reinterpret<u64>(kdShifted);
  const kd = kdShifted - EXPF_SHIFT;
  const r = fma64(EXPF_INV_LN2_N, xd, -kd);
  const s = reinterpret<f64>(load<u64>(EXP2F_TABLE + (<usize>(ki & 31) << 3)) + (ki << 47));
  const z = fma64(EXPF_C0, r, EXPF_C1);
  const r2 = r * r;
  let y = fma64(EXPF_C2, r, 1.0);
  y = fma64(z, r2, y);
  return roundFtz(y * s);
}

/** One lane of libmvec's vector expf (AVX-512 and AVX2 variants compute identically). */
export function mvecExpf(x: f32): f32 {
  if (<i32>(reinterpret<u32>(x) & 0x7fffffff) > 0x42aeac4f) return glibcExpf(x);
  const shifter = reinterpret<f32>(0x4b400000); // 1.5 * 2^23
  const z = fma32(x, reinterpret<f32>(0x3fb8aa3b), shifter);
  const n = z - shifter;
  const scale = reinterpret<f32>((reinterpret<u32>(z) + 127) << 23); // 2^n from z's low bits
  let r = fma32(-n, reinterpret<f32>(0x3f317200), x);
  r = fma32(-n, reinterpret<f32>(0x35bfbe8e), r);
  let p = reinterpret<f32>(0x3c07d9fe);
  p = fma32(p, r, reinterpret<f32>(0x3d2b8392));
  p = fma32(p, r, reinterpret<f32>(0x3e2aacac));
  p = fma32(p, r, reinterpret<f32>(0x3effff34));
  p = fma32(p, r, reinterpret<f32>(0x3f7ffffe));
  p = fma32(p, r, 1.0);
  return mulFtz(scale, p);
}

// ---------------------------------------------------------------------------------------------
// sincosf
// ---------------------------------------------------------------------------------------------

/** Results of the last glibcSincosf call (a module global: each thread has its own instance). */
export let sincosSin: f32 = 0;
export let sincosCos: f32 = 0;

const HPI_INV_2_24: f64 = reinterpret<f64>(0x41645f306dc9c883); // 2/pi * 2^24
const HPI: f64 = reinterpret<f64>(0x3ff921fb54442d18); // pi/2
const PI63: f64 = reinterpret<f64>(0x3c1921fb54442d18); // pi * 2^-63

/** sign of sin per quadrant */
@inline function quadrantSign(q: i32): f64 {
  return (q & 3) == 1 || (q & 3) == 2 ? -1.0 : 1.0;
}

@inline function polyCoeff(table: i32, i: i32): f64 {
  return reinterpret<f64>(load<u64>(SINCOSF_POLY + (<usize>(table * 8 + i) << 3)));
}

/**
 * glibc's sincosf_poly: xs is the reduced argument with the quadrant's sign, x2 its square;
 * table 1 holds the cosine coefficients negated (for odd half-turns); odd n swaps sin and cos.
 */
function sincosPoly(xs: f64, x2: f64, table: i32, n: i32): void {
  const s1v = fma64(x2, polyCoeff(table, 6), polyCoeff(table, 4));
  const c2v = fma64(x2, polyCoeff(table, 7), polyCoeff(table, 5));
  const x3 = x2 * xs;
  const x4 = x2 * x2;
  const c1v = fma64(x2, polyCoeff(table, 1), polyCoeff(table, 0));
  const x5 = x2 * x3;
  const x6 = x2 * x4;
  const s = fma64(x3, polyCoeff(table, 2), xs);
  const c = fma64(x4, polyCoeff(table, 3), c1v);
  const sv = roundFtz(fma64(s1v, x5, s));
  const cv = roundFtz(fma64(c2v, x6, c));
  if (n & 1) {
    sincosSin = cv;
    sincosCos = sv;
  } else {
    sincosSin = sv;
    sincosCos = cv;
  }
}

/** glibc 2.36 sincosf (FMA build); results in sincosSin / sincosCos. */
export function glibcSincosf(y: f32): void {
  const iy = reinterpret<u32>(y);
  const abstop = (iy >> 20) & 0x7ff;
  const x = <f64>y;
  if (abstop <= 0x3f3) {
    // |y| < pi/4
    if (abstop <= 0x397) {
      // |y| < 2^-12
      sincosSin = y;
      sincosCos = 1;
      return;
    }
    sincosPoly(x, x * x, 0, 0);
    return;
  }
  if (abstop <= 0x42e) {
    // |y| < 120: n = nearest quadrant, from x * 2/pi scaled by 2^24 and truncated.
    const n = (<i32>(x * HPI_INV_2_24) + 0x800000) >> 24;
    const xr = fma64(-<f64>n, HPI, x);
    sincosPoly(xr * quadrantSign(n), xr * xr, (n & 2) != 0 ? 1 : 0, n);
    return;
  }
  if (abstop <= 0x7f7) {
    // Finite |y| >= 120: multiply the 24-bit significand by 4/pi in fixed point.
    const arr = INV_PIO4 + (<usize>((iy >> 26) & 15) << 2);
    const shift = (iy >> 23) & 7;
    const xi: u32 = ((iy & 0xffffff) | 0x800000) << shift;
    let res0: u64 = <u64>(xi * load<u32>(arr));
    const res1: u64 = <u64>xi * <u64>load<u32>(arr, 16);
    const res2: u64 = <u64>xi * <u64>load<u32>(arr, 32);
    res0 = (res2 >> 32) | (res0 << 32);
    res0 += res1;
    const n = (res0 + (<u64>1 << 61)) >> 62;
    res0 -= n << 62;
    const xr = <f64>(<i64>res0) * PI63;
    const ns = <i32>n + <i32>(iy >> 31);
    sincosPoly(xr * quadrantSign(ns), xr * xr, (ns & 2) != 0 ? 1 : 0, <i32>n);
    return;
  }
  sincosSin = y - y;
  sincosCos = y - y;
}

// ---------------------------------------------------------------------------------------------
// Approximate reciprocals (hardware instructions, under FTZ and DAZ)
// ---------------------------------------------------------------------------------------------

/** Shared special cases of rcp12 and rcp14: NaN stays NaN, +-inf -> +-0, zero or denormal (DAZ) -> +-inf. */
@inline function rcpSpecial(u: u32): f32 {
  const e = (u >> 23) & 0xff;
  if (e == 0xff) return (u & 0x7fffff) != 0 ? reinterpret<f32>(u | 0x400000) : reinterpret<f32>(u & 0x80000000);
  return reinterpret<f32>((u & 0x80000000) | 0x7f800000);
}

/** AMD RCPPS / RCPSS: 12-bit table result; results below the normal range flush to zero. */
export function rcp12(x: f32): f32 {
  const u = reinterpret<u32>(x);
  const e = <i32>((u >> 23) & 0xff);
  if (e == 0 || e == 0xff) return rcpSpecial(u);
  const ex = 253 - e;
  if (ex <= 0) return reinterpret<f32>(u & 0x80000000);
  const frac = <u32>load<u16>(RCP12_TABLE + (<usize>((u & 0x7fffff) >> 11) << 1)) << 11;
  return reinterpret<f32>((u & 0x80000000) | (<u32>ex << 23) | frac);
}

/** AMD RSQRTSS for x > 0 (runq only takes it of positive values); 0 -> inf, negative -> NaN. */
export function rsqrt12(x: f32): f32 {
  const u = reinterpret<u32>(x);
  const e = <i32>((u >> 23) & 0xff);
  if (e == 0xff) return (u & 0x7fffff) != 0 ? reinterpret<f32>(u | 0x400000) : (u >> 31 ? <f32>NaN : <f32>0);
  if (e == 0) return reinterpret<f32>((u & 0x80000000) | 0x7f800000);
  if (u >> 31) return <f32>NaN;
  const ue = e - 127;
  const index = ((ue & 1) << 12) | <i32>((u & 0x7fffff) >> 11);
  const frac = <u32>load<u16>(RSQRT12_TABLE + (<usize>index << 1)) << 11;
  return reinterpret<f32>((<u32>(126 - (ue >> 1)) << 23) | frac);
}

/** VRCP14PS: the fraction's top 6 bits pick a segment, its top 16 bits interpolate linearly. */
export function rcp14(x: f32): f32 {
  const u = reinterpret<u32>(x);
  const e = <i32>((u >> 23) & 0xff);
  if (e == 0 || e == 0xff) return rcpSpecial(u);
  const f = u & 0x7fffff;
  const one17: i64 = 1 << 17;
  let sig17 = one17; // 1/1.0 exactly
  if (f != 0) {
    const f16 = <i32>(f >> 7);
    const seg = f16 >> 10;
    const delta = f16 - ((2 * seg + 1) << 9);
    const a = <i64>load<u32>(RCP14_COEFFS + (<usize>seg << 3));
    const b = <i64>load<u32>(RCP14_COEFFS + (<usize>seg << 3), 4);
    sig17 = (a * 256 - b * <i64>delta) / 512;
  }
  let ex: i32, frac: u32;
  if (sig17 == one17) {
    ex = 254 - e;
    frac = 0;
  } else {
    ex = 253 - e;
    frac = <u32>(sig17 - (one17 >> 1)) << 7;
  }
  if (ex <= 0) return reinterpret<f32>(u & 0x80000000);
  return reinterpret<f32>((u & 0x80000000) | (<u32>ex << 23) | frac);
}

/** gcc's 1/sqrtf(x) under -Ofast: rsqrtss refined by one Newton step, r*(r*x) - 3 fused, times r * -0.5. */
export function rsqrtNewton(x: f32): f32 {
  const r = rsqrt12(x);
  return fma32(r * x, r, -3.0) * (r * -0.5);
}

/** One Newton step on a reciprocal estimate r0 of d, as gcc emits it: (r0 + r0) - r0 * (r0 * d), under FTZ. */
@inline export function recipNewton(r0: f32, d: f32): f32 {
  return roundFtz(addRoundOdd(<f64>(r0 + r0), -<f64>mulFtz(r0, r0 * d)));
}
