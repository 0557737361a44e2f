/**
 * "runq" numerics (assembly/runq.ts, assembly/runq-math.ts): llama2.c's runq.c, as gcc -Ofast
 * -march=native builds it on AMD Zen 4/5 against glibc, reproduced bit for bit.
 *
 *   - the emulated primitives (glibc expf and sincosf, libmvec expf, rcp14/rcpps/rsqrtss, FMA under
 *     flush-to-zero) against values captured from the real functions and instructions;
 *   - every runq kernel against a TypeScript transcription of gcc's evaluation order, on odd sizes
 *     that exercise each vector block and scalar tail, with an exact (BigInt) FMA;
 *   - threads: the parallel dispatch of the runq kernels gives the single-thread bits;
 *   - end to end: greedy ids of stories260K_q80 equal runq's (recorded with runq.c built -Ofast
 *     -march=native), for the golden prompt and three more, one of them to seq_len 512, with the
 *     prompt as one chunk and token by token.
 */
import { describe, expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import { CpuBackend } from "../src/backend/wasm/cpu.ts";
import { KVArena } from "../src/backend/wasm/kv-arena.ts";
import { StepBatch } from "../src/model/batch.ts";
import { LlamaModel } from "../src/backend/wasm/llama.ts";
import { readLlama2cCheckpoint } from "../src/model/llama2c.ts";
import { loadWeights, type WeightMatrix } from "../src/backend/wasm/weights.ts";
import { Xoshiro128 } from "../src/util/random.ts";
import { sharedPath } from "./helpers/shared.ts";
import { decodeTokens, readTokenPieces } from "./reference/decode-tokens.ts";
import { EXPF_CASES, RECIP_CASES, SINCOSF_CASES } from "./reference/runq-captures.ts";
import { KernelRegion } from "./helpers/wasm-scratch.ts";
import { randInt, randomArray, randomPagedSequences } from "./helpers/random-data.ts";

const fr = Math.fround;
const be = new CpuBackend();
const k = be.kernels;
const mem = be.mem;
const region = new KernelRegion(mem, 4 << 20);

// ---------------------------------------------------------------------------------------------
// f32 bits and an exact fused multiply-add
// ---------------------------------------------------------------------------------------------

const f32Cell = new Float32Array(1);
const u32Cell = new Uint32Array(f32Cell.buffer);
function bitsOf(x: number): number {
  f32Cell[0] = x;
  return u32Cell[0]!;
}
function fromBits(u: number): number {
  u32Cell[0] = u;
  return f32Cell[0]!;
}
/** Bit pattern with every NaN made one NaN (payloads are not part of the contract). */
function canon(x: number): number {
  return Number.isNaN(x) ? 0x7fc00000 : bitsOf(x);
}
const hex = (u: number) => `0x${(u >>> 0).toString(16).padStart(8, "0")}`;

/** A finite f32 as m * 2^e, m a signed integer. */
function decompose(x: number): { m: bigint; e: number } {
  const u = bitsOf(x);
  const sign = u >>> 31 ? -1n : 1n;
  const exp = (u >>> 23) & 0xff;
  const frac = u & 0x7fffff;
  if (exp === 0) return { m: sign * BigInt(frac), e: -149 };
  return { m: sign * BigInt(frac | 0x800000), e: exp - 150 };
}

/** Whether exactFma flushes tiny results (always, except to show that a test depends on it). */
let flushToZero = true;

/** a * b + c rounded once to f32 (ties to even); a result tiny after rounding is a signed zero (x86 FTZ). */
function exactFma(a: number, b: number, c: number): number {
  const A = decompose(a), B = decompose(b), C = decompose(c);
  const E = -298; // every f32 product and f32 is an integer multiple of 2^-298
  const sum = ((A.m * B.m) << BigInt(A.e + B.e - E)) + (C.m << BigInt(C.e - E));
  if (sum === 0n) {
    const productNegative = (bitsOf(a) ^ bitsOf(b)) >>> 31 === 1;
    return productNegative && Object.is(c, -0) ? -0 : 0;
  }
  const neg = sum < 0n;
  let mag = neg ? -sum : sum;
  let e = E;
  const bitlen = mag.toString(2).length;
  if (bitlen > 24) {
    const shift = BigInt(bitlen - 24);
    const q = mag >> shift;
    const rem = mag - (q << shift);
    const half = 1n << (shift - 1n);
    mag = rem > half || (rem === half && (q & 1n) === 1n) ? q + 1n : q;
    e += bitlen - 24;
  }
  const value = Number(mag) * 2 ** e;
  if (value < 2 ** -126) return flushToZero ? (neg ? -0 : 0) : fr(neg ? -value : value);
  if (value > 3.4028234663852886e38) return neg ? -Infinity : Infinity;
  return neg ? -value : value;
}

function expectSameBits(got: ArrayLike<number>, want: ArrayLike<number>, what: string): void {
  expect(got.length).toBe(want.length);
  for (let i = 0; i < want.length; i++) {
    if (canon(got[i]!) !== canon(want[i]!)) {
      throw new Error(`${what}[${i}]: got ${got[i]} (${hex(canon(got[i]!))}), want ${want[i]} (${hex(canon(want[i]!))})`);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Transcriptions of gcc's evaluation order (see assembly/runq.ts)
// ---------------------------------------------------------------------------------------------

const glibcExpf = (x: number) => k.runqMath(0, x);
const mvecExpf = (x: number) => k.runqMath(1, x);
const rcp14 = (x: number) => k.runqMath(4, x);
const rcpps = (x: number) => k.runqMath(5, x);
const rsqrtss = (x: number) => k.runqMath(6, x);

/** sum a[i] * b[i]: 16 FMA lanes, fold to 8, one 8-lane FMA step if 8 remain, fold 8 -> 4 -> 2 -> 1, scalar FMAs. */
function gccDot(a: ArrayLike<number>, ao: number, b: ArrayLike<number>, bo: number, n: number): number {
  const acc = new Array<number>(16).fill(0);
  let i = 0;
  for (; i + 16 <= n; i += 16) for (let l = 0; l < 16; l++) acc[l] = exactFma(a[ao + i + l]!, b[bo + i + l]!, acc[l]!);
  const v8 = Array.from({ length: 8 }, (_, l) => fr(acc[l]! + acc[l + 8]!));
  if (n - i >= 8) {
    for (let l = 0; l < 8; l++) v8[l] = exactFma(a[ao + i + l]!, b[bo + i + l]!, v8[l]!);
    i += 8;
  }
  const v4 = [0, 1, 2, 3].map((l) => fr(v8[l]! + v8[l + 4]!));
  let s = fr(fr(v4[0]! + v4[2]!) + fr(v4[1]! + v4[3]!));
  for (; i < n; i++) s = exactFma(a[ao + i]!, b[bo + i]!, s);
  return s;
}

/** 1/sqrtf(x) under -Ofast: rsqrtss, then (r*(r*x) - 3) fused, times r * -0.5. */
function rsqrtNewton(x: number): number {
  const r = rsqrtss(x);
  return fr(exactFma(fr(r * x), r, -3) * fr(r * -0.5));
}

function rmsnormRef(x: Float32Array, w: Float32Array, T: number, n: number, eps: number, final: boolean): Float32Array {
  const out = new Float32Array(T * n);
  const body = final || n < 8 ? n : n & ~15;
  for (let t = 0; t < T; t++) {
    const ss = gccDot(x, t * n, x, t * n, n);
    const ms = final ? fr(fr(ss / n) + eps) : exactFma(ss, fr(1 / n), eps);
    const inv = rsqrtNewton(ms);
    for (let j = 0; j < n; j++) {
      const xv = x[t * n + j]!;
      out[t * n + j] = j < body ? fr(fr(w[j]! * xv) * inv) : fr(fr(inv * xv) * w[j]!);
    }
  }
  return out;
}

const ROUND_HALF = fromBits(0x3effffff);

function quantizeRef(x: Float32Array, T: number, d: number, gs: number): { q: Int8Array; s: Float32Array } {
  const groups = Math.floor(d / gs);
  const q = new Int8Array(T * d);
  const s = new Float32Array(T * groups);
  for (let t = 0; t < T; t++) {
    for (let g = 0; g < groups; g++) {
      let wmax = 0;
      for (let i = 0; i < gs; i++) wmax = Math.max(wmax, Math.abs(x[t * d + g * gs + i]!));
      s[t * groups + g] = fr(wmax * fr(1 / 127));
      if (wmax === 0) continue;
      const inv = fr(127 / wmax);
      for (let i = 0; i < gs; i++) {
        const v = fr(x[t * d + g * gs + i]! * inv);
        q[t * d + g * gs + i] = Math.trunc(fr(v + (v < 0 || Object.is(v, -0) ? -ROUND_HALF : ROUND_HALF)));
      }
    }
  }
  return { q, s };
}

function swigluRef(a: Float32Array, b: Float32Array, T: number, n: number): Float32Array {
  const out = new Float32Array(T * n);
  const n16 = n < 8 ? 0 : n & ~15;
  const n8 = n < 8 ? 0 : n16 + (n - n16 >= 8 ? 8 : 0);
  const newton = (r0: number, d: number) => fr(fr(r0 + r0) - fr(r0 * fr(r0 * d)));
  for (let i = 0; i < T * n; i++) {
    const j = i % n;
    const x = a[i]!, up = b[i]!;
    if (j < n16) {
      const den = fr(mvecExpf(-x) + 1);
      out[i] = fr(fr(newton(rcp14(den), den) * x) * up);
    } else if (j < n8) {
      const den = fr(mvecExpf(-x) + 1);
      out[i] = fr(newton(rcpps(den), den) * fr(x * up));
    } else {
      const r = fr(1 / fr(glibcExpf(-x) + 1));
      out[i] = n >= 8 ? fr(r * fr(x * up)) : fr(fr(r * x) * up);
    }
  }
  return out;
}

/** runq's softmax: exps by glibc (element 0, tail) or libmvec (the vector blocks), lane-folded sum, e * (1/sum). */
function softmaxRef(s: number[]): number[] {
  const len = s.length;
  const mx = s.reduce((m, v) => Math.max(m, v), s[0]!);
  const rest = len - 1;
  const m16 = rest & ~15;
  const m8 = m16 + (rest - m16 >= 8 ? 8 : 0);
  const e = s.map((v, j) => (j >= 1 && j <= m8 ? mvecExpf(fr(v - mx)) : glibcExpf(fr(v - mx))));
  const acc = new Array<number>(16).fill(0);
  for (let j = 0; j < m16; j++) acc[j % 16] = fr(acc[j % 16]! + e[1 + j]!);
  const v8 = Array.from({ length: 8 }, (_, l) => fr(acc[l]! + acc[l + 8]!));
  if (m8 > m16) for (let l = 0; l < 8; l++) v8[l] = fr(v8[l]! + e[1 + m16 + l]!);
  const v4 = [0, 1, 2, 3].map((l) => fr(v8[l]! + v8[l + 4]!));
  let sum = fr(e[0]! + fr(fr(v4[0]! + v4[2]!) + fr(v4[1]! + v4[3]!)));
  for (let j = m8 + 1; j < len; j++) sum = fr(sum + e[j]!);
  const inv = fr(1 / sum);
  return e.map((v) => fr(v * inv));
}

// ---------------------------------------------------------------------------------------------
// Emulated primitives against captured values
// ---------------------------------------------------------------------------------------------

describe("runq math primitives equal the values captured from glibc, libmvec and the CPU", () => {
  test("expf: glibc's scalar expf and libmvec's vector expf, a few hundred inputs across every path", () => {
    let differ = 0;
    for (const [input, glibc, mvec] of EXPF_CASES) {
      const x = fromBits(input);
      expect(hex(canon(glibcExpf(x)))).toBe(hex(canon(fromBits(glibc))));
      expect(hex(canon(mvecExpf(x)))).toBe(hex(canon(fromBits(mvec))));
      if (glibc !== mvec) differ++;
    }
    // The two differ often, which is why softmax and SwiGLU must pick the right one per element.
    expect(differ).toBeGreaterThan(100);
  });

  test("sincosf: glibc's sinf/cosf below pi/4, below 120 and on the large-argument path", () => {
    for (const [input, sin, cos] of SINCOSF_CASES) {
      const x = fromBits(input);
      expect(hex(canon(k.runqMath(2, x)))).toBe(hex(canon(fromBits(sin))));
      expect(hex(canon(k.runqMath(3, x)))).toBe(hex(canon(fromBits(cos))));
    }
  });

  test("vrcp14ps, rcpps and rsqrtss, including flushed results and special inputs", () => {
    for (const [input, r14, r12, rsq] of RECIP_CASES) {
      const x = fromBits(input);
      expect(hex(canon(rcp14(x)))).toBe(hex(canon(fromBits(r14))));
      expect(hex(canon(rcpps(x)))).toBe(hex(canon(fromBits(r12))));
      expect(hex(canon(rsqrtss(x)))).toBe(hex(canon(fromBits(rsq))));
    }
  });

  test("fma32 is a correctly rounded fused multiply-add with x86 flush-to-zero", () => {
    const rng = new Xoshiro128(7);
    const randomF32 = () => {
      // Random sign, an exponent spread over the whole range, random fraction.
      const e = randInt(rng, 1, 254);
      return fromBits(((rng.nextFloat() < 0.5 ? 1 : 0) << 31) | (e << 23) | Math.floor(rng.nextFloat() * 0x800000)) ;
    };
    const near = () => fromBits(0x3f800000 + randInt(rng, -0x400000, 0x400000) * (rng.nextFloat() < 0.5 ? 1 : 3));
    for (let i = 0; i < 20000; i++) {
      let a: number, b: number, c: number;
      if (i % 3 === 0) {
        [a, b, c] = [randomF32(), randomF32(), randomF32()];
      } else {
        // Products near c: cancellation, ties and near-ties of the final rounding.
        a = near();
        b = fr(near() * 2 ** randInt(rng, -20, 20));
        const p = fr(a * b);
        c = fromBits((bitsOf(-p) + randInt(rng, -3, 3)) >>> 0);
        if (i % 3 === 2) c = fr(c * 2 ** -randInt(rng, 20, 30));
      }
      if (![a, b, c].every(Number.isFinite) || !Number.isFinite(a * b + c)) continue;
      const want = exactFma(a, b, c);
      const got = k.runqFma(a, b, c);
      if (canon(got) !== canon(want)) throw new Error(`fma(${a}, ${b}, ${c}): got ${got}, want ${want}`);
    }
    // Flush-to-zero: a result below 2^-126 after rounding is zero; one that rounds up to 2^-126 is not.
    const t = 2 ** -63;
    expect(k.runqFma(fr(t * (1 - 2 ** -23)), fr(t), 0)).toBe(0);
    expect(k.runqFma(fr(t * (1 - 2 ** -23)), fr(t * (1 + 2 ** -23)), 0)).toBe(2 ** -126);
  });
});

// ---------------------------------------------------------------------------------------------
// Kernels against the transcriptions
// ---------------------------------------------------------------------------------------------

describe("runq kernels follow gcc's evaluation order bit for bit", () => {
  test("rmsnorm, layer and final forms, every split of 16-lane body, 8-lane block and scalar tail", () => {
    const rng = new Xoshiro128(21);
    const sizes = [1, 3, 7, 8, 9, 15, 16, 17, 23, 24, 25, 31, 32, 33, 40, 47, 48, 55, 63, 64, 65, 71, 72, 79, 288];
    for (const n of sizes) {
      for (const final of [false, true]) {
        const s = region.scratch();
        const T = 3;
        const x = randomArray(rng, T * n, 4);
        const w = randomArray(rng, n, 2);
        const eps = fr(1e-5);
        const out = s.alloc(4 * T * n);
        k.rmsnormRunq(out, s.f32(x), s.f32(w), T, n, eps, final ? 1 : 0);
        expectSameBits(region.readF32(out, T * n), rmsnormRef(x, w, T, n, eps, final), `rmsnorm n=${n} final=${final}`);
      }
    }
  });

  test("rmsnorm of tiny values: squares below 2^-126 flush to zero in every lane, as under FTZ", () => {
    const rng = new Xoshiro128(26);
    const n = 40; // a 16-lane block, an 8-lane block and a scalar tail
    const x = new Float32Array(n);
    for (let j = 0; j < n; j++) {
      // Around 2^-63, so that squares straddle 2^-126: some flush, some round up to 2^-126, some stay.
      const m = j % 4 === 0 ? 1 - 2 ** -24 : j % 4 === 1 ? 1 + 2 ** -23 : 0.5 + rng.nextFloat();
      x[j] = fr((j % 3 === 0 ? -1 : 1) * m * 2 ** -63);
    }
    const w = randomArray(rng, n, 2);
    const s = region.scratch();
    const out = s.alloc(4 * n);
    // A tiny eps (2^-120), so that the sum of squares still shows in the result.
    const eps = 2 ** -120;
    k.rmsnormRunq(out, s.f32(x), s.f32(w), 1, n, eps, 0);
    const got = region.readF32(out, n);
    expectSameBits(got, rmsnormRef(x, w, 1, n, eps, false), "rmsnorm of tiny values");
    // Without the flush the result differs: the case has teeth.
    flushToZero = false;
    try {
      const unflushed = rmsnormRef(x, w, 1, n, eps, false);
      expect(Array.from(got).some((v, i) => canon(v) !== canon(unflushed[i]!))).toBe(true);
    } finally {
      flushToZero = true;
    }
  });

  test("rmsnorm in place (the final norm aliases out and x) gives the same bits", () => {
    const rng = new Xoshiro128(22);
    const s = region.scratch();
    const n = 64, T = 2;
    const x = randomArray(rng, T * n, 3);
    const w = randomArray(rng, n);
    const xa = s.f32(x);
    k.rmsnormRunq(xa, xa, s.f32(w), T, n, fr(1e-5), 1);
    expectSameBits(region.readF32(xa, T * n), rmsnormRef(x, w, T, n, fr(1e-5), true), "in-place rmsnorm");
  });

  test("quantize and matmul: -Ofast's reciprocal scales and (w_scale * x_scale) * ival, groups straddling rows", () => {
    const rng = new Xoshiro128(23);
    for (const [d, gs, rows, T] of [[64, 32, 13, 3], [70, 32, 9, 2], [172, 32, 5, 4], [48, 16, 7, 1], [33, 11, 6, 2], [19, 5, 4, 3]] as const) {
      const s = region.scratch();
      const x = randomArray(rng, T * d, 3);
      // A group of zeros quantizes to zeros with scale 0.
      for (let i = 0; i < gs; i++) x[i] = 0;
      const groups = Math.floor(d / gs);
      const xq = s.alloc(T * d);
      const xs = s.alloc(4 * T * groups);
      k.quantizeQ8Runq(xq, xs, s.f32(x), T, d, gs);
      const ref = quantizeRef(x, T, d, gs);
      expect(Array.from(mem.u8.slice(xq, xq + T * d), (v) => (v << 24) >> 24)).toEqual(Array.from(ref.q));
      expectSameBits(region.readF32(xs, T * groups), ref.s, `quantize scales d=${d} gs=${gs}`);

      const wq = Int8Array.from({ length: rows * d }, () => randInt(rng, -127, 127));
      const ws = randomArray(rng, Math.floor((rows * d) / gs), 0.01).map(Math.abs);
      const wqAddr = s.alloc(rows * d);
      mem.u8.set(new Uint8Array(wq.buffer), wqAddr);
      const out = s.alloc(4 * T * rows);
      k.matmulQ8Runq(out, xq, xs, wqAddr, s.f32(ws), T, d, gs, rows, 0, rows);
      const want = new Float32Array(T * rows);
      for (let t = 0; t < T; t++) {
        for (let i = 0; i < rows; i++) {
          let val = 0;
          for (let g = 0; g < groups; g++) {
            let ival = 0;
            for (let j = 0; j < gs; j++) ival += ref.q[t * d + g * gs + j]! * wq[i * d + g * gs + j]!;
            val = fr(val + fr(fr(ws[Math.floor((i * d + g * gs) / gs)]! * ref.s[t * groups + g]!) * ival));
          }
          want[t * rows + i] = val;
        }
      }
      expectSameBits(region.readF32(out, T * rows), want, `matmul d=${d} gs=${gs}`);
    }
  });

  test("SwiGLU: 16-lane blocks, one 8-lane block and the scalar tail per row, for any row length", () => {
    const rng = new Xoshiro128(24);
    for (const n of [1, 5, 7, 8, 9, 15, 16, 17, 23, 24, 25, 31, 40, 47, 172, 173]) {
      const s = region.scratch();
      const T = 3;
      const a = randomArray(rng, T * n, 8);
      const b = randomArray(rng, T * n, 3);
      const aAddr = s.f32(a);
      k.swigluRunq(aAddr, s.f32(b), T, n);
      expectSameBits(region.readF32(aAddr, T * n), swigluRef(a, b, T, n), `swiglu n=${n}`);
    }
  });

  test("RoPE tables: freq = expf(-(2k * (1/hs)) * f32(ln 10000)), angle = freq * pos, glibc sincosf", () => {
    const s = region.scratch();
    const seqLen = 512;
    for (const hd of [8, 6, 32]) {
      const half = hd / 2;
      const cos = s.alloc(4 * seqLen * half);
      const sin = s.alloc(4 * seqLen * half);
      const lnTheta = fr(Math.log(10000));
      k.ropeTablesRunq(cos, sin, seqLen, hd, lnTheta);
      const wantCos = new Float32Array(seqLen * half);
      const wantSin = new Float32Array(seqLen * half);
      for (let j = 0; j < half; j++) {
        const freq = j === 0 ? 1 : glibcExpf(fr(-fr(2 * j * fr(1 / hd)) * lnTheta));
        for (let pos = 0; pos < seqLen; pos++) {
          const angle = fr(freq * pos);
          wantCos[pos * half + j] = k.runqMath(3, angle);
          wantSin[pos * half + j] = k.runqMath(2, angle);
        }
      }
      expectSameBits(region.readF32(cos, seqLen * half), wantCos, `rope cos hd=${hd}`);
      expectSameBits(region.readF32(sin, seqLen * half), wantSin, `rope sin hd=${hd}`);
    }
  });

  test("attention: gcc-ordered scores, runq's softmax split and sum, FMA mix; paged, chunked, GQA", () => {
    const rng = new Xoshiro128(25);
    for (let iter = 0; iter < 14; iter++) {
      const s = region.scratch();
      const nKv = randInt(rng, 1, 2);
      const group = randInt(rng, 1, 2);
      const nHeads = nKv * group;
      const hd = [8, 5, 19, 24, 35, 8, 16][iter % 7]!;
      const bs = randInt(rng, 1, 7);
      const numBlocks = 30;
      const kvFloats = numBlocks * nKv * bs * hd;
      const kv = randomArray(rng, kvFloats, 1.5);
      const vv = randomArray(rng, kvFloats, 1.5);
      const kc = s.f32(kv);
      const vc = s.f32(vv);
      const numSeqs = randInt(rng, 1, 2);
      const { seqs, info: infoAddr, T } = randomPagedSequences(rng, s, { numSeqs, numBlocks, blockSize: bs, maxCtx: 45, maxCount: 4 });
      const qStride = nHeads * hd;
      const qv = randomArray(rng, T * qStride, 2);
      const out = s.alloc(4 * T * qStride);
      const scores = s.alloc(4 * 64);
      const items = numSeqs * nKv;
      const split = randInt(rng, 0, items);
      const qAddr = s.f32(qv);
      k.pagedAttentionRunq(out, qAddr, kc, vc, infoAddr, nHeads, nKv, hd, bs, numBlocks, qStride, scores, 0, split);
      k.pagedAttentionRunq(out, qAddr, kc, vc, infoAddr, nHeads, nKv, hd, bs, numBlocks, qStride, scores, split, items);
      const want = new Float32Array(T * qStride);
      const scale = rsqrtNewton(hd);
      for (const sq of seqs) {
        for (let i = 0; i < sq.count; i++) {
          const pos = sq.ctx - sq.count + i;
          for (let h = 0; h < nHeads; h++) {
            const kvh = Math.floor(h / group);
            const at = (p: number) => ((kvh * numBlocks + sq.table[Math.floor(p / bs)]!) * bs + (p % bs)) * hd;
            const qOff = (sq.start + i) * qStride + h * hd;
            const sc = Array.from({ length: pos + 1 }, (_, p) => fr(gccDot(qv, qOff, kv, at(p), hd) * scale));
            const att = softmaxRef(sc);
            for (let j = 0; j < hd; j++) {
              let acc = 0;
              for (let p = 0; p <= pos; p++) acc = exactFma(att[p]!, vv[at(p) + j]!, acc);
              want[qOff + j] = acc;
            }
          }
        }
      }
      expectSameBits(region.readF32(out, T * qStride), want, `attention iter ${iter} hd=${hd}`);
    }
  });
});

// ---------------------------------------------------------------------------------------------
// Threads
// ---------------------------------------------------------------------------------------------

describe("runq kernels split across threads", () => {
  test("int8 matmul and attention give the single-thread bits with 3 threads", () => {
    const rng = new Xoshiro128(31);
    const rows = 256, d = 96, gs = 32, T = 24;
    const wq = Int8Array.from({ length: rows * d }, () => randInt(rng, -127, 127));
    const ws = randomArray(rng, (rows * d) / gs, 0.01).map(Math.abs);
    const x = randomArray(rng, T * d, 2);
    const nHeads = 4, nKv = 2, hd = 24, bs = 8, ctx = 40;
    const kv = randomArray(rng, 8 * nKv * bs * hd, 1);
    const vv = randomArray(rng, 8 * nKv * bs * hd, 1);
    const qv = randomArray(rng, 3 * nHeads * hd, 2);

    const run = (threads: number) => {
      const b = new CpuBackend(threads);
      try {
        b.reserveScratch(T, d, nHeads / nKv, hd, 64);
        b.numerics = "runq";
        const put = (v: ArrayLike<number>) => {
          const addr = b.mem.alloc(4 * v.length);
          b.mem.f32.set(v, addr >> 2);
          return addr;
        };
        const q = b.mem.alloc(rows * d);
        b.mem.u8.set(new Uint8Array(wq.buffer), q);
        const m: WeightMatrix = { kind: "q8", rows, cols: d, q, s: put(ws), groupSize: gs };
        const out = b.mem.alloc(4 * T * rows);
        b.matmul(out, put(x), m, T);
        const mm = b.mem.f32.slice(out >> 2, (out >> 2) + T * rows);
        // Two sequences of 3 and 1 new tokens at the end of a 40-token context, blocks in order.
        const table = Array.from({ length: 8 }, (_, i) => i);
        const tAddr = b.mem.alloc(4 * 8);
        b.mem.i32.set(table, tAddr >> 2);
        const info = b.mem.alloc(4 * 8);
        b.mem.i32.set([0, 2, ctx, tAddr, 2, 1, ctx - 5, tAddr], info >> 2);
        const att = b.mem.alloc(4 * 3 * nHeads * hd);
        b.attention(att, put(qv), put(kv), put(vv), info, 2, nHeads, nKv, hd, bs, 8, nHeads * hd, 1 << 20);
        return { mm, att: b.mem.f32.slice(att >> 2, (att >> 2) + 3 * nHeads * hd) };
      } finally {
        b.close();
      }
    };
    const one = run(1);
    const three = run(3);
    expectSameBits(three.mm, one.mm, "matmul, 3 threads");
    expectSameBits(three.att, one.att, "attention, 3 threads");
  });
});

// ---------------------------------------------------------------------------------------------
// End to end: runq's greedy ids
// ---------------------------------------------------------------------------------------------

interface RunqCase {
  prompt: string;
  /** runq's -n: positions, the prompt included. */
  steps: number;
  promptIds: number[];
  /** What runq printed after the prompt: the generated ids, up to (not including) BOS or position `steps`. */
  runq: number[];
}

// Recorded with runq.c built `gcc -Ofast -march=native` on AMD Zen 4: `runq stories260K_q80.bin -z tok512.bin -t 0 -n STEPS -i PROMPT`.
const RUNQ_CASES: RunqCase[] = [
  {
    prompt: "A little fish",
    steps: 256,
    promptIds: [1, 410, 447, 376, 272, 293, 415],
    // 145 ids
    runq: [
      395, 410, 447, 343, 432, 410, 447, 343, 432, 410, 447, 343, 432, 410, 447, 343, 432, 410, 447, 343, 432, 261, 376, 268,
      315, 418, 395, 410, 447, 343, 426, 410, 447, 343, 286, 399, 263, 420, 412, 427, 289, 261, 413, 311, 270, 277, 372, 426,
      410, 447, 343, 286, 399, 384, 431, 423, 343, 443, 410, 447, 264, 358, 280, 303, 261, 421, 424, 283, 419, 267, 414, 278,
      289, 428, 426, 410, 447, 264, 261, 276, 261, 421, 424, 283, 419, 410, 276, 388, 422, 410, 417, 431, 413, 412, 439, 419,
      270, 287, 411, 426, 410, 447, 264, 410, 447, 343, 439, 419, 270, 287, 411, 421, 271, 377, 267, 329, 280, 412, 276, 431,
      425, 421, 294, 417, 289, 426, 410, 447, 264, 410, 447, 343, 439, 419, 270, 287, 411, 387, 278, 379, 402, 424, 304, 433,
      426,
    ],
  },
  {
    prompt: "Once upon a time",
    steps: 256,
    promptIds: [1, 403, 407, 261, 378],
    // 252 ids
    runq: [
      432, 383, 286, 261, 376, 298, 315, 421, 395, 317, 426, 338, 401, 396, 267, 337, 410, 408, 419, 292, 411, 322, 265, 282,
      415, 327, 285, 269, 262, 411, 411, 261, 306, 373, 311, 272, 314, 310, 426, 385, 328, 432, 317, 286, 337, 299, 335, 311,
      272, 314, 310, 263, 415, 290, 411, 366, 382, 276, 298, 414, 299, 267, 265, 282, 290, 411, 426, 342, 382, 276, 352, 379,
      416, 299, 269, 262, 415, 415, 315, 413, 426, 317, 391, 266, 267, 298, 414, 267, 265, 282, 290, 411, 432, 398, 312, 286,
      267, 414, 270, 333, 415, 426, 338, 279, 292, 416, 439, 413, 409, 416, 327, 263, 415, 294, 286, 263, 414, 341, 426, 13,
      438, 310, 391, 266, 267, 298, 316, 265, 272, 303, 426, 338, 282, 425, 306, 266, 269, 280, 314, 411, 426, 338, 262, 415,
      415, 415, 421, 417, 266, 432, 313, 442, 280, 303, 439, 413, 267, 425, 402, 284, 422, 272, 421, 412, 428, 426, 410, 448,
      411, 306, 261, 276, 261, 421, 424, 283, 432, 436, 358, 336, 426, 13, 446, 412, 444, 269, 317, 279, 380, 263, 276, 340,
      265, 272, 421, 412, 428, 285, 426, 342, 280, 303, 262, 424, 288, 267, 265, 315, 272, 314, 310, 426, 342, 282, 412, 425,
      429, 316, 269, 262, 423, 290, 411, 426, 342, 261, 276, 393, 426, 342, 261, 276, 393, 426, 342, 337, 266, 335, 265, 272,
      421, 412, 428, 426, 342, 381, 261, 278, 309, 373, 265, 315,
    ],
  },
  {
    prompt: "Lily and Ben",
    steps: 512,
    promptIds: [1, 317, 269, 368, 302],
    // 508 ids
    runq: [
      261, 276, 259, 424, 414, 259, 424, 414, 280, 294, 419, 426, 342, 397, 354, 267, 352, 379, 269, 410, 449, 414, 428, 344,
      363, 328, 426, 342, 300, 360, 261, 278, 309, 373, 272, 379, 426, 410, 447, 276, 364, 391, 267, 414, 284, 271, 276, 397,
      289, 419, 426, 410, 447, 276, 364, 391, 267, 414, 450, 410, 448, 411, 300, 360, 267, 284, 412, 354, 261, 280, 415, 412,
      271, 426, 410, 448, 411, 306, 414, 261, 276, 261, 421, 424, 283, 419, 393, 426, 410, 448, 411, 306, 261, 276, 261, 421,
      424, 283, 419, 393, 426, 410, 448, 411, 306, 261, 276, 261, 421, 424, 283, 419, 393, 426, 410, 447, 264, 364, 280, 303,
      439, 413, 267, 425, 402, 265, 423, 426, 410, 447, 264, 364, 280, 303, 439, 413, 426, 410, 447, 264, 364, 280, 303, 439,
      413, 426, 410, 447, 264, 364, 280, 303, 439, 413, 426, 410, 354, 411, 427, 261, 276, 261, 421, 424, 283, 419, 262, 417,
      451, 411, 373, 265, 423, 426, 410, 447, 264, 364, 280, 303, 439, 413, 426, 410, 447, 264, 364, 280, 303, 439, 413, 387,
      428, 316, 267, 284, 412, 354, 261, 416, 422, 413, 415, 299, 426, 410, 452, 277, 280, 303, 439, 413, 426, 410, 452, 277,
      280, 303, 439, 413, 426, 410, 452, 277, 280, 303, 439, 413, 426, 410, 452, 277, 280, 303, 439, 413, 426, 410, 452, 277,
      280, 303, 439, 413, 426, 410, 452, 277, 280, 303, 439, 413, 426, 410, 452, 277, 280, 303, 439, 413, 426, 410, 452, 277,
      280, 303, 439, 413, 426, 410, 452, 277, 280, 303, 439, 413, 426, 410, 452, 277, 280, 303, 439, 413, 426, 410, 452, 277,
      280, 303, 439, 413, 426, 410, 452, 277, 280, 303, 439, 413, 426, 410, 452, 277, 280, 303, 439, 413, 426, 410, 452, 277,
      280, 303, 439, 413, 426, 410, 452, 277, 280, 303, 439, 413, 426, 410, 452, 277, 280, 303, 439, 413, 426, 410, 452, 277,
      280, 303, 439, 413, 426, 410, 452, 277, 280, 303, 439, 413, 426, 410, 452, 277, 280, 303, 439, 413, 426, 410, 452, 277,
      280, 303, 439, 413, 426, 410, 452, 277, 280, 303, 439, 413, 426, 410, 452, 277, 280, 303, 439, 413, 426, 410, 452, 277,
      280, 303, 439, 413, 426, 410, 452, 277, 280, 303, 439, 413, 426, 410, 452, 277, 280, 303, 439, 413, 426, 410, 452, 277,
      280, 303, 439, 413, 426, 410, 452, 277, 280, 303, 439, 413, 426, 410, 452, 277, 280, 303, 439, 413, 426, 410, 452, 277,
      280, 303, 439, 413, 426, 410, 452, 277, 280, 303, 439, 413, 426, 410, 452, 277, 280, 303, 439, 413, 426, 410, 452, 277,
      280, 303, 439, 413, 426, 410, 452, 277, 280, 303, 439, 413, 426, 410, 452, 277, 280, 303, 426, 410, 452, 277, 280, 303,
      426, 410, 452, 277, 280, 303, 426, 410, 452, 277, 280, 303, 439, 413, 426, 410, 452, 277, 280, 303, 426, 410, 452, 277,
      280, 303, 426, 410,
    ],
  },
  {
    prompt: "There was a boy",
    steps: 512,
    promptIds: [1, 291, 276, 286, 261, 268, 414, 422],
    // 447 ids
    runq: [
      395, 326, 414, 426, 346, 381, 261, 370, 268, 414, 444, 351, 281, 397, 355, 267, 337, 335, 426, 346, 286, 399, 262, 429,
      295, 305, 426, 346, 381, 261, 370, 268, 414, 444, 426, 346, 391, 266, 267, 298, 414, 353, 265, 268, 414, 444, 426, 346,
      391, 266, 267, 298, 414, 267, 265, 268, 414, 444, 426, 346, 263, 285, 266, 267, 414, 284, 425, 402, 272, 379, 426, 13,
      441, 416, 411, 328, 432, 326, 272, 277, 264, 261, 370, 268, 414, 444, 426, 291, 268, 414, 444, 451, 285, 286, 297, 309,
      272, 421, 425, 431, 431, 426, 359, 413, 286, 399, 272, 379, 426, 359, 413, 410, 293, 397, 354, 267, 284, 412, 354, 261,
      278, 277, 418, 426, 410, 447, 416, 416, 412, 439, 419, 268, 414, 444, 426, 291, 268, 414, 444, 406, 426, 291, 268, 414,
      444, 406, 426, 291, 268, 414, 444, 406, 426, 359, 413, 410, 293, 261, 421, 424, 283, 419, 262, 417, 340, 426, 359, 413,
      410, 293, 349, 290, 421, 397, 354, 267, 337, 335, 284, 412, 428, 412, 427, 414, 289, 426, 410, 447, 416, 416, 412, 269,
      368, 302, 262, 411, 411, 263, 304, 433, 267, 428, 316, 386, 426, 342, 262, 411, 411, 263, 287, 411, 280, 287, 427, 303,
      402, 426, 410, 447, 416, 288, 412, 269, 368, 302, 262, 411, 411, 263, 415, 294, 410, 447, 416, 416, 412, 261, 276, 426,
      13, 447, 416, 416, 412, 269, 368, 302, 262, 411, 411, 261, 278, 277, 418, 426, 342, 262, 411, 411, 261, 278, 277, 418,
      269, 262, 415, 412, 427, 411, 426, 342, 262, 411, 411, 261, 278, 277, 418, 269, 262, 415, 412, 427, 406, 426, 342, 262,
      411, 411, 261, 278, 277, 418, 269, 262, 415, 412, 427, 406, 426, 342, 262, 411, 411, 261, 278, 277, 418, 426, 342, 262,
      411, 411, 261, 278, 277, 418, 269, 262, 415, 412, 427, 406, 426, 342, 262, 411, 411, 261, 278, 277, 418, 426, 342, 262,
      411, 411, 261, 278, 277, 418, 426, 342, 262, 411, 411, 265, 315, 357, 269, 262, 283, 419, 366, 261, 276, 268, 425, 419,
      426, 342, 262, 411, 411, 263, 415, 415, 412, 419, 426, 342, 262, 411, 411, 261, 278, 277, 418, 269, 262, 415, 412, 427,
      411, 426, 342, 262, 411, 411, 261, 278, 277, 418, 426, 342, 262, 411, 411, 261, 278, 277, 418, 269, 262, 415, 412, 427,
      406, 426, 342, 300, 360, 261, 278, 309, 373, 265, 315, 357, 426, 342, 261, 276, 393, 426, 342, 261, 276, 393, 426, 342,
      261, 276, 393, 426, 342, 337, 266, 335, 265, 315, 282, 412, 428, 412, 426,
    ],
  },
];

const MODEL = sharedPath("models/llama2c/stories260K_q80.bin");
const TOKENIZER = sharedPath("models/llama2c/tok512.bin");
const GOLDEN = sharedPath("golden/runc-greedy.json");

/** Greedy decoding like run.c: stop on BOS or when the next position would be `steps`. */
function greedy(path: string, c: RunqCase, promptMode: "chunk" | "token"): number[] {
  const ckpt = readLlama2cCheckpoint(path);
  expect(ckpt.config.numerics).toBe("runq");
  const b = new CpuBackend();
  try {
    const weights = loadWeights(ckpt, b.mem, b.kernels);
    const model = new LlamaModel(ckpt.config, weights, b, 16, 1);
    const blockSize = 16;
    const blocks = Math.ceil(ckpt.config.seqLen / blockSize);
    const kv = new KVArena(b.mem, ckpt.config, blocks, blockSize);
    const batch = new StepBatch(b.mem, 16, 1, blocks, blockSize);
    // Blocks in reverse order: the cache must be read through the table.
    const table = Array.from({ length: blocks }, (_, i) => blocks - 1 - i);
    const vocab = ckpt.config.vocabSize;
    const step = (tokens: number[], pos: number): number => {
      batch.reset();
      const row = batch.addSequence(tokens, pos, [table], "last");
      model.forward(batch, kv);
      const f = b.mem.f32;
      const base = model.logitsAddr(row) >> 2;
      let best = 0;
      for (let i = 1; i < vocab; i++) if (f[base + i]! > f[base + best]!) best = i;
      return best;
    };
    let pos = 0;
    let next = -1;
    if (promptMode === "chunk") {
      next = step(c.promptIds, 0);
      pos = c.promptIds.length;
    } else {
      for (const t of c.promptIds) next = step([t], pos++);
    }
    const out: number[] = [];
    while (next !== 1) {
      out.push(next);
      if (pos >= c.steps) break;
      next = step([next], pos++);
    }
    return out;
  } finally {
    b.close();
  }
}

describe("stories260K_q80 greedy output equals runq's", () => {
  test("the recorded cases are sane", () => {
    expect(RUNQ_CASES.length).toBeGreaterThanOrEqual(4);
    // One case runs to seq_len: 512 positions, no BOS on the way.
    expect(RUNQ_CASES.some((c) => c.steps === 512 && c.promptIds.length + c.runq.length - 1 === 512)).toBe(true);
  });

  for (const c of RUNQ_CASES) {
    for (const mode of ["chunk", "token"] as const) {
      test.skipIf(MODEL === null)(`"${c.prompt}" -n ${c.steps}, prompt fed as one ${mode === "chunk" ? "chunk" : "token at a time"}: ${c.runq.length} ids`, () => {
        expect(greedy(MODEL!, c, mode)).toEqual(c.runq);
      }, 60_000);
    }
  }

  test.skipIf(TOKENIZER === null || GOLDEN === null)("the recorded ids of 'A little fish' decode to the golden text", () => {
    const entry = (JSON.parse(readFileSync(GOLDEN!, "utf8")) as { model: string; prompt: string; stdout: string }[])
      .find((g) => g.model === "llama2c/stories260K_q80.bin" && g.prompt === "A little fish");
    expect(entry).toBeDefined();
    const c = RUNQ_CASES[0]!;
    const pieces = readTokenPieces(TOKENIZER!, 512);
    expect(decodeTokens(pieces, c.promptIds[0]!, [...c.promptIds.slice(1), ...c.runq]) + "\n").toBe(entry!.stdout);
  });
});
