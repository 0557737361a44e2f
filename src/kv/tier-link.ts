/**
 * Connects the KV cache manager to a second tier (KVSecondTier, e.g. the disk): which blocks go
 * down to it and when, and how blocks come back up into the pool. The engine calls it around each
 * step; it never touches a file itself.
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
 * asynchronously (startLoad), while the engine goes on stepping other requests; once read, they are
 * adopted into free blocks of the pool (land), and the request's ordinary lookup finds them as hits.
 * Reads of the same block by several requests are shared.
 */
import type { Request } from "../engine/request.ts";
import type { BlockHash } from "./block-hash.ts";
import type { KVCacheBlock } from "./block.ts";
import type { CachedBlockListener, KVCacheManager } from "./kv-cache-manager.ts";
import type { KVBlockIO, KVBlockKey, KVSecondTier } from "./second-tier.ts";

/** A request's blocks being read from the tier. */
export interface TierLoad {
  /** Resolves when every read has finished (each block's bytes, or null when it failed its checks). */
  readonly done: Promise<void>;
  /** Whether `done` has resolved. */
  readonly settled: boolean;
  /** Blocks asked for. */
  readonly numBlocks: number;
}

interface LoadState extends TierLoad {
  settled: boolean;
  /** Block index → its bytes (null: failed), filled as reads finish. */
  readonly kv: Map<number, Uint8Array | null>;
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
  private kv: KVCacheManager | null = null;

  constructor(
    readonly tier: KVSecondTier,
    private readonly io: KVBlockIO,
    numBlocks: number,
  ) {
    this.unsaved = new Array<KVBlockKey | null>(numBlocks).fill(null);
  }

  /** The manager this link listens to (it is created with the link as its listener). */
  attach(kv: KVCacheManager): void {
    this.kv = kv;
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

  /** Saves every cached block not saved yet (at exit, so "evict" loses nothing either). */
  saveAll(): void {
    for (const block of this.manager.cachedBlocks()) {
      const key = this.unsaved[block.blockId];
      if (key === null || key === undefined || block.blockHash !== key.hash) continue;
      this.unsaved[block.blockId] = null;
      this.save(block.blockId, key);
    }
    this.computed.length = 0;
  }

  /**
   * Starts reading the blocks the tier holds for `req` beyond what memory holds now; null when it
   * holds none of them (the request needs nothing from the tier).
   */
  startLoad(req: Request): TierLoad | null {
    const kv = this.manager;
    const first = kv.peekCachedTokens(req) / kv.blockSize;
    const max = kv.maxLookupBlocks(req);
    const keys: [number, KVBlockKey][] = [];
    for (let i = first; i < max; i++) {
      const key = kv.blockKey(req, i);
      if (!this.reading.has(key.hash) && !this.tier.contains(key.hash)) break;
      keys.push([i, key]);
    }
    if (keys.length === 0) return null;
    const state: LoadState = { settled: false, numBlocks: keys.length, kv: new Map(), done: Promise.resolve() };
    const reads = keys.map(async ([index, key]) => {
      state.kv.set(index, await this.read(key));
    });
    return Object.assign(state, { done: Promise.all(reads).then(() => { state.settled = true; }) });
  }

  /** Puts a finished load's blocks into the pool (see KVCacheManager.adoptBlocks); returns how many. */
  land(req: Request, load: TierLoad): number {
    const kv = (load as LoadState).kv;
    return this.manager.adoptBlocks(req, (i) => kv.get(i) ?? null, (blockId, bytes) => this.io.writeBlock(blockId, bytes));
  }

  private get manager(): KVCacheManager {
    if (this.kv === null) throw new Error("SecondTierLink used before attach()");
    return this.kv;
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
