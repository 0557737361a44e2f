/**
 * Each WGSL kernel against its WebAssembly twin (CpuBackend's kernels) on odd shapes, and the
 * batch invariance of the GPU reductions: a row's result is the same bits whatever else is in
 * the batch. Shapes are tiny: a software adapter (llvmpipe) runs about 1 GFLOP/s.
 * The WGSL and WebAssembly reductions add in different orders, so the twins agree within a
 * tolerance; invariance on the GPU itself is checked bitwise.
 */
import { expect, test } from "bun:test";
import { CpuBackend } from "../src/backend/wasm/cpu.ts";
import type { WebGpuBackend } from "../src/backend/webgpu/backend.ts";
import { Xoshiro128 } from "../src/util/random.ts";
import { randInt, randomArray } from "./helpers/random-data.ts";
import { describeGpu } from "./helpers/webgpu.ts";

const cpu = new CpuBackend();
const k = cpu.kernels;
const mem = cpu.mem;

/** Copy values into fresh linear memory; returns the address. */
function wasmF32(values: ArrayLike<number>): number {
  const addr = mem.alloc(4 * Math.max(1, values.length));
  mem.f32.set(values, addr >> 2);
  return addr;
}
function wasmRead(addr: number, n: number): Float32Array {
  return mem.f32.slice(addr >> 2, (addr >> 2) + n);
}

/** |got - want| within rel of the largest magnitude of want (plus an absolute floor). */
function expectClose(got: Float32Array, want: ArrayLike<number>, rel = 2e-5): void {
  expect(got.length).toBe(want.length);
  let scale = 1;
  for (let i = 0; i < want.length; i++) scale = Math.max(scale, Math.abs(want[i]!));
  for (let i = 0; i < want.length; i++) {
    if (!(Math.abs(got[i]! - want[i]!) <= rel * scale)) {
      throw new Error(`element ${i}: got ${got[i]}, want ${want[i]} (tolerance ${rel * scale})`);
    }
  }
}

async function describeKernels(): Promise<void> {
  await describeGpu("WGSL kernels against their WebAssembly twins", (gpu: WebGpuBackend) => {
    const run = gpu.runner;
    const upload = (v: Float32Array | Int32Array, label = "test") => gpu.bufferFrom(v, label);

    test("f32 matmul matches matmulF32 on odd shapes; a token's row is the same bits at any T and split", async () => {
      const rng = new Xoshiro128(21);
      for (let iter = 0; iter < 12; iter++) {
        const rows = randInt(rng, 1, 70);
        const cols = randInt(rng, 1, 300);
        const T = randInt(rng, 1, 5);
        const w = randomArray(rng, rows * cols);
        const x = randomArray(rng, T * cols);
        const packed = mem.alloc(4 * rows * cols);
        k.packF32(packed, wasmF32(w), rows, cols);
        const wantAddr = mem.alloc(4 * T * rows);
        cpu.matmul(wantAddr, wasmF32(x), { kind: "f32", rows, cols, addr: packed }, T);

        const m = gpu.uploadF32Matrix(w, rows, cols, "w");
        const out = gpu.f32Buffer(T * rows, "out");
        gpu.matmul(out, gpu.productInput(upload(x), T, cols), m);
        const got = await run.readF32(out, T * rows);
        expectClose(got, wasmRead(wantAddr, T * rows));

        // The last token alone, through a matrix split into parts of a few rows.
        gpu.matrixPartBytes = 4 * cols * randInt(rng, 1, 7);
        const split = gpu.uploadF32Matrix(w, rows, cols, "w-split");
        gpu.matrixPartBytes = Infinity;
        const one = gpu.f32Buffer(rows, "one");
        gpu.matmul(one, gpu.productInput(upload(x.slice((T - 1) * cols)), 1, cols), split);
        expect(await run.readF32(one, rows)).toEqual(got.slice((T - 1) * rows));
      }
    });

    test("rmsnorm matches the wasm kernel on odd widths", async () => {
      const rng = new Xoshiro128(22);
      for (let iter = 0; iter < 8; iter++) {
        const n = randInt(rng, 1, 200);
        const T = randInt(rng, 1, 4);
        const x = randomArray(rng, T * n, 3);
        const w = randomArray(rng, n);
        const want = mem.alloc(4 * T * n);
        k.rmsnorm(want, wasmF32(x), wasmF32(w), T, n, 1e-5);
        const out = gpu.f32Buffer(T * n, "out");
        gpu.rmsnorm(out, upload(x), upload(w), T, n, 1e-5);
        expectClose(await run.readF32(out, T * n), wasmRead(want, T * n));
      }
    });

    test("addRmsnorm is add then rmsnorm, bit for bit, on odd widths", async () => {
      const rng = new Xoshiro128(23);
      for (let iter = 0; iter < 8; iter++) {
        const n = randInt(rng, 1, 300);
        const T = randInt(rng, 1, 5);
        const [x, y, w] = [randomArray(rng, T * n, 3), randomArray(rng, T * n, 3), randomArray(rng, n)];
        const [xSeparate, xFused] = [upload(x), upload(x)];
        const [outSeparate, outFused] = [gpu.f32Buffer(T * n, "out"), gpu.f32Buffer(T * n, "out")];
        gpu.add(xSeparate, upload(y), T * n);
        gpu.rmsnorm(outSeparate, xSeparate, upload(w), T, n, 1e-5);
        gpu.addRmsnorm(outFused, xFused, upload(y), upload(w), T, n, 1e-5);
        expect(await run.readF32(outFused, T * n)).toEqual(await run.readF32(outSeparate, T * n));
        expect(await run.readF32(xFused, T * n)).toEqual(await run.readF32(xSeparate, T * n));
      }
    });

    test("swiglu and add match the wasm kernels", async () => {
      const rng = new Xoshiro128(25);
      const n = 333;
      const g = randomArray(rng, n, 6);
      const u = randomArray(rng, n, 2);
      const gAddr = wasmF32(g);
      k.swiglu(gAddr, wasmF32(u), n);
      const gBuf = upload(g);
      gpu.swiglu(gBuf, upload(u), 1, n);
      expectClose(await run.readF32(gBuf, n), wasmRead(gAddr, n), 1e-5);

      const x = randomArray(rng, n);
      const y = randomArray(rng, n);
      const xAddr = wasmF32(x);
      k.addInPlace(xAddr, wasmF32(y), n);
      const xBuf = upload(x);
      gpu.add(xBuf, upload(y), n);
      expect(await run.readF32(xBuf, n)).toEqual(wasmRead(xAddr, n));
    });

    test("gpt-oss's clamped SwiGLU matches the wasm kernel on odd sizes, both clamps acting", async () => {
      const rng = new Xoshiro128(29);
      for (const n of [1, 7, 333]) {
        const g = randomArray(rng, n, 12);
        const u = randomArray(rng, n, 12);
        const gAddr = wasmF32(g);
        k.swigluOai(gAddr, wasmF32(u), n);
        const gBuf = upload(g);
        gpu.gated("silu-oai", gBuf, upload(u), 1, n);
        expectClose(await run.readF32(gBuf, n), wasmRead(gAddr, n), 1e-5);
      }
    });

    test("geglu and scale match the wasm kernels on odd sizes", async () => {
      const rng = new Xoshiro128(27);
      for (const n of [1, 7, 333]) {
        const g = randomArray(rng, n, 6);
        const u = randomArray(rng, n, 2);
        const gAddr = wasmF32(g);
        k.geglu(gAddr, wasmF32(u), n);
        const gBuf = upload(g);
        gpu.gated("gelu", gBuf, upload(u), 1, n);
        expectClose(await run.readF32(gBuf, n), wasmRead(gAddr, n), 1e-5);

        const s = Math.fround(33.941125);
        const xAddr = wasmF32(g);
        k.scaleInPlace(xAddr, s, n);
        const xBuf = upload(g);
        gpu.scale(xBuf, s, n);
        expect(await run.readF32(xBuf, n)).toEqual(wasmRead(xAddr, n));
      }
    });

    test("gatherRows picks rows from a split table", async () => {
      const rng = new Xoshiro128(26);
      const rows = 13, cols = 7;
      const table = randomArray(rng, rows * cols);
      gpu.matrixPartBytes = 4 * cols * 4;
      const m = gpu.uploadF32Matrix(table, rows, cols, "table");
      gpu.matrixPartBytes = Infinity;
      expect(m.parts.length).toBe(4);
      const picks = new Int32Array([12, 0, 5, 5, 3]);
      const out = gpu.f32Buffer(picks.length * cols, "out");
      gpu.embed(out, m, upload(picks), picks.length);
      const want = Array.from(picks).flatMap((r) => Array.from(table.subarray(r * cols, (r + 1) * cols)));
      expect(Array.from(await run.readF32(out, picks.length * cols))).toEqual(want);
    });
  });
}

await describeKernels();
