/**
 * The block pool: every physical KV block, the free queue, and the hash map of cached blocks.
 * Modelled on vLLM v1's BlockPool.
 */
import type { BlockHash } from "./block-hash.ts";
import { KVCacheBlock } from "./block.ts";
import type { EvictionPolicy } from "./eviction.ts";
import { FreeKVCacheBlockQueue } from "./free-queue.ts";

/** Prefix cache counters (see KVCacheManager.stats for what they count). */
export interface PrefixCacheStats {
  queries: number;
  hits: number;
  evictions: number;
}

/**
 * Owns all `numBlocks` blocks, created once. Invariants, between calls:
 * - refCnt === 0 ⇔ the block is in the free queue. Free blocks may still be cached (findable by
 *   hash) until they are popped for reuse, which is what keeps the KV of finished requests alive.
 * - blockHash !== null ⇔ the block is in `cachedBlocks` under that hash, with its exact content
 *   (contentId, parentContentId, tokens, extra keys) recorded for verification.
 * - Several blocks may share a hash ("duplicated blocks" in vLLM's design: block tables are
 *   append-only, so a block that fills with content already cached elsewhere stays where it is), so
 *   the map goes hash → (block id → block).
 *
 * A hit is never decided by the hash alone: the candidate's tokens and extra keys must be equal to
 * the lookup's, and its parent's contentId equal to the contentId of the block the lookup matched
 * just before. contentIds are handed out per distinct content (a duplicate gets the original's), so
 * by induction from the first block a verified hit has exactly the lookup's whole prefix. With
 * sha256 the checks cost a few comparisons; with xxh64 they turn a collision into a miss.
 */
export class BlockPool {
  readonly blocks: readonly KVCacheBlock[];
  private readonly freeQueue: FreeKVCacheBlockQueue;
  private readonly cachedBlocks = new Map<BlockHash, Map<number, KVCacheBlock>>();
  /** Tokens of the cached content of block b, at [b * blockSize, (b + 1) * blockSize). */
  private readonly cachedTokens: Uint32Array;
  private nextContentId = 0;
  private numCached = 0;
  /** Scratch list for freeBlocks, reused so freeing allocates nothing. */
  private readonly released: KVCacheBlock[] = [];

  constructor(
    readonly numBlocks: number,
    readonly blockSize: number,
    private readonly policy: EvictionPolicy,
    private readonly stats: PrefixCacheStats,
    /** Told about each cached block just before its cached content is dropped for reuse (its KV is still intact). */
    private readonly onEvict: ((block: KVCacheBlock) => void) | null = null,
  ) {
    if (!Number.isInteger(numBlocks) || numBlocks < 1) throw new RangeError(`numBlocks must be a positive integer, got ${numBlocks}`);
    if (!Number.isInteger(blockSize) || blockSize < 1) throw new RangeError(`blockSize must be a positive integer, got ${blockSize}`);
    const blocks: KVCacheBlock[] = [];
    for (let id = 0; id < numBlocks; id++) blocks.push(new KVCacheBlock(id));
    this.blocks = blocks;
    // Queued in id order, so a fresh pool hands out blocks 0, 1, 2, …
    this.freeQueue = new FreeKVCacheBlockQueue(blocks);
    this.cachedTokens = new Uint32Array(numBlocks * blockSize);
  }

  get numFreeBlocks(): number {
    return this.freeQueue.length;
  }

  /** Blocks that currently hold a hash (in use or free). */
  get numCachedBlocks(): number {
    return this.numCached;
  }

  /** Ids of the free blocks, head (next to reuse) to tail. */
  freeBlockIds(): number[] {
    return this.freeQueue.toArray().map((block) => block.blockId);
  }

  /**
   * A cached block of KV cache group `group` with hash `hash` whose content is exactly:
   * tokens[start … start + blockSize), `extraKeys` (framed, block-hash.ts), after the content
   * `parentContentId` (null: first block). Any one of several such duplicates; null when there is none.
   */
  findCachedBlock(
    hash: BlockHash,
    parentContentId: number | null,
    tokens: ArrayLike<number>,
    start: number,
    extraKeys: Uint8Array,
    group = 0,
  ): KVCacheBlock | null {
    const candidates = this.cachedBlocks.get(hash);
    if (candidates === undefined) return null;
    for (const block of candidates.values()) {
      if (block.group === group && this.hasContent(block, parentContentId, tokens, start, extraKeys)) return block;
    }
    return null;
  }

  /**
   * findCachedBlock without checking the parent's content: the first block of a sliding window's
   * run of hits in a model whose every layer is windowed, where no block before the run is held to
   * check it against (its hash still chains every parent's).
   */
  findCachedBlockAfterAnyParent(hash: BlockHash, tokens: ArrayLike<number>, start: number, extraKeys: Uint8Array, group: number): KVCacheBlock | null {
    const candidates = this.cachedBlocks.get(hash);
    if (candidates === undefined) return null;
    for (const block of candidates.values()) {
      if (block.group === group && this.hasContent(block, block.parentContentId, tokens, start, extraKeys)) return block;
    }
    return null;
  }

  /** Whether a block of `group` is cached under `hash`, its content not checked (planning reads from a second tier). */
  hasCachedHash(hash: BlockHash, group: number): boolean {
    const candidates = this.cachedBlocks.get(hash);
    if (candidates === undefined) return false;
    for (const block of candidates.values()) if (block.group === group) return true;
    return false;
  }

  /**
   * A contentId no cached content has: the parent of a block read from a second tier whose parent
   * no block holds (the start of a window's run in a model without full-attention layers).
   */
  unknownContentId(): number {
    return this.nextContentId++;
  }

  /** Whether `block` is still cached under `hash` with exactly that content (same arguments as findCachedBlock). */
  isCachedAs(
    block: KVCacheBlock,
    hash: BlockHash,
    parentContentId: number | null,
    tokens: ArrayLike<number>,
    start: number,
    extraKeys: Uint8Array,
    group = 0,
  ): boolean {
    return block.blockHash === hash && block.group === group && this.hasContent(block, parentContentId, tokens, start, extraKeys);
  }

  /**
   * Caches `block` for KV cache group `group`: it has just become full with tokens[start … start +
   * blockSize) and `extraKeys` after the content `parentContentId`. It must be in use and not yet
   * cached. Its contentId is that of any cached block of the same content, in any group: the same
   * tokens are the same content whichever layers hold them.
   */
  cacheBlock(
    block: KVCacheBlock,
    hash: BlockHash,
    parentContentId: number | null,
    tokens: ArrayLike<number>,
    start: number,
    extraKeys: Uint8Array,
    group = 0,
  ): void {
    if (block.blockHash !== null) throw new Error(`block ${block.blockId} is already cached`);
    if (block.refCnt === 0) throw new Error(`block ${block.blockId} is free and cannot be cached`);
    const duplicate = this.sameContent(hash, parentContentId, tokens, start, extraKeys);
    block.contentId = duplicate === null ? this.nextContentId++ : duplicate.contentId;
    block.parentContentId = parentContentId;
    block.group = group;
    block.extraKeys = extraKeys.length === 0 ? null : extraKeys.slice();
    const base = block.blockId * this.blockSize;
    for (let i = 0; i < this.blockSize; i++) this.cachedTokens[base + i] = tokens[start + i] as number;
    block.blockHash = hash;
    let sameHash = this.cachedBlocks.get(hash);
    if (sameHash === undefined) {
      sameHash = new Map();
      this.cachedBlocks.set(hash, sameHash);
    }
    sameHash.set(block.blockId, block);
    this.numCached++;
  }

  /**
   * Takes a reference on each of `blocks` (cache hits of a request being admitted), pulling the
   * free ones out of the free queue so they cannot be evicted while in use.
   */
  touch(blocks: readonly KVCacheBlock[]): void {
    for (const block of blocks) {
      if (block.refCnt === 0) this.freeQueue.remove(block);
      block.refCnt++;
    }
  }

  /**
   * Pops `count` blocks from the head of the free queue, evicting the cached ones, with ref count 1.
   * The caller checks numFreeBlocks first; asking for more throws.
   */
  getNewBlocks(count: number): KVCacheBlock[] {
    if (count > this.freeQueue.length) throw new Error(`cannot get ${count} blocks: only ${this.freeQueue.length} are free`);
    const blocks: KVCacheBlock[] = [];
    for (let i = 0; i < count; i++) {
      const block = this.freeQueue.popLeft();
      if (block.blockHash !== null) this.evict(block);
      block.refCnt = 1;
      blocks.push(block);
    }
    return blocks;
  }

  /**
   * Drops one reference on each of a request's blocks (given in block-table order). Blocks left
   * unreferenced go to the eviction policy tail first, and stay cached until they are reused.
   */
  freeBlocks(blocks: readonly KVCacheBlock[]): void {
    const released = this.released;
    released.length = 0;
    for (let i = blocks.length - 1; i >= 0; i--) {
      const block = blocks[i] as KVCacheBlock;
      if (block.refCnt <= 0) throw new Error(`block ${block.blockId} freed more often than it was allocated`);
      if (--block.refCnt === 0) released.push(block);
    }
    this.policy.release(this.freeQueue, released);
    released.length = 0;
  }

  /**
   * Forgets every cached block (e.g. after a weight update, or between benchmark runs). Refuses, and
   * returns false, while any block is in use: a running request's blocks must stay as they are.
   */
  reset(): boolean {
    if (this.freeQueue.length !== this.numBlocks) return false;
    for (const block of this.blocks) this.clearCachedContent(block);
    this.cachedBlocks.clear();
    this.numCached = 0;
    return true;
  }

  private evict(block: KVCacheBlock): void {
    const sameHash = this.cachedBlocks.get(block.blockHash as BlockHash);
    if (sameHash === undefined || !sameHash.delete(block.blockId)) {
      throw new Error(`block ${block.blockId} has a hash but is not in the cache map`);
    }
    if (sameHash.size === 0) this.cachedBlocks.delete(block.blockHash as BlockHash);
    this.onEvict?.(block);
    this.clearCachedContent(block);
    this.numCached--;
    this.stats.evictions++;
  }

  /** A cached block of any group with exactly this content, or null. */
  private sameContent(hash: BlockHash, parentContentId: number | null, tokens: ArrayLike<number>, start: number, extraKeys: Uint8Array): KVCacheBlock | null {
    const candidates = this.cachedBlocks.get(hash);
    if (candidates === undefined) return null;
    for (const block of candidates.values()) if (this.hasContent(block, parentContentId, tokens, start, extraKeys)) return block;
    return null;
  }

  private clearCachedContent(block: KVCacheBlock): void {
    block.blockHash = null;
    block.contentId = null;
    block.parentContentId = null;
    block.extraKeys = null;
    block.group = 0;
    block.loadedFromTier = false;
  }

  private hasContent(
    block: KVCacheBlock,
    parentContentId: number | null,
    tokens: ArrayLike<number>,
    start: number,
    extraKeys: Uint8Array,
  ): boolean {
    if (block.parentContentId !== parentContentId) return false;
    const base = block.blockId * this.blockSize;
    for (let i = 0; i < this.blockSize; i++) if (this.cachedTokens[base + i] !== tokens[start + i]) return false;
    const stored = block.extraKeys;
    if (stored === null) return extraKeys.length === 0;
    if (stored.length !== extraKeys.length) return false;
    for (let i = 0; i < stored.length; i++) if (stored[i] !== extraKeys[i]) return false;
    return true;
  }
}
