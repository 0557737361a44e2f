/**
 * The KV layout: how many bytes a K or V row, a block of one layer and a block across the model
 * take, and in what element type. The one place the arena, the pool sizing and the disk tier's
 * keys read it from. (The same shape of answer as the KV types work gives: f32 only here.)
 */
import type { ModelConfig } from "../model/config.ts";

/** Element type of the stored K and V. */
export type KVType = "f32";

export interface KVLayout {
  readonly type: KVType;
  readonly blockSize: number;
  /** Bytes of one head's K (or V) row at one position. */
  readonly rowBytes: number;
  /** Bytes of one block in one layer, K or V alone: nKvHeads * blockSize rows. */
  readonly layerBlockBytes: number;
  /** Bytes of one block across all layers, K and V: the unit `--kv-cache-mb` is divided by. */
  readonly blockBytes: number;
}

/** The layout of a KV cache of `type` for this model and block size. */
export function kvLayout(config: ModelConfig, blockSize: number, type: KVType = "f32"): KVLayout {
  const rowBytes = 4 * config.headDim;
  const layerBlockBytes = rowBytes * config.nKvHeads * blockSize;
  return { type, blockSize, rowBytes, layerBlockBytes, blockBytes: 2 * config.nLayers * layerBlockBytes };
}
