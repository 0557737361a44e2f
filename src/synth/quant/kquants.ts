/**
 * ggml's K-quants (super-blocks of 256 values): the reference quantizers llama-quantize uses
 * without an importance matrix (quantize_row_q*_K_ref), in f32 arithmetic, and dequantize_row_*.
 */
import { f32ToHalf, halfToF32 } from "../../util/half.ts";
import { makeQ3Quants, makeQkx2Quants, makeQxQuants, nearestInt } from "./kquant-search.ts";

const fr = Math.fround;
export const QK_K = 256;

export const K_BLOCK_BYTES = { Q2_K: 84, Q3_K: 110, Q4_K: 144, Q5_K: 176, Q6_K: 210 } as const;
export type KType = keyof typeof K_BLOCK_BYTES;

function setHalf(out: Uint8Array, at: number, x: number): void {
  const h = f32ToHalf(x);
  out[at] = h & 0xff;
  out[at + 1] = h >>> 8;
}

function getHalf(b: Uint8Array, at: number): number {
  return halfToF32(b[at]! | (b[at + 1]! << 8));
}

/** Scale and minimum j (0..7) of Q4_K/Q5_K's 12 packed bytes (get_scale_min_k4). */
export function scaleMinK4(b: Uint8Array, q: number, j: number): [number, number] {
  if (j < 4) return [b[q + j]! & 63, b[q + j + 4]! & 63];
  return [(b[q + j + 4]! & 0xf) | ((b[q + j - 4]! >> 6) << 4), (b[q + j + 4]! >> 4) | ((b[q + j]! >> 6) << 4)];
}

/** Q3_K's 16 signed 6-bit scales from 12 packed bytes. */
export function scalesQ3K(b: Uint8Array, q: number): number[] {
  const out: number[] = [];
  for (let j = 0; j < 16; j++) {
    const low = j < 8 ? b[q + j]! & 0xf : b[q + j - 8]! >> 4;
    const high = (b[q + 8 + (j & 3)]! >> (2 * (j >> 2))) & 3;
    out.push((low | (high << 4)) - 32);
  }
  return out;
}

/** Pack 8 six-bit scales and minimums as Q4_K/Q5_K store them. */
function packScalesK4(out: Uint8Array, q: number, ls: number[], lm: number[]): void {
  for (let j = 0; j < 8; j++) {
    if (j < 4) {
      out[q + j] = ls[j]!;
      out[q + j + 4] = lm[j]!;
    } else {
      out[q + j + 4] = (ls[j]! & 0xf) | ((lm[j]! & 0xf) << 4);
      out[q + j - 4] |= (ls[j]! >> 4) << 6;
      out[q + j] |= (lm[j]! >> 4) << 6;
    }
  }
}

/** Q4_K / Q5_K: 8 sub-blocks of 32 with 6-bit scales and minimums. */
function quantizeQ45K(type: "Q4_K" | "Q5_K", x: Float32Array, at: number, out: Uint8Array, o: number): void {
  const nmax = type === "Q4_K" ? 15 : 31;
  const [rmin, nstep] = type === "Q4_K" ? [-1, 20] : [-0.5, 15];
  const L = new Uint8Array(QK_K);
  const weights = new Float32Array(32);
  const scales: number[] = [];
  const mins: number[] = [];
  let maxScale = 0;
  let maxMin = 0;
  for (let j = 0; j < 8; j++) {
    let sumX2 = 0;
    for (let l = 0; l < 32; l++) sumX2 = fr(sumX2 + fr(x[at + 32 * j + l]! * x[at + 32 * j + l]!));
    const avX = fr(Math.sqrt(fr(sumX2 / 32)));
    for (let l = 0; l < 32; l++) weights[l] = fr(avX + Math.abs(x[at + 32 * j + l]!));
    const [scale, min] = makeQkx2Quants(32, nmax, x, at + 32 * j, weights, L, 32 * j, fr(rmin), fr(0.1), nstep, false);
    scales.push(scale);
    mins.push(min);
    if (scale > maxScale) maxScale = scale;
    if (min > maxMin) maxMin = min;
  }
  const invScale = maxScale > 0 ? fr(63 / maxScale) : 0;
  const invMin = maxMin > 0 ? fr(63 / maxMin) : 0;
  const ls = scales.map((s) => Math.min(63, nearestInt(fr(invScale * s)) & 0xff));
  const lm = mins.map((m) => Math.min(63, nearestInt(fr(invMin * m)) & 0xff));
  packScalesK4(out, o + 4, ls, lm);
  setHalf(out, o, fr(maxScale / 63));
  setHalf(out, o + 2, fr(maxMin / 63));
  const d0 = getHalf(out, o);
  const dmin0 = getHalf(out, o + 2);
  for (let j = 0; j < 8; j++) {
    const [sc, m] = scaleMinK4(out, o + 4, j);
    const d = fr(d0 * sc);
    if (d === 0) continue;
    const dm = fr(dmin0 * m);
    for (let ii = 0; ii < 32; ii++) {
      L[32 * j + ii] = Math.max(0, Math.min(nmax, nearestInt(fr(fr(x[at + 32 * j + ii]! + dm) / d))));
    }
  }
  if (type === "Q4_K") {
    for (let j = 0; j < QK_K; j += 64) for (let l = 0; l < 32; l++) out[o + 16 + j / 2 + l] = L[j + l]! | (L[j + l + 32]! << 4);
    return;
  }
  let m1 = 1;
  let m2 = 2;
  for (let n = 0; n < QK_K; n += 64) {
    for (let j = 0; j < 32; j++) {
      let l1 = L[n + j]!;
      if (l1 > 15) {
        l1 -= 16;
        out[o + 16 + j] |= m1;
      }
      let l2 = L[n + j + 32]!;
      if (l2 > 15) {
        l2 -= 16;
        out[o + 16 + j] |= m2;
      }
      out[o + 48 + n / 2 + j] = l1 | (l2 << 4);
    }
    m1 <<= 2;
    m2 <<= 2;
  }
}

function quantizeQ6K(x: Float32Array, at: number, out: Uint8Array, o: number): void {
  const L = new Int8Array(QK_K);
  const scales: number[] = [];
  let maxScale = 0;
  let maxAbsScale = 0;
  for (let ib = 0; ib < 16; ib++) {
    const scale = makeQxQuants(16, 32, x, at + 16 * ib, L, 16 * ib);
    scales.push(scale);
    if (Math.abs(scale) > maxAbsScale) {
      maxAbsScale = Math.abs(scale);
      maxScale = scale;
    }
  }
  if (maxAbsScale < fr(1e-15)) return; // all zero (the block stays zeroed)
  const iscale = fr(-128 / maxScale);
  setHalf(out, o + 208, fr(1 / iscale));
  for (let ib = 0; ib < 16; ib++) out[o + 192 + ib] = Math.min(127, nearestInt(fr(iscale * scales[ib]!))) & 0xff;
  const d0 = getHalf(out, o + 208);
  for (let j = 0; j < 16; j++) {
    const d = fr(d0 * ((out[o + 192 + j]! << 24) >> 24));
    if (d === 0) continue;
    for (let ii = 0; ii < 16; ii++) L[16 * j + ii] = Math.max(-32, Math.min(31, nearestInt(fr(x[at + 16 * j + ii]! / d)))) + 32;
  }
  for (let j = 0; j < QK_K; j += 128) {
    const ql = o + j / 2;
    const qh = o + 128 + j / 4;
    for (let l = 0; l < 32; l++) {
      const q = [0, 32, 64, 96].map((k) => L[j + l + k]!);
      out[ql + l] = (q[0]! & 0xf) | ((q[2]! & 0xf) << 4);
      out[ql + l + 32] = (q[1]! & 0xf) | ((q[3]! & 0xf) << 4);
      out[qh + l] = (q[0]! >> 4) | ((q[1]! >> 4) << 2) | ((q[2]! >> 4) << 4) | ((q[3]! >> 4) << 6);
    }
  }
}

function quantizeQ2K(x: Float32Array, at: number, out: Uint8Array, o: number): void {
  const L = new Uint8Array(QK_K);
  const weights = new Float32Array(16);
  const scales: number[] = [];
  const mins: number[] = [];
  let maxScale = 0;
  let maxMin = 0;
  for (let j = 0; j < 16; j++) {
    for (let l = 0; l < 16; l++) weights[l] = Math.abs(x[at + 16 * j + l]!);
    const [scale, min] = makeQkx2Quants(16, 3, x, at + 16 * j, weights, L, 16 * j, fr(-0.5), fr(0.1), 15, true);
    scales.push(scale);
    mins.push(min);
    if (scale > maxScale) maxScale = scale;
    if (min > maxMin) maxMin = min;
  }
  if (maxScale > 0) {
    const iscale = fr(15 / maxScale);
    for (let j = 0; j < 16; j++) out[o + j] = nearestInt(fr(iscale * scales[j]!)) & 0xff;
    setHalf(out, o + 80, fr(maxScale / 15));
  }
  if (maxMin > 0) {
    const iscale = fr(15 / maxMin);
    for (let j = 0; j < 16; j++) out[o + j] |= (nearestInt(fr(iscale * mins[j]!)) << 4) & 0xff;
    setHalf(out, o + 82, fr(maxMin / 15));
  }
  for (let j = 0; j < 16; j++) {
    const d = fr(getHalf(out, o + 80) * (out[o + j]! & 0xf));
    if (d === 0) continue;
    const dm = fr(getHalf(out, o + 82) * (out[o + j]! >> 4));
    for (let ii = 0; ii < 16; ii++) L[16 * j + ii] = Math.max(0, Math.min(3, nearestInt(fr(fr(x[at + 16 * j + ii]! + dm) / d))));
  }
  packTwoBits(L, out, o + 16);
}

/** Four 2-bit levels per byte, as Q2_K and Q3_K store them: values l, l+32, l+64, l+96 of each 128. */
function packTwoBits(L: ArrayLike<number>, out: Uint8Array, q: number): void {
  for (let j = 0; j < QK_K; j += 128) {
    for (let l = 0; l < 32; l++) {
      out[q + j / 4 + l] = L[j + l]! | (L[j + l + 32]! << 2) | (L[j + l + 64]! << 4) | (L[j + l + 96]! << 6);
    }
  }
}

function quantizeQ3K(x: Float32Array, at: number, out: Uint8Array, o: number): void {
  const L = new Int8Array(QK_K);
  const scales: number[] = [];
  let maxScale = 0;
  let amax = 0;
  for (let j = 0; j < 16; j++) {
    const s = makeQ3Quants(16, 4, x, at + 16 * j, L, 16 * j);
    scales.push(s);
    if (Math.abs(s) > amax) {
      amax = Math.abs(s);
      maxScale = s;
    }
  }
  const sc = o + 96;
  if (maxScale !== 0) {
    const iscale = fr(-32 / maxScale);
    for (let j = 0; j < 16; j++) {
      let l = Math.max(-32, Math.min(31, (nearestInt(fr(iscale * scales[j]!)) << 24) >> 24)) + 32;
      if (j < 8) out[sc + j] = l & 0xf;
      else out[sc + j - 8] |= (l & 0xf) << 4;
      l >>= 4;
      out[sc + 8 + (j % 4)] |= l << (2 * (j >> 2));
    }
    setHalf(out, o + 108, fr(1 / iscale));
  }
  const d0 = getHalf(out, o + 108);
  const unpacked = scalesQ3K(out, sc);
  for (let j = 0; j < 16; j++) {
    const d = fr(d0 * unpacked[j]!);
    if (d === 0) continue;
    for (let ii = 0; ii < 16; ii++) L[16 * j + ii] = Math.max(-4, Math.min(3, nearestInt(fr(x[at + 16 * j + ii]! / d)))) + 4;
  }
  // High bits: the first 32 values in bit 0 of hmask[0..31], the next 32 in bit 1, ...
  for (let j = 0; j < QK_K; j++) {
    if (L[j]! > 3) {
      out[o + (j % 32)] |= 1 << (j >> 5);
      L[j] = L[j]! - 4;
    }
  }
  packTwoBits(L, out, o + 32);
}

/** Quantize x (a multiple of 256 values) to `type` super-blocks. */
export function quantizeK(type: KType, x: Float32Array): Uint8Array {
  if (x.length % QK_K !== 0) throw new RangeError(`${type} needs a multiple of ${QK_K} values, got ${x.length}`);
  const bs = K_BLOCK_BYTES[type];
  const out = new Uint8Array((x.length / QK_K) * bs);
  for (let i = 0; i < x.length / QK_K; i++) {
    const at = i * QK_K;
    const o = i * bs;
    if (type === "Q4_K" || type === "Q5_K") quantizeQ45K(type, x, at, out, o);
    else if (type === "Q6_K") quantizeQ6K(x, at, out, o);
    else if (type === "Q2_K") quantizeQ2K(x, at, out, o);
    else quantizeQ3K(x, at, out, o);
  }
  return out;
}

/** The values of `type` super-blocks (n values), as dequantize_row_*_K computes them. */
export function dequantizeK(type: KType, b: Uint8Array, n: number): Float32Array {
  const bs = K_BLOCK_BYTES[type];
  const y = new Float32Array(n);
  for (let i = 0; i < n / QK_K; i++) {
    const o = i * bs;
    const base = i * QK_K;
    for (let v = 0; v < QK_K; v++) {
      const half = v >> 7, j = (v >> 5) & 3, l = v & 31;
      let val: number;
      if (type === "Q2_K") {
        const q = (b[o + 16 + 32 * half + l]! >> (2 * j)) & 3;
        const sc = b[o + 8 * half + 2 * j + (l >> 4)]!;
        val = fr(fr(getHalf(b, o + 80) * (sc & 0xf)) * q) - fr(getHalf(b, o + 82) * (sc >> 4));
      } else if (type === "Q3_K") {
        const q = (b[o + 32 + 32 * half + l]! >> (2 * j)) & 3;
        const high = (b[o + l]! >> (4 * half + j)) & 1;
        val = fr(getHalf(b, o + 108) * scalesQ3K(b, o + 96)[8 * half + 2 * j + (l >> 4)]!) * (q - (high ? 0 : 4));
      } else if (type === "Q4_K" || type === "Q5_K") {
        const c = v >> 6, upper = (v >> 5) & 1;
        const byte = b[o + (type === "Q4_K" ? 16 : 48) + 32 * c + l]!;
        let q = upper ? byte >> 4 : byte & 0xf;
        if (type === "Q5_K") q += ((b[o + 16 + l]! >> (2 * c + upper)) & 1) << 4;
        const [sc, m] = scaleMinK4(b, o + 4, 2 * c + upper);
        val = fr(fr(getHalf(b, o) * sc) * q) - fr(getHalf(b, o + 2) * m);
      } else {
        const byte = b[o + 64 * half + l + ((j & 1) << 5)]!;
        const nib = j < 2 ? byte & 0xf : byte >> 4;
        const hb = (b[o + 128 + 32 * half + l]! >> (2 * j)) & 3;
        const sc = (b[o + 192 + 8 * half + 2 * j + (l >> 4)]! << 24) >> 24;
        val = fr(fr(getHalf(b, o + 208) * sc) * ((nib | (hb << 4)) - 32));
      }
      y[base + v] = val;
    }
  }
  return y;
}
