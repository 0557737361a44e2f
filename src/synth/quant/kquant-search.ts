/**
 * ggml's searches for a K-quant sub-block's scale (ggml-quants.c: make_qx_quants,
 * make_q3_quants, make_qkx2_quants, nearest_int), in f32 arithmetic like the C code: every
 * operation is rounded with Math.fround, so the chosen levels are the ones llama-quantize picks.
 */
import { f32Bits } from "../../util/half.ts";

const fr = Math.fround;
/** GROUP_MAX_EPS: a group whose largest magnitude is below this is all zero. */
const GROUP_MAX_EPS = fr(1e-15);

/** Round an f32 to the nearest integer, ties to even (ggml's nearest_int; |x| < 2^22). */
export function nearestInt(x: number): number {
  return (f32Bits(fr(x + 12582912)) & 0x007fffff) - 0x00400000;
}

/** The first value of largest magnitude among n values, or null when all are (nearly) zero. */
function signedMax(x: Float32Array, at: number, n: number): number | null {
  let max = 0;
  let amax = 0;
  for (let i = 0; i < n; i++) {
    const ax = Math.abs(x[at + i]!);
    if (ax > amax) {
      amax = ax;
      max = x[at + i]!;
    }
  }
  return amax < GROUP_MAX_EPS ? null : max;
}

/**
 * Levels L[i] in 0..2*nmax-1 for x (offset by nmax) with one signed scale, refined to minimize
 * the x^2-weighted error (rmse_type 1, no importance weights); returns the scale.
 */
export function makeQxQuants(n: number, nmax: number, x: Float32Array, at: number, L: Int8Array, lAt: number): number {
  const max = signedMax(x, at, n);
  if (max === null) {
    L.fill(0, lAt, lAt + n);
    return 0;
  }
  let iscale = fr(-nmax / max);
  let sumlx = 0;
  let suml2 = 0;
  for (let i = 0; i < n; i++) {
    const xi = x[at + i]!;
    const l = Math.max(-nmax, Math.min(nmax - 1, nearestInt(fr(iscale * xi))));
    L[lAt + i] = l + nmax;
    const w = fr(xi * xi);
    sumlx = fr(sumlx + fr(fr(w * xi) * l));
    suml2 = fr(suml2 + fr(fr(w * l) * l));
  }
  let scale = suml2 !== 0 ? fr(sumlx / suml2) : 0;
  let best = fr(scale * sumlx);
  for (let is = -9; is <= 9; is++) {
    if (is === 0) continue;
    iscale = fr(-fr(nmax + fr(fr(0.1) * is)) / max);
    sumlx = 0;
    suml2 = 0;
    for (let i = 0; i < n; i++) {
      const xi = x[at + i]!;
      const l = Math.max(-nmax, Math.min(nmax - 1, nearestInt(fr(iscale * xi))));
      const w = fr(xi * xi);
      sumlx = fr(sumlx + fr(fr(w * xi) * l));
      suml2 = fr(suml2 + fr(fr(w * l) * l));
    }
    if (suml2 > 0 && fr(sumlx * sumlx) > fr(best * suml2)) {
      for (let i = 0; i < n; i++) {
        L[lAt + i] = nmax + Math.max(-nmax, Math.min(nmax - 1, nearestInt(fr(iscale * x[at + i]!))));
      }
      scale = fr(sumlx / suml2);
      best = fr(scale * sumlx);
    }
  }
  return scale;
}

/** Q3_K's per-16 search (make_q3_quants with do_rmse): levels 0..2*nmax-1 and a signed scale. */
export function makeQ3Quants(n: number, nmax: number, x: Float32Array, at: number, L: Int8Array, lAt: number): number {
  const max = signedMax(x, at, n);
  if (max === null) {
    L.fill(0, lAt, lAt + n);
    return 0;
  }
  const iscale = fr(-nmax / max);
  let sumlx = 0;
  let suml2 = 0;
  for (let i = 0; i < n; i++) {
    const xi = x[at + i]!;
    const l = Math.max(-nmax, Math.min(nmax - 1, nearestInt(fr(iscale * xi))));
    L[lAt + i] = l;
    const w = fr(xi * xi);
    sumlx = fr(sumlx + fr(fr(w * xi) * l));
    suml2 = fr(suml2 + fr(fr(w * l) * l));
  }
  for (let itry = 0; itry < 5; itry++) {
    let changed = 0;
    for (let i = 0; i < n; i++) {
      const xi = x[at + i]!;
      const w = fr(xi * xi);
      let slx = fr(sumlx - fr(fr(w * xi) * L[lAt + i]!));
      if (slx > 0) {
        let sl2 = fr(suml2 - fr(fr(w * L[lAt + i]!) * L[lAt + i]!));
        let newL = nearestInt(fr(fr(xi * sl2) / slx));
        newL = Math.max(-nmax, Math.min(nmax - 1, newL));
        if (newL !== L[lAt + i]) {
          slx = fr(slx + fr(fr(w * xi) * newL));
          sl2 = fr(sl2 + fr(fr(w * newL) * newL));
          if (sl2 > 0 && fr(fr(slx * slx) * suml2) > fr(fr(sumlx * sumlx) * sl2)) {
            L[lAt + i] = newL;
            sumlx = slx;
            suml2 = sl2;
            changed++;
          }
        }
      }
    }
    if (changed === 0) break;
  }
  for (let i = 0; i < n; i++) L[lAt + i] = L[lAt + i]! + nmax;
  return suml2 > 0 ? fr(sumlx / suml2) : 0;
}

/**
 * Levels 0..nmax with a scale and a minimum (x ~ scale * L - min), searched over nstep + 1
 * candidate scales to minimize the weighted error (make_qkx2_quants). Returns [scale, min].
 */
export function makeQkx2Quants(
  n: number, nmax: number, x: Float32Array, at: number, weights: Float32Array, L: Uint8Array, lAt: number,
  rmin: number, rdelta: number, nstep: number, useMad: boolean,
): [number, number] {
  let min = x[at]!;
  let max = x[at]!;
  let sumW = weights[0]!;
  let sumX = fr(sumW * x[at]!);
  for (let i = 1; i < n; i++) {
    const xi = x[at + i]!;
    if (xi < min) min = xi;
    if (xi > max) max = xi;
    const w = weights[i]!;
    sumW = fr(sumW + w);
    sumX = fr(sumX + fr(w * xi));
  }
  if (min > 0) min = 0;
  if (max === min) {
    L.fill(0, lAt, lAt + n);
    return [0, -min];
  }
  let iscale = fr(nmax / fr(max - min));
  let scale = fr(1 / iscale);
  let bestError = 0;
  const err = (d: number) => (useMad ? Math.abs(d) : fr(d * d));
  for (let i = 0; i < n; i++) {
    const l = nearestInt(fr(iscale * fr(x[at + i]! - min)));
    L[lAt + i] = Math.max(0, Math.min(nmax, l));
    const diff = fr(fr(fr(scale * L[lAt + i]!) + min) - x[at + i]!);
    bestError = fr(bestError + fr(weights[i]! * err(diff)));
  }
  if (nstep < 1) return [scale, -min];
  const aux = new Uint8Array(n);
  for (let is = 0; is <= nstep; is++) {
    iscale = fr(fr(fr(rmin + fr(rdelta * is)) + nmax) / fr(max - min));
    let sumL = 0;
    let sumL2 = 0;
    let sumXL = 0;
    for (let i = 0; i < n; i++) {
      const l = Math.max(0, Math.min(nmax, nearestInt(fr(iscale * fr(x[at + i]! - min)))));
      aux[i] = l;
      const w = weights[i]!;
      sumL = fr(sumL + fr(w * l));
      sumL2 = fr(sumL2 + fr(fr(w * l) * l));
      sumXL = fr(sumXL + fr(fr(w * l) * x[at + i]!));
    }
    const D = fr(fr(sumW * sumL2) - fr(sumL * sumL));
    if (D > 0) {
      let thisScale = fr(fr(fr(sumW * sumXL) - fr(sumX * sumL)) / D);
      let thisMin = fr(fr(fr(sumL2 * sumX) - fr(sumL * sumXL)) / D);
      if (thisMin > 0) {
        thisMin = 0;
        thisScale = fr(sumXL / sumL2);
      }
      let curError = 0;
      for (let i = 0; i < n; i++) {
        const diff = fr(fr(fr(thisScale * aux[i]!) + thisMin) - x[at + i]!);
        curError = fr(curError + fr(weights[i]! * err(diff)));
      }
      if (curError < bestError) {
        L.set(aux, lAt);
        bestError = curError;
        scale = thisScale;
        min = thisMin;
      }
    }
  }
  return [scale, -min];
}
