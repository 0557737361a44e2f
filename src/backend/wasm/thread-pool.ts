/**
 * A pool of Bun workers that share the engine's WebAssembly memories, so one kernel call can be cut
 * into ranges (rows of a matrix product, (sequence, kv head) items of attention) and computed by
 * every thread at once, results written in place. The calling thread computes the first range.
 *
 * Synchronisation is a job counter in a SharedArrayBuffer: the caller writes the kernel and its
 * arguments and bumps GEN; then the caller and each worker (spinning on GEN; it acknowledges the
 * job first) claim chunks of the range from an atomic counter until none are left, and each
 * worker bumps DONE. Chunks rather than fixed halves: the two cores of a shared machine rarely
 * run at the same speed, and with fixed halves the caller waited 7-19% of a decode step for the
 * slower one; chunks shrink as the range runs out (guided scheduling), which shortens that wait. Spinning costs ~0.2 µs a dispatch where an
 * Atomics.wait/notify round trip costs ~55 µs, and a token dispatches hundreds of kernels; after a
 * short spin a worker sleeps in Atomics.wait, so an idle process does not burn a core.
 *
 * Failure: a kernel that throws in a worker is caught there and reported through the control
 * block; a worker that died (its 'error'/'close' event, or no acknowledgement of a job within
 * ACK_TIMEOUT_MS) makes every later dispatch throw WorkerPoolError instead of hanging.
 *
 * Several memories (a model larger than one 4 GiB memory, see placement.ts): every thread holds
 * one instance of the kernel module per memory, and a job names the memory it runs on.
 */
import { WorkerPoolError } from "../../errors.ts";
import type { KernelName, Kernels } from "./kernels.ts";
import { Control, CTRL_BYTES, DEFAULT_MIN_CHUNK, PARALLEL_KERNELS, type ParallelKernel } from "./thread-protocol.ts";

/** Spins before the caller sleeps while waiting for workers (each spin is one atomic load). */
const CALLER_SPINS = 20_000;
/** A worker that has not picked up a job this long after it was posted is taken for dead. */
const ACK_TIMEOUT_MS = 3000;
const START_TIMEOUT_MS = 10_000;

export interface ParallelCall {
  kernel: ParallelKernel;
  /** The kernel's arguments; the last two are overwritten with each thread's [start, end). */
  args: number[];
  /** Size of the range to split. */
  total: number;
  /** Ranges start on multiples of this (4: a panel of rows). */
  granularity: number;
  /** Smallest chunk a thread claims, in units of `granularity` (default DEFAULT_MIN_CHUNK). */
  minChunk?: number;
  /** An argument that is a per-thread scratch address: base + thread index * stride. */
  scratch?: { arg: number; stride: number };
}

/** A call as the threads see it: its minimum chunk settled, and the thread count chunk sizes derive from. */
export type ThreadCall = ParallelCall & { minChunk: number; threads: number };

export class ThreadPool {
  readonly workers: Worker[] = [];
  private readonly ctrl: Control;
  private deadReason: string | null = null;

  /**
   * Start `threads - 1` workers over `memories` (kernels[i] is the calling thread's instance over
   * memories[i]); blocks until they are ready.
   */
  constructor(
    readonly threads: number,
    memories: readonly WebAssembly.Memory[],
    module: WebAssembly.Module,
    private readonly kernels: readonly Kernels[],
  ) {
    if (memories.length !== kernels.length) throw new Error("ThreadPool: one kernel instance per memory");
    this.ctrl = new Control(new SharedArrayBuffer(CTRL_BYTES));
    const url = new URL("./worker.ts", import.meta.url).href;
    for (let i = 1; i < threads; i++) {
      const worker = new Worker(url);
      worker.addEventListener("error", (e) => this.markDead(`worker ${i} failed: ${(e as ErrorEvent).message}`));
      worker.addEventListener("close", () => this.markDead(`worker ${i} exited`));
      worker.postMessage({ memories, module, control: this.ctrl.buffer, index: i, threads });
      worker.unref();
      this.workers.push(worker);
    }
    this.awaitReady();
  }

  /** Worker threads (the caller is not counted). */
  get numWorkers(): number {
    return this.workers.length;
  }

  /**
   * Run `call` across every thread; returns when all ranges are done. Every output element is
   * computed by exactly one thread, in the kernel's fixed order, so results do not depend on the
   * thread count. `memory` is the index of the memory the call's addresses are in.
   */
  run(call: ParallelCall, memory = 0): void {
    if (this.deadReason !== null) throw new WorkerPoolError(this.deadReason);
    const kernels = this.kernels[memory];
    if (kernels === undefined) throw new Error(`ThreadPool: no memory ${memory}`);
    const c = this.ctrl;
    const job: ThreadCall = { ...call, minChunk: call.minChunk ?? DEFAULT_MIN_CHUNK, threads: this.threads };
    c.post(PARALLEL_KERNELS.indexOf(job.kernel), job.args, job.total, job.granularity, job.minChunk, job.scratch, memory);
    let callerError: unknown = null;
    try {
      runChunks(kernels, job, 0, (units, threads, minChunk) => c.claimChunk(units, threads, minChunk));
    } catch (e) {
      callerError = e;
    }
    this.awaitDone();
    const workerError = c.takeError();
    if (workerError !== null) {
      const also = callerError === null ? "" : ` (the calling thread failed too: ${(callerError as Error).message})`;
      throw new WorkerPoolError(workerError + also);
    }
    if (callerError !== null) throw callerError;
  }

  /** Stop the workers. */
  close(): void {
    if (this.workers.length === 0) return;
    this.deadReason = "thread pool closed";
    this.ctrl.postExit();
    for (const w of this.workers) w.terminate();
    this.workers.length = 0;
  }

  private markDead(reason: string): void {
    this.deadReason ??= reason;
  }

  private awaitReady(): void {
    const start = performance.now();
    while (!this.ctrl.allReady(this.numWorkers)) {
      if (performance.now() - start > START_TIMEOUT_MS) {
        this.close();
        throw new WorkerPoolError(`worker threads did not start within ${START_TIMEOUT_MS / 1000} s`);
      }
      this.ctrl.waitReady(10);
    }
    const error = this.ctrl.takeError();
    if (error !== null) {
      this.close();
      throw new WorkerPoolError(error);
    }
  }

  /** Spin, then sleep in short waits, until every worker finished; a worker that never acknowledges is dead. */
  private awaitDone(): void {
    const c = this.ctrl;
    const n = this.numWorkers;
    for (let spins = 0; spins < CALLER_SPINS; spins++) if (c.done() >= n) return;
    const posted = performance.now();
    while (c.done() < n) {
      c.sleepUntilDone(n, 1);
      if (c.acks() < n && performance.now() - posted > ACK_TIMEOUT_MS) {
        const reason = this.deadReason ?? `a worker thread stopped responding (no answer within ${ACK_TIMEOUT_MS / 1000} s)`;
        this.markDead(reason);
        throw new WorkerPoolError(reason);
      }
    }
  }
}

/**
 * Compute chunks of `call` on thread `index` until `claim` hands out no more (also what a worker
 * runs). `claim(units, threads)` returns the [start, end) units of the next chunk, or null. Each
 * element is computed exactly as an unsplit call computes it.
 */
export function runChunks(
  kernels: Kernels, call: ThreadCall, index: number,
  claim: (units: number, threads: number, minChunk: number) => [number, number] | null,
): void {
  const fn = kernels[call.kernel as KernelName] as (...a: number[]) => void;
  const args = call.args.slice();
  if (call.scratch) args[call.scratch.arg] = args[call.scratch.arg]! + index * call.scratch.stride;
  const g = call.granularity;
  const units = Math.ceil(call.total / g);
  for (let chunk = claim(units, call.threads, call.minChunk); chunk !== null; chunk = claim(units, call.threads, call.minChunk)) {
    args[args.length - 2] = chunk[0] * g;
    args[args.length - 1] = Math.min(call.total, chunk[1] * g);
    fn(...args);
  }
}
