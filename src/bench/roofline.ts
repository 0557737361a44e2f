/**
 * The machine's ceilings, measured in the same run as the figures compared with them: the
 * bandwidth of a plain streaming read (what a decode step, which reads every weight once, is
 * bound by) and the GFLOP/s of the matrix kernels (what a batched step, which reuses each weight
 * for many tokens, is bound by).
 */
import type { CpuBackend } from "../backend/wasm/cpu.ts";
import { WasmMemories } from "../backend/wasm/wasm-memories.ts";
import type { ParallelCall } from "../backend/wasm/thread-pool.ts";
import { Xoshiro128 } from "../util/random.ts";
import { rateSummary, secondsPerCall, type Summary } from "./measure.ts";

/**
 * Runs `fn` on a WebAssembly memory of its own with `threads` threads, freed after: where the
 * roofline's buffers go, beside the engine's memories, never growing a nearly full one of them
 * past 4 GiB (a Llama-3.1-8B-shaped model's first memory holds 3.9 GiB).
 */
export function withScratchBackend<T>(threads: number, fn: (backend: CpuBackend) => T): T {
  const memories = new WasmMemories(1, threads);
  try {
    return fn(memories.backends[0]!);
  } finally {
    memories.close();
  }
}

/** Default size of the streamed buffer: far beyond any last-level cache. */
export const STREAM_BYTES = 256 * 2 ** 20;

/**
 * GB/s (1e9 bytes) of `streamSumF32` over `bytes` of memory, split across the backend's threads
 * like a matrix product (each thread sums its own range into its own slot).
 */
export function measureStreamBandwidth(backend: CpuBackend, reps: number, bytes = STREAM_BYTES): Summary {
  const mem = backend.mem;
  const nFloats = Math.floor(bytes / 64) * 16;
  const mark = mem.mark();
  try {
    const x = mem.alloc(4 * nFloats);
    const out = mem.alloc(64 * backend.threads);
    // Touch every page: fresh WebAssembly memory reads as the zero page, which never leaves the cache.
    mem.f32.fill(1, x >>> 2, (x >>> 2) + nFloats);
    const call: ParallelCall = { kernel: "streamSumF32", args: [out, x, 0, 0], total: nFloats, granularity: 16, scratch: { arg: 0, stride: 64 } };
    const run = parallelRunner(backend, call);
    run(); // warm-up: page tables, worker wake-up
    return rateSummary(secondsPerCall(run, reps, 100), (4 * nFloats) / 1e9);
  } finally {
    mem.release(mark);
  }
}

/** A matrix W[n][d] in linear memory, row-major (for the scalar loop) and packed (for the kernels). */
export interface TestMatrix {
  n: number;
  d: number;
  rowMajor: number;
  packed: number;
}

/** Allocate and fill a random n x d matrix in both layouts. */
export function allocMatrix(backend: CpuBackend, n: number, d: number, seed = 1): TestMatrix {
  const mem = backend.mem;
  const rowMajor = mem.alloc(4 * n * d);
  const packed = mem.alloc(4 * n * d);
  new Xoshiro128(seed).fillNormalish(mem.f32.subarray(rowMajor >>> 2, (rowMajor >>> 2) + n * d), 0, 1 / Math.sqrt(d));
  backend.kernels.packF32(packed, rowMajor, n, d);
  return { n, d, rowMajor, packed };
}

/** Activations and outputs for T tokens through `m`. */
function allocActivations(backend: CpuBackend, m: TestMatrix, T: number): { x: number; out: number } {
  const mem = backend.mem;
  const x = mem.alloc(4 * T * m.d);
  new Xoshiro128(2).fillNormalish(mem.f32.subarray(x >>> 2, (x >>> 2) + T * m.d), 0, 1);
  return { x, out: mem.alloc(4 * T * m.n) };
}

/** Seconds per matmulF32 call of T tokens through `m`, on the backend's threads (one thread: the kernel alone). */
export function timeMatmul(backend: CpuBackend, m: TestMatrix, T: number, reps: number): number[] {
  const mark = backend.mem.mark();
  try {
    const { x, out } = allocActivations(backend, m, T);
    return secondsPerCall(parallelRunner(backend, backend.matmulF32Call(out, x, m.packed, T, m.n, m.d)), reps);
  } finally {
    backend.mem.release(mark);
  }
}

/** Seconds per call of the plain scalar loop (row-major, one accumulator) over the same matrix. */
export function timeScalarMatvec(backend: CpuBackend, m: TestMatrix, reps: number): number[] {
  const mark = backend.mem.mark();
  try {
    const { x, out } = allocActivations(backend, m, 1);
    return secondsPerCall(() => backend.kernels.matvecScalarF32(out, x, m.rowMajor, m.n, m.d), reps);
  } finally {
    backend.mem.release(mark);
  }
}

/** GFLOP/s of T tokens through an n x d matrix: 2·n·d·T flops per call. */
export function matmulGflops(seconds: readonly number[], n: number, d: number, T: number): Summary {
  return rateSummary(seconds, (2 * n * d * T) / 1e9);
}

/** GFLOP/s of the matrix-matrix kernel on a fresh n x d matrix (T tokens), on the backend's threads. */
export function measureMatmulGflops(backend: CpuBackend, n: number, d: number, T: number, reps: number): Summary {
  const mark = backend.mem.mark();
  try {
    const m = allocMatrix(backend, n, d);
    return matmulGflops(timeMatmul(backend, m, T, reps), n, d, T);
  } finally {
    backend.mem.release(mark);
  }
}

/** A call on every thread of the backend's pool, or the kernel on the calling thread when it has none. */
function parallelRunner(backend: CpuBackend, call: ParallelCall): () => void {
  const pool = backend.pool;
  if (pool !== null) return () => pool.run(call);
  const fn = backend.kernels[call.kernel] as (...a: number[]) => void;
  const args = call.args.slice();
  args[args.length - 2] = 0;
  args[args.length - 1] = call.total;
  return () => fn(...args);
}
