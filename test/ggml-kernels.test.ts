/**
 * The kernels of the ggml tensor types (assembly/ggml/) against plain loops over the reference
 * dequantizers (src/synth/quant/): every type, odd row counts, several blocks, many iterations; the
 * same bits for a token whatever else is in the call, whichever rows a thread computes, and at
 * any thread count.
 */
import { afterAll, describe, expect, test } from "bun:test";
import { CpuBackend } from "../src/backend/wasm/cpu.ts";
import type { WeightMatrix } from "../src/backend/wasm/weights.ts";
import { dequantize, GGML_TYPE, quantize, type QuantTypeName } from "../src/synth/quant/index.ts";
import { Xoshiro128 } from "../src/util/random.ts";

type GGMLType = Exclude<QuantTypeName, "F32">;
const TYPES: GGMLType[] = ["F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "MXFP4", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K"];
const MAX_T = 9;
const MAX_COLS = 768;

const backend = new CpuBackend(1);
backend.reserveScratch(MAX_T, MAX_COLS, 1, 64, 0, true);
const pool = new CpuBackend(2);
pool.reserveScratch(MAX_T, MAX_COLS, 1, 64, 0, true);
afterAll(() => {
  backend.close();
  pool.close();
});

const isFloat16 = (type: GGMLType): boolean => type === "F16" || type === "BF16";

/** A column count for the type: whole blocks, and odd (not a multiple of 8) where the type allows. */
function colsFor(type: GGMLType, rng: Xoshiro128): number {
  if (type.endsWith("_K")) return 256 * (1 + Math.floor(rng.nextFloat() * 3));
  if (isFloat16(type)) return 1 + Math.floor(rng.nextFloat() * 300);
  return 32 * (1 + Math.floor(rng.nextFloat() * 9));
}

function place(b: CpuBackend, type: GGMLType, w: Float32Array, rows: number, cols: number): WeightMatrix {
  const bytes = quantize(type, w);
  const addr = b.mem.alloc(bytes.length, 16);
  b.mem.u8.set(bytes, addr);
  return { kind: "ggml", type: GGML_TYPE[type], rows, cols, addr, rowBytes: bytes.length / rows };
}

/** out = W · x[t] for T tokens on backend b (W of `type`, placed and given back): the output as it came. */
function productOn(b: CpuBackend, type: GGMLType, w: Float32Array, rows: number, cols: number, x: Float32Array, T: number): Float32Array {
  const mark = b.mem.mark();
  const m = place(b, type, w, rows, cols);
  const xAddr = b.mem.alloc(4 * T * cols);
  b.mem.f32.set(x, xAddr >> 2);
  const out = b.mem.alloc(4 * T * rows);
  b.matmul(out, xAddr, m, T);
  const got = b.mem.f32.slice(out >> 2, (out >> 2) + T * rows);
  b.mem.release(mark);
  return got;
}

function dotRows(wd: Float32Array, cols: number, xr: Float64Array, r: number): { value: number; magnitude: number } {
  let value = 0;
  let magnitude = 0;
  for (let k = 0; k < cols; k++) {
    value += wd[r * cols + k]! * xr[k]!;
    magnitude += Math.abs(wd[r * cols + k]! * xr[k]!);
  }
  return { value, magnitude };
}

function activationsAsRead(type: GGMLType, x: Float32Array, cols: number): Float64Array {
  const xr = new Float64Array(cols);
  if (type === "F16" || type === "BF16") {
    // Rounded to the weights' type first, as llama.cpp does (the reference converter of src/synth/quant).
    xr.set(dequantize(type, quantize(type, x.subarray(0, cols)), cols));
    return xr;
  }
  const block = type.endsWith("_K") ? 256 : 32;
  for (let b = 0; b < cols; b += block) {
    let amax = 0;
    for (let i = b; i < b + block; i++) amax = Math.max(amax, Math.abs(x[i]!));
    const d = Math.fround(amax / 127);
    const inv = d !== 0 ? Math.fround(1 / d) : 0;
    for (let i = b; i < b + block; i++) {
      const v = Math.fround(x[i]! * inv);
      const floor = Math.floor(v);
      const q = v - floor === 0.5 ? (floor % 2 === 0 ? floor : floor + 1) : Math.round(v);
      xr[i] = q * d;
    }
  }
  return xr;
}

function randomArray(rng: Xoshiro128, n: number, scale = 1): Float32Array {
  return Float32Array.from({ length: n }, () => (rng.nextFloat() * 2 - 1) * scale);
}

describe("ggml type products against a dequantize-then-dot loop", () => {
  for (const type of TYPES) {
    test(type, () => {
      const rng = new Xoshiro128(GGML_TYPE[type] + 1);
      const mark = backend.mem.mark();
      for (let iter = 0; iter < 12; iter++) {
        backend.mem.release(mark);
        const rows = 1 + 2 * Math.floor(rng.nextFloat() * 20); // odd
        const cols = colsFor(type, rng);
        // Every remainder of four (the kernels' token groups: 4, then 3, 2 or 1 at the end) in the first iterations, then any.
        const T = iter < 8 ? 1 + iter : 1 + Math.floor(rng.nextFloat() * MAX_T);
        const w = randomArray(rng, rows * cols, 0.5);
        const x = randomArray(rng, T * cols, 2);
        const m = place(backend, type, w, rows, cols);
        const xAddr = backend.mem.alloc(4 * T * cols);
        backend.mem.f32.set(x, xAddr >> 2);
        const out = backend.mem.alloc(4 * T * rows);
        backend.matmul(out, xAddr, m, T);
        const got = backend.mem.f32.slice(out >> 2, (out >> 2) + T * rows);
        const wd = dequantize(type, quantize(type, w), rows * cols);
        for (let t = 0; t < T; t++) {
          const xr = activationsAsRead(type, x.subarray(t * cols, (t + 1) * cols), cols);
          for (let r = 0; r < rows; r++) {
            const { value, magnitude } = dotRows(wd, cols, xr, r);
            expect(Math.abs(got[t * rows + r]! - value)).toBeLessThanOrEqual(2e-6 * magnitude + 1e-6);
          }
        }
        // Each token alone gives the same bits as inside the batch (where tokens go four at a time, then the last 3, 2 or 1 together).
        const one = backend.mem.alloc(4 * rows);
        for (let t = 0; t < T; t++) {
          backend.matmul(one, xAddr + 4 * t * cols, m, 1);
          expect(backend.mem.f32.slice(one >> 2, (one >> 2) + rows)).toEqual(got.slice(t * rows, (t + 1) * rows));
        }
      }
      backend.mem.release(mark);
    });
  }
});

describe("the same bits at any thread count", () => {
  for (const type of TYPES) {
    test(type, () => {
      const rng = new Xoshiro128(100 + GGML_TYPE[type]);
      const rows = 333;
      const cols = type.endsWith("_K") ? 512 : isFloat16(type) ? 101 : 96;
      const T = 5;
      const w = randomArray(rng, rows * cols);
      const x = randomArray(rng, T * cols);
      const results = [backend, pool].map((b) => productOn(b, type, w, rows, cols, x, T));
      expect(results[1]).toEqual(results[0]!);
    });
  }
});

describe("several products in one call (matmulSegments: a mixture of experts' chosen experts)", () => {
  // Every quantized type: segments of odd row counts over row ranges of one input, T of 1 to 5 each,
  // give each product's bits alone, on one thread and split over two.
  for (const type of TYPES.filter((t) => t !== "F16" && t !== "BF16")) {
    test(`${type}: the same bits as each product alone, at 1 and 2 threads`, () => {
      const rng = new Xoshiro128(300 + GGML_TYPE[type]);
      for (const b of [backend, pool]) {
        const mark = b.mem.mark();
        for (let iter = 0; iter < 6; iter++) {
          const cols = type.endsWith("_K") ? 256 * (1 + Math.floor(rng.nextFloat() * 2)) : 32 * (1 + Math.floor(rng.nextFloat() * 6));
          const count = 1 + Math.floor(rng.nextFloat() * 4);
          const Ts = Array.from({ length: count }, () => 1 + Math.floor(rng.nextFloat() * 5));
          const rowsOf = Array.from({ length: count }, () => 1 + 2 * Math.floor(rng.nextFloat() * 40));
          const xRows = Ts.reduce((a, t) => a + t, 0);
          if (xRows > MAX_T) continue;
          const xAddr = b.mem.alloc(4 * xRows * cols);
          b.mem.f32.set(randomArray(rng, xRows * cols, 2), xAddr >> 2);
          let row = 0;
          const segs = Ts.map((T, i) => {
            const m = place(b, type, randomArray(rng, rowsOf[i]! * cols, 0.5), rowsOf[i]!, cols);
            const s = { out: b.mem.alloc(4 * T * m.rows), m, row, T };
            row += T;
            return s;
          });
          const table = b.mem.alloc(4 * 9 * count);
          b.matmulSegments(table, segs, xAddr, xRows);
          for (const s of segs) {
            const alone = b.mem.alloc(4 * s.T * s.m.rows);
            b.matmul(alone, xAddr + 4 * s.row * cols, s.m, s.T);
            expect(b.mem.f32.slice(s.out >> 2, (s.out >> 2) + s.T * s.m.rows)).toEqual(b.mem.f32.slice(alone >> 2, (alone >> 2) + s.T * s.m.rows));
          }
        }
        b.mem.release(mark);
      }
    });
  }
});

describe("embedding rows", () => {
  for (const type of TYPES) {
    test(`${type}: rows equal the reference dequantizer's values`, () => {
      const rng = new Xoshiro128(200 + GGML_TYPE[type]);
      const mark = backend.mem.mark();
      const rows = 37;
      const cols = type.endsWith("_K") ? 512 : isFloat16(type) ? 77 : 160;
      const w = randomArray(rng, rows * cols);
      const m = place(backend, type, w, rows, cols);
      const tokens = [0, 36, 5, 5, 17];
      const tokAddr = backend.mem.alloc(4 * tokens.length);
      backend.mem.i32.set(tokens, tokAddr >> 2);
      const out = backend.mem.alloc(4 * tokens.length * cols);
      backend.embed(out, m, tokAddr, tokens.length);
      const wd = dequantize(type, quantize(type, w), rows * cols);
      tokens.forEach((tok, t) => {
        expect(backend.mem.f32.slice((out >> 2) + t * cols, (out >> 2) + (t + 1) * cols)).toEqual(wd.slice(tok * cols, (tok + 1) * cols));
      });
      backend.mem.release(mark);
    });
  }
});

describe("half-precision scales", () => {
  test("every half converts exactly (subnormals included), in an embedding row and in an F16 product", () => {
    // Every finite half, positive and negative, as the rows of an F16 matrix: embedding rows give
    // the scalar conversion, a product with a one-hot x the SIMD one.
    const mark = backend.mem.mark();
    const halves = Uint16Array.from({ length: 0x7c00 * 2 }, (_, i) => (i < 0x7c00 ? i : 0x8000 | (i - 0x7c00)));
    const cols = 512;
    const rows = halves.length / cols;
    const addr = backend.mem.alloc(halves.byteLength, 16);
    backend.mem.u8.set(new Uint8Array(halves.buffer), addr);
    const m: WeightMatrix = { kind: "ggml", type: GGML_TYPE.F16, rows, cols, addr, rowBytes: 2 * cols };
    const tokens = Array.from({ length: rows }, (_, i) => i);
    const tokAddr = backend.mem.alloc(4 * rows);
    backend.mem.i32.set(tokens, tokAddr >> 2);
    const out = backend.mem.alloc(4 * halves.length);
    backend.embed(out, m, tokAddr, rows);
    const got = backend.mem.f32.slice(out >> 2, (out >> 2) + halves.length);
    const want = dequantize("F16", new Uint8Array(halves.buffer), halves.length);
    expect(Array.from(got)).toEqual(Array.from(want));
    // The SIMD conversion in the product: x = e_k picks column k of every row.
    const x = new Float32Array(cols);
    x[cols - 9] = 1; // inside the SIMD part of the row
    const xAddr = backend.mem.alloc(4 * cols);
    backend.mem.f32.set(x, xAddr >> 2);
    const prod = backend.mem.alloc(4 * rows);
    backend.matmul(prod, xAddr, m, 1);
    expect(backend.mem.f32.slice(prod >> 2, (prod >> 2) + rows)).toEqual(Float32Array.from({ length: rows }, (_, r) => want[r * cols + cols - 9]!));
    backend.mem.release(mark);
  });
});

describe("MXFP4 scales and codes", () => {
  test("every E8M0 scale (subnormal 2^-128 and 2^-127 included) with every code, in embedding rows and in a product", () => {
    // Row e: one block per E8M0 byte e, its 32 codes 0..15 twice (low nibbles, then high ones reversed).
    const mark = backend.mem.mark();
    const rows = 256;
    const cols = 32;
    const bytes = new Uint8Array(rows * 17);
    for (let e = 0; e < rows; e++) {
      bytes[17 * e] = e;
      for (let j = 0; j < 16; j++) bytes[17 * e + 1 + j] = j | ((15 - j) << 4);
    }
    const addr = backend.mem.alloc(bytes.length, 16);
    backend.mem.u8.set(bytes, addr);
    const m: WeightMatrix = { kind: "ggml", type: GGML_TYPE.MXFP4, rows, cols, addr, rowBytes: 17 };
    const want = dequantize("MXFP4", bytes, rows * cols);
    // Exact: kvalue * 2^(e - 128), in float64 (each is representable in f32, subnormals too).
    const kvalues = [0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12];
    for (let e = 0; e < rows; e++) {
      for (let j = 0; j < cols; j++) expect(want[e * cols + j]).toBe(Math.fround(kvalues[j < 16 ? j : 31 - j]! * 2 ** (e - 128)));
    }
    const tokens = Array.from({ length: rows }, (_, i) => i);
    const tokAddr = backend.mem.alloc(4 * rows);
    backend.mem.i32.set(tokens, tokAddr >> 2);
    const out = backend.mem.alloc(4 * rows * cols);
    backend.embed(out, m, tokAddr, rows);
    expect(Array.from(backend.mem.f32.slice(out >> 2, (out >> 2) + rows * cols))).toEqual(Array.from(want));
    // x = 1 at column k (its int8 block is 127 there, scale 1/127): the product reads code k of every row,
    // exactly where the scaled value stays a normal f32.
    for (const k of [0, 7, 16, 31]) {
      const x = new Float32Array(cols);
      x[k] = 1;
      const xAddr = backend.mem.alloc(4 * cols);
      backend.mem.f32.set(x, xAddr >> 2);
      const prod = backend.mem.alloc(4 * rows);
      backend.matmul(prod, xAddr, m, 1);
      const got = backend.mem.f32.slice(prod >> 2, (prod >> 2) + rows);
      for (let e = 8; e < rows - 8; e++) {
        const exact = want[e * cols + k]!;
        expect(Math.abs(got[e]! - exact)).toBeLessThanOrEqual(Math.abs(exact) * 2 ** -22);
      }
    }
    backend.mem.release(mark);
  });
});

describe("activations rounded for F16 and BF16 products (roundActivations)", () => {
  /** Values around every boundary the rounding has: ties, the half's subnormal and overflow edges, 0, inf, NaN. */
  function edgeValues(): Float32Array {
    const u = new Uint32Array([
      0x00000000, 0x80000000, 0x7f800000, 0xff800000, 0x7fc00000, 0x7f800001, 0xffc12345,
      0x3f800000, 0x3f801000, 0x3f803000, 0x3f802fff, 0x3f801001, 0x3f808000, 0x3f818000, 0x3f808001, 0x3f807fff, // ties and near ties
      0x387fe000, 0x387ff000, 0x387fffff, 0x38800000, 0x38801000, 0x33800000, 0x33000000, 0x33000001, 0x32ffffff, // 2^-14, 2^-24, half of it
      0x477fe000, 0x477fefff, 0x477ff000, 0x477fffff, 0x47800000, 0xc77ff000, 0x7f7fffff, 0x00000001, 0x807fffff, // 65504, 65520, max f32, f32 subnormals
    ]);
    return new Float32Array(u.buffer);
  }

  function roundInWasm(x: Float32Array, bf16: boolean): Float32Array {
    const mark = backend.mem.mark();
    const src = backend.mem.alloc(4 * x.length + 16);
    const dst = backend.mem.alloc(4 * x.length + 16);
    backend.mem.f32.set(x, src >> 2);
    backend.kernels.roundActivations(dst, src, x.length, bf16 ? 1 : 0);
    const got = backend.mem.f32.slice(dst >> 2, (dst >> 2) + x.length);
    backend.mem.release(mark);
    return got;
  }

  /** Bits, with every NaN as one value (a NaN's payload is not kept exactly). */
  const bits = (x: Float32Array): number[] => Array.from(new Uint32Array(x.buffer.slice(0)), (b, i) => (Number.isNaN(x[i]!) ? -1 : b));

  for (const type of ["F16", "BF16"] as const) {
    test(`${type}: the reference converter's nearest-even rounding, SIMD and scalar tail, odd sizes`, () => {
      const rng = new Xoshiro128(type === "F16" ? 16 : 17);
      const edges = edgeValues();
      for (let iter = 0; iter < 200; iter++) {
        const n = 1 + Math.floor(rng.nextFloat() * 97);
        const x = new Float32Array(n);
        const raw = new Uint32Array(x.buffer);
        for (let i = 0; i < n; i++) {
          const pick = rng.nextFloat();
          if (pick < 0.3) x[i] = edges[Math.floor(rng.nextFloat() * edges.length)]!;
          else if (pick < 0.6) raw[i] = Math.floor(rng.nextFloat() * 2 ** 32) >>> 0; // any bits
          else x[i] = (rng.nextFloat() * 2 - 1) * 2 ** (Math.floor(rng.nextFloat() * 40) - 26);
        }
        const want = dequantize(type, quantize(type, x), n);
        const got = roundInWasm(x, type === "BF16");
        expect(bits(got)).toEqual(bits(want));
        if (type === "F16") expect(bits(got)).toEqual(bits(Float32Array.from(x, (v) => Math.f16round(v))));
      }
    });
  }
});

describe("Q5_0 stored as Q8_0", () => {
  test("transcodeQ5_0ToQ8_0 keeps every value (odd block counts, extreme and tiny scales)", () => {
    const rng = new Xoshiro128(77);
    const mark = backend.mem.mark();
    for (const blocks of [1, 3, 37]) {
      for (const scale of [1, 1e-6, 3e4]) {
        const w = randomArray(rng, 32 * blocks, scale);
        const q5 = quantize("Q5_0", w);
        const src = backend.mem.alloc(q5.length, 16);
        backend.mem.u8.set(q5, src);
        const dst = backend.mem.alloc(34 * blocks, 16);
        backend.kernels.transcodeQ5_0ToQ8_0(dst, src, blocks);
        const q8 = backend.mem.u8.slice(dst, dst + 34 * blocks);
        expect(Array.from(dequantize("Q8_0", q8, 32 * blocks))).toEqual(Array.from(dequantize("Q5_0", q5, 32 * blocks)));
      }
    }
    backend.mem.release(mark);
  });
});

describe("products of many tokens, past a token block", () => {
  // matmulF16/BF16 widen a row once per block of tokens and take the tokens three, two or one at a
  // time; every element must still be rowDot's reduction: column k to lane k & 15 (four
  // accumulators of four lanes) while whole 16-column groups last, then (a0 + a1) + (a2 + a3)
  // lane-wise, ((l0 + l1) + (l2 + l3)), then the tail columns in order.
  const f = Math.fround;
  function scalarOrder(w: Float32Array, x: Float64Array, cols: number): number {
    const acc = new Float32Array(16);
    const c16 = cols & ~15;
    for (let k = 0; k < c16; k++) acc[k & 15] = f(acc[k & 15]! + f(w[k]! * x[k]!));
    const lane = (l: number): number => f(f(acc[l]! + acc[4 + l]!) + f(acc[8 + l]! + acc[12 + l]!));
    let s = f(f(lane(0) + lane(1)) + f(lane(2) + lane(3)));
    for (let k = c16; k < cols; k++) s = f(s + f(w[k]! * x[k]!));
    return s;
  }
  const MANY_T = 700;
  const WIDTH = 2048;
  const single = new CpuBackend(1);
  single.reserveScratch(MANY_T, WIDTH, 1, 64, 0, true);
  const pair = new CpuBackend(2);
  pair.reserveScratch(MANY_T, WIDTH, 1, 64, 0, true);
  afterAll(() => {
    single.close();
    pair.close();
  });
  for (const type of ["F16", "BF16"] as const) {
    test(`${type}: bit for bit against the scalar order, odd widths, T from 1 to ${MANY_T} (past one token block), one and two threads`, () => {
      const rng = new Xoshiro128(type === "F16" ? 4016 : 4030);
      // Widths below, at and past 16-column groups; T covering every remainder of three and more than one token block of the widest.
      const cases: [number, number][] = [[1, 5], [15, 3], [16, 2], [17, 7], [33, 4], [47, 11], [101, 40], [331, 13], [331, 230], [331, MANY_T]];
      for (const [cols, T] of cases) {
        const rows = 65 + 2 * Math.floor(rng.nextFloat() * 12); // odd, and more than one claim of rows on two threads
        const w = randomArray(rng, rows * cols, 0.5);
        const x = randomArray(rng, T * cols, 2);
        const wd = dequantize(type, quantize(type, w), rows * cols);
        const results = [single, pair].map((b) => productOn(b, type, w, rows, cols, x, T));
        expect(results[1]).toEqual(results[0]!);
        const want = new Float32Array(T * rows);
        for (let t = 0; t < T; t++) {
          const xr = activationsAsRead(type, x.subarray(t * cols, (t + 1) * cols), cols);
          for (let r = 0; r < rows; r++) want[t * rows + r] = scalarOrder(wd.subarray(r * cols, (r + 1) * cols), xr, cols);
        }
        expect(results[0]).toEqual(want);
      }
    });
  }
  // The 32-value types take tokens in blocks of 128 KiB of int8 activations (64 tokens of 2048).
  for (const type of ["Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "MXFP4"] as const) {
    test(`${type}: T = 150 of 2048 columns (three token blocks) equal each token alone, on one and two threads`, () => {
      const rng = new Xoshiro128(4100 + GGML_TYPE[type]);
      const rows = 97, cols = 2048, T = 150;
      const w = randomArray(rng, rows * cols, 0.5);
      const x = randomArray(rng, T * cols, 2);
      const [one, two] = [single, pair].map((b) => productOn(b, type, w, rows, cols, x, T));
      expect(two).toEqual(one!);
      for (const t of [0, 63, 64, 127, 128, 149]) expect(productOn(single, type, w, rows, cols, x.subarray(t * cols, (t + 1) * cols), 1)).toEqual(one!.slice(t * rows, (t + 1) * rows));
    });
  }
});
