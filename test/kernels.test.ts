/**
 * Every WebAssembly kernel against a plain scalar loop, on odd sizes (not multiples of the SIMD
 * width), over many random iterations. Where the kernel's reduction order is part of its contract
 * (matmul, rmsnorm, int8), the loop emulates that order with Math.fround and the comparison is
 * bitwise; where it calls exp, it is within a few ulps.
 */
import { describe, expect, test } from "bun:test";
import { CpuBackend } from "../src/backend/wasm/cpu.ts";
import { attentionScratchBytes } from "../src/backend/wasm/kernels.ts";
import { attentionScale } from "../src/model/attention.ts";
import { Xoshiro128 } from "../src/util/random.ts";
import { KernelRegion } from "./helpers/wasm-scratch.ts";
import { randInt, randomArray, randomPagedSequences } from "./helpers/random-data.ts";

const fr = Math.fround;
const be = new CpuBackend();
const k = be.kernels;
const mem = be.mem;
// One scratch region, reused: every test writes its inputs and reads its outputs here.
const region = new KernelRegion(mem, 8 << 20);

/** The canonical dot product order of assembly/matmul.ts, in f32. */
function canonicalDot(w: Float32Array, wOff: number, x: Float32Array, xOff: number, d: number): number {
  const d4 = d & ~3;
  const acc = [0, 0, 0, 0];
  for (let c = 0; c < d4; c += 4) {
    for (let l = 0; l < 4; l++) acc[l] = fr(acc[l]! + fr(w[wOff + c + l]! * x[xOff + c + l]!));
  }
  let s = fr(fr(acc[0]! + acc[1]!) + fr(acc[2]! + acc[3]!));
  for (let j = d4; j < d; j++) s = fr(s + fr(w[wOff + j]! * x[xOff + j]!));
  return s;
}

describe("f32 matmul over packed panels", () => {
  test("matches the canonical scalar order bitwise for any T, shape and row split", () => {
    const rng = new Xoshiro128(1);
    for (let iter = 0; iter < 300; iter++) {
      const s = region.scratch();
      const n = randInt(rng, 1, 41);
      // Widths past a k-block (128 columns) and batches past TOKEN_BLOCK (16) take several k-blocks and
      // token blocks, with odd tokens and column tails.
      const d = randInt(rng, 1, iter % 2 === 0 ? 75 : 300);
      const T = randInt(rng, 1, iter % 3 === 0 ? 40 : 7);
      const w = randomArray(rng, n * d);
      const x = randomArray(rng, T * d);
      const src = s.f32(w);
      const packed = s.alloc(4 * n * d);
      k.packF32(packed, src, n, d);
      const xAddr = s.f32(x);
      const out = s.alloc(4 * T * n);
      // Split rows at a random panel boundary, as the thread pool does.
      const split = Math.min(n, 4 * randInt(rng, 0, Math.ceil(n / 4)));
      const acc = s.alloc(k.matmulScratchBytes());
      k.matmulF32(out, xAddr, packed, T, n, d, n, acc, 0, split);
      k.matmulF32(out, xAddr, packed, T, n, d, n, acc, split, n);
      const got = region.readF32(out, T * n);
      for (let t = 0; t < T; t++) {
        for (let i = 0; i < n; i++) {
          const want = canonicalDot(w, i * d, x, t * d, d);
          if (got[t * n + i] !== want) {
            throw new Error(`iter ${iter} n=${n} d=${d} T=${T} t=${t} i=${i}: ${got[t * n + i]} != ${want}`);
          }
        }
      }
    }
  });

  test("the product does not depend on where the matrix lies (k-blocks end on 2 KiB boundaries)", () => {
    const rng = new Xoshiro128(3);
    for (let iter = 0; iter < 60; iter++) {
      const s = region.scratch();
      const n = randInt(rng, 1, 13);
      const d = randInt(rng, 130, 700);
      const T = randInt(rng, 2, 21);
      const w = randomArray(rng, n * d);
      const xValues = randomArray(rng, T * d);
      const x = s.f32(xValues);
      const src = s.f32(w);
      const acc = s.alloc(k.matmulScratchBytes());
      let reference: Float32Array | null = null;
      for (let place = 0; place < 4; place++) {
        s.alloc(4 * randInt(rng, 0, 1023)); // a pad: the matrix starts anywhere relative to 2 KiB
        const packed = s.alloc(4 * n * d);
        k.packF32(packed, src, n, d);
        const out = s.alloc(4 * T * n);
        k.matmulF32(out, x, packed, T, n, d, n, acc, 0, n);
        const got = region.readF32(out, T * n);
        if (reference === null) {
          reference = got;
          const t = randInt(rng, 0, T - 1);
          const i = randInt(rng, 0, n - 1);
          expect(got[t * n + i]).toBe(canonicalDot(w, i * d, xValues, t * d, d));
        } else {
          expect(got).toEqual(reference);
        }
      }
    }
  });

  test("a token's result does not depend on the rest of the batch", () => {
    const rng = new Xoshiro128(2);
    for (let iter = 0; iter < 50; iter++) {
      const s = region.scratch();
      const n = randInt(rng, 1, 33);
      const d = randInt(rng, 1, 290);
      const T = randInt(rng, 2, 35);
      const packed = s.alloc(4 * n * d);
      k.packF32(packed, s.f32(randomArray(rng, n * d)), n, d);
      const x = s.f32(randomArray(rng, T * d));
      const batched = s.alloc(4 * T * n);
      const acc = s.alloc(k.matmulScratchBytes());
      k.matmulF32(batched, x, packed, T, n, d, n, acc, 0, n);
      const single = s.alloc(4 * n);
      for (let t = 0; t < T; t++) {
        k.matmulF32(single, x + 4 * t * d, packed, 1, n, d, n, acc, 0, n);
        expect(region.readF32(single, n)).toEqual(region.readF32(batched + 4 * t * n, n));
      }
    }
  });

  test("matmulF32Multi equals separate products, for any split of the shared row space", () => {
    const rng = new Xoshiro128(14);
    for (let iter = 0; iter < 100; iter++) {
      const s = region.scratch();
      const d = randInt(rng, 1, iter % 2 === 0 ? 40 : 200);
      const T = randInt(rng, 1, iter % 2 === 0 ? 5 : 20);
      const x = s.f32(randomArray(rng, T * d));
      const acc = s.alloc(k.matmulScratchBytes());
      const parts = Array.from({ length: randInt(rng, 1, 3) }, () => {
        const n = randInt(rng, 1, 23);
        const packed = s.alloc(4 * n * d);
        k.packF32(packed, s.f32(randomArray(rng, n * d)), n, d);
        return { n, packed, out: s.alloc(4 * T * n), want: s.alloc(4 * T * n) };
      });
      const table: number[] = [];
      let rows = 0;
      for (const p of parts) {
        table.push(p.packed, p.out, p.n, p.n, rows);
        rows += Math.ceil(p.n / 4) * 4;
        k.matmulF32(p.want, x, p.packed, T, p.n, d, p.n, acc, 0, p.n);
      }
      const split = 4 * randInt(rng, 0, rows / 4);
      const tableAddr = s.i32(table);
      k.matmulF32Multi(tableAddr, parts.length, x, T, d, acc, 0, split);
      k.matmulF32Multi(tableAddr, parts.length, x, T, d, acc, split, rows);
      for (const p of parts) expect(region.readF32(p.out, T * p.n)).toEqual(region.readF32(p.want, T * p.n));
    }
  });

  test("unpackRow and embed recover the original rows", () => {
    const rng = new Xoshiro128(3);
    for (let iter = 0; iter < 100; iter++) {
      const s = region.scratch();
      const n = randInt(rng, 1, 30);
      const d = randInt(rng, 1, 50);
      const w = randomArray(rng, n * d);
      const packed = s.alloc(4 * n * d);
      k.packF32(packed, s.f32(w), n, d);
      const tokens = Array.from({ length: 5 }, () => randInt(rng, 0, n - 1));
      const out = s.alloc(4 * 5 * d);
      k.embedF32(out, packed, s.i32(tokens), 5, n, d);
      tokens.forEach((r, t) => expect(region.readF32(out + 4 * t * d, d)).toEqual(w.slice(r * d, (r + 1) * d)));
    }
  });

  test("the scalar baseline kernel is a plain row-major loop", () => {
    const rng = new Xoshiro128(4);
    const s = region.scratch();
    const n = 13, d = 29;
    const w = randomArray(rng, n * d);
    const x = randomArray(rng, d);
    const out = s.alloc(4 * n);
    k.matvecScalarF32(out, s.f32(x), s.f32(w), n, d);
    const got = region.readF32(out, n);
    for (let i = 0; i < n; i++) {
      let acc = 0;
      for (let j = 0; j < d; j++) acc = fr(acc + fr(w[i * d + j]! * x[j]!));
      expect(got[i]).toBe(acc);
    }
  });
});

describe("exp", () => {
  test("expF32 is within 2 ulp of exp, saturates at both ends, and lanes equal the scalar tail", () => {
    const rng = new Xoshiro128(13);
    const s = region.scratch();
    const n = 4099;
    const x = new Float32Array(n);
    for (let i = 0; i < n; i++) x[i] = (rng.nextFloat() * 2 - 1) * 100;
    x.set([0, -0, 1, -1, 88.7, 88.73, -87.3, -87.4, -1000, 1000, -Infinity, Infinity], 0);
    const out = s.alloc(4 * n);
    k.expF32(out, s.f32(x), n);
    const got = region.readF32(out, n);
    for (let i = 0; i < n; i++) {
      const want = Math.exp(x[i]!);
      if (x[i]! < -87.33654) expect(got[i]).toBe(0);
      else if (x[i]! > 88.72283) expect(got[i]).toBe(Infinity);
      else {
        const ulp = Math.abs(fr(want) - fr(fr(want) * (1 + 2 ** -23))) || 2 ** -149;
        expect(Math.abs(got[i]! - want)).toBeLessThanOrEqual(2 * ulp);
      }
    }
    for (let offset = 1; offset < 4; offset++) {
      const o = s.alloc(4 * (n - offset));
      k.expF32(o, s.f32(x.subarray(offset)), n - offset);
      expect(region.readF32(o, n - offset)).toEqual(got.subarray(offset));
    }
  });
});

describe("streaming read", () => {
  test("streamSumF32 sums any range with four accumulators and a scalar tail", () => {
    const rng = new Xoshiro128(12);
    for (let iter = 0; iter < 200; iter++) {
      const s = region.scratch();
      const n = randInt(rng, 1, 150);
      const x = randomArray(rng, n);
      const start = randInt(rng, 0, n - 1);
      const end = randInt(rng, start, n);
      const out = s.alloc(4);
      k.streamSumF32(out, s.f32(x), start, end);
      const acc = [0, 0, 0, 0].map(() => [0, 0, 0, 0]);
      const body = start + ((end - start) & ~15);
      for (let i = start; i < body; i += 16) {
        for (let a = 0; a < 4; a++) for (let l = 0; l < 4; l++) acc[a]![l] = fr(acc[a]![l]! + x[i + 4 * a + l]!);
      }
      const lanes = [0, 1, 2, 3].map((l) => fr(fr(acc[0]![l]! + acc[1]![l]!) + fr(acc[2]![l]! + acc[3]![l]!)));
      let want = fr(fr(lanes[0]! + lanes[1]!) + fr(lanes[2]! + lanes[3]!));
      for (let i = body; i < end; i++) want = fr(want + x[i]!);
      expect(region.readF32(out, 1)[0]).toBe(want);
    }
  });
});

describe("int8 group-quantized kernels (runq.c arithmetic)", () => {
  const roundAway = (v: number) => (v < 0 ? -Math.floor(-v + 0.5) : Math.floor(v + 0.5));

  function quantizeRef(x: Float32Array, T: number, d: number, gs: number) {
    const groups = Math.floor(d / gs);
    const q = new Int8Array(T * d);
    const sc = new Float32Array(T * groups);
    for (let t = 0; t < T; t++) {
      for (let g = 0; g < groups; g++) {
        let wmax = 0;
        for (let i = 0; i < gs; i++) wmax = Math.max(wmax, Math.abs(x[t * d + g * gs + i]!));
        const scale = fr(wmax / 127);
        sc[t * groups + g] = scale;
        for (let i = 0; i < gs; i++) q[t * d + g * gs + i] = scale === 0 ? 0 : roundAway(fr(x[t * d + g * gs + i]! / scale));
      }
    }
    return { q, s: sc };
  }

  test("quantize and matmul match a scalar loop exactly, including groups that straddle rows", () => {
    const rng = new Xoshiro128(5);
    for (let iter = 0; iter < 120; iter++) {
      const s = region.scratch();
      const gs = [2, 4, 8, 16, 32, 48][randInt(rng, 0, 5)]!;
      const d = gs * randInt(rng, 1, 4) + (iter % 3 === 0 ? randInt(rng, 1, gs - 1) || 0 : 0);
      const n = randInt(rng, 1, 21);
      const T = randInt(rng, 1, 4);
      if ((n * d) % gs !== 0) continue; // export.py asserts numel % group_size == 0
      const w = randomArray(rng, n * d);
      const x = randomArray(rng, T * d, 3);
      const wq = quantizeRef(w.map((_, i) => w[i]!), 1, n * d, gs);
      const xRef = quantizeRef(x, T, d, gs);
      const xq = s.alloc(T * d);
      const xs = s.alloc(4 * T * Math.floor(d / gs));
      k.quantizeQ8(xq, xs, s.f32(x), T, d, gs);
      expect(new Int8Array(mem.u8.buffer, xq, T * d).slice()).toEqual(xRef.q);
      expect(region.readF32(xs, xRef.s.length)).toEqual(xRef.s);
      const wqAddr = s.alloc(n * d);
      new Int8Array(mem.u8.buffer, wqAddr, n * d).set(wq.q);
      const wsAddr = s.f32(wq.s);
      const out = s.alloc(4 * T * n);
      k.matmulQ8(out, xq, xs, wqAddr, wsAddr, T, d, gs, n, 0, n);
      const got = region.readF32(out, T * n);
      const groups = Math.floor(d / gs);
      for (let t = 0; t < T; t++) {
        for (let i = 0; i < n; i++) {
          let val = 0;
          for (let g = 0; g < groups; g++) {
            let ival = 0;
            for (let kk = 0; kk < gs; kk++) ival += xRef.q[t * d + g * gs + kk]! * wq.q[i * d + g * gs + kk]!;
            val = fr(val + fr(fr(ival * wq.s[Math.floor((i * d + g * gs) / gs)]!) * xRef.s[t * groups + g]!));
          }
          expect(got[t * n + i]).toBe(val);
        }
      }
    }
  });
});

describe("element-wise kernels", () => {
  test("rmsnorm matches the canonical order bitwise", () => {
    const rng = new Xoshiro128(6);
    for (let iter = 0; iter < 100; iter++) {
      const s = region.scratch();
      const n = randInt(rng, 1, 99);
      const T = randInt(rng, 1, 4);
      const x = randomArray(rng, T * n, 4);
      const w = randomArray(rng, n);
      const out = s.alloc(4 * T * n);
      k.rmsnorm(out, s.f32(x), s.f32(w), T, n, 1e-5);
      const got = region.readF32(out, T * n);
      for (let t = 0; t < T; t++) {
        const ss = canonicalDot(x, t * n, x, t * n, n);
        const inv = fr(1 / fr(Math.sqrt(fr(fr(ss / n) + fr(1e-5)))));
        for (let j = 0; j < n; j++) expect(got[t * n + j]).toBe(fr(w[j]! * fr(inv * x[t * n + j]!)));
      }
    }
  });

  test("addInPlace, addRows, swiglu and softmax", () => {
    const rng = new Xoshiro128(7);
    for (let iter = 0; iter < 100; iter++) {
      const s = region.scratch();
      const n = randInt(rng, 1, 77);
      const x = randomArray(rng, n, 5);
      const y = randomArray(rng, n, 5);
      const xa = s.f32(x);
      k.addInPlace(xa, s.f32(y), n);
      expect(region.readF32(xa, n)).toEqual(x.map((v, i) => fr(v + y[i]!)));

      const T = randInt(rng, 1, 4);
      const rows = randomArray(rng, T * n, 5);
      const ra = s.f32(rows);
      k.addRows(ra, s.f32(y), T, n);
      expect(region.readF32(ra, T * n)).toEqual(rows.map((v, i) => fr(v + y[i % n]!)));

      const ga = s.f32(x);
      k.swiglu(ga, s.f32(y), n);
      const sw = region.readF32(ga, n);
      for (let i = 0; i < n; i++) {
        const want = (x[i]! / (1 + Math.exp(-x[i]!))) * y[i]!;
        expect(Math.abs(sw[i]! - want)).toBeLessThanOrEqual(1e-6 * Math.max(1, Math.abs(want)));
      }

      const sa = s.f32(x);
      k.softmax(sa, n);
      const sm = region.readF32(sa, n);
      const m = Math.max(...x);
      const z = x.reduce((acc, v) => acc + Math.exp(v - m), 0);
      for (let i = 0; i < n; i++) expect(Math.abs(sm[i]! - Math.exp(x[i]! - m) / z)).toBeLessThan(1e-6);
    }
  });

  /** The kernels' exp of one value (expF32's scalar path), on buffers of its own kept clear of later scratch. */
  function scalarExp(): (x: number) => number {
    const one = region.scratch();
    const e1 = one.alloc(4), x1 = one.alloc(4);
    return (x: number): number => {
      mem.f32[x1 >> 2] = x;
      k.expF32(e1, x1, 1);
      return mem.f32[e1 >> 2]!;
    };
  }

  test("geglu (tanh GELU) and scaleInPlace match a scalar loop of the same f32 operations bitwise, and geglu the tanh formula", () => {
    // The scalar loop runs the kernel's own exp (expF32 on one value, its scalar path) inside the
    // same f32 steps, so SIMD lanes and the scalar tail are both checked bit for bit.
    const rng = new Xoshiro128(27);
    const C1 = fr(1.5957691216057308), C2 = fr(0.07135481627159173);
    const expOne = scalarExp();
    for (let iter = 0; iter < 200; iter++) {
      const s = region.scratch();
      s.alloc(64); // keep clear of the one-value buffers above
      const n = randInt(rng, 1, 83);
      const x = randomArray(rng, n, iter % 4 === 0 ? 12 : 4);
      const y = randomArray(rng, n, 3);
      const ga = s.f32(x);
      k.geglu(ga, s.f32(y), n);
      const got = region.readF32(ga, n);
      for (let i = 0; i < n; i++) {
        const v = x[i]!;
        const inner = fr(v * fr(C1 + fr(C2 * fr(v * v))));
        const gelu = fr(v * fr(1 / fr(1 + expOne(-inner))));
        expect(got[i]).toBe(fr(gelu * y[i]!));
        const exact = 0.5 * v * (1 + Math.tanh(Math.sqrt(2 / Math.PI) * (v + 0.044715 * v * v * v))) * y[i]!;
        expect(Math.abs(got[i]! - exact)).toBeLessThanOrEqual(2e-6 * Math.max(1, Math.abs(exact)));
      }
      const scale = fr(rng.nextFloat() * 40);
      const xa = s.f32(x);
      k.scaleInPlace(xa, scale, n);
      expect(region.readF32(xa, n)).toEqual(x.map((v) => fr(v * scale)));
    }
  });

  test("swigluOai (gpt-oss's clamped SwiGLU) matches a scalar loop of the same f32 operations bitwise, and ggml's formula", () => {
    // Gates past 7 and ups outside [-7, 7] on many elements, so both clamps act; odd sizes cover the tail.
    const rng = new Xoshiro128(31);
    const expOne = scalarExp();
    let clamped = 0;
    for (let iter = 0; iter < 200; iter++) {
      const s = region.scratch();
      s.alloc(64);
      const n = randInt(rng, 1, 83);
      const x = randomArray(rng, n, 12);
      const y = randomArray(rng, n, 12);
      const ga = s.f32(x);
      k.swigluOai(ga, s.f32(y), n);
      const got = region.readF32(ga, n);
      for (let i = 0; i < n; i++) {
        const g = Math.min(x[i]!, 7);
        const u = Math.min(Math.max(y[i]!, -7), 7);
        if (g !== x[i] || u !== y[i]) clamped++;
        const glu = fr(g * fr(1 / fr(1 + expOne(-fr(fr(1.702) * g)))));
        expect(got[i]).toBe(fr(glu * fr(u + 1)));
        const exact = (g / (1 + Math.exp(-1.702 * g))) * (u + 1);
        expect(Math.abs(got[i]! - exact)).toBeLessThanOrEqual(2e-6 * Math.max(1, Math.abs(exact)));
      }
    }
    expect(clamped).toBeGreaterThan(1000);
  });

  test("weightedRowSum adds each token's k rows, weighted, in rank order (bitwise), odd widths", () => {
    const rng = new Xoshiro128(41);
    for (let iter = 0; iter < 50; iter++) {
      const s = region.scratch();
      const n = randInt(rng, 1, 70), k2 = randInt(rng, 1, 5), T = randInt(rng, 1, 6), R = randInt(rng, T * k2, T * k2 + 5);
      const src = randomArray(rng, R * n, 3);
      const rows = Array.from({ length: T * k2 }, () => randInt(rng, 0, R - 1));
      const weights = randomArray(rng, T * k2, 1);
      const out = s.alloc(4 * T * n);
      k.weightedRowSum(out, s.f32(src), s.i32(rows), s.f32(weights), T, k2, n);
      const want = new Float32Array(T * n);
      for (let t = 0; t < T; t++) {
        for (let i = 0; i < n; i++) {
          let acc = fr(weights[t * k2]! * src[rows[t * k2]! * n + i]!);
          for (let r = 1; r < k2; r++) acc = fr(acc + fr(weights[t * k2 + r]! * src[rows[t * k2 + r]! * n + i]!));
          want[t * n + i] = acc;
        }
      }
      expect(region.readF32(out, T * n)).toEqual(want);
    }
  });

  test("gatherRows copies the selected rows", () => {
    const rng = new Xoshiro128(8);
    const s = region.scratch();
    const n = 7, R = 3;
    const src = randomArray(rng, 10 * n);
    const rows = [9, 0, 4];
    const out = s.alloc(4 * R * n);
    k.gatherRows(out, s.f32(src), s.i32(rows), R, n);
    rows.forEach((r, i) => expect(region.readF32(out + 4 * i * n, n)).toEqual(src.slice(r * n, (r + 1) * n)));
  });

  test("RoPE, interleaved and NeoX forms, whole and partial rotation, match the scalar rotation exactly", () => {
    const rng = new Xoshiro128(9);
    for (let iter = 0; iter < 60; iter++) {
      const s = region.scratch();
      const headDim = 2 * randInt(rng, 1, 20);
      // Rotate all of each head, or only its first ropeDim elements.
      const ropeDim = rng.nextFloat() < 0.5 ? headDim : 2 * randInt(rng, 1, headDim / 2);
      const nHeads = randInt(rng, 1, 5);
      const rowStride = nHeads * headDim + randInt(rng, 0, 3);
      const T = randInt(rng, 1, 5);
      const half = ropeDim / 2;
      const maxPos = 40;
      const cos = randomArray(rng, maxPos * half);
      const sin = randomArray(rng, maxPos * half);
      const positions = Array.from({ length: T }, () => randInt(rng, 0, maxPos - 1));
      const v = randomArray(rng, T * rowStride);
      for (const style of ["interleaved", "neox"] as const) {
        const va = s.f32(v);
        const fn = style === "neox" ? k.ropeNeox : k.ropeInterleaved;
        fn(va, s.i32(positions), T, nHeads, headDim, ropeDim, rowStride, s.f32(cos), s.f32(sin));
        const got = region.readF32(va, T * rowStride);
        const want = v.slice();
        for (let t = 0; t < T; t++) {
          for (let h = 0; h < nHeads; h++) {
            for (let kk = 0; kk < half; kk++) {
              const base = t * rowStride + h * headDim;
              const [i0, i1] = style === "neox" ? [base + kk, base + kk + half] : [base + 2 * kk, base + 2 * kk + 1];
              const c = cos[positions[t]! * half + kk]!, sn = sin[positions[t]! * half + kk]!;
              want[i0] = fr(fr(v[i0]! * c) - fr(v[i1]! * sn));
              want[i1] = fr(fr(v[i0]! * sn) + fr(v[i1]! * c));
            }
          }
        }
        expect(got).toEqual(want);
      }
    }
  });
});

describe("paged KV cache kernels", () => {
  test("writeKV scatters each head to its slot", () => {
    const rng = new Xoshiro128(10);
    const s = region.scratch();
    const nKv = 3, hd = 6, bs = 4, blocks = 5, T = 7;
    const kvBytes = 4 * blocks * nKv * bs * hd;
    const kc = s.alloc(kvBytes), vc = s.alloc(kvBytes);
    const kk = randomArray(rng, T * nKv * hd), vv = randomArray(rng, T * nKv * hd);
    const slots = [0, 5, 19, 7, 12, 3, 16];
    k.writeKV(kc, vc, s.f32(kk), s.f32(vv), s.i32(slots), T, nKv, hd, bs, blocks, 0, 4 * hd);
    slots.forEach((slot, t) => {
      const block = Math.floor(slot / bs), row = slot % bs;
      for (let h = 0; h < nKv; h++) {
        const at = kc + 4 * ((h * blocks + block) * bs + row) * hd;
        expect(region.readF32(at, hd)).toEqual(kk.slice((t * nKv + h) * hd, (t * nKv + h + 1) * hd));
        const atv = vc + 4 * ((h * blocks + block) * bs + row) * hd;
        expect(region.readF32(atv, hd)).toEqual(vv.slice((t * nKv + h) * hd, (t * nKv + h + 1) * hd));
      }
    });
  });

  test("pagedAttention gives the same bits whatever the block size and block order", () => {
    const rng = new Xoshiro128(15);
    for (let iter = 0; iter < 30; iter++) {
      const s = region.scratch();
      const nKv = randInt(rng, 1, 2), group = randInt(rng, 1, 2), nHeads = nKv * group;
      const hd = randInt(rng, 1, 20);
      const ctx = randInt(rng, 1, 70);
      const count = randInt(rng, 1, Math.min(ctx, 9));
      const keys = randomArray(rng, ctx * nKv * hd, 2), values = randomArray(rng, ctx * nKv * hd, 2);
      const qv = s.f32(randomArray(rng, count * nHeads * hd, 2));
      const results: Float32Array[] = [];
      for (const bs of [1, 3, 16, 17, 64]) {
        const nBlocks = Math.ceil(ctx / bs) + 2;
        const table = Array.from({ length: nBlocks }, (_, i) => i).sort(() => rng.nextFloat() - 0.5);
        const kc = s.alloc(4 * nBlocks * nKv * bs * hd), vc = s.alloc(4 * nBlocks * nKv * bs * hd);
        for (let p = 0; p < ctx; p++) {
          for (let h = 0; h < nKv; h++) {
            const at = ((h * nBlocks + table[Math.floor(p / bs)]!) * bs + (p % bs)) * hd;
            mem.f32.set(keys.subarray((p * nKv + h) * hd, (p * nKv + h + 1) * hd), (kc >> 2) + at);
            mem.f32.set(values.subarray((p * nKv + h) * hd, (p * nKv + h + 1) * hd), (vc >> 2) + at);
          }
        }
        const out = s.alloc(4 * count * nHeads * hd);
        const info = s.i32([0, count, ctx, s.i32(table)]);
        k.pagedAttention(out, qv, kc, vc, info, nHeads, nKv, hd, bs, nBlocks, nHeads * hd, 0, 4 * hd, attentionScale(hd), 0, 0, s.alloc(attentionScratchBytes(count * group, hd)), 0, nKv);
        results.push(region.readF32(out, count * nHeads * hd));
      }
      for (const r of results) expect(r).toEqual(results[0]!);
    }
  });

  test("pagedAttention computes a group's query heads in batches with each head's bits alone (f32, and f16 read in place or widened)", () => {
    // Groups of 1 to 9 heads cover batches of 4, 3, 2 and 1 (assembly/attention-tile.ts) with every
    // remainder; odd head sizes the scalar tails; one query per sequence the f16 rows read in place.
    const rng = new Xoshiro128(16);
    for (let iter = 0; iter < 60; iter++) {
      const s = region.scratch();
      const type = iter % 2 === 0 ? 0 : 1; // KV_TYPE_CODE f32, f16
      const group = randInt(rng, 1, 9);
      const hd = randInt(rng, 1, 70);
      const bs = randInt(rng, 1, 20), numBlocks = 12;
      const rowBytes = type === 0 ? 4 * hd : 2 * hd;
      const kc = s.alloc(numBlocks * bs * rowBytes), vc = s.alloc(numBlocks * bs * rowBytes);
      for (const arena of [kc, vc]) {
        for (let r = 0; r < numBlocks * bs; r++) k.storeKVRow(arena + r * rowBytes, s.f32(randomArray(rng, hd, 2)), hd, type);
      }
      const { seqs, info, T } = randomPagedSequences(rng, s, { numSeqs: randInt(rng, 1, 3), numBlocks, blockSize: bs, maxCtx: 80, maxCount: iter % 3 === 0 ? 5 : 1 });
      const q = randomArray(rng, T * group * hd, 2);
      const maxCount = Math.max(...seqs.map((x) => x.count));
      const scratch = s.alloc(attentionScratchBytes(maxCount * group, hd));
      const batched = s.alloc(4 * T * group * hd);
      k.pagedAttention(batched, s.f32(q), kc, vc, info, group, 1, hd, bs, numBlocks, group * hd, type, rowBytes, attentionScale(hd), 0, 0, scratch, 0, seqs.length);
      const got = region.readF32(batched, T * group * hd);
      for (let h = 0; h < group; h++) {
        const qHead = new Float32Array(T * hd);
        for (let t = 0; t < T; t++) qHead.set(q.subarray((t * group + h) * hd, (t * group + h + 1) * hd), t * hd);
        const alone = s.alloc(4 * T * hd);
        k.pagedAttention(alone, s.f32(qHead), kc, vc, info, 1, 1, hd, bs, numBlocks, hd, type, rowBytes, attentionScale(hd), 0, 0, scratch, 0, seqs.length);
        const want = region.readF32(alone, T * hd);
        for (let t = 0; t < T; t++) expect(got.subarray((t * group + h) * hd, (t * group + h + 1) * hd)).toEqual(want.subarray(t * hd, (t + 1) * hd));
      }
    }
  });

  test("pagedAttention with a sliding window (and attention sinks) equals plain windowed softmax, reads nothing before the window, and gives the same bits in any chunking, block size and type", () => {
    // Blocks wholly before a sequence's windows point at a "freed" block full of NaN (the KV
    // manager frees them): a read would poison the result. Chunks of a random split, token by
    // token and at once must give the same bits; f32, f16 and q8_0 caches, odd head sizes, GQA.
    const rng = new Xoshiro128(17);
    for (let iter = 0; iter < 60; iter++) {
      const s = region.scratch();
      const type = iter % 3; // KV_TYPE_CODE f32, f16, q8_0
      const nKv = randInt(rng, 1, 2), group = randInt(rng, 1, 5), nHeads = nKv * group;
      const hd = type === 2 ? 32 * randInt(rng, 1, 2) : randInt(rng, 1, 40);
      const rowBytes = type === 0 ? 4 * hd : type === 1 ? 2 * hd : Math.ceil(((hd / 32) * 34) / 4) * 4;
      const window = randInt(rng, 1, 40);
      const ctx = randInt(rng, 1, 90);
      const count = randInt(rng, 1, Math.min(ctx, 24));
      const firstPos = ctx - count;
      const keys = randomArray(rng, ctx * nKv * hd, 2), values = randomArray(rng, ctx * nKv * hd, 2);
      const q = randomArray(rng, count * nHeads * hd, 2);
      const scale = Math.fround(0.7 / Math.sqrt(hd)); // a model's own scale (gemma3 27B) is not 1/sqrt(hd)
      const qStride = nHeads * hd;
      // Every other case with gpt-oss's attention sinks: one more logit per head, no value.
      const sinks = iter % 2 === 1 ? randomArray(rng, nHeads, 3) : null;
      const sinksAddr = sinks === null ? 0 : s.f32(sinks);
      const runs: Float32Array[] = [];
      for (const bs of [1, 5, 16, 17]) {
        const nBlocks = Math.ceil(ctx / bs) + 1;
        const freed = nBlocks - 1;
        const live = Array.from({ length: nBlocks - 1 }, (_, i) => i).sort(() => rng.nextFloat() - 0.5);
        // Blocks wholly before the first query's window are freed.
        const firstNeeded = Math.floor(Math.max(0, firstPos - window + 1) / bs);
        const table = live.map((b, i) => (i < firstNeeded ? freed : b));
        const kc = s.alloc(nBlocks * nKv * bs * rowBytes), vc = s.alloc(nBlocks * nKv * bs * rowBytes);
        const nan = s.f32(new Array<number>(hd).fill(NaN));
        for (const arena of [kc, vc]) for (let h = 0; h < nKv; h++) for (let r = 0; r < bs; r++) k.storeKVRow(arena + ((h * nBlocks + freed) * bs + r) * rowBytes, nan, hd, type);
        for (let p = Math.floor(Math.max(0, firstPos - window + 1) / bs) * bs; p < ctx; p++) {
          for (let h = 0; h < nKv; h++) {
            const at = ((h * nBlocks + table[Math.floor(p / bs)]!) * bs + (p % bs)) * rowBytes;
            k.storeKVRow(kc + at, s.f32(keys.subarray((p * nKv + h) * hd, (p * nKv + h + 1) * hd)), hd, type);
            k.storeKVRow(vc + at, s.f32(values.subarray((p * nKv + h) * hd, (p * nKv + h + 1) * hd)), hd, type);
          }
        }
        const tableAddr = s.i32(table);
        // The chunk at once, then split into random pieces (each piece a step of its own).
        const cuts = [0, ...Array.from({ length: randInt(rng, 0, 3) }, () => randInt(rng, 1, count - 1)).filter((c) => c > 0 && c < count), count]
          .sort((a, b) => a - b);
        for (const pieces of [[0, count], cuts]) {
          const out = new Float32Array(count * qStride);
          for (let c = 0; c + 1 < pieces.length; c++) {
            const [from, to] = [pieces[c]!, pieces[c + 1]!];
            if (from === to) continue;
            const n = to - from;
            const o = s.alloc(4 * n * qStride);
            const info = s.i32([0, n, firstPos + to, tableAddr]);
            const scratch = s.alloc(attentionScratchBytes(n * group, hd));
            k.pagedAttention(o, s.f32(q.subarray(from * qStride, to * qStride)), kc, vc, info, nHeads, nKv, hd, bs, nBlocks, qStride, type, rowBytes, scale, window, sinksAddr, scratch, 0, nKv);
            out.set(region.readF32(o, n * qStride), from * qStride);
          }
          runs.push(out);
        }
      }
      for (const r of runs) expect(r).toEqual(runs[0]!);
      // Against plain windowed softmax over the cache's values (f32 here; the typed caches round them).
      if (type !== 0) continue;
      const got = runs[0]!;
      for (let i = 0; i < count; i++) {
        const pos = firstPos + i;
        const lo = Math.max(0, pos - window + 1);
        for (let h = 0; h < nHeads; h++) {
          const kvh = Math.floor(h / group);
          const row = (p: number) => (p * nKv + kvh) * hd;
          const scores: number[] = [];
          for (let p = lo; p <= pos; p++) {
            let dot = 0;
            for (let j = 0; j < hd; j++) dot += q[i * qStride + h * hd + j]! * keys[row(p) + j]!;
            scores.push(dot * scale);
          }
          const sink = sinks === null ? -Infinity : sinks[h]!;
          const m = Math.max(...scores, sink);
          const e = scores.map((v) => Math.exp(v - m));
          const z = e.reduce((a, b) => a + b, 0) + Math.exp(sink - m);
          for (let j = 0; j < hd; j++) {
            let want = 0;
            for (let p = lo; p <= pos; p++) want += (e[p - lo]! / z) * values[row(p) + j]!;
            expect(Math.abs(got[i * qStride + h * hd + j]! - want)).toBeLessThan(2e-5 * Math.max(1, Math.abs(want)));
          }
        }
      }
    }
  });

  test("pagedAttention equals plain causal softmax attention over shuffled blocks, chunks and GQA", () => {
    const rng = new Xoshiro128(11);
    for (let iter = 0; iter < 60; iter++) {
      const s = region.scratch();
      const nKv = randInt(rng, 1, 3);
      const group = randInt(rng, 1, 3);
      const nHeads = nKv * group;
      const hd = randInt(rng, 1, 19);
      const bs = randInt(rng, 1, 6);
      const numBlocks = 40;
      const kvBytes = 4 * numBlocks * nKv * bs * hd;
      const kc = s.f32(randomArray(rng, kvBytes / 4, 2));
      const vc = s.f32(randomArray(rng, kvBytes / 4, 2));
      // A few sequences, each a chunk of new tokens at the end of its context, with a shuffled block table.
      const numSeqs = randInt(rng, 1, 3);
      const { seqs, info: infoAddr, T } = randomPagedSequences(rng, s, { numSeqs, numBlocks, blockSize: bs, maxCtx: Infinity, maxCount: 6 });
      const qStride = nHeads * hd;
      const qv = randomArray(rng, T * qStride, 2);
      const out = s.alloc(4 * T * qStride);
      const scratch = s.alloc(attentionScratchBytes(Math.max(...seqs.map((x) => x.count)) * group, hd));
      const items = numSeqs * nKv;
      const split = randInt(rng, 0, items);
      k.pagedAttention(out, s.f32(qv), kc, vc, infoAddr, nHeads, nKv, hd, bs, numBlocks, qStride, 0, 4 * hd, attentionScale(hd), 0, 0, scratch, 0, split);
      k.pagedAttention(out, s.f32(qv), kc, vc, infoAddr, nHeads, nKv, hd, bs, numBlocks, qStride, 0, 4 * hd, attentionScale(hd), 0, 0, scratch, split, items);
      const got = region.readF32(out, T * qStride);
      const kAll = region.readF32(kc, kvBytes / 4), vAll = region.readF32(vc, kvBytes / 4);
      for (const sq of seqs) {
        for (let i = 0; i < sq.count; i++) {
          const pos = sq.ctx - sq.count + i;
          for (let h = 0; h < nHeads; h++) {
            const kvh = Math.floor(h / group);
            const at = (p: number) => ((kvh * numBlocks + sq.table[Math.floor(p / bs)]!) * bs + (p % bs)) * hd;
            const qOff = (sq.start + i) * qStride + h * hd;
            const scores = Array.from({ length: pos + 1 }, (_, p) => {
              let dot = 0;
              for (let j = 0; j < hd; j++) dot += qv[qOff + j]! * kAll[at(p) + j]!;
              return dot / Math.sqrt(hd);
            });
            const m = Math.max(...scores);
            const e = scores.map((v) => Math.exp(v - m));
            const z = e.reduce((a, b) => a + b, 0);
            for (let j = 0; j < hd; j++) {
              let want = 0;
              for (let p = 0; p <= pos; p++) want += (e[p]! / z) * vAll[at(p) + j]!;
              expect(Math.abs(got[qOff + j]! - want)).toBeLessThan(2e-5 * Math.max(1, Math.abs(want)));
            }
          }
        }
      }
    }
  });
});
