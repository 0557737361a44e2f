/**
 * The seam between the KV cache and a second tier of storage under the memory pool (the disk tier
 * in src/kv-disk/ is one). The kv folder declares these interfaces and never imports a tier; the
 * engine is handed one by its owner (LLM.open wires the disk tier in).
 *
 * A tier stores whole, full blocks by their content key and KV cache group (kv-groups.ts). A key
 * carries the block's hash and the exact content it hashes (parent hash, tokens, framed extra
 * keys), so a tier can check that what it returns is that block and nothing else: the hash names a
 * file, the content proves it. The group says whose layers the bytes are: a model with
 * sliding-window layers stores a block of each group apart (the same tokens in the global layers
 * and in each group of local ones), a model with one kind of layer one block of every layer (group 0).
 */
import type { BlockHash } from "./block-hash.ts";

/** A full block's identity: hash(parentHash, tokens, extraKeys), as block-hash.ts defines it. */
export interface KVBlockKey {
  readonly hash: BlockHash;
  /** The previous block's hash, or ROOT_PARENT_HASH for a request's first block. */
  readonly parentHash: BlockHash;
  /** The block's blockSize token ids. */
  readonly tokens: Uint32Array;
  /** The block's extra keys framed as block-hash.ts encodes them (LoRA, multimodal items, cache salt); empty when none. */
  readonly extraKeys: Uint8Array;
  /** The KV cache group whose layers the block's bytes hold (0 for a model with one group). */
  readonly group: number;
}

/** When blocks reach the tier: as soon as they are computed ("through"), or when memory evicts them ("evict"). */
export type KVWriteMode = "through" | "evict";

export const KV_WRITE_MODES: readonly KVWriteMode[] = ["through", "evict"];

/** What a tier has done, over its life in this process. */
export interface SecondTierStats {
  /** Blocks read back and verified, and their bytes. */
  blocksRead: number;
  bytesRead: number;
  /** Wall time with at least one read in flight, ms (bytesRead / readMs is the tier's read speed). */
  readMs: number;
  /** Blocks written (synced and renamed into place), and their bytes. */
  blocksWritten: number;
  bytesWritten: number;
  /** Stored blocks found torn, truncated, corrupt or foreign: removed, and recomputed instead. */
  blocksRejected: number;
  /** Blocks not written: the tier was full or failing, or too far behind. */
  writesDropped: number;
  /** Blocks removed to stay within the size bound (by any process, as seen by this one). */
  blocksRemoved: number;
}

export interface KVSecondTier {
  readonly writeMode: KVWriteMode;
  readonly stats: SecondTierStats;
  /** Bytes of one stored block's KV in `group` (its layers' K and V): every block of the group read or written has this size. */
  blockBytes(group: number): number;
  /** Whether the block with this hash is probably stored for `group`: cheap, reads nothing. A true may still fail to load. */
  contains(hash: BlockHash, group: number): boolean;
  /**
   * Reads a block's KV: its bytes, or null when it is missing or fails any check (then it is removed
   * and counted in blocksRejected). Never throws for a bad or missing block.
   */
  load(key: KVBlockKey): Promise<Uint8Array | null>;
  /**
   * Queues a block for writing in the background; `bytes` is the tier's to keep (a copy made for
   * it). Returns at once: never waits for the disk.
   */
  store(key: KVBlockKey, bytes: Uint8Array): void;
  /** Resolves when every block queued so far is written (or dropped). */
  flush(): Promise<void>;
}

/**
 * A backend's access to its KV arena by block, layer by layer, so that an arena split across
 * several memories (or held in GPU buffers) moves blocks the same way. A block holds the layers of
 * one KV cache group (every layer when the model has one group); its bytes are laid out
 * [j][K, V][kvHead][row][headDim] for the group's layers layers[j] in order (2 x layers x
 * KVLayout.layerBlockBytes in all).
 */
export interface KVBlockIO {
  /**
   * Copies block `blockId` of `group`'s layers into `out`: the bytes the block holds at the call,
   * even when it is overwritten before a returned promise resolves (a GPU records its copy at once
   * and fills `out` when the read-back lands; linear memory copies at once, returning nothing).
   */
  readBlock(blockId: number, group: number, out: Uint8Array): void | Promise<void>;
  /** Writes `data` into block `blockId` of `group`'s layers, in place for every later forward. */
  writeBlock(blockId: number, group: number, data: Uint8Array): void;
}
