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
 * Coming up: when a request arrives, the blocks its longest hit in memory and the tier together
 * needs that memory lacks (KVCacheManager.blocksToLoad, asking `holds`) are read asynchronously
 * (startLoad), while the engine goes on stepping other requests; once read, the scheduler adopts
 * them into free blocks of the pool (their bytes from TierLoad.kvOf, written by writeBlock), and the
 * request's ordinary lookup finds them as hits. Reads of the same block by several requests are shared.
 *
 * Every group's blocks go down (a model with sliding-window layers stores its local layers' blocks
 * of every position too, since any position may end a later request's hit); a hit reads the global
 * groups' blocks of the whole prefix and only the window's worth of each local group's.
 */
import type { BlockHash } from "./block-hash.ts";
import type { KVCacheBlock } from "./block.ts";
import type { CachedBlockListener, TierPlan } from "./kv-cache-manager.ts";
import type { KVBlockIO, KVBlockKey, KVSecondTier } from "./second-tier.ts";

/** A request's blocks being read from the tier. */
export interface TierLoad {
  /** Resolves when every read has finished (each block's bytes, or null when it failed its checks). */
  readonly done: Promise<void>;
  /** Whether `done` has resolved. */
  readonly settled: boolean;
  /** Blocks asked for (over every group). */
  readonly numBlocks: number;
  /** The hit, in blocks, the reads were planned for (TierPlan.numBlocks): what KVCacheManager.adoptBlocks walks. */
  readonly numHitBlocks: number;
  /** Blocks whose read failed (missing, or refused by a check), once `done` has resolved. */
  readonly numFailed: number;
  /** Whether this load was planned again after an earlier one of the request had failed reads. */
  readonly retry: boolean;
  /** The bytes read for the request's block `index` of `group` once `done` has resolved; null when not asked for or failed. */
  kvOf(index: number, group: number): Uint8Array | null;
}

export class SecondTierLink implements CachedBlockListener {
  /** Per block id: the key of the content computed into it, while it is cached and not yet saved. */
  private readonly unsaved: (KVBlockKey | null)[];
  /** Blocks cached since the last saveComputed ("through" only). */
  private readonly computed: KVCacheBlock[] = [];
  /** Blocks being copied out of a GPU arena on their way to the tier. */
  private readonly copying = new Set<Promise<void>>();
  /** Reads in flight, by readKey, shared by every request that needs the block. */
  private readonly reading = new Map<string, Promise<Uint8Array | null>>();

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

  /** Whether the tier holds (or is reading) block `hash` of `group`: cheap, reads nothing (for KVCacheManager.blocksToLoad). */
  holds(hash: BlockHash, group: number): boolean {
    return this.reading.has(readKey(hash, group)) || this.tier.contains(hash, group);
  }

  /** Starts reading the blocks of a request's plan (KVCacheManager.blocksToLoad); null without one (nothing to read). */
  startLoad(plan: TierPlan | null, retry = false): TierLoad | null {
    if (plan === null) return null;
    const keys = plan.keys;
    const read = new Map<string, Uint8Array | null>();
    let settled = false;
    let numFailed = 0;
    const done = Promise.all(keys.map(async ([index, key]) => {
      const bytes = await this.read(key);
      if (bytes === null) numFailed++;
      read.set(`${index}/${key.group}`, bytes);
    })).then(() => {
      settled = true;
    });
    return {
      done,
      get settled() {
        return settled;
      },
      get numFailed() {
        return numFailed;
      },
      retry,
      numBlocks: keys.length,
      numHitBlocks: plan.numBlocks,
      kvOf: (index, group) => (settled ? (read.get(`${index}/${group}`) ?? null) : null),
    };
  }

  /** Writes a block of `group` read from the tier into the arena (for KVCacheManager.adoptBlocks). */
  writeBlock(blockId: number, group: number, bytes: Uint8Array): void {
    this.io.writeBlock(blockId, group, bytes);
  }

  private read(key: KVBlockKey): Promise<Uint8Array | null> {
    const at = readKey(key.hash, key.group);
    let pending = this.reading.get(at);
    if (pending === undefined) {
      pending = this.tier.load(key).finally(() => this.reading.delete(at));
      this.reading.set(at, pending);
    }
    return pending;
  }

  /** Resolves when every block handed to the tier so far has left the arena (then tier.flush() waits for the disk). */
  async settle(): Promise<void> {
    while (this.copying.size > 0) await Promise.all(this.copying);
  }

  private save(blockId: number, key: KVBlockKey): void {
    if (this.tier.contains(key.hash, key.group)) return;
    const bytes = new Uint8Array(this.tier.blockBytes(key.group));
    const copied = this.io.readBlock(blockId, key.group, bytes);
    if (copied === undefined) {
      this.tier.store(key, bytes);
      return;
    }
    const job: Promise<void> = copied.then(() => this.tier.store(key, bytes)).finally(() => this.copying.delete(job));
    this.copying.add(job);
  }
}

/** A block's identity in the tier: its hash, and its group (each group stores the block apart). */
function readKey(hash: BlockHash, group: number): string {
  return `${hash}/${group}`;
}
