/**
 * Where the KV cache lives: one arena in linear memory, per layer a K region and a V region,
 * each [kvHead][block][blockSize] rows of one head's values in the layout's element type (one
 * head's rows in consecutive blocks are adjacent: see assembly/attention.ts for why). Block ids
 * index this arena directly; the KVCacheManager decides which request owns which block. Sizes
 * come from the KVLayout (kv-layout.ts), the one place that knows the bytes of a row and a block.
 *
 * A model placed over several memories has one arena per memory, for the layers that memory
 * holds (`layers`); every one is indexed by the same block ids.
 */
import type { ModelConfig } from "../model/config.ts";
import type { LinearMemory } from "../backend/wasm.ts";
import { MAX_BLOCK_SIZE } from "../backend/kernels.ts";
import { InputError } from "../errors.ts";
import { kvLayout, type KVLayout, type KVType } from "./kv-layout.ts";

export class KVArena {
  /** The element type and bytes of rows and blocks. */
  readonly layout: KVLayout;
  /** Bytes of one block in one layer, K or V alone (layout.layerBlockBytes). */
  readonly blockBytes: number;
  private readonly base: number;
  private readonly layerBytes: number;
  /** Bytes of one kv head's rows of one block: the unit a block copy moves (heads are strided by numBlocks). */
  private readonly headBlockBytes: number;
  private readonly nKvHeads: number;

  /** The layers this arena holds, [first, end). */
  readonly firstLayer: number;
  readonly endLayer: number;

  constructor(
    private readonly mem: LinearMemory, config: ModelConfig, readonly numBlocks: number, readonly blockSize: number,
    type: KVType = "f32",
    layers: { first: number; end: number } = { first: 0, end: config.nLayers },
  ) {
    if (!Number.isInteger(blockSize) || blockSize < 1 || blockSize > MAX_BLOCK_SIZE) {
      throw new InputError(`block size must be an integer from 1 to ${MAX_BLOCK_SIZE}, got ${blockSize}`);
    }
    this.layout = kvLayout(config, blockSize, type);
    this.blockBytes = this.layout.layerBlockBytes;
    this.layerBytes = this.blockBytes * numBlocks;
    this.headBlockBytes = this.blockBytes / config.nKvHeads;
    this.nKvHeads = config.nKvHeads;
    this.firstLayer = layers.first;
    this.endLayer = layers.end;
    const bytes = 2 * (layers.end - layers.first) * this.layerBytes;
    this.base = mem.alloc(bytes);
    // A request touches a few rows of every layer's and head's region: 2 MiB pages would make
    // each touched one wholly resident (see huge-pages.ts).
    mem.keepSmallPages(this.base, bytes);
  }

  /**
   * Copy block `src`'s K and V into block `dst` in every layer and head (a forked request's partly
   * filled block); `bytes` is the arena's memory. The same bits as recomputing them.
   */
  copyBlock(bytes: Uint8Array, src: number, dst: number): void {
    for (const offset of this.blockRegions(src, dst)) bytes.copyWithin(offset.dst, offset.src, offset.src + this.headBlockBytes);
  }

  /** Byte offsets (from the arena's layer regions) of each head's rows of blocks src and dst, every layer it holds, K and V. */
  *blockRegions(src: number, dst: number): Generator<{ src: number; dst: number }> {
    for (let l = this.firstLayer; l < this.endLayer; l++) {
      for (const region of [this.kLayer(l), this.vLayer(l)]) {
        for (let h = 0; h < this.nKvHeads; h++) {
          const head = region + h * this.numBlocks * this.headBlockBytes;
          yield { src: head + src * this.headBlockBytes, dst: head + dst * this.headBlockBytes };
        }
      }
    }
  }

  /** Address of layer l's K region. */
  kLayer(l: number): number {
    return this.base + 2 * this.local(l) * this.layerBytes;
  }

  /** Address of layer l's V region. */
  vLayer(l: number): number {
    return this.base + (2 * this.local(l) + 1) * this.layerBytes;
  }

  /**
   * Copies block `blockId` of layer `l` (one this arena holds) into out[at, at + 2 * blockBytes):
   * K then V, each [kvHead][slot] rows of layout.rowBytes. Layer by layer, so a block split over several arenas
   * (memories) is read by asking each for its layers.
   */
  readLayerBlock(l: number, blockId: number, out: Uint8Array, at: number): void {
    const u8 = this.mem.u8;
    for (const region of [this.kLayer(l), this.vLayer(l)]) {
      for (let h = 0; h < this.nKvHeads; h++, at += this.headBlockBytes) {
        const src = region + (h * this.numBlocks + blockId) * this.headBlockBytes;
        out.set(u8.subarray(src, src + this.headBlockBytes), at);
      }
    }
  }

  /** Writes data[at, at + 2 * blockBytes) (readLayerBlock's layout) into block `blockId` of layer `l`. */
  writeLayerBlock(l: number, blockId: number, data: Uint8Array, at: number): void {
    const u8 = this.mem.u8;
    for (const region of [this.kLayer(l), this.vLayer(l)]) {
      for (let h = 0; h < this.nKvHeads; h++, at += this.headBlockBytes) {
        u8.set(data.subarray(at, at + this.headBlockBytes), region + (h * this.numBlocks + blockId) * this.headBlockBytes);
      }
    }
  }

  private local(l: number): number {
    if (l < this.firstLayer || l >= this.endLayer) throw new Error(`KVArena holds layers ${this.firstLayer}-${this.endLayer - 1}, not ${l}`);
    return l - this.firstLayer;
  }
}
