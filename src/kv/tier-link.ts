/**
 * Connects the KV cache manager to a second tier (KVSecondTier, e.g. the disk): which blocks go
 * down to it and when, and reads of blocks coming back up. It hears of the manager's blocks only
 * through the CachedBlockListener events and the blocks and keys it is handed; it never calls the
 * manager (the scheduler adopts a finished load's blocks with KVCacheManager.adoptBlocks), and it
 * never touches a file itself.
 *
 * Going down (the step's critical path only copies bytes out of the arena; the tier writes them in
 * the background):
 *   - "through": every block that becomes full and cached is saved right after the forward pass
 *     that computed it (saveComputed), so a crash loses nothing computed;
 *   - "evict": a block is saved when the pool evicts it (its KV is copied out inside the eviction,
 *     before anything can overwrite it), and every block still cached is saved by saveAll at exit.
 *   A block read from the tier is never written back.
 *
 * Coming up: when a request arrives, the blocks after its memory hits that the tier holds are read
 * asynchronously (startLoad, given the request's block keys), while the engine goes on stepping
 * other requests; once read, the scheduler adopts them into free blocks of the pool (their bytes
 * from TierLoad.kvOf, written by writeBlock), and the request's ordinary lookup finds them as hits.
 * Reads of the same block by several requests are shared.
 */
import type { BlockHash } from "./block-hash.ts";
import type { KVCacheBlock } from "./block.ts";
import type { CachedBlockListener } from "./kv-cache-manager.ts";
import type { KVBlockIO, KVBlockKey, KVSecondTier } from "./second-tier.ts";

/** A request's blocks being read from the tier. */
export interface TierLoad {
  /** Resolves when every read has finished (each block's bytes, or null when it failed its checks). */
  readonly done: Promise<void>;
  /** Whether `done` has resolved. */
  readonly settled: boolean;
  /** Blocks asked for. */
  readonly numBlocks: number;
  /** The bytes read for the request's block `index` once `done` has resolved; null when not asked for or failed. */
  kvOf(index: number): Uint8Array | null;
}

export class SecondTierLink implements CachedBlockListener {
  /** Per block id: the key of the content computed into it, while it is cached and not yet saved. */
  private readonly unsaved: (KVBlockKey | null)[];
  /** Blocks cached since the last saveComputed ("through" only). */
  private readonly computed: KVCacheBlock[] = [];
  /** Blocks being copied out of a GPU arena on their way to the tier. */
  private readonly copying = new Set<Promise<void>>();
  /** Reads in flight, shared by every request that needs the block. */
  private readonly reading = new Map<BlockHash, Promise<Uint8Array | null>>();

  constructor(
    readonly tier: KVSecondTier,
    private readonly io: KVBlockIO,
    numBlocks: number,
  ) {
    this.unsaved = new Array<KVBlockKey | null>(numBlocks).fill(null);
  }

  blockCached(block: KVCacheBlock, key: KVBlockKey): void {
    this.unsaved[block.blockId] = key;
    if (this.tier.writeMode === "through") this.computed.push(block);
  }

  blockEvicted(block: KVCacheBlock): void {
    const key = this.unsaved[block.blockId];
    if (key === null || key === undefined) return;
    this.unsaved[block.blockId] = null;
    // "through": a block evicted before its step ran was never computed; saveComputed skips it.
    if (this.tier.writeMode === "evict") this.save(block.blockId, key);
  }

  /** After a forward pass: saves the blocks it computed ("through"). */
  saveComputed(): void {
    for (const block of this.computed) {
      const key = this.unsaved[block.blockId];
      if (key === null || key === undefined || block.blockHash !== key.hash) continue;
      this.unsaved[block.blockId] = null;
      this.save(block.blockId, key);
    }
    this.computed.length = 0;
  }

  /** Saves every one of the `cached` blocks not saved yet (at exit, so "evict" loses nothing either). */
  saveAll(cached: readonly KVCacheBlock[]): void {
    for (const block of cached) {
      const key = this.unsaved[block.blockId];
      if (key === null || key === undefined || block.blockHash !== key.hash) continue;
      this.unsaved[block.blockId] = null;
      this.save(block.blockId, key);
    }
    this.computed.length = 0;
  }

  /**
   * Starts reading, in order, the blocks of `keys` (a request's block index and key, from the
   * first block memory does not hold) as long as the tier holds them; null when it holds the first
   * of them not (the request needs nothing from the tier).
   */
  startLoad(keys: Iterable<readonly [number, KVBlockKey]>): TierLoad | null {
    const wanted: (readonly [number, KVBlockKey])[] = [];
    for (const entry of keys) {
      const hash = entry[1].hash;
      if (!this.reading.has(hash) && !this.tier.contains(hash)) break;
      wanted.push(entry);
    }
    if (wanted.length === 0) return null;
    const read = new Map<number, Uint8Array | null>();
    let settled = false;
    const done = Promise.all(wanted.map(async ([index, key]) => {
      read.set(index, await this.read(key));
    })).then(() => {
      settled = true;
    });
    return {
      done,
      get settled() {
        return settled;
      },
      numBlocks: wanted.length,
      kvOf: (index) => (settled ? (read.get(index) ?? null) : null),
    };
  }

  /** Writes a block read from the tier into the arena (for KVCacheManager.adoptBlocks). */
  writeBlock(blockId: number, bytes: Uint8Array): void {
    this.io.writeBlock(blockId, bytes);
  }

  private read(key: KVBlockKey): Promise<Uint8Array | null> {
    let pending = this.reading.get(key.hash);
    if (pending === undefined) {
      pending = this.tier.load(key).finally(() => this.reading.delete(key.hash));
      this.reading.set(key.hash, pending);
    }
    return pending;
  }

  /** Resolves when every block handed to the tier so far has left the arena (then tier.flush() waits for the disk). */
  async settle(): Promise<void> {
    while (this.copying.size > 0) await Promise.all(this.copying);
  }

  private save(blockId: number, key: KVBlockKey): void {
    if (this.tier.contains(key.hash)) return;
    const bytes = new Uint8Array(this.tier.blockBytes);
    const copied = this.io.readBlock(blockId, bytes);
    if (copied === undefined) {
      this.tier.store(key, bytes);
      return;
    }
    const job: Promise<void> = copied.then(() => this.tier.store(key, bytes)).finally(() => this.copying.delete(job));
    this.copying.add(job);
  }
}
