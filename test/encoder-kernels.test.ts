/**
 * The encoder's kernels: layerNorm (SIMD) against its scalar reference, bit for bit, and both
 * against a scalar loop written here from ggml_norm's definition; encoderAttention against a
 * scalar loop of softmax attention in both directions, per sequence, on odd sizes.
 */
import { expect, test } from "bun:test";
import { CpuBackend } from "../src/backend/wasm/cpu.ts";
import { Scratch } from "./helpers/wasm-scratch.ts";

const be = new CpuBackend();
const k = be.kernels;
const REGION_BYTES = 4 << 20;
const region = be.mem.alloc(REGION_BYTES);
const fr = Math.fround;

/** A deterministic stream of floats in [-scale, scale) (an LCG: no Math.random, so a failure replays). */
function floats(n: number, seed: number, scale = 1): Float32Array {
  const out = new Float32Array(n);
  let s = seed >>> 0;
  for (let i = 0; i < n; i++) {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    out[i] = ((s / 2 ** 32) * 2 - 1) * scale;
  }
  return out;
}

/** ggml_norm then weight and bias, one element at a time: sums in f64, everything else in f32. */
function layerNormLoop(x: Float32Array, w: Float32Array, b: Float32Array, T: number, n: number, eps: number): Float32Array {
  const out = new Float32Array(T * n);
  for (let t = 0; t < T; t++) {
    const row = x.subarray(t * n, (t + 1) * n);
    let sum = 0;
    for (const v of row) sum += v;
    const mean = fr(sum / n);
    let sum2 = 0;
    for (const v of row) sum2 += fr(fr(v - mean) * fr(v - mean));
    const inv = fr(1 / fr(Math.sqrt(fr(fr(sum2 / n) + fr(eps)))));
    for (let j = 0; j < n; j++) out[t * n + j] = fr(fr(fr(fr(row[j]! - mean) * inv) * w[j]!) + b[j]!);
  }
  return out;
}

test("layerNorm equals its scalar reference bit for bit, and ggml_norm's definition, on odd widths", () => {
  for (const [T, n] of [[1, 1], [3, 5], [2, 7], [5, 33], [4, 256], [3, 383]] as const) {
    const s = new Scratch(be.mem, region, REGION_BYTES);
    const x = floats(T * n, T * 31 + n, 3);
    const w = floats(n, n + 1, 2);
    const b = floats(n, n + 2, 0.5);
    const [xa, wa, ba] = [s.f32(x), s.f32(w), s.f32(b)];
    const [simd, ref] = [s.alloc(4 * T * n), s.alloc(4 * T * n)];
    k.layerNorm(simd, xa, wa, ba, T, n, 1e-12);
    k.layerNormRef(ref, xa, wa, ba, T, n, 1e-12);
    const got = be.mem.f32.slice(simd >> 2, (simd >> 2) + T * n);
    expect(got).toEqual(be.mem.f32.slice(ref >> 2, (ref >> 2) + T * n));
    expect(Array.from(got)).toEqual(Array.from(layerNormLoop(x, w, b, T, n, 1e-12)));
    // In place (out = x), as the encoder calls it.
    k.layerNorm(xa, xa, wa, ba, T, n, 1e-12);
    expect(be.mem.f32.slice(xa >> 2, (xa >> 2) + T * n)).toEqual(got);
  }
});

/** Softmax attention of each sequence's tokens over its own tokens, per head, in f64. */
function attentionLoop(q: Float32Array, kk: Float32Array, v: Float32Array, lens: number[], nHeads: number, headDim: number, scale: number): Float64Array {
  const stride = nHeads * headDim;
  const out = new Float64Array(q.length);
  let start = 0;
  for (const n of lens) {
    for (let h = 0; h < nHeads; h++) {
      for (let i = start; i < start + n; i++) {
        const sc: number[] = [];
        for (let j = start; j < start + n; j++) {
          let d = 0;
          for (let e = 0; e < headDim; e++) d += q[i * stride + h * headDim + e]! * kk[j * stride + h * headDim + e]!;
          sc.push(d * scale);
        }
        const m = Math.max(...sc);
        const p = sc.map((x) => Math.exp(x - m));
        const sum = p.reduce((a, x) => a + x, 0);
        for (let e = 0; e < headDim; e++) {
          let acc = 0;
          for (let j = 0; j < n; j++) acc += p[j]! * v[(start + j) * stride + h * headDim + e]!;
          out[i * stride + h * headDim + e] = acc / sum;
        }
      }
    }
    start += n;
  }
  return out;
}

test("encoderAttention: each token attends to every token of its own sequence and no other, on odd sizes", () => {
  for (const [lens, nHeads, headDim] of [[[1], 1, 3], [[3, 1, 5], 3, 7], [[7, 2], 2, 16], [[13, 4, 9], 4, 33]] as const) {
    const s = new Scratch(be.mem, region, REGION_BYTES);
    const T = lens.reduce((a, n) => a + n, 0);
    const width = nHeads * headDim;
    const q = floats(T * width, 7 + T, 1.5);
    const kk = floats(T * width, 11 + T, 1.5);
    const v = floats(T * width, 13 + T, 1);
    const starts = [0];
    for (const n of lens) starts.push(starts.at(-1)! + n);
    const out = s.alloc(4 * T * width);
    const scores = s.alloc(4 * Math.max(...lens));
    const scale = 1 / Math.sqrt(headDim);
    k.encoderAttention(out, s.f32(q), s.f32(kk), s.f32(v), s.i32(starts), nHeads, nHeads, headDim, width, width, scale, scores, 0, lens.length * nHeads);
    const got = be.mem.f32.slice(out >> 2, (out >> 2) + T * width);
    const want = attentionLoop(q, kk, v, [...lens], nHeads, headDim, scale);
    for (let i = 0; i < got.length; i++) expect(Math.abs(got[i]! - want[i]!)).toBeLessThan(1e-5);
  }
});
