/**
 * Generic scalar dots: what the SIMD kernels in assembly/ggml/ compute, element by element, in
 * their exact float order (see assembly/ggml/common.ts and f16.ts), for tests to compare bits.
 */
import { blockInts, QK, type Block32Type } from "./blocks.ts";

const fr = Math.fround;

/** Round half to even (f32x4.nearest). */
function roundHalfEven(v: number): number {
  const r = Math.round(v);
  return r - v === 0.5 && r % 2 !== 0 ? r - 1 : r;
}

/** One activation row quantized as assembly/ggml/act.ts does: per block d, s = d * sum q, q[32]. */
export interface QuantizedActivation {
  d: Float32Array;
  s: Float32Array;
  q: Int8Array;
  /** Per block, four lane sums of q: lane l over elements 4l..4l+3 and 16+4l..16+4l+3. */
  qsum: Int32Array;
}

export function quantizeActivationRow(x: Float32Array): QuantizedActivation {
  const nb = x.length / QK;
  const out: QuantizedActivation = { d: new Float32Array(nb), s: new Float32Array(nb), q: new Int8Array(x.length), qsum: new Int32Array(4 * nb) };
  for (let b = 0; b < nb; b++) {
    let amax = 0;
    for (let j = 0; j < QK; j++) amax = Math.max(amax, Math.abs(x[b * QK + j]!));
    const d = fr(amax / 127);
    const id = d !== 0 ? fr(1 / d) : 0;
    let sum = 0;
    for (let j = 0; j < QK; j++) {
      const q = Math.max(-128, Math.min(127, roundHalfEven(fr(x[b * QK + j]! * id))));
      out.q[b * QK + j] = q;
      out.qsum[4 * b + ((j & 15) >> 2)] += q;
      sum += q;
    }
    out.d[b] = d;
    out.s[b] = fr(d * sum);
  }
  return out;
}

/** Row `bytes` of a block-32 type · quantized activation row, in the kernels' order. */
export function dotBlock32(type: Block32Type, bytes: Uint8Array, x: QuantizedActivation): number {
  const acc = [0, 0, 0, 0];
  let accMin = 0;
  const hasMin = type === "Q4_1" || type === "Q5_1";
  for (let b = 0; b < x.d.length; b++) {
    const { q, d, m } = blockInts(type, bytes, b);
    const isum = [0, 0, 0, 0];
    // Q8_0 (dotWide) and the unsigned 4/5-bit weights (dotUnsigned) sum different elements per lane.
    for (let j = 0; j < QK; j++) isum[type === "Q8_0" ? (j >> 1) & 3 : (j & 15) >> 2]! += q[j]! * x.q[b * QK + j]!;
    const scale = fr(d * x.d[b]!);
    for (let l = 0; l < 4; l++) acc[l] = fr(acc[l]! + fr(isum[l]! * scale));
    if (hasMin) accMin = fr(accMin + fr(m * x.s[b]!));
  }
  const lanes = fr(fr(acc[0]! + acc[1]!) + fr(acc[2]! + acc[3]!));
  return hasMin ? fr(lanes + accMin) : lanes;
}

/** Dot of half-precision weights (already widened to f32) with f32 activations, in f16.ts's order. */
export function dotHalf(w: Float32Array, x: Float32Array): number {
  const acc = Array.from({ length: 4 }, () => [0, 0, 0, 0]);
  const n = w.length;
  let j = 0;
  for (; j + 16 <= n; j += 16) {
    for (let k = 0; k < 16; k++) acc[k >> 2]![k & 3] = fr(acc[k >> 2]![k & 3]! + fr(w[j + k]! * x[j + k]!));
  }
  const v = [0, 1, 2, 3].map((l) => fr(fr(acc[0]![l]! + acc[1]![l]!) + fr(acc[2]![l]! + acc[3]![l]!)));
  let sum = fr(fr(v[0]! + v[1]!) + fr(v[2]! + v[3]!));
  for (; j < n; j++) sum = fr(sum + fr(w[j]! * x[j]!));
  return sum;
}
