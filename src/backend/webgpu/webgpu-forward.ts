/**
 * The WebGPU backend behind the engine's ModelForward: GpuLlamaModel's forward pass in WGSL, with
 * the KV arena (one K and one V buffer per layer) and the step's block tables in GPU buffers. The
 * step batch itself is written by the engine into linear memory as for WebAssembly, and uploaded
 * each step; the logits of the step's logit rows are read back in one mapping.
 */
import type { DeviceKind, ModelForward } from "../model-forward.ts";
import { DeviceError } from "../../errors.ts";
import type { BlockCopy } from "../../kv/kv-cache-manager.ts";
import type { StepBatch } from "../../model/batch.ts";
import type { ModelConfig } from "../../model/config.ts";
import type { KVLayout } from "../../kv/kv-layout.ts";
import type { CpuBackend } from "../wasm/cpu.ts";
import type { WebGpuBackend } from "./backend.ts";
import { describeAdapter } from "./device.ts";
import type { FileWeights } from "./file-weights.ts";
import { GpuLlamaModel, type StepShape } from "./llama-gpu.ts";
import type { KVBlockIO } from "../../kv/second-tier.ts";

export class WebGpuForward implements ModelForward, KVBlockIO {
  readonly device: DeviceKind = "webgpu";
  readonly kvProducer: string;
  readonly description: string;
  private readonly model: GpuLlamaModel;
  private logits: Float32Array = new Float32Array(0);
  private hidden: Float32Array = new Float32Array(0);

  constructor(
    private readonly config: ModelConfig, weights: FileWeights, private readonly cpu: CpuBackend,
    gpu: WebGpuBackend, s: StepShape,
  ) {
    const layerBytes = s.kv.layerBlockBytes * s.numBlocks;
    if (layerBytes > gpu.runner.maxBinding) {
      throw new DeviceError(
        `webgpu: a KV cache of ${s.numBlocks} blocks needs ${layerBytes} bytes per layer, the device binds at most ` +
          `${gpu.runner.maxBinding}: lower --kv-cache-mb or --num-blocks`,
      );
    }
    this.model = new GpuLlamaModel(config, weights, cpu, gpu, s);
    this.kvProducer = `webgpu, ${gpu.productArithmetic}`;
    this.description = `webgpu on ${describeAdapter(gpu.gpu.adapter)}`;
  }

  /** Most KV blocks one layer's buffer can hold on this device. */
  static maxBlocks(gpu: WebGpuBackend, kv: KVLayout): number {
    return Math.floor(gpu.runner.maxBinding / kv.layerBlockBytes);
  }

  async forward(batch: StepBatch): Promise<void> {
    if (batch.inputRows.length > 0) throw new DeviceError("images run on the WebAssembly backend (--device wasm); the WebGPU one takes token prompts only");
    ({ logits: this.logits, hidden: this.hidden } = await this.model.forward(batch, this.cpu));
  }

  hiddenRow(h: number): Float32Array {
    const d = this.config.dim;
    return this.hidden.subarray(h * d, (h + 1) * d);
  }

  logitsRow(r: number): Float32Array {
    const v = this.config.vocabSize;
    return this.logits.subarray(r * v, (r + 1) * v);
  }

  copyBlocks(copies: readonly BlockCopy[]): void {
    this.model.copyBlocks(copies);
  }

  /** Blocks in and out of the GPU arena (the disk tier's access): reads resolve when the copy is back. */
  get kvBlocks(): KVBlockIO {
    return this;
  }

  async readBlock(blockId: number, group: number, out: Uint8Array): Promise<void> {
    this.checkBlock(blockId, group, out);
    const pending = this.model.readKVBlock(blockId, group); // recorded now: the bytes of this moment
    out.set(new Uint8Array(await pending));
  }

  writeBlock(blockId: number, group: number, data: Uint8Array): void {
    this.checkBlock(blockId, group, data);
    this.model.writeKVBlock(blockId, group, data);
  }

  private checkBlock(blockId: number, group: number, bytes: Uint8Array): void {
    if (!Number.isInteger(blockId) || blockId < 0 || blockId >= this.model.numBlocks) throw new RangeError(`no block ${blockId} in an arena of ${this.model.numBlocks}`);
    const want = this.model.groupBlockBytes(group);
    if (bytes.length !== want) throw new RangeError(`a KV block of group ${group} is ${want} bytes, got ${bytes.length}`);
  }

  /** Free the model's buffers; the device is its owner's (it may run other models). */
  close(): void {
    this.model.destroy();
  }
}
