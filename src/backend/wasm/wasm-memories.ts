/**
 * The WebAssembly memories a model runs in (one, or several for a model larger than 4 GiB: see
 * placement.ts), each with the calling thread's instance of the kernel module over it, and one
 * pool of worker threads that holds an instance per memory too. Each memory gets a CpuBackend
 * whose kernels dispatch to the pool on that memory.
 */
import { CpuBackend } from "./cpu.ts";
import type { Kernels } from "./kernels.ts";
import { ThreadPool } from "./thread-pool.ts";
import { instantiateKernels, kernelModule, LinearMemory } from "./wasm.ts";
import type { WeightTarget } from "./weights.ts";

export class WasmMemories {
  /** One backend per memory, in placement order; backends[0] also holds the engine's step batch. */
  readonly backends: CpuBackend[];
  /** Null when running on the calling thread alone. */
  readonly pool: ThreadPool | null;

  constructor(count: number, readonly threads: number) {
    if (!Number.isInteger(count) || count < 1) throw new Error(`WasmMemories: ${count} memories`);
    const module = kernelModule();
    const mems: LinearMemory[] = [];
    const kernels: Kernels[] = [];
    for (let i = 0; i < count; i++) {
      const mem = new LinearMemory();
      const k = instantiateKernels(mem.memory, module);
      // Before any worker starts: they read the same table in the shared memory.
      k.buildHalfTable();
      mems.push(mem);
      kernels.push(k);
    }
    this.pool = threads > 1 ? new ThreadPool(threads, mems.map((m) => m.memory), module, kernels) : null;
    this.backends = mems.map((mem, index) => new CpuBackend(threads, { mem, kernels: kernels[index]!, pool: this.pool, index }));
  }

  get count(): number {
    return this.backends.length;
  }

  /** The memories as weight loading takes them. */
  get targets(): WeightTarget[] {
    return this.backends.map((b) => ({ mem: b.mem, kernels: b.kernels }));
  }

  /** Bytes in use in each memory (the top of its allocator). */
  get bytesInUse(): number[] {
    return this.backends.map((b) => b.mem.bytesInUse);
  }

  /**
   * The backend whose memory has the most room (the least in use): where a measurement may put
   * buffers of its own (bench's roofline) without growing a nearly full memory past 4 GiB.
   */
  get roomiest(): CpuBackend {
    return this.backends.reduce((best, b) => (b.mem.bytesInUse < best.mem.bytesInUse ? b : best));
  }

  /** Stop the worker threads and give the memories' pages back: nothing runs on them afterwards. */
  close(): void {
    this.pool?.close();
    for (const b of this.backends) b.mem.discard();
  }
}
