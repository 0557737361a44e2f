/**
 * The WebAssembly backend behind the engine's ModelForward: LlamaModel's forward pass on the
 * WebAssembly SIMD kernels, with the KV arena in linear memory. Synchronous underneath;
 * forward() resolves as soon as the step is computed.
 *
 * A model placed over several memories (placement.ts) runs as one LlamaModel per memory, each
 * with its layers' part of the KV arena (indexed by the same block ids) and its own copy of the
 * step batch. A step runs the memories in order: the embedding and layers of each, the residual
 * stream (tokens x dim floats) copied to the next memory where one ends, then the classifier in
 * the memory that holds it. The same kernels run in the same order on the same numbers however
 * the model is split, so the results are the same bits.
 */
import type { DeviceKind, ModelForward } from "../model-forward.ts";
import { KVArena } from "./kv-arena.ts";
import type { BlockCopy } from "../../kv/kv-cache-manager.ts";
import type { KVLayout } from "../../kv/kv-layout.ts";
import { StepBatch } from "../../model/batch.ts";
import type { ModelConfig } from "../../model/config.ts";
import { LlamaModel, type ModelPart } from "./llama.ts";
import type { ModelWeights } from "./weights.ts";
import type { CpuBackend } from "./cpu.ts";
import type { KVBlockIO } from "../../kv/second-tier.ts";

/** One memory's share of the model. */
interface MemoryPart {
  backend: CpuBackend;
  model: LlamaModel;
  arena: KVArena;
  /** The step batch in this memory (the engine's own batch in the first memory). */
  batch: StepBatch | null;
}

export class WasmForward implements ModelForward, KVBlockIO {
  readonly device: DeviceKind = "wasm";
  readonly kvProducer = "wasm";
  readonly description: string;
  private readonly parts: MemoryPart[];
  /** The part that holds the classifier (the first, when the classifier is the embedding). */
  private readonly classifier: MemoryPart;
  /** The engine's batch of the last step (where its hidden rows start depends on its logit rows). */
  private lastBatch: StepBatch | null = null;

  /**
   * `backends[i]` is memory i of weights.placement; `parts[i]` what it runs (placement.ts). The
   * engine's step batch is in backends[0]'s memory.
   */
  constructor(
    private readonly config: ModelConfig, weights: ModelWeights, backends: readonly CpuBackend[], parts: readonly ModelPart[],
    batch: StepBatch, maxLogits: number, numBlocks: number, kv: KVLayout,
  ) {
    if (parts.length !== backends.length) throw new Error("WasmForward: one part per memory");
    this.parts = parts.map((part, i) => {
      const backend = backends[i]!;
      const local = i === 0 ? null : new StepBatch(backend.mem, batch.maxTokens, batch.maxSeqs, batch.maxBlocksPerSeq, batch.blockSize, batch.maxLogitRows, batch.numGroups);
      const model = new LlamaModel(config, weights, backend, batch.maxTokens, maxLogits, part);
      const arena = new KVArena(backend.mem, config, numBlocks, kv.blockSize, kv.type, { first: part.firstLayer, end: part.endLayer });
      return { backend, model, arena, batch: local };
    });
    const classifier = this.parts.find((p) => p.model.part.classify);
    if (classifier === undefined) throw new Error("WasmForward: no memory holds the classifier");
    this.classifier = classifier;
    const threads = backends[0]!.threads;
    const memories = backends.length === 1 ? "" : `, ${backends.length} memories`;
    this.description = `wasm (${threads} thread${threads === 1 ? "" : "s"}${memories})`;
  }

  /** Blocks in and out of the arena, layer by layer from the memory that holds each layer (the disk tier's access). */
  get kvBlocks(): KVBlockIO {
    return this;
  }

  readBlock(blockId: number, group: number, out: Uint8Array): void {
    const layers = this.blockLayers(blockId, group, out);
    layers.forEach((l, j) => this.arenaOf(l).readLayerBlock(l, blockId, out, 2 * j * this.parts[0]!.arena.blockBytes));
  }

  writeBlock(blockId: number, group: number, data: Uint8Array): void {
    const layers = this.blockLayers(blockId, group, data);
    layers.forEach((l, j) => this.arenaOf(l).writeLayerBlock(l, blockId, data, 2 * j * this.parts[0]!.arena.blockBytes));
  }

  /** The layers a block of `group` holds, the block id and the bytes' length checked. */
  private blockLayers(blockId: number, group: number, bytes: Uint8Array): readonly number[] {
    const arena = this.parts[0]!.arena;
    if (!Number.isInteger(blockId) || blockId < 0 || blockId >= arena.numBlocks) throw new RangeError(`no block ${blockId} in an arena of ${arena.numBlocks}`);
    const layers = arena.groups.groups[group]?.layers;
    if (layers === undefined) throw new RangeError(`no KV cache group ${group}`);
    const want = 2 * layers.length * arena.blockBytes;
    if (bytes.length !== want) throw new RangeError(`a KV block of group ${group} is ${want} bytes, got ${bytes.length}`);
    return layers;
  }

  /** The arena (memory) that holds layer l. */
  private arenaOf(l: number): KVArena {
    return this.parts.find((p) => l >= p.arena.firstLayer && l < p.arena.endLayer)!.arena;
  }

  forward(batch: StepBatch): Promise<void> {
    this.lastBatch = batch;
    const T = batch.numTokens;
    for (const p of this.parts) if (p.batch !== null) batch.copyTo(p.batch);
    let previous: MemoryPart | null = null;
    for (const p of this.parts) {
      if (p.model.part.endLayer === p.model.part.firstLayer && !p.model.part.embed) continue;
      if (previous !== null) this.copyResidual(previous, p, T);
      p.model.runLayers(p.batch ?? batch, p.arena);
      previous = p;
    }
    const c = this.classifier;
    if (previous !== null && previous !== c) this.copyResidual(previous, c, T);
    c.model.classify(c.batch ?? batch);
    return Promise.resolve();
  }

  hiddenRow(h: number): Float32Array {
    const c = this.classifier;
    const start = c.model.hiddenAddr((c.batch ?? this.lastBatch!).numLogits, h) >>> 2;
    return c.backend.mem.f32.subarray(start, start + this.config.dim);
  }

  logitsRow(r: number): Float32Array {
    const start = this.classifier.model.logitsAddr(r) >>> 2;
    return this.classifier.backend.mem.f32.subarray(start, start + this.config.vocabSize);
  }

  /** Copy blocks in every memory's arena: each holds its layers' part of every block. */
  copyBlocks(copies: readonly BlockCopy[]): void {
    for (const p of this.parts) {
      const bytes = p.backend.mem.u8;
      for (const { src, dst } of copies) p.arena.copyBlock(bytes, src, dst);
    }
  }

  close(): void {}

  /** The residual stream of T tokens from one memory to the next: the only data that crosses. */
  private copyResidual(from: MemoryPart, to: MemoryPart, T: number): void {
    const n = T * this.config.dim;
    const src = from.model.residualAddr >>> 2;
    to.backend.mem.f32.set(from.backend.mem.f32.subarray(src, src + n), to.model.residualAddr >>> 2);
  }
}
