/**
 * The KV cache manager: which physical blocks each request's KV lives in, with automatic prefix
 * caching. The scheduler calls it every step; getBlockIds(req) is the block table the paged
 * attention kernel reads. Modelled on vLLM v1's KVCacheManager (single full-attention group).
 */
import type { Request } from "./request.ts";
import { type BlockHash, BlockHasher, ExtraKeyEncoder, type HashAlgorithm, ROOT_PARENT_HASH } from "./block-hash.ts";
import { BlockPool, type PrefixCacheStats } from "./block-pool.ts";
import type { KVCacheBlock } from "./block.ts";
import { createEvictionPolicy, type EvictionPolicyName } from "./eviction.ts";
import { RequestBlockHashes } from "./request-hashes.ts";
import type { KVBlockKey } from "./second-tier.ts";

/**
 * Told what happens to cached blocks, for a second tier (see tier-link.ts). Both calls come from
 * inside the manager's own calls, synchronously.
 */
export interface CachedBlockListener {
  /** `block` is newly full and cached under `key`; its KV is computed by the end of the step that allocated it. */
  blockCached(block: KVCacheBlock, key: KVBlockKey): void;
  /** `block`'s cached content is about to be dropped for reuse; its KV is still intact during the call. */
  blockEvicted(block: KVCacheBlock): void;
}

export interface KVCacheManagerOptions {
  numBlocks: number;
  /** Tokens per block. */
  blockSize: number;
  /** Automatic prefix caching; false: no hashing, no hits, same allocation path. Default true. */
  enableCaching?: boolean;
  /** Default "lru-keep-cached" (see the README: never evicts a cached block while an unfilled free one exists). */
  evictionPolicy?: EvictionPolicyName;
  /** Block hash function; default "sha256". */
  hash?: HashAlgorithm;
  /** Told about blocks being cached and evicted (a second tier); none by default. */
  listener?: CachedBlockListener;
}

export interface ComputedBlocks {
  /** Cached blocks holding the request's first tokens, in order; pass them to allocateSlots. */
  blocks: KVCacheBlock[];
  /** blocks.length × blockSize. */
  numComputedTokens: number;
}

/** What the manager holds for a request that has blocks. */
interface RequestKV {
  readonly request: Request;
  /** The block table, append-only while the request runs. */
  readonly blocks: KVCacheBlock[];
  readonly blockIds: number[];
  /** The first numCachedBlocks blocks are cached (hashed); the rest are not full yet. */
  numCachedBlocks: number;
  /** Null when caching is off. */
  readonly hashes: RequestBlockHashes | null;
}

const NO_BLOCKS: readonly KVCacheBlock[] = [];

/** Copy the KV of block `src` into block `dst`, every layer, K and V (a forked request's partly filled block). */
export interface BlockCopy {
  src: number;
  dst: number;
}

export class KVCacheManager {
  readonly numBlocks: number;
  readonly blockSize: number;
  readonly enableCaching: boolean;
  readonly evictionPolicy: EvictionPolicyName;
  readonly hash: HashAlgorithm;
  /**
   * Prefix cache counters, in tokens like vLLM's PrefixCacheStats (hit rate = hits / queries):
   * - queries: every getComputedBlocks call adds req.numTokens, the tokens it looked up (the last
   *   one included, though it can never hit). A request the scheduler retries counts every time.
   * - hits: every getComputedBlocks call adds the numComputedTokens it returns.
   * - evictions: cached blocks dropped from the cache because their block was reused (blocks).
   * Nothing is counted while caching is off; resetPrefixCache leaves the counters alone.
   */
  readonly stats: PrefixCacheStats = { queries: 0, hits: 0, evictions: 0 };
  /** Of stats.hits, the tokens whose blocks a second tier supplied (adoptBlocks), counted at admission. */
  tierHits = 0;

  private readonly pool: BlockPool;
  private readonly listener: CachedBlockListener | null;
  private readonly hasher: BlockHasher;
  private readonly encoder = new ExtraKeyEncoder();
  private readonly requests = new Map<string, RequestKV>();
  /** Block hashes per request, kept across preemption (re-admission needs them again) and dropped with the Request. */
  private readonly hashChains = new WeakMap<Request, RequestBlockHashes>();

  constructor(opts: KVCacheManagerOptions) {
    this.numBlocks = opts.numBlocks;
    this.blockSize = opts.blockSize;
    this.enableCaching = opts.enableCaching ?? true;
    this.evictionPolicy = opts.evictionPolicy ?? "lru-keep-cached";
    this.hash = opts.hash ?? "sha256";
    this.hasher = new BlockHasher(this.hash);
    this.listener = opts.listener ?? null;
    const onEvict = this.listener === null ? null : this.listener.blockEvicted.bind(this.listener);
    this.pool = new BlockPool(opts.numBlocks, opts.blockSize, createEvictionPolicy(this.evictionPolicy), this.stats, onEvict);
  }

  /** Blocks in the free queue (unused; some still cached). */
  get numFreeBlocks(): number {
    return this.pool.numFreeBlocks;
  }

  /** Blocks held by at least one request. */
  get numUsedBlocks(): number {
    return this.numBlocks - this.pool.numFreeBlocks;
  }

  /** Blocks that hold a hash, in use or free. */
  get numCachedBlocks(): number {
    return this.pool.numCachedBlocks;
  }

  /**
   * The longest run of cached blocks that equals the start of the request's tokens. Changes
   * nothing but `stats` (the request's block hashes are computed and remembered, which is not
   * observable). Never covers the last token: a fully cached prompt still recomputes it, because
   * its logits are needed to sample (vLLM: max_cache_hit_length = num_tokens - 1), so the last hit
   * block is dropped when the prompt is an exact multiple of the block size.
   */
  getComputedBlocks(req: Request): ComputedBlocks {
    const found = this.findComputedBlocks(req);
    if (this.enableCaching) {
      this.stats.queries += req.numTokens;
      this.stats.hits += found.numComputedTokens;
    }
    return found;
  }

  /**
   * How many of the request's tokens getComputedBlocks would find cached now, without counting a
   * query: the scheduler's longest-prefix-match ordering probes every waiting request each step.
   */
  peekCachedTokens(req: Request): number {
    return this.findComputedBlocks(req).numComputedTokens;
  }

  private findComputedBlocks(req: Request): ComputedBlocks {
    if (!this.enableCaching) return { blocks: [], numComputedTokens: 0 };
    const hashes = this.hashesOf(req);
    const maxBlocks = this.maxLookupBlocks(req);
    const tokens = req.allTokenIds;
    const blocks: KVCacheBlock[] = [];
    let parentContentId: number | null = null;
    for (let i = 0; i < maxBlocks; i++) {
      const hash = hashes.hashAt(i);
      const block = this.pool.findCachedBlock(hash, parentContentId, tokens, i * this.blockSize, hashes.extraKeysOf(i));
      if (block === null) break;
      blocks.push(block);
      parentContentId = block.contentId;
    }
    return { blocks, numComputedTokens: blocks.length * this.blockSize };
  }

  /**
   * Makes room for the request to compute `numNewTokens` more tokens, after its
   * req.numComputedTokens computed ones and the `numNewComputedTokens` found in the cache
   * (`newComputedBlocks`, straight from getComputedBlocks, only when the request is admitted: it
   * must hold no blocks and have req.numComputedTokens === 0, with no other allocation in between).
   *
   * The request then holds ceil((req.numComputedTokens + numNewComputedTokens + numNewTokens) /
   * blockSize) blocks: the hits (touched: ref count + 1, taken out of the free queue) and new blocks
   * popped from the head of the free queue (a cached one popped there is evicted). Every block that
   * is full once those tokens are computed, as far as the request's known tokens go
   * (min(…, req.numTokens)), is hashed and cached right away, so a request allocated later in the
   * same step can hit it: the engine must write a layer's KV for all scheduled tokens before any of
   * them attends in that layer.
   *
   * Returns the newly allocated blocks ([] when the request already has enough), or null, changing
   * nothing, when the free queue (minus the hits that are in it) has too few blocks. The first
   * allocation of a request sets req.numCachedTokens = numNewComputedTokens. The caller advances
   * req.numComputedTokens after the step.
   */
  allocateSlots(
    req: Request,
    numNewTokens: number,
    numNewComputedTokens = 0,
    newComputedBlocks: readonly KVCacheBlock[] = NO_BLOCKS,
  ): KVCacheBlock[] | null {
    checkCount("numNewTokens", numNewTokens);
    checkCount("numNewComputedTokens", numNewComputedTokens);
    if (newComputedBlocks.length * this.blockSize !== numNewComputedTokens) {
      throw new RangeError(
        `numNewComputedTokens (${numNewComputedTokens}) must be ${newComputedBlocks.length} computed blocks × ${this.blockSize}`,
      );
    }
    let kv = this.requests.get(req.id);
    if (kv !== undefined && kv.request !== req) throw new Error(`request id ${req.id} already belongs to another Request`);
    const numHeld = kv === undefined ? 0 : kv.blocks.length;
    if (req.numComputedTokens > numHeld * this.blockSize) {
      throw new Error(`request ${req.id} has ${req.numComputedTokens} computed tokens but only ${numHeld} KV blocks`);
    }
    if (newComputedBlocks.length > 0) this.checkComputedBlocks(req, numHeld, newComputedBlocks);

    const numComputed = req.numComputedTokens + numNewComputedTokens;
    const numNew = this.numNewBlocks(req, numNewTokens, numNewComputedTokens, newComputedBlocks);
    if (this.freeBlocksAfter(req, numNewTokens, numNewComputedTokens, newComputedBlocks) < 0) return null;

    if (kv === undefined) {
      kv = {
        request: req,
        blocks: [],
        blockIds: [],
        numCachedBlocks: 0,
        hashes: this.enableCaching ? this.hashesOf(req) : null,
      };
      this.requests.set(req.id, kv);
    }
    if (req.numCachedTokens === null) {
      req.numCachedTokens = numNewComputedTokens;
      req.numTierCachedTokens = this.takeTierHits(newComputedBlocks) * this.blockSize;
      this.tierHits += req.numTierCachedTokens;
    }
    if (newComputedBlocks.length > 0) {
      this.pool.touch(newComputedBlocks);
      this.appendBlocks(kv, newComputedBlocks);
      kv.numCachedBlocks = newComputedBlocks.length; // hits are cached already
    }
    const newBlocks = this.pool.getNewBlocks(numNew);
    this.appendBlocks(kv, newBlocks);
    if (kv.hashes !== null) this.cacheFullBlocks(kv, kv.hashes, Math.min(numComputed + numNewTokens, req.numTokens));
    return newBlocks;
  }

  /**
   * Free blocks the queue would hold after allocateSlots with these arguments (negative: it would
   * fail). Changes nothing; the scheduler uses it to keep room for running requests to grow.
   */
  freeBlocksAfter(
    req: Request, numNewTokens: number, numNewComputedTokens = 0, newComputedBlocks: readonly KVCacheBlock[] = NO_BLOCKS,
  ): number {
    // A hit that sits in the free queue leaves it when touched, so it cannot also serve as a new block.
    let numFreeHits = 0;
    for (const block of newComputedBlocks) if (block.refCnt === 0) numFreeHits++;
    return this.pool.numFreeBlocks - numFreeHits - this.numNewBlocks(req, numNewTokens, numNewComputedTokens, newComputedBlocks);
  }

  /** Blocks allocateSlots would pop from the free queue for these arguments. */
  private numNewBlocks(req: Request, numNewTokens: number, numNewComputedTokens: number, newComputedBlocks: readonly KVCacheBlock[]): number {
    const numHeld = this.requests.get(req.id)?.blocks.length ?? 0;
    const numRequired = Math.ceil((req.numComputedTokens + numNewComputedTokens + numNewTokens) / this.blockSize);
    return Math.max(0, numRequired - numHeld - newComputedBlocks.length);
  }

  /**
   * Parallel sampling (`n` > 1): gives `child`, which holds no blocks, the KV of the
   * parent.numComputedTokens tokens the parent has computed, so the prompt is computed once for
   * all samples. The parent's full blocks are shared (ref count + 1: full blocks are never written
   * again, so sharing is safe); a partly filled last block would be written by both, so the child
   * gets a fresh block and the caller copies the parent's into it (`copy`) before the next step.
   * The child's first tokens must equal the parent's computed ones (it is the same prompt).
   * Returns null, changing nothing, when the copy needs a block and none is free.
   */
  fork(parent: Request, child: Request): { copy: BlockCopy | null } | null {
    const kv = this.requests.get(parent.id);
    if (kv === undefined) throw new Error(`request ${parent.id} holds no blocks to fork`);
    if (this.requests.has(child.id)) throw new Error(`request ${child.id} already holds blocks`);
    const numComputed = parent.numComputedTokens;
    const a = parent.allTokenIds;
    const b = child.allTokenIds;
    for (let i = 0; i < numComputed; i++) {
      if (a[i] !== b[i]) throw new Error(`request ${child.id} differs from ${parent.id} at token ${i}: cannot share its KV`);
    }
    const numFull = Math.floor(numComputed / this.blockSize);
    const partial = numComputed % this.blockSize !== 0;
    if (partial && this.pool.numFreeBlocks < 1) return null;
    const shared = kv.blocks.slice(0, numFull);
    this.pool.touch(shared);
    const forked: RequestKV = {
      request: child,
      blocks: [],
      blockIds: [],
      numCachedBlocks: Math.min(kv.numCachedBlocks, numFull),
      hashes: this.enableCaching ? this.hashesOf(child) : null,
    };
    this.appendBlocks(forked, shared);
    let copy: BlockCopy | null = null;
    if (partial) {
      const [fresh] = this.pool.getNewBlocks(1) as [KVCacheBlock];
      this.appendBlocks(forked, [fresh]);
      copy = { src: (kv.blocks[numFull] as KVCacheBlock).blockId, dst: fresh.blockId };
    }
    this.requests.set(child.id, forked);
    child.numCachedTokens ??= parent.numCachedTokens;
    return { copy };
  }

  /**
   * Releases a finished (or preempted) request's blocks: ref counts drop, and blocks nobody uses go
   * back to the free queue tail block first (the eviction policy places them), still findable by
   * hash until reused. A request without blocks is ignored.
   */
  free(req: Request): void {
    const kv = this.requests.get(req.id);
    if (kv === undefined) return;
    this.requests.delete(req.id);
    this.pool.freeBlocks(kv.blocks);
  }

  /**
   * Speculative decoding's rollback: the request keeps the KV of its first `numComputedTokens`
   * tokens (all known: numComputedTokens <= req.numTokens) and forgets the rest, the draft
   * positions it computed that were rejected. Blocks past the one holding token
   * numComputedTokens - 1 held only rejected positions: they go back to the free queue (never
   * cached: a block is cached only when full with known tokens, and a draft is not among them). The
   * blocks the accepted tokens have now filled are hashed and cached, as the next allocation would.
   */
  rollback(req: Request, numComputedTokens: number): void {
    checkCount("numComputedTokens", numComputedTokens);
    if (numComputedTokens > req.numTokens) throw new RangeError(`request ${req.id}: ${numComputedTokens} computed tokens exceed its ${req.numTokens} known ones`);
    const kv = this.requests.get(req.id);
    if (kv === undefined) return;
    const keep = Math.ceil(numComputedTokens / this.blockSize);
    if (keep < kv.numCachedBlocks) throw new Error(`request ${req.id}: rollback into its cached blocks`);
    if (kv.blocks.length > keep) {
      this.pool.freeBlocks(kv.blocks.splice(keep));
      kv.blockIds.length = keep;
    }
    if (kv.hashes !== null) this.cacheFullBlocks(kv, kv.hashes, numComputedTokens);
  }

  /** The request's block table (a copy): physical block ids in token order. */
  getBlockIds(req: Request): number[] {
    const kv = this.requests.get(req.id);
    return kv === undefined ? [] : kv.blockIds.slice();
  }

  /** The request's blocks in token order (live; do not modify). */
  getBlocks(req: Request): readonly KVCacheBlock[] {
    return this.requests.get(req.id)?.blocks ?? NO_BLOCKS;
  }

  /** Ids of the free queue, head (next to reuse) to tail. */
  freeBlockIds(): number[] {
    return this.pool.freeBlockIds();
  }

  /** The block with id `blockId` (0 ≤ blockId < numBlocks), for inspection. */
  block(blockId: number): KVCacheBlock {
    const block = this.pool.blocks[blockId];
    if (block === undefined) throw new RangeError(`no block ${blockId} in a pool of ${this.numBlocks}`);
    return block;
  }

  /** Forgets every cached block and returns true; returns false, changing nothing, while any block is in use. */
  resetPrefixCache(): boolean {
    return this.pool.reset();
  }

  /** Blocks a lookup for `req` may find: all its full blocks but one that would hold its last token. */
  maxLookupBlocks(req: Request): number {
    return this.enableCaching ? Math.floor((req.numTokens - 1) / this.blockSize) : 0;
  }

  /**
   * The [index, key] of each block a lookup for `req` may find after those memory holds now, in
   * order (for a second tier to read ahead); lazily, so a reader that stops early hashes no more.
   */
  *uncachedBlockKeys(req: Request): Generator<readonly [number, KVBlockKey]> {
    const max = this.maxLookupBlocks(req);
    for (let i = this.peekCachedTokens(req) / this.blockSize; i < max; i++) yield [i, this.blockKey(req, i)];
  }

  /** The content key of the request's full block `index` (for a second tier). */
  blockKey(req: Request, index: number): KVBlockKey {
    const hashes = this.hashesOf(req);
    const start = index * this.blockSize;
    return {
      hash: hashes.hashAt(index),
      parentHash: index === 0 ? ROOT_PARENT_HASH[this.hash] : hashes.hashAt(index - 1),
      tokens: Uint32Array.from(req.allTokenIds.slice(start, start + this.blockSize)),
      extraKeys: hashes.extraKeysOf(index).slice(),
    };
  }

  /**
   * Puts blocks a second tier holds into the pool as cached blocks, so the next lookup for `req`
   * finds them: walking the request's blocks from the first, those cached in memory are kept, and
   * each missing one for which `kvOf(index)` has bytes gets a block popped from the free queue, its
   * KV written by `write`, and is cached as if computed. Stops at the first block with neither, or
   * when no free block is left. The adopted blocks and the memory hits before them go back to the
   * free queue (still cached, most recently used), like a finished request's. Returns how many
   * blocks were adopted.
   *
   * The memory hits are held while blocks are popped, so an adoption never evicts the prefix it
   * extends; an evicted block is reported to the listener before `write` overwrites it.
   */
  adoptBlocks(req: Request, kvOf: (index: number) => Uint8Array | null, write: (blockId: number, kv: Uint8Array) => void): number {
    const maxBlocks = this.maxLookupBlocks(req);
    const hashes = this.hashesOf(req);
    const tokens = req.allTokenIds;
    const held: KVCacheBlock[] = [];
    let parentContentId: number | null = null;
    let adopted = 0;
    for (let i = 0; i < maxBlocks; i++) {
      const start = i * this.blockSize;
      let block = this.pool.findCachedBlock(hashes.hashAt(i), parentContentId, tokens, start, hashes.extraKeysOf(i));
      if (block !== null) {
        this.pool.touch([block]);
      } else {
        const kv = kvOf(i);
        if (kv === null || this.pool.numFreeBlocks === 0) break;
        block = this.pool.getNewBlocks(1)[0] as KVCacheBlock;
        write(block.blockId, kv);
        this.pool.cacheBlock(block, hashes.hashAt(i), parentContentId, tokens, start, hashes.extraKeysOf(i));
        block.loadedFromTier = true;
        adopted++;
      }
      held.push(block);
      parentContentId = block.contentId;
    }
    this.pool.freeBlocks(held);
    return adopted;
  }

  /** The blocks cached now, in use or free (a tier saves them at shutdown). */
  cachedBlocks(): KVCacheBlock[] {
    return this.pool.blocks.filter((block) => block.blockHash !== null);
  }

  /** How many of `hits` came from a second tier and were not counted yet; clears their marks. */
  private takeTierHits(hits: readonly KVCacheBlock[]): number {
    let n = 0;
    for (const block of hits) {
      if (block.loadedFromTier) n++;
      block.loadedFromTier = false;
    }
    return n;
  }

  private hashesOf(req: Request): RequestBlockHashes {
    let hashes = this.hashChains.get(req);
    if (hashes === undefined) {
      hashes = new RequestBlockHashes(req, this.blockSize, this.hasher, this.encoder);
      this.hashChains.set(req, hashes);
    }
    return hashes;
  }

  private appendBlocks(kv: RequestKV, blocks: readonly KVCacheBlock[]): void {
    for (const block of blocks) {
      kv.blocks.push(block);
      kv.blockIds.push(block.blockId);
    }
  }

  /** Hashes and caches the request's blocks numCachedBlocks … ⌊numTokens / blockSize⌋ - 1. */
  private cacheFullBlocks(kv: RequestKV, hashes: RequestBlockHashes, numTokens: number): void {
    const numFull = Math.floor(numTokens / this.blockSize);
    const tokens = kv.request.allTokenIds;
    for (let i = kv.numCachedBlocks; i < numFull; i++) {
      // Blocks before i are cached and in use, so cannot have been evicted: the parent has a contentId.
      const parentContentId = i === 0 ? null : (kv.blocks[i - 1] as KVCacheBlock).contentId;
      const hash: BlockHash = hashes.hashAt(i);
      const block = kv.blocks[i] as KVCacheBlock;
      this.pool.cacheBlock(block, hash, parentContentId, tokens, i * this.blockSize, hashes.extraKeysOf(i));
      this.listener?.blockCached(block, this.blockKey(kv.request, i));
    }
    kv.numCachedBlocks = Math.max(kv.numCachedBlocks, numFull);
  }

  /** Rejects computed blocks that are not this request's current cache hits (stale, or for another request). */
  private checkComputedBlocks(req: Request, numHeld: number, blocks: readonly KVCacheBlock[]): void {
    if (!this.enableCaching) throw new Error("newComputedBlocks given while prefix caching is off");
    if (numHeld > 0 || req.numComputedTokens !== 0) {
      throw new Error(`request ${req.id}: newComputedBlocks are only accepted when the request is admitted`);
    }
    if (blocks.length * this.blockSize >= req.numTokens) {
      throw new RangeError(`request ${req.id}: computed blocks must leave its last token to compute`);
    }
    const hashes = this.hashesOf(req);
    let parentContentId: number | null = null;
    for (let i = 0; i < blocks.length; i++) {
      const block = blocks[i] as KVCacheBlock;
      const cached = this.pool.isCachedAs(block, hashes.hashAt(i), parentContentId, req.allTokenIds, i * this.blockSize, hashes.extraKeysOf(i));
      if (!cached) {
        throw new Error(
          `request ${req.id}: computed block ${block.blockId} no longer holds its tokens ${i * this.blockSize}…; call getComputedBlocks right before allocateSlots`,
        );
      }
      parentContentId = block.contentId;
    }
  }
}

function checkCount(name: string, value: number): void {
  if (!Number.isInteger(value) || value < 0) throw new RangeError(`${name} must be a non-negative integer, got ${value}`);
}
