/**
 * The WebAssembly backend behind the engine's ModelForward: LlamaModel's forward pass on the
 * WebAssembly SIMD kernels, with the KV arena in the same linear memory. Synchronous underneath;
 * forward() resolves as soon as the step is computed.
 */
import type { DeviceKind, ModelForward } from "../engine/model-forward.ts";
import { KVArena } from "../kv/kv-arena.ts";
import type { BlockCopy } from "../kv/kv-cache-manager.ts";
import type { StepBatch } from "../model/batch.ts";
import type { ModelConfig } from "../model/config.ts";
import { LlamaModel } from "../model/llama.ts";
import type { ModelWeights } from "../model/weights.ts";
import type { CpuBackend } from "./cpu.ts";

export class WasmForward implements ModelForward {
  readonly device: DeviceKind = "wasm";
  readonly description: string;
  private readonly model: LlamaModel;
  private readonly arena: KVArena;

  constructor(
    config: ModelConfig, weights: ModelWeights, private readonly cpu: CpuBackend,
    maxTokens: number, maxLogits: number, numBlocks: number, blockSize: number,
  ) {
    this.model = new LlamaModel(config, weights, cpu, maxTokens, maxLogits);
    this.arena = new KVArena(cpu.mem, config, numBlocks, blockSize);
    this.description = `wasm (${cpu.threads} thread${cpu.threads === 1 ? "" : "s"})`;
  }

  forward(batch: StepBatch): Promise<void> {
    this.model.forward(batch, this.arena);
    return Promise.resolve();
  }

  logitsRow(r: number): Float32Array {
    const start = this.model.logitsAddr(r) >> 2;
    return this.cpu.mem.f32.subarray(start, start + this.model.config.vocabSize);
  }

  copyBlocks(copies: readonly BlockCopy[]): void {
    for (const { src, dst } of copies) this.arena.copyBlock(this.cpu.mem.u8, src, dst);
  }

  close(): void {}
}
