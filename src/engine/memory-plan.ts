/**
 * What a run needs in memory, decided before anything is allocated: how the weights are stored
 * (Q5_0 as the faster, larger Q8_0 unless the machine's memory is short), which WebAssembly
 * memory holds which part of the model (placement.ts), and whether the machine has the memory at
 * all (refused with the sizes, before loading, when it has not).
 */
import { readFileSync } from "node:fs";
import { freemem } from "node:os";
import { RESERVED_BYTES, instantiateKernels, kernelModule, LinearMemory } from "../backend/wasm/wasm.ts";
import { placeModel, type PlacedMemory, type Placement } from "../backend/wasm/placement.ts";
import type { Kernels } from "../backend/wasm/kernels.ts";
import { ModelFormatError } from "../errors.ts";
import { StepBatch } from "../model/batch.ts";
import { KVCacheGroups } from "../kv/kv-groups.ts";
import type { Checkpoint } from "../model/checkpoint.ts";
import type { ModelConfig } from "../model/config.ts";
import { LlamaModel, type ModelPart } from "../backend/wasm/llama.ts";
import { FAST_STORAGE, FILE_STORAGE, partBytes, weightBytes, type WeightStorage } from "../backend/wasm/weights.ts";

/** The load's staging buffer (weights.ts), on top of a memory while tensors are read. */
const STAGING_BYTES = (8 << 20) + 64;

/** The bounds of a run that size its buffers. */
export interface RunShape {
  /** Tokens of one step (EngineOptions.maxNumBatchedTokens). */
  maxTokens: number;
  maxSeqs: number;
  /** Logit rows of one step. */
  maxLogits: number;
  blockSize: number;
  /** KV blocks in WebAssembly memory (0 when the KV cache is in GPU buffers). */
  numBlocks: number;
  /** Bytes of one KV block across the model (KVLayout.blockBytes: the KV type's). */
  kvBlockBytes: number;
  threads: number;
}

export interface MemoryPlan {
  storage: WeightStorage;
  placement: Placement;
  /** Bytes of every memory together. */
  totalBytes: number;
  /** Bytes the faster storage (Q5_0 as Q8_0) would add, and whether it was dropped for lack of memory. */
  fastStorageExtraBytes: number;
  fastStorageDropped: boolean;
}

/**
 * Plan the memories of a run of `checkpoint` at config `c` (its context set), each at most
 * `limitBytes` unless one item is larger. `availableBytes` is what the machine can give (default:
 * its available memory); a plan larger than that is refused before loading, with the sizes.
 */
export function planMemory(
  checkpoint: Checkpoint, c: ModelConfig, shape: RunShape, limitBytes: number, availableBytes: number = availableMemoryBytes(),
): MemoryPlan {
  for (const [key, value] of Object.entries(shape)) {
    if (!Number.isFinite(value) || value < 0) throw new Error(`planMemory: ${key} is ${value}`);
  }
  const kernels = sizingKernels();
  const maxBlocksPerSeq = Math.ceil(c.seqLen / shape.blockSize);
  const groups = KVCacheGroups.of(c);
  const fixedBytes = (part: ModelPart): number =>
    RESERVED_BYTES + STAGING_BYTES + StepBatch.bytes(shape.maxTokens, shape.maxSeqs, maxBlocksPerSeq, shape.maxLogits, groups.groups.length) + 64 +
    LlamaModel.bufferBytes(c, kernels, shape.threads, part, shape.maxTokens, shape.maxLogits);
  const plan = (storage: WeightStorage): Placement =>
    placeModel(checkpoint.file, c.nLayers, {
      weights: partBytes(checkpoint, storage),
      sharedClassifier: c.sharedClassifier,
      // A block is kvBlockBytes over the model's slots (kv-layout.ts); a memory stores its layers' slots.
      kvBytes: (first, end) => (shape.numBlocks * shape.kvBlockBytes * groups.slotsOf(first, end).length) / groups.numSlots,
      fixedBytes,
    }, limitBytes);
  const total = (p: Placement) => p.memories.reduce((a, m) => a + m.totalBytes, 0);
  const refuse = (weights: number, kv: number, buffers: number): never => {
    // Advice for the largest part only (lowering the KV cache cannot help a model refused for its buffers).
    const largest = [
      { bytes: kv, advice: "lower --ctx-size or --kv-cache-mb, or use --kv-type q8_0" },
      { bytes: buffers, advice: `lower --max-num-batched-tokens (${shape.maxTokens}) or --max-num-seqs (${shape.maxSeqs})` },
      { bytes: weights, advice: "use a smaller quantization" },
    ].sort((a, b) => b.bytes - a.bytes)[0]!;
    throw new ModelFormatError(
      checkpoint.file,
      `needs ${gib(weights + kv + buffers)} (weights ${gib(weights)}, KV cache ${gib(kv)}, buffers ${gib(buffers)}), ` +
        `more than the ${gib(availableBytes)} this machine has available; ${largest.advice}`,
    );
  };
  // The least any placement takes (one memory's buffers): refused before placing when the machine lacks it.
  const leastWeights = weightBytes(checkpoint, FILE_STORAGE);
  const kvTotal = shape.numBlocks * shape.kvBlockBytes;
  const leastBuffers = fixedBytes({ embed: true, firstLayer: 0, endLayer: c.nLayers, classify: true });
  if (leastWeights + kvTotal + leastBuffers > availableBytes) refuse(leastWeights, kvTotal, leastBuffers);

  const extra = weightBytes(checkpoint, FAST_STORAGE) - leastWeights;
  const fast = plan(FAST_STORAGE);
  if (total(fast) <= availableBytes) {
    return { storage: FAST_STORAGE, placement: fast, totalBytes: total(fast), fastStorageExtraBytes: extra, fastStorageDropped: false };
  }
  const file = extra === 0 ? fast : plan(FILE_STORAGE);
  const bytes = total(file);
  if (bytes > availableBytes) {
    const sum = (f: (m: PlacedMemory) => number) => file.memories.reduce((a, m) => a + f(m), 0);
    refuse(sum((m) => m.weightBytes), sum((m) => m.kvBytes), sum((m) => m.bufferBytes));
  }
  return { storage: FILE_STORAGE, placement: file, totalBytes: bytes, fastStorageExtraBytes: extra, fastStorageDropped: extra > 0 };
}

/**
 * Memory the machine can give a new allocation: Linux's MemAvailable (free memory plus what the
 * page cache can give back), else the free memory the OS reports.
 */
export function availableMemoryBytes(): number {
  try {
    const line = readFileSync("/proc/meminfo", "utf8").split("\n").find((l) => l.startsWith("MemAvailable:"));
    const kib = line === undefined ? NaN : Number(line.split(/\s+/)[1]);
    if (Number.isFinite(kib)) return kib * 1024;
  } catch {
    // Not Linux: fall through.
  }
  return freemem();
}

let sizing: Kernels | null = null;

/** A kernel instance over a small memory of its own, to ask the kernels their scratch sizes. */
function sizingKernels(): Kernels {
  sizing ??= instantiateKernels(new LinearMemory().memory, kernelModule());
  return sizing;
}

function gib(bytes: number): string {
  return `${(bytes / 2 ** 30).toFixed(2)} GiB`;
}
