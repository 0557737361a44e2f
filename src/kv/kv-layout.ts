/**
 * How the KV cache stores its values: the element type (llama.cpp's --cache-type-k/-v) and the
 * bytes that follow from it. This is the one place that says how many bytes a K or V row, a block
 * of one layer and a block across the model take: the arena (backend/wasm/kv-arena.ts), the attention kernels'
 * arguments, the memory checks, `info` and anything that copies blocks (a disk tier, an arena
 * split over several memories) all read kvLayout()'s answer.
 *
 *   f32    4 bytes a value (run.c's arithmetic: llama2.c checkpoints default to it)
 *   f16    IEEE half, rounded to nearest even as ggml's fp32->fp16 (GGUF models default to it,
 *          as llama.cpp does)
 *   q8_0   ggml's block_q8_0: 32 values as an f16 scale and 32 int8 (34 bytes, 0.27x of f32),
 *          quantized as ggml's quantize_row_q8_0_ref; a head's row is whole blocks
 *
 * A row (one head of one position) is padded to a multiple of 4 bytes, so that every row starts on
 * a 32-bit word (the GPU writes rows as u32 words); only q8_0 with an odd number of blocks per head
 * pads (2 bytes).
 */
import { InputError } from "../errors.ts";
import { KVCacheGroups, type LayerAttention } from "./kv-groups.ts";

/** What the KV cache's layout needs of a model (a ModelConfig has it): its layers, KV heads and their width. */
export interface KVModelShape extends LayerAttention {
  readonly nKvHeads: number;
  readonly headDim: number;
  /** "runq": llama2.c's int8 arithmetic, whose cache is f32. */
  readonly numerics?: string;
}

export const KV_TYPES = ["f32", "f16", "q8_0"] as const;
export type KVType = (typeof KV_TYPES)[number];

/** The kernels' code of each type (assembly/attention.ts KV_F32, KV_F16, KV_Q8_0). */
export const KV_TYPE_CODE: Readonly<Record<KVType, number>> = { f32: 0, f16: 1, q8_0: 2 };

/** Largest KV block size accepted (a sanity bound: attention's numerics do not depend on it). */
export const MAX_BLOCK_SIZE = 256;

/** Values per q8_0 block, and its bytes (f16 scale + 32 int8). */
export const Q8_0_BLOCK = 32;
export const Q8_0_BLOCK_BYTES = 34;

export interface KVLayout {
  readonly type: KVType;
  readonly blockSize: number;
  /** Bytes of one head's K (or V) row at one position, padded to 4. */
  readonly rowBytes: number;
  /** Bytes of one block in one layer, K or V alone: nKvHeads * blockSize rows. */
  readonly layerBlockBytes: number;
  /**
   * Layers one block holds: every layer, or for a model with sliding-window layers the size of its
   * KV cache groups (kv-groups.ts: a block serves one group, its layers side by side).
   */
  readonly slots: number;
  /** Bytes of one block across its slots, K and V: the unit `--kv-cache-mb` is divided by. */
  readonly blockBytes: number;
}

/** Bytes of one row of `headDim` values of `type`, padded to a multiple of 4. */
export function kvRowBytes(type: KVType, headDim: number): number {
  const raw = type === "f32" ? 4 * headDim : type === "f16" ? 2 * headDim : (headDim / Q8_0_BLOCK) * Q8_0_BLOCK_BYTES;
  return Math.ceil(raw / 4) * 4;
}

/** The layout of a KV cache of `type` for this model and block size. */
export function kvLayout(config: KVModelShape, blockSize: number, type: KVType = "f32"): KVLayout {
  if (type === "q8_0" && config.headDim % Q8_0_BLOCK !== 0) {
    throw new InputError(`--kv-type q8_0 needs a head dimension that is a multiple of ${Q8_0_BLOCK}; this model's is ${config.headDim}`);
  }
  const rowBytes = kvRowBytes(type, config.headDim);
  const layerBlockBytes = rowBytes * config.nKvHeads * blockSize;
  const slots = KVCacheGroups.of(config).numSlots;
  return { type, blockSize, rowBytes, layerBlockBytes, slots, blockBytes: 2 * slots * layerBlockBytes };
}

/** The KV type a run gets when none is asked for: f16 for GGUF models (as llama.cpp), f32 for llama2.c checkpoints (run.c). */
export function defaultKVType(checkpointFormat: string): KVType {
  return checkpointFormat.startsWith("GGUF") ? "f16" : "f32";
}

/**
 * The KV type a run uses: `requested`, or the model's default when null. q8_0 on a head dimension
 * that is not whole blocks falls back to f16 (llama.cpp refuses such a cache outright; falling back
 * keeps one `--kv-type q8_0` usable over a mix of models) and says so in `note`.
 */
export function resolveKVType(config: KVModelShape, checkpointFormat: string, requested: KVType | null): { type: KVType; note: string | null } {
  const type = requested ?? defaultKVType(checkpointFormat);
  if (type !== "f32" && config.numerics === "runq") {
    throw new InputError(`--kv-type ${type}: this llama2.c int8 checkpoint runs run.c's runq arithmetic, whose KV cache is f32`);
  }
  if (type === "q8_0" && config.headDim % Q8_0_BLOCK !== 0) {
    return { type: "f16", note: `--kv-type q8_0 needs a head dimension that is a multiple of ${Q8_0_BLOCK} (this model's is ${config.headDim}): KV cache in f16` };
  }
  return { type, note: null };
}
