/**
 * Where the KV cache lives: one arena in linear memory, per slot a K region and a V region, each
 * [kvHead][block][blockSize] rows of one head's values in the layout's element type (one head's
 * rows in consecutive blocks are adjacent: see assembly/attention.ts for why). A slot is one layer
 * of a block (kv-groups.ts): with one KV cache group every layer has its own slot; with sliding-window
 * layers a block holds one group's layers, layer l in slot slotOf[l], so layers of different groups
 * share a slot's region and the block ids the manager gives each group keep them apart. Block ids
 * index this arena directly; the KVCacheManager decides which request (and group) owns which block.
 * Sizes come from the KVLayout (kv-layout.ts), the one place that knows the bytes of a row and a block.
 *
 * A model placed over several memories has one arena per memory, for the layers that memory
 * holds (`layers`): it stores the slots those layers occupy; every one is indexed by the same block ids.
 */
import type { ModelConfig } from "../../model/config.ts";
import type { LinearMemory } from "./wasm.ts";
import { InputError } from "../../errors.ts";
import { KVCacheGroups } from "../../kv/kv-groups.ts";
import { kvLayout, MAX_BLOCK_SIZE, type KVLayout, type KVType } from "../../kv/kv-layout.ts";

export class KVArena {
  /** The element type and bytes of rows and blocks. */
  readonly layout: KVLayout;
  /** Bytes of one block in one layer, K or V alone (layout.layerBlockBytes). */
  readonly blockBytes: number;
  /** The model's KV cache groups: which group's block table each layer reads, and its slot. */
  readonly groups: KVCacheGroups;
  private readonly base: number;
  private readonly layerBytes: number;
  /** Bytes of one kv head's rows of one block: the unit a block copy moves (heads are strided by numBlocks). */
  private readonly headBlockBytes: number;
  private readonly nKvHeads: number;
  /** The slots this arena stores, and each one's index among them. */
  private readonly slots: readonly number[];
  private readonly slotIndex = new Map<number, number>();

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
    this.groups = KVCacheGroups.of(config);
    this.blockBytes = this.layout.layerBlockBytes;
    this.layerBytes = this.blockBytes * numBlocks;
    this.headBlockBytes = this.blockBytes / config.nKvHeads;
    this.nKvHeads = config.nKvHeads;
    this.firstLayer = layers.first;
    this.endLayer = layers.end;
    this.slots = this.groups.slotsOf(layers.first, layers.end);
    this.slots.forEach((slot, i) => this.slotIndex.set(slot, i));
    const bytes = 2 * this.slots.length * this.layerBytes;
    this.base = mem.alloc(bytes);
    // A request touches a few rows of every layer's and head's region: 2 MiB pages would make
    // each touched one wholly resident (see huge-pages.ts).
    mem.keepSmallPages(this.base, bytes);
  }

  /** The KV cache group whose block tables layer l reads. */
  groupOf(l: number): number {
    return this.groups.groupOf[this.local(l)]!;
  }

  /**
   * Copy block `src`'s K and V into block `dst` in every slot and head (a forked request's partly
   * filled block); `bytes` is the arena's memory. The same bits as recomputing them.
   */
  copyBlock(bytes: Uint8Array, src: number, dst: number): void {
    for (const offset of this.blockRegions(src, dst)) bytes.copyWithin(offset.dst, offset.src, offset.src + this.headBlockBytes);
  }

  /** Byte offsets (from the arena's slot regions) of each head's rows of blocks src and dst, every slot it holds, K and V. */
  *blockRegions(src: number, dst: number): Generator<{ src: number; dst: number }> {
    for (let i = 0; i < this.slots.length; i++) {
      for (const region of [this.base + 2 * i * this.layerBytes, this.base + (2 * i + 1) * this.layerBytes]) {
        for (let h = 0; h < this.nKvHeads; h++) {
          const head = region + h * this.numBlocks * this.headBlockBytes;
          yield { src: head + src * this.headBlockBytes, dst: head + dst * this.headBlockBytes };
        }
      }
    }
  }

  /** Address of layer l's K region (its slot's). */
  kLayer(l: number): number {
    return this.base + 2 * this.slotIndex.get(this.groups.slotOf[this.local(l)]!)! * this.layerBytes;
  }

  /** Address of layer l's V region (its slot's). */
  vLayer(l: number): number {
    return this.kLayer(l) + this.layerBytes;
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

  /** l, checked to be one of this arena's layers. */
  private local(l: number): number {
    if (l < this.firstLayer || l >= this.endLayer) throw new Error(`KVArena holds layers ${this.firstLayer}-${this.endLayer - 1}, not ${l}`);
    return l;
  }
}
