/**
 * The one seam between the engine and a compute backend: a model's forward pass over the
 * engine's StepBatch and KV block ids. Both backends implement it:
 *   - WasmForward (src/backend/wasm/wasm-forward.ts): LlamaModel, WebAssembly kernels, the KV arena in
 *     linear memory;
 *   - WebGpuForward (src/backend/webgpu/webgpu-forward.ts): GpuLlamaModel, WGSL kernels, the KV
 *     arena and block tables in GPU buffers.
 * Everything above it (the scheduler, the KV block manager and its prefix cache, the sampler, the
 * tokenizers) is the same for both: the block ids a forward receives are the manager's, and a
 * backend only stores K/V at those ids.
 *
 * Invariant: after forward(batch) resolves, logitsRow(r) for r < batch.numLogits holds the logits
 * of the batch's r-th logit row, and hiddenRow(h) for h < batch.numHidden the final norm's output
 * of its h-th hidden row, until the next forward.
 */
import type { BlockCopy } from "../kv/kv-cache-manager.ts";
import type { StepBatch } from "../model/batch.ts";
import type { KVBlockIO } from "../kv/second-tier.ts";

export type DeviceKind = "wasm" | "webgpu";

export interface ModelForward {
  readonly device: DeviceKind;
  /** One line for people: "wasm (2 threads)", "webgpu on llvmpipe (mesa, software)". */
  readonly description: string;
  /** Compute the step: K/V of its new tokens into their slots, then the logits of its logit rows. */
  forward(batch: StepBatch): Promise<void>;
  /** Logits of logit row r of the last step (a view; valid until the next forward). */
  logitsRow(r: number): Float32Array;
  /**
   * The normed hidden state (dim values) of hidden row h of the last step (StepBatch.addSequence
   * "hidden": the output norm of a token without the classifier, what a decoder embedder returns;
   * a view, valid until the next forward).
   */
  hiddenRow(h: number): Float32Array;
  /** Copy KV blocks (every layer, K and V), in order, before the next forward. */
  copyBlocks(copies: readonly BlockCopy[]): void;
  /**
   * What decides the bits of the K and V this backend computes ("wasm"; WebGPU and its product
   * arithmetic): blocks stored by one are only ever read by the same, so a disk hit gives the bits
   * a recomputation would (WebAssembly's are the same at any thread count and memory split).
   */
  readonly kvProducer: string;
  /** Block-by-block access to the KV arena (for a second tier). */
  readonly kvBlocks: KVBlockIO;
  /** Free what the backend holds (GPU buffers); the host memory is the engine's. */
  close(): void;
}
