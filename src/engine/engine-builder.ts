/**
 * Builds an engine: the context and options it runs at, the KV cache's type and pool size, the
 * memory plan (which WebAssembly memory holds which part of the model) or the GPU buffers, the
 * weights read into them, the forward pass on its backend, the KV cache manager with its second
 * tier (the disk), and the step batch. Everything that can fail for want of memory or a usable
 * file fails here, before the engine exists; what was started is stopped again.
 */
import { InputError } from "../errors.ts";
import { KVCacheManager } from "../kv/kv-cache-manager.ts";
import { KVCacheGroups } from "../kv/kv-groups.ts";
import { kvLayout, resolveKVType, type KVLayout } from "../kv/kv-layout.ts";
import type { KVSecondTier } from "../kv/second-tier.ts";
import { SecondTierLink } from "../kv/tier-link.ts";
import { StepBatch } from "../model/batch.ts";
import type { Checkpoint } from "../model/checkpoint.ts";
import type { ModelConfig } from "../model/config.ts";
import { loadPlacedWeights, type LoadProgress } from "../backend/wasm/weights.ts";
import type { CpuBackend } from "../backend/wasm/cpu.ts";
import type { ModelForward } from "../backend/model-forward.ts";
import { memoryLimitBytes } from "../backend/wasm/placement.ts";
import { WasmForward } from "../backend/wasm/wasm-forward.ts";
import { WasmMemories } from "../backend/wasm/wasm-memories.ts";
import { FileWeights } from "../backend/webgpu/file-weights.ts";
import type { WebGpuBackend } from "../backend/webgpu/backend.ts";
import { WebGpuForward } from "../backend/webgpu/webgpu-forward.ts";
import type { Tokenizer } from "../tokenizer/tokenizer.ts";
import { LLMEngine } from "./engine.ts";
import { DEFAULT_ENGINE_OPTIONS, defaultNumBlocks, fitToVocabulary, logitRows, withContext, type EngineOptions } from "./engine-options.ts";
import { planMemory, type MemoryPlan } from "./memory-plan.ts";
import { ModelRunner } from "./model-runner.ts";
import { checkSpeculative } from "./speculative.ts";

export interface BuildOptions {
  /** Told as the weights load (for a progress bar). */
  onLoadProgress?: LoadProgress;
  /** Run the forward pass on this WebGPU backend (its owner closes it after the engine); absent: WebAssembly. */
  gpu?: WebGpuBackend;
  /**
   * Opens a second tier of cached KV blocks under the memory pool (the disk tier) for this
   * engine's KV layout and the backend that computes its KV (ModelForward.kvProducer).
   */
  secondTier?: (layout: KVLayout, kvProducer: string) => KVSecondTier;
}

/** The engine for `checkpoint` with `requested` options, its weights loaded on WebAssembly or on `build.gpu`. */
export function buildEngine(checkpoint: Checkpoint, tokenizer: Tokenizer, requested: EngineOptions = DEFAULT_ENGINE_OPTIONS, build: BuildOptions = {}): LLMEngine {
  const config = withContext(checkpoint.config, requested.ctxSize);
  const options = fitToVocabulary(requested, config);
  if (options.speculative !== null) checkSpeculative(options.speculative);
  const kvType = resolveKVType(config, checkpoint.format, options.kvType ?? null);
  const layout = kvLayout(config, options.blockSize, kvType.type);
  const gpu = build.gpu;
  const numBlocks = options.numBlocks ?? defaultNumBlocks(config, options, layout, gpu === undefined ? Infinity : WebGpuForward.maxBlocks(gpu, layout));
  // On WebGPU the weights and the KV cache are in GPU buffers; linear memory holds the step batch
  // and a ggml embedding table (its rows are looked up by WebAssembly): one memory, no threads.
  const memoryPlan = gpu === undefined ? planWasmMemory(checkpoint, config, options, numBlocks, layout) : null;
  const memories = memoryPlan === null ? new WasmMemories(1, 1) : new WasmMemories(memoryPlan.placement.memories.length, options.threads);
  try {
    const cpu = memories.backends[0]!;
    const groups = KVCacheGroups.of(config);
    const batch = new StepBatch(
      cpu.mem, options.maxNumBatchedTokens, options.maxNumSeqs, Math.ceil(config.seqLen / options.blockSize), options.blockSize, logitRows(options), groups.groups.length,
    );
    const model = memoryPlan === null
      ? gpuForward(config, checkpoint, cpu, batch, numBlocks, layout, gpu!, build.onLoadProgress)
      : wasmForward(checkpoint, config, memories, memoryPlan, batch, numBlocks, layout, build.onLoadProgress);
    const tierLink = build.secondTier === undefined ? null : tierLinkFor(build.secondTier(layout, model.kvProducer), model, options, numBlocks);
    const kv = new KVCacheManager({
      numBlocks,
      blockSize: options.blockSize,
      groups,
      enableCaching: options.enablePrefixCaching,
      evictionPolicy: options.evictionPolicy,
      hash: options.prefixHash,
      listener: tierLink ?? undefined,
    });
    const runner = new ModelRunner(model, kv, batch);
    return new LLMEngine({
      checkpoint, tokenizer, config, options, memories, memoryPlan, model, kv, kvLayout: layout, kvTypeNote: kvType.note, numBlocks, runner, tierLink,
    });
  } catch (e) {
    memories.close();
    throw e;
  }
}

/** The memory plan of a WebAssembly run: the step's buffers, the KV arena and the weights, placed over memories. */
function planWasmMemory(checkpoint: Checkpoint, c: ModelConfig, o: EngineOptions, numBlocks: number, kv: KVLayout): MemoryPlan {
  const shape = {
    maxTokens: o.maxNumBatchedTokens, maxSeqs: o.maxNumSeqs, maxLogits: logitRows(o), blockSize: o.blockSize, numBlocks, kvBlockBytes: kv.blockBytes, threads: o.threads,
  };
  return planMemory(checkpoint, c, shape, memoryLimitBytes(o.wasmMemoryMb));
}

/** The weights loaded into the planned memories, and the forward pass over them. */
function wasmForward(
  checkpoint: Checkpoint, c: ModelConfig, memories: WasmMemories, plan: MemoryPlan, batch: StepBatch, numBlocks: number, kv: KVLayout, onLoadProgress?: LoadProgress,
): ModelForward {
  const placement = plan.placement;
  const weights = loadPlacedWeights(checkpoint, memories.targets, placement.weights, onLoadProgress, plan.storage);
  const parts = placement.memories.map((m) => m.part);
  return new WasmForward(c, weights, memories.backends, parts, batch, batch.maxLogitRows, numBlocks, kv);
}

/** The forward pass on WebGPU, weights read from the file to GPU buffers, its buffers sized for the engine's largest step. */
function gpuForward(
  c: ModelConfig, checkpoint: Checkpoint, cpu: CpuBackend, batch: StepBatch, numBlocks: number, kv: KVLayout, gpu: WebGpuBackend, onLoadProgress?: LoadProgress,
): ModelForward {
  return new WebGpuForward(c, new FileWeights({ ...checkpoint, config: c }, onLoadProgress), cpu, gpu, {
    maxTokens: batch.maxTokens,
    // A step's logit rows are some of its tokens.
    maxLogits: Math.min(batch.maxLogitRows, batch.maxTokens),
    maxSeqs: batch.maxSeqs,
    maxBlocksPerSeq: batch.maxBlocksPerSeq,
    numBlocks,
    blockSize: batch.blockSize,
    kv,
  });
}

/** The link to a second tier, refused where it cannot work (the fast hash, no prefix cache). */
function tierLinkFor(tier: KVSecondTier, model: ModelForward, o: EngineOptions, numBlocks: number): SecondTierLink {
  if (!o.enablePrefixCaching) throw new InputError("a KV cache directory needs the prefix cache: drop --no-prefix-cache");
  if (o.prefixHash !== "sha256") throw new InputError(`a KV cache directory keys blocks by sha256 block hashes; --prefix-hash ${o.prefixHash} cannot be used with it`);
  return new SecondTierLink(tier, model.kvBlocks, numBlocks);
}

/** The KV cache in words, for the load line: "KV cache f16, 512 blocks of 16 tokens, 24.0 MiB". */
export function kvCacheSummary(kv: KVLayout, numBlocks: number): string {
  const mib = (numBlocks * kv.blockBytes) / 2 ** 20;
  return `KV cache ${kv.type}, ${numBlocks} blocks of ${kv.blockSize} tokens, ${mib.toFixed(1)} MiB`;
}
