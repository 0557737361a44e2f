/**
 * The ggml block-type kernels (assembly/ggml/) against the generic scalar dots of src/quant/dot.ts,
 * which repeat their arithmetic element by element in the same order: bitwise equal on odd row
 * counts, several blocks, T = 1..9 and arbitrary row splits. Embedding lookups against the
 * reference dequantizers; CpuBackend's products at 1 and 2 threads; the type table's errors.
 */
import { describe, expect, test } from "bun:test";
import { CpuBackend } from "../src/backend/cpu.ts";
import { activationFormat, ggmlKernels, UnsupportedTensorTypeError } from "../src/backend/ggml-kernels.ts";
import type { WeightMatrix } from "../src/model/weights.ts";
import {
  dequantizeRow, dotBlock32, dotHalf, quantizeActivationRow, quantizeTensor, type Block32Type,
} from "../src/quant/index.ts";
import { Xoshiro128 } from "../src/util/random.ts";
import { randInt, randomArray } from "./helpers/random-data.ts";
import { Scratch } from "./helpers/wasm-scratch.ts";

const be = new CpuBackend();
const k = be.kernels;
const mem = be.mem;
const REGION_BYTES = 8 << 20;
const region = mem.alloc(REGION_BYTES);

interface TypeCase {
  code: number;
  name: Block32Type | "F16" | "BF16";
}

const BLOCK_TYPES: TypeCase[] = [
  { code: 8, name: "Q8_0" }, { code: 2, name: "Q4_0" }, { code: 3, name: "Q4_1" }, { code: 6, name: "Q5_0" }, { code: 7, name: "Q5_1" },
];
const HALF_TYPES: TypeCase[] = [{ code: 1, name: "F16" }, { code: 30, name: "BF16" }];
const ROW_BYTES_PER_BLOCK: Record<string, number> = { Q8_0: 34, Q4_0: 18, Q4_1: 20, Q5_0: 22, Q5_1: 24 };

function rowBytes(c: TypeCase, cols: number): number {
  return c.name === "F16" || c.name === "BF16" ? 2 * cols : (cols / 32) * ROW_BYTES_PER_BLOCK[c.name]!;
}

function bytesAt(s: Scratch, bytes: Uint8Array): number {
  const addr = s.alloc(bytes.length);
  mem.u8.set(bytes, addr);
  return addr;
}

/** Weights of mixed magnitudes, with some all-zero blocks (scale 0) now and then. */
function randomWeights(rng: Xoshiro128, n: number): Float32Array {
  const w = randomArray(rng, n, 10 ** randInt(rng, -2, 1));
  if (rng.nextFloat() < 0.3) w.fill(0, 0, Math.min(n, 32));
  return w;
}

/** Cut [0, rows) into random consecutive ranges. */
function randomSplit(rng: Xoshiro128, rows: number): [number, number][] {
  const ranges: [number, number][] = [];
  for (let start = 0; start < rows;) {
    const end = Math.min(rows, start + randInt(rng, 1, rows));
    ranges.push([start, end]);
    start = end;
  }
  return ranges;
}

function checkMatmul(c: TypeCase, iterations: number): void {
  const rng = new Xoshiro128(1000 + c.code);
  const kernels = ggmlKernels(c.code);
  const format = activationFormat(kernels.activation);
  const half = c.name === "F16" || c.name === "BF16";
  for (let it = 0; it < iterations; it++) {
    const s = new Scratch(mem, region, REGION_BYTES);
    const rows = 2 * randInt(rng, 0, 6) + 1;
    const cols = half ? randInt(rng, 1, 70) : 32 * randInt(rng, 1, 5);
    const T = 1 + (it % 9);
    const wf = randomWeights(rng, rows * cols);
    const wBytes = quantizeTensor(c.code, wf, rows, cols);
    const w = bytesAt(s, wBytes);
    const xf = randomArray(rng, T * cols, 10 ** randInt(rng, -1, 1));
    const x = s.f32(xf);
    let act = x;
    if (format.quantizer !== null) {
      act = s.alloc(T * format.rowBytes(cols));
      k[format.quantizer](act, x, T, cols);
    }
    const outStride = rows + randInt(rng, 0, 3);
    const out = s.alloc(4 * T * outStride);
    for (const [r0, r1] of randomSplit(rng, rows)) k[kernels.matmul](out, act, w, T, cols, outStride, r0, r1);
    for (let t = 0; t < T; t++) {
      const xt = xf.subarray(t * cols, (t + 1) * cols);
      const qa = half ? null : quantizeActivationRow(xt);
      for (let r = 0; r < rows; r++) {
        const rowB = wBytes.subarray(r * rowBytes(c, cols), (r + 1) * rowBytes(c, cols));
        const expected = qa === null ? dotHalf(dequantizeRow(c.code, rowB, cols), xt) : dotBlock32(c.name as Block32Type, rowB, qa);
        const got = mem.f32[(out >> 2) + t * outStride + r]!;
        if (!Object.is(got, expected)) throw new Error(`${c.name} it ${it} rows ${rows} cols ${cols} T ${T}: [${t}][${r}] ${got} != ${expected}`);
      }
    }
  }
}

describe("ggml matmul kernels = scalar dot, bitwise", () => {
  for (const c of [...BLOCK_TYPES, ...HALF_TYPES]) test(c.name, () => checkMatmul(c, 300));
});

test("F16 products widen every half exactly: subnormals, signed zeros, infinities, NaN", () => {
  const s = new Scratch(mem, region, REGION_BYTES);
  const rng = new Xoshiro128(5);
  // Rows of 32 halves: every subnormal and some normals, then rows with an infinity or a NaN.
  const halves: number[][] = [];
  for (let base = 0; base < 0x400; base += 32) halves.push(Array.from({ length: 32 }, (_, j) => (base + j) | (j & 1 ? 0x8000 : 0)));
  halves.push(Array.from({ length: 32 }, (_, j) => 0x3c00 + 977 * j));
  halves.push(Array.from({ length: 32 }, (_, j) => (j === 5 ? 0x7c00 : 0x7bff - j)));
  halves.push(Array.from({ length: 32 }, (_, j) => (j === 9 ? 0xfc00 : j === 20 ? 0x7e01 : 0x8001 + j)));
  const rows = halves.length;
  const wBytes = new Uint8Array(new Uint16Array(halves.flat()).buffer);
  const w = bytesAt(s, wBytes);
  const xf = randomArray(rng, 32);
  const x = s.f32(xf);
  const out = s.alloc(4 * rows);
  k.matmulF16(out, x, w, 1, 32, rows, 0, rows);
  for (let r = 0; r < rows; r++) {
    const expected = dotHalf(dequantizeRow(1, wBytes.subarray(64 * r, 64 * (r + 1)), 32), xf);
    expect(Object.is(mem.f32[(out >> 2) + r]!, expected)).toBe(true);
  }
});

describe("activation quantizers = reference", () => {
  for (const [kernel, withSum] of [["quantizeActQ8_0", false], ["quantizeActQ8_1", true]] as const) {
    test(kernel, () => {
      const rng = new Xoshiro128(7);
      const blockBytes = withSum ? 40 : 52;
      for (let it = 0; it < 200; it++) {
        const s = new Scratch(mem, region, REGION_BYTES);
        const cols = 32 * randInt(rng, 1, 6);
        const xf = randomArray(rng, cols, 10 ** randInt(rng, -3, 2));
        if (it % 10 === 0) xf.fill(0, 0, 32);
        // Exact ties of x * (1 / d) must round to even, as f32x4.nearest does.
        if (it % 7 === 0) for (let j = 0; j < 32; j++) xf[j] = (j - 16) * 0.5;
        const x = s.f32(xf);
        const act = s.alloc((cols / 32) * blockBytes);
        k[kernel](act, x, 1, cols);
        const ref = quantizeActivationRow(xf);
        const view = new DataView(mem.u8.buffer, act);
        for (let b = 0; b < cols / 32; b++) {
          expect(view.getFloat32(b * blockBytes, true)).toBe(ref.d[b]!);
          if (withSum) expect(view.getFloat32(b * blockBytes + 4, true)).toBe(ref.s[b]!);
          else expect(Array.from(new Int32Array(mem.u8.buffer.slice(act + b * blockBytes + 36, act + b * blockBytes + 52)))).toEqual(Array.from(ref.qsum.subarray(4 * b, 4 * b + 4)));
          const qs = new Int8Array(mem.u8.buffer, act + b * blockBytes + (withSum ? 8 : 4), 32);
          expect(Array.from(qs)).toEqual(Array.from(ref.q.subarray(b * 32, b * 32 + 32)));
        }
      }
    });
  }
});

describe("ggml embedding = reference dequantizer", () => {
  for (const c of [...BLOCK_TYPES, ...HALF_TYPES]) {
    test(c.name, () => {
      const rng = new Xoshiro128(2000 + c.code);
      const half = c.name === "F16" || c.name === "BF16";
      for (let it = 0; it < 50; it++) {
        const s = new Scratch(mem, region, REGION_BYTES);
        const rows = randInt(rng, 1, 9);
        const cols = half ? randInt(rng, 1, 70) : 32 * randInt(rng, 1, 4);
        const wBytes = quantizeTensor(c.code, randomWeights(rng, rows * cols), rows, cols);
        const w = bytesAt(s, wBytes);
        const T = randInt(rng, 1, 5);
        const ids = Array.from({ length: T }, () => randInt(rng, 0, rows - 1));
        const out = s.alloc(4 * T * cols);
        k[ggmlKernels(c.code).embed](out, w, s.i32(ids), T, cols);
        ids.forEach((id, t) => {
          const rb = rowBytes(c, cols);
          const expected = dequantizeRow(c.code, wBytes.subarray(id * rb, (id + 1) * rb), cols);
          const got = mem.f32.slice((out >> 2) + t * cols, (out >> 2) + (t + 1) * cols);
          expect(Array.from(got).map((v, j) => Object.is(v, expected[j]))).not.toContain(false);
        });
      }
    });
  }
});

describe("CpuBackend on ggml tensors", () => {
  const types = [...BLOCK_TYPES, ...HALF_TYPES];
  const rows = 301;
  const cols = 256;
  const T = 5;
  const rng = new Xoshiro128(99);
  const weights = types.map((c) => quantizeTensor(c.code, randomWeights(rng, rows * cols), rows, cols));
  const xf = randomArray(rng, T * cols);

  /** Every type's product (alone and all sharing one input) and an embedding, at `threads`. */
  function run(threads: number): Float32Array[] {
    const backend = new CpuBackend(threads);
    try {
      backend.reserveScratch(T, cols, 1);
      const ms: WeightMatrix[] = types.map((c, i) => {
        const addr = backend.mem.alloc(weights[i]!.length);
        backend.mem.u8.set(weights[i]!, addr);
        return { kind: "ggml", type: c.code, rows, cols, addr, rowBytes: rowBytes(c, cols) };
      });
      const x = backend.mem.alloc(4 * T * cols);
      backend.mem.f32.set(xf, x >> 2);
      const results: Float32Array[] = [];
      const outs = ms.map(() => backend.mem.alloc(4 * T * rows));
      ms.forEach((m, i) => {
        backend.matmul(outs[i]!, x, m, T);
        results.push(backend.mem.f32.slice(outs[i]! >> 2, (outs[i]! >> 2) + T * rows));
      });
      const shared = backend.prepareShared(ms.map((m) => ({ out: backend.mem.alloc(4 * T * rows), m })));
      backend.matmulShared(shared, x, T);
      for (const p of shared.parts) results.push(backend.mem.f32.slice(p.out >> 2, (p.out >> 2) + T * rows));
      const tokens = backend.mem.alloc(4 * 3);
      backend.mem.i32.set([0, 300, 7], tokens >> 2);
      ms.forEach((m) => {
        const out = backend.mem.alloc(4 * 3 * cols);
        backend.embed(out, m, tokens, 3);
        results.push(backend.mem.f32.slice(out >> 2, (out >> 2) + 3 * cols));
      });
      return results;
    } finally {
      backend.close();
    }
  }

  test("same bits at 1 and 2 threads; shared input = separate products", () => {
    const one = run(1);
    const two = run(2);
    expect(two.length).toBe(one.length);
    one.forEach((r, i) => expect(Buffer.from(two[i]!.buffer).equals(Buffer.from(r.buffer))).toBe(true));
    // matmulShared's results (second group) equal the separate products (first group).
    for (let i = 0; i < types.length; i++) expect(Buffer.from(one[types.length + i]!.buffer).equals(Buffer.from(one[i]!.buffer))).toBe(true);
  });

  test("an unknown type is a typed error naming it", () => {
    expect(() => ggmlKernels(12)).toThrow(UnsupportedTensorTypeError);
    expect(() => ggmlKernels(12)).toThrow(/Q4_K/);
  });
});
