/**
 * A kernel worker: instantiates the kernels once over each shared memory it is given, then runs
 * its share of each job the pool posts (on the instance of the job's memory), until told to exit.
 */
import type { Kernels } from "./kernels.ts";
import { Control } from "./thread-protocol.ts";
import { runChunks } from "./thread-pool.ts";
import { instantiateKernels } from "./wasm.ts";

declare const self: Worker;

interface Start {
  memories: WebAssembly.Memory[];
  module: WebAssembly.Module;
  control: SharedArrayBuffer;
  index: number;
  threads: number;
}

/** Spins before sleeping between jobs: back-to-back kernels of a step arrive well within it. */
const WORKER_SPINS = 100_000;

self.onmessage = (event: MessageEvent<Start>) => {
  const { memories, module, control, index, threads } = event.data;
  const ctrl = new Control(control);
  let seen = ctrl.generation();
  let kernels: Kernels[];
  try {
    kernels = memories.map((memory) => instantiateKernels(memory, module));
  } catch (e) {
    ctrl.reportError(`worker ${index} could not start: ${(e as Error).message}`);
    ctrl.markReady();
    return;
  }
  ctrl.markReady();
  for (;;) {
    seen = ctrl.waitForJob(seen, WORKER_SPINS);
    if (ctrl.exiting()) break;
    const job = ctrl.job();
    try {
      runChunks(kernels[job.memory]!, { ...job, threads }, index, (units, n, minChunk) => ctrl.claimChunk(units, n, minChunk));
    } catch (e) {
      ctrl.reportError(`worker ${index}: ${job.kernel} failed: ${(e as Error).message}`);
    }
    ctrl.finishJob();
  }
};
