/**
 * Where the KV cache lives: one arena in linear memory, per layer a K region and a V region,
 * each [kvHead][block][blockSize][headDim] f32 (one head's rows in consecutive blocks are
 * adjacent: see assembly/attention.ts for why). Block ids index this arena directly; the
 * KVCacheManager decides which request owns which block.
 */
import type { ModelConfig } from "../model/config.ts";
import type { LinearMemory } from "../backend/wasm.ts";
import { MAX_BLOCK_SIZE } from "../backend/kernels.ts";
import { InputError } from "../errors.ts";

export class KVArena {
  /** Bytes of one block in one layer, K or V alone. */
  readonly blockBytes: number;
  private readonly base: number;
  private readonly layerBytes: number;

  constructor(mem: LinearMemory, config: ModelConfig, readonly numBlocks: number, readonly blockSize: number) {
    if (!Number.isInteger(blockSize) || blockSize < 1 || blockSize > MAX_BLOCK_SIZE) {
      throw new InputError(`block size must be an integer from 1 to ${MAX_BLOCK_SIZE}, got ${blockSize}`);
    }
    this.blockBytes = 4 * config.nKvHeads * blockSize * config.headDim;
    this.layerBytes = this.blockBytes * numBlocks;
    this.base = mem.alloc(2 * config.nLayers * this.layerBytes);
  }

  /** Address of layer l's K region. */
  kLayer(l: number): number {
    return this.base + 2 * l * this.layerBytes;
  }

  /** Address of layer l's V region. */
  vLayer(l: number): number {
    return this.base + (2 * l + 1) * this.layerBytes;
  }

  /** Bytes one block takes across all layers, K and V: the unit `--kv-cache-mb` is divided by. */
  static bytesPerBlock(config: ModelConfig, blockSize: number): number {
    return 2 * config.nLayers * 4 * config.nKvHeads * blockSize * config.headDim;
  }
}
