/**
 * The control block the caller and the workers share: a job (kernel, arguments, range to split),
 * counters for acknowledgement and completion, and the first error a worker hit.
 */
import type { KernelName } from "./kernels.ts";

/** Kernels the pool can split, by index in this list. Each takes its range as the last two arguments. */
export const PARALLEL_KERNELS = [
  "matmulF32", "matmulF32Multi", "matmulQ8", "pagedAttention", "streamSumF32", "matmulQ8Runq", "pagedAttentionRunq",
  "matmulF16", "matmulBF16", "matmulQ8_0", "matmulQ4_0", "matmulQ4_1", "matmulQ5_0", "matmulQ5_1", "matmulMXFP4",
  "matmulQ2_K", "matmulQ3_K", "matmulQ4_K", "matmulQ5_K", "matmulQ6_K", "matmulSegments",
  "encoderAttention",
] as const satisfies readonly KernelName[];
export type ParallelKernel = (typeof PARALLEL_KERNELS)[number];

/**
 * Guided self-scheduling, as OpenMP's `guided`: each claim takes 1/(GUIDED_DIVISOR x threads)
 * of what is left, at least `minChunk` units (DEFAULT_MIN_CHUNK unless the call says otherwise).
 * Early chunks are long (few JS-to-kernel calls); the last ones are short, so the thread that
 * finishes first waits little for the other.
 */
const GUIDED_DIVISOR = 2;
/** Four units: 16 matrix rows, a few microseconds of a matrix-vector product. */
export const DEFAULT_MIN_CHUNK = 4;

/** The size in units of the chunk claimed when `done` of `units` are handed out. */
export function guidedChunk(done: number, units: number, threads: number, minChunk = DEFAULT_MIN_CHUNK): number {
  return Math.min(units - done, Math.max(minChunk, Math.ceil((units - done) / (GUIDED_DIVISOR * threads))));
}

const enum Slot {
  Gen, Kernel, NumArgs, Total, Granularity, MinChunk, ScratchArg, ScratchStride,
  Acks, Done, Ready, Sleepers, CallerSleeping, Error, ErrorLength, Exit, NextChunk, Memory,
}
const ARGS_OFFSET = 128;
/** Most arguments of a parallel kernel (pagedAttention takes 18). */
const MAX_ARGS = 20;
const ERROR_OFFSET = ARGS_OFFSET + 8 * MAX_ARGS;
const ERROR_BYTES = 1024;
export const CTRL_BYTES = ERROR_OFFSET + ERROR_BYTES;

/** What a worker reads for one job. */
export interface Job {
  kernel: ParallelKernel;
  args: number[];
  total: number;
  granularity: number;
  /** Smallest chunk a claim takes, in units of `granularity`. */
  minChunk: number;
  scratch?: { arg: number; stride: number };
  /** Which of the pool's memories the kernel runs on (its instance of the module over that memory). */
  memory: number;
}

export class Control {
  private readonly i32: Int32Array;
  private readonly args: Float64Array;
  private readonly errorBytes: Uint8Array;

  constructor(readonly buffer: SharedArrayBuffer) {
    this.i32 = new Int32Array(buffer, 0, ARGS_OFFSET / 4);
    this.args = new Float64Array(buffer, ARGS_OFFSET, MAX_ARGS);
    this.errorBytes = new Uint8Array(buffer, ERROR_OFFSET, ERROR_BYTES);
  }

  // ---- caller side

  post(
    kernel: number, args: readonly number[], total: number, granularity: number, minChunk: number,
    scratch: { arg: number; stride: number } | undefined, memory: number,
  ): void {
    const a = this.i32;
    if (args.length > MAX_ARGS) throw new Error(`too many kernel arguments (${args.length})`);
    this.args.set(args);
    a[Slot.Kernel] = kernel;
    a[Slot.NumArgs] = args.length;
    a[Slot.Total] = total;
    a[Slot.Granularity] = granularity;
    a[Slot.MinChunk] = minChunk;
    a[Slot.ScratchArg] = scratch ? scratch.arg : -1;
    a[Slot.ScratchStride] = scratch ? scratch.stride : 0;
    a[Slot.Memory] = memory;
    Atomics.store(a, Slot.Acks, 0);
    Atomics.store(a, Slot.Done, 0);
    Atomics.store(a, Slot.NextChunk, 0);
    // The increment publishes the fields above (atomics are sequentially consistent).
    Atomics.add(a, Slot.Gen, 1);
    if (Atomics.load(a, Slot.Sleepers) > 0) Atomics.notify(a, Slot.Gen);
  }

  postExit(): void {
    Atomics.store(this.i32, Slot.Exit, 1);
    Atomics.add(this.i32, Slot.Gen, 1);
    Atomics.notify(this.i32, Slot.Gen);
  }

  /**
   * The next chunk of the current job's `units`, for whichever thread asks: [start, end) units,
   * each unit handed out once, or null when none are left. Sizes follow guidedChunk.
   */
  claimChunk(units: number, threads: number, minChunk: number): [number, number] | null {
    const a = this.i32;
    for (;;) {
      const start = Atomics.load(a, Slot.NextChunk);
      if (start >= units) return null;
      const end = start + guidedChunk(start, units, threads, minChunk);
      if (Atomics.compareExchange(a, Slot.NextChunk, start, end) === start) return [start, end];
    }
  }

  done(): number {
    return Atomics.load(this.i32, Slot.Done);
  }

  acks(): number {
    return Atomics.load(this.i32, Slot.Acks);
  }

  sleepUntilDone(n: number, timeoutMs: number): void {
    const a = this.i32;
    Atomics.store(a, Slot.CallerSleeping, 1);
    const done = Atomics.load(a, Slot.Done);
    if (done < n) Atomics.wait(a, Slot.Done, done, timeoutMs);
    Atomics.store(a, Slot.CallerSleeping, 0);
  }

  allReady(n: number): boolean {
    return Atomics.load(this.i32, Slot.Ready) >= n;
  }

  waitReady(timeoutMs: number): void {
    const ready = Atomics.load(this.i32, Slot.Ready);
    Atomics.wait(this.i32, Slot.Ready, ready, timeoutMs);
  }

  /** The first error a worker reported since the last call, or null; clears it. */
  takeError(): string | null {
    if (Atomics.load(this.i32, Slot.Error) === 0) return null;
    const text = new TextDecoder().decode(this.errorBytes.slice(0, this.i32[Slot.ErrorLength]));
    Atomics.store(this.i32, Slot.Error, 0);
    return text;
  }

  // ---- worker side

  generation(): number {
    return Atomics.load(this.i32, Slot.Gen);
  }

  /** Spin `spins` times for a generation other than `seen`, then sleep until one comes. */
  waitForJob(seen: number, spins: number): number {
    const a = this.i32;
    for (let i = 0; i < spins; i++) {
      const gen = Atomics.load(a, Slot.Gen);
      if (gen !== seen) return gen;
    }
    Atomics.add(a, Slot.Sleepers, 1);
    // Returns at once if Gen already moved on: a job posted before we slept is never missed.
    Atomics.wait(a, Slot.Gen, seen);
    Atomics.sub(a, Slot.Sleepers, 1);
    return Atomics.load(a, Slot.Gen);
  }

  exiting(): boolean {
    return Atomics.load(this.i32, Slot.Exit) === 1;
  }

  job(): Job {
    const a = this.i32;
    Atomics.add(a, Slot.Acks, 1);
    const job: Job = {
      kernel: PARALLEL_KERNELS[a[Slot.Kernel]!]!,
      args: Array.from(this.args.subarray(0, a[Slot.NumArgs])),
      total: a[Slot.Total]!,
      granularity: a[Slot.Granularity]!,
      minChunk: a[Slot.MinChunk]!,
      memory: a[Slot.Memory]!,
    };
    if (a[Slot.ScratchArg]! >= 0) job.scratch = { arg: a[Slot.ScratchArg]!, stride: a[Slot.ScratchStride]! };
    return job;
  }

  finishJob(): void {
    Atomics.add(this.i32, Slot.Done, 1);
    if (Atomics.load(this.i32, Slot.CallerSleeping) === 1) Atomics.notify(this.i32, Slot.Done);
  }

  markReady(): void {
    Atomics.add(this.i32, Slot.Ready, 1);
    Atomics.notify(this.i32, Slot.Ready);
  }

  /** Record an error unless one is already recorded (the first one is the cause). */
  reportError(message: string): void {
    if (Atomics.compareExchange(this.i32, Slot.Error, 0, 2) !== 0) return;
    const bytes = new TextEncoder().encode(message).subarray(0, ERROR_BYTES);
    this.errorBytes.set(bytes);
    this.i32[Slot.ErrorLength] = bytes.length;
    Atomics.store(this.i32, Slot.Error, 1);
  }
}
