/**
 * The KV cache manager: which physical blocks each request's KV lives in, with automatic prefix
 * caching. The scheduler calls it every step; getBlockTables(req) are the block tables the paged
 * attention kernels read. Modelled on vLLM v1's KVCacheManager and its KVCacheCoordinator: the
 * model's KV cache groups (kv-groups.ts; one for most models, gemma3's global and local layers
 * apart) each have their own blocks per request, drawn from one block pool, and a manager per kind
 * of group (single-type-manager.ts) says which blocks a step reads and what a hit is.
 *
 * A prefix hit of n tokens holds in every group: the full-attention groups hold all its blocks,
 * the sliding-window groups the blocks of the window before token n (found by
 * SlidingWindowManager, the hit shortened until every kind agrees, as vLLM's
 * HybridKVCacheCoordinator). As a request advances, a sliding-window group's blocks that fall out
 * of the window of its next query are freed (they stay cached until reused).
 */
import type { Request } from "./request.ts";
import { type BlockHash, BlockHasher, ExtraKeyEncoder, type HashAlgorithm, ROOT_PARENT_HASH } from "./block-hash.ts";
import { BlockPool, type PrefixCacheStats } from "./block-pool.ts";
import type { KVCacheBlock } from "./block.ts";
import { createEvictionPolicy, type EvictionPolicyName } from "./eviction.ts";
import { FullAttentionManager } from "./full-attention-manager.ts";
import { KVCacheGroups } from "./kv-groups.ts";
import { RequestBlockHashes } from "./request-hashes.ts";
import type { KVBlockKey } from "./second-tier.ts";
import type { BlockLookup, GroupBlocks, SingleTypeKVCacheManager } from "./single-type-manager.ts";
import { SlidingWindowManager } from "./sliding-window-manager.ts";

export type { GroupBlocks } from "./single-type-manager.ts";

/**
 * Told what happens to cached blocks, for a second tier (see tier-link.ts). Both calls come from
 * inside the manager's own calls, synchronously; a block's key names its group.
 */
export interface CachedBlockListener {
  /** `block` is newly full and cached under `key`; its KV is computed by the end of the step that allocated it. */
  blockCached(block: KVCacheBlock, key: KVBlockKey): void;
  /** `block`'s cached content is about to be dropped for reuse; its KV is still intact during the call. */
  blockEvicted(block: KVCacheBlock): void;
}

/** What a request's hit needs from a second tier (KVCacheManager.blocksToLoad). */
export interface TierPlan {
  /** The hit, in blocks, that memory and the tier hold together. */
  readonly numBlocks: number;
  /** [index, key] of each block that hit needs and memory lacks, index by index, groups in order. */
  readonly keys: readonly (readonly [number, KVBlockKey])[];
}

export interface KVCacheManagerOptions {
  numBlocks: number;
  /** Tokens per block. */
  blockSize: number;
  /** The model's KV cache groups; default: one full-attention group (every layer in every block). */
  groups?: KVCacheGroups;
  /** Automatic prefix caching; false: no hashing, no hits, same allocation path. Default true. */
  enableCaching?: boolean;
  /** Default "lru-keep-cached" (see the README: never evicts a cached block while an unfilled free one exists). */
  evictionPolicy?: EvictionPolicyName;
  /** Block hash function; default "sha256". */
  hash?: HashAlgorithm;
  /** Told about blocks being cached and evicted (a second tier); none by default. */
  listener?: CachedBlockListener;
}

/**
 * A prefix hit (getComputedBlocks), as vLLM's KVCacheBlocks: per KV cache group the cached blocks
 * holding the request's first tokens. allocateSlots takes it whole, its `groups`, or, for a cache
 * of one group (every model without sliding-window layers), its `blocks`: the form the manager
 * had before KV cache groups, which code written against it keeps using.
 */
export class ComputedBlocks {
  constructor(
    /** Per KV cache group, the hit's blocks in order (null where a sliding-window group needs none). */
    readonly groups: GroupBlocks[],
    /** The hit's blocks (in each group) × blockSize. */
    readonly numComputedTokens: number,
  ) {}

  /** The hit's blocks in a cache of one KV cache group; a cache of several has them per group (`groups`). */
  get blocks(): GroupBlocks {
    if (this.groups.length !== 1) {
      throw new RangeError(`the cache has ${this.groups.length} KV cache groups: its hit is per group (ComputedBlocks.groups)`);
    }
    return this.groups[0]!;
  }

  /** The hit's block ids per group, SKIPPED_BLOCK_ID where a window needs none (vLLM's get_block_ids()). */
  getBlockIds(): number[][] {
    return this.groups.map((blocks) => blocks.map((block) => block?.blockId ?? SKIPPED_BLOCK_ID));
  }
}

/**
 * The hit allocateSlots is given: a ComputedBlocks, its groups, or for a cache of one KV cache
 * group that group's blocks (a flat list); nothing ([]) when there is none.
 */
export type NewComputedBlocks = ComputedBlocks | readonly GroupBlocks[] | GroupBlocks;

/** What the manager holds for a request that has blocks. */
interface RequestKV {
  readonly request: Request;
  /** Per group, the block table in token order; append-only while the request runs, but for out-of-window blocks of a sliding-window group, which become null. */
  readonly groups: GroupBlocks[];
  readonly blockIds: number[][];
  /** The first numCachedBlocks blocks of each group are cached (hashed) or null; the rest are not full yet. */
  numCachedBlocks: number;
  /** contentIds[i]: the content identity of the request's block i (block-pool.ts), known once it is cached or hit. */
  readonly contentIds: number[];
  /** Null when caching is off. */
  readonly hashes: RequestBlockHashes | null;
}

/** The block-table entry of a block no query reads again (before a sliding window): never dereferenced. */
export const SKIPPED_BLOCK_ID = 0;

/** Copy the KV of block `src` into block `dst`, every slot (layer) of the arena, K and V (a forked request's partly filled block). */
export interface BlockCopy {
  src: number;
  dst: number;
}

export class KVCacheManager {
  readonly numBlocks: number;
  readonly blockSize: number;
  readonly groups: KVCacheGroups;
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
  /** One per kind of group: the full-attention groups' first, then each window's. */
  private readonly managers: SingleTypeKVCacheManager[];
  private readonly listener: CachedBlockListener | null;
  private readonly hasher: BlockHasher;
  private readonly encoder = new ExtraKeyEncoder();
  private readonly requests = new Map<string, RequestKV>();
  /** Block hashes per request, kept across preemption (re-admission needs them again) and dropped with the Request. */
  private readonly hashChains = new WeakMap<Request, RequestBlockHashes>();

  constructor(opts: KVCacheManagerOptions) {
    this.numBlocks = opts.numBlocks;
    this.blockSize = opts.blockSize;
    this.groups = opts.groups ?? KVCacheGroups.fromLayers(1, () => ({ kind: "full" }));
    this.enableCaching = opts.enableCaching ?? true;
    this.evictionPolicy = opts.evictionPolicy ?? "lru-keep-cached";
    this.hash = opts.hash ?? "sha256";
    this.hasher = new BlockHasher(this.hash);
    this.listener = opts.listener ?? null;
    const onEvict = this.listener === null ? null : this.listener.blockEvicted.bind(this.listener);
    this.pool = new BlockPool(opts.numBlocks, opts.blockSize, createEvictionPolicy(this.evictionPolicy), this.stats, onEvict);
    this.managers = managersOf(this.groups, this.blockSize);
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
   * The longest cached prefix of the request's tokens, in every group (see the class). Changes
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

  /**
   * The hit every kind of group agrees on: each kind finds its longest hit within the length the
   * others allow, until none shortens it (full attention first, whose verified chain the windows
   * continue).
   */
  private findComputedBlocks(req: Request): ComputedBlocks {
    const groups = this.groups.groups.map((): GroupBlocks => []);
    if (!this.enableCaching) return new ComputedBlocks(groups, 0);
    const lookup = this.lookupFor(req);
    let numBlocks = this.maxLookupBlocks(req);
    let chain: number[] = [];
    for (let changed = true; changed; ) {
      changed = false;
      for (const manager of this.managers) {
        const hits = manager.findLongestHit(lookup, numBlocks, chain);
        const length = hits[0]!.length;
        if (manager instanceof FullAttentionManager) chain = hits[0]!.map((block) => block!.contentId!);
        manager.groups.forEach((g, j) => (groups[g] = hits[j]!));
        if (length < numBlocks) {
          numBlocks = length;
          changed = true;
        }
      }
    }
    for (let g = 0; g < groups.length; g++) groups[g] = groups[g]!.slice(0, numBlocks);
    return new ComputedBlocks(groups, numBlocks * this.blockSize);
  }

  /** The pool's verified lookups of the request's blocks. */
  private lookupFor(req: Request): BlockLookup {
    const hashes = this.hashesOf(req);
    const tokens = req.allTokenIds;
    const start = (i: number) => i * this.blockSize;
    return {
      find: (i, parent, group) => this.pool.findCachedBlock(hashes.hashAt(i), parent, tokens, start(i), hashes.extraKeysOf(i), group),
      findAfterAnyParent: (i, group) => this.pool.findCachedBlockAfterAnyParent(hashes.hashAt(i), tokens, start(i), hashes.extraKeysOf(i), group),
    };
  }

  /**
   * Makes room for the request to compute `numNewTokens` more tokens, after its
   * req.numComputedTokens computed ones and the `numNewComputedTokens` found in the cache
   * (`newComputedBlocks`, the hit getComputedBlocks returned (whole, its groups, or in a cache of
   * one group its blocks), only when the request is admitted: it
   * must hold no blocks and have req.numComputedTokens === 0, with no other allocation in between).
   *
   * First a running request's sliding-window blocks that no query will read again (before the window
   * of the query at req.numComputedTokens) are freed, whatever follows: they stay cached until reused.
   * Then each group holds ceil((req.numComputedTokens + numNewComputedTokens + numNewTokens) /
   * blockSize) entries: the hits (touched: ref count + 1, taken out of the free queue; nulls where a
   * window needs none) and new blocks popped from the head of the free queue (a cached one popped there
   * is evicted), group after group. Every block that is full once those tokens are computed, as far as
   * the request's known tokens go (min(…, req.numTokens)), is hashed and cached right away, so a
   * request allocated later in the same step can hit it: the engine must write a layer's KV for all
   * scheduled tokens before any of them attends in that layer.
   *
   * Returns the newly allocated blocks, group after group ([] when the request already has enough),
   * or null, changing nothing else, when the free queue (minus the hits that are in it) has too few
   * blocks. The first allocation of a request sets req.numCachedTokens = numNewComputedTokens. The
   * caller advances req.numComputedTokens after the step.
   */
  allocateSlots(
    req: Request,
    numNewTokens: number,
    numNewComputedTokens = 0,
    newComputedBlocks: NewComputedBlocks = [],
  ): KVCacheBlock[] | null {
    checkCount("numNewTokens", numNewTokens);
    checkCount("numNewComputedTokens", numNewComputedTokens);
    const hits = this.hitsOf(newComputedBlocks);
    if (hits[0]!.length * this.blockSize !== numNewComputedTokens || hits.some((h) => h.length !== hits[0]!.length)) {
      throw new RangeError(
        `numNewComputedTokens (${numNewComputedTokens}) must be ${hits[0]!.length} computed blocks × ${this.blockSize}, in every group`,
      );
    }
    let kv = this.requests.get(req.id);
    if (kv !== undefined && kv.request !== req) throw new Error(`request id ${req.id} already belongs to another Request`);
    const numHeld = kv === undefined ? 0 : kv.groups[0]!.length;
    if (req.numComputedTokens > numHeld * this.blockSize) {
      throw new Error(`request ${req.id} has ${req.numComputedTokens} computed tokens but only ${numHeld} KV blocks`);
    }
    if (hits[0]!.length > 0) this.checkComputedBlocks(req, numHeld, hits);
    if (kv !== undefined) this.removeSkippedBlocks(kv, req.numComputedTokens);

    const numComputed = req.numComputedTokens + numNewComputedTokens;
    if (this.freeBlocksAfter(req, numNewTokens, numNewComputedTokens, hits) < 0) return null;

    if (kv === undefined) {
      kv = {
        request: req,
        groups: this.groups.groups.map(() => []),
        blockIds: this.groups.groups.map(() => []),
        numCachedBlocks: 0,
        contentIds: [],
        hashes: this.enableCaching ? this.hashesOf(req) : null,
      };
      this.requests.set(req.id, kv);
    }
    if (req.numCachedTokens === null) {
      const tierBlocks = this.takeTierHits(hits);
      req.numCachedTokens = numNewComputedTokens;
      req.numTierCachedTokens = tierBlocks * this.blockSize;
      this.tierHits += req.numTierCachedTokens;
    }
    const numRequired = Math.ceil((numComputed + numNewTokens) / this.blockSize);
    // Every group's hits are taken out of the free queue before any group pops new blocks from it.
    hits.forEach((groupHits, g) => {
      this.pool.touch(nonNull(groupHits));
      this.appendBlocks(kv!, g, groupHits);
    });
    const newBlocks: KVCacheBlock[] = [];
    hits.forEach((_, g) => {
      const count = Math.max(0, numRequired - kv!.groups[g]!.length);
      const blocks = this.pool.getNewBlocks(count);
      this.appendBlocks(kv!, g, blocks);
      newBlocks.push(...blocks);
    });
    if (hits[0]!.length > 0) {
      // Hits are cached already; the full-attention chain (or the window's run) names their contents.
      kv.numCachedBlocks = hits[0]!.length;
      for (let i = 0; i < kv.numCachedBlocks; i++) {
        const block = hits.map((h) => h[i]).find((b) => b !== null && b !== undefined);
        if (block !== undefined && block !== null) kv.contentIds[i] = block.contentId!;
      }
    }
    if (kv.hashes !== null) this.cacheFullBlocks(kv, kv.hashes, Math.min(numComputed + numNewTokens, req.numTokens));
    return newBlocks;
  }

  /**
   * Free blocks the queue would hold after allocateSlots with these arguments (negative: it would
   * fail), counting the out-of-window blocks it frees first. Changes nothing; the scheduler uses it
   * to keep room for running requests to grow.
   */
  freeBlocksAfter(
    req: Request, numNewTokens: number, numNewComputedTokens = 0, newComputedBlocks: NewComputedBlocks = [],
  ): number {
    const hits = this.hitsOf(newComputedBlocks);
    const kv = this.requests.get(req.id);
    const numRequired = Math.ceil((req.numComputedTokens + numNewComputedTokens + numNewTokens) / this.blockSize);
    let needed = 0;
    let freed = 0;
    hits.forEach((groupHits, g) => {
      const held = kv === undefined ? 0 : kv.groups[g]!.length;
      needed += Math.max(0, numRequired - held - groupHits.length);
      // A hit that sits in the free queue leaves it when touched, so it cannot also serve as a new block.
      for (const block of groupHits) if (block !== null && block.refCnt === 0) needed++;
      if (kv !== undefined) freed += this.skippedBlocks(kv, g, req.numComputedTokens).filter((b) => b.refCnt === 1).length;
    });
    return this.pool.numFreeBlocks + freed - needed;
  }

  /** newComputedBlocks as one list per group (none given: empty lists). */
  private hitsOf(newComputedBlocks: NewComputedBlocks): readonly GroupBlocks[] {
    const numGroups = this.groups.groups.length;
    if (newComputedBlocks instanceof ComputedBlocks) return this.hitsOf(newComputedBlocks.groups);
    if (newComputedBlocks.length === 0) return this.groups.groups.map(() => []);
    if (!isGroupList(newComputedBlocks)) {
      if (numGroups !== 1) {
        throw new RangeError(`newComputedBlocks is one list of blocks, but the cache has ${numGroups} KV cache groups: pass the hit's groups`);
      }
      return [newComputedBlocks];
    }
    if (newComputedBlocks.length !== numGroups) {
      throw new RangeError(`newComputedBlocks has ${newComputedBlocks.length} groups, the cache ${numGroups}`);
    }
    return newComputedBlocks;
  }

  /** The blocks of group g that a step computing from `numComputedTokens` never reads, still held. */
  private skippedBlocks(kv: RequestKV, g: number, numComputedTokens: number): KVCacheBlock[] {
    const first = this.managerOf(g).firstNeededBlock(numComputedTokens);
    return nonNull(kv.groups[g]!.slice(0, first));
  }

  /**
   * Frees each group's blocks that a step computing from `numComputedTokens` never reads (before a
   * sliding window), leaving null in their place; last first, so the oldest are reused first.
   */
  private removeSkippedBlocks(kv: RequestKV, numComputedTokens: number): void {
    kv.groups.forEach((blocks, g) => {
      const first = Math.min(blocks.length, this.managerOf(g).firstNeededBlock(numComputedTokens));
      let from = first;
      // Blocks before an earlier call's boundary are null already.
      while (from > 0 && blocks[from - 1] !== null) from--;
      if (from === first) return;
      const skipped = nonNull(blocks.slice(from, first));
      for (let i = from; i < first; i++) {
        blocks[i] = null;
        kv.blockIds[g]![i] = SKIPPED_BLOCK_ID;
      }
      this.pool.freeBlocks(skipped);
    });
  }

  private managerOf(g: number): SingleTypeKVCacheManager {
    return this.managers.find((m) => m.groups.includes(g))!;
  }

  /**
   * Parallel sampling (`n` > 1): gives `child`, which holds no blocks, the KV of the
   * parent.numComputedTokens tokens the parent has computed, so the prompt is computed once for
   * all samples. The parent's full blocks are shared (ref count + 1: full blocks are never written
   * again, so sharing is safe; a window's skipped ones stay null); a partly filled last block would
   * be written by both, so in each group the child gets a fresh block and the caller copies the
   * parent's into it (`copies`, one per group) before the next step. The child's first tokens must
   * equal the parent's computed ones (it is the same prompt). Returns null, changing nothing, when
   * the copies need more blocks than are free.
   */
  fork(parent: Request, child: Request): { copies: BlockCopy[] } | null {
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
    if (partial && this.pool.numFreeBlocks < kv.groups.length) return null;
    const forked: RequestKV = {
      request: child,
      groups: kv.groups.map(() => []),
      blockIds: kv.groups.map(() => []),
      numCachedBlocks: Math.min(kv.numCachedBlocks, numFull),
      contentIds: kv.contentIds.slice(0, numFull),
      hashes: this.enableCaching ? this.hashesOf(child) : null,
    };
    const copies: BlockCopy[] = [];
    kv.groups.forEach((blocks, g) => {
      const shared = blocks.slice(0, numFull);
      this.pool.touch(nonNull(shared));
      this.appendBlocks(forked, g, shared);
      if (partial) {
        const [fresh] = this.pool.getNewBlocks(1) as [KVCacheBlock];
        this.appendBlocks(forked, g, [fresh]);
        copies.push({ src: (blocks[numFull] as KVCacheBlock).blockId, dst: fresh.blockId });
      }
    });
    this.requests.set(child.id, forked);
    child.numCachedTokens ??= parent.numCachedTokens;
    return { copies };
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
    for (const blocks of kv.groups) this.pool.freeBlocks(nonNull(blocks));
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
    kv.groups.forEach((blocks, g) => {
      if (blocks.length <= keep) return;
      this.pool.freeBlocks(nonNull(blocks.splice(keep)));
      kv.blockIds[g]!.length = keep;
    });
    if (kv.hashes !== null) this.cacheFullBlocks(kv, kv.hashes, numComputedTokens);
  }

  /** The request's block table in group `group` (a copy): physical block ids in token order, SKIPPED_BLOCK_ID where none is held. */
  getBlockIds(req: Request, group = 0): number[] {
    const kv = this.requests.get(req.id);
    return kv === undefined ? [] : kv.blockIds[group]!.slice();
  }

  /** The request's block tables, one per group (live; do not modify): what the kernels read. */
  getBlockTables(req: Request): readonly (readonly number[])[] {
    return this.requests.get(req.id)?.blockIds ?? this.groups.groups.map(() => []);
  }

  /** The request's blocks of group `group` in token order (live; do not modify); null where none is held. */
  getBlocks(req: Request, group = 0): readonly (KVCacheBlock | null)[] {
    return this.requests.get(req.id)?.groups[group] ?? [];
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
   * What to read from a second tier for `req`: the [index, key] of each block that the longest hit
   * in memory and the tier together needs and memory lacks, when that hit is longer than memory's
   * alone (else null). `held(hash, group)` says whether the tier holds a block. The hit follows
   * every kind's rule (the coordinator's loop of findComputedBlocks over longestHeldHit): the
   * full-attention groups' blocks of the whole prefix, each window's last blocks before its end.
   * Contents are not checked here: adoptBlocks and the lookup after it do.
   */
  blocksToLoad(req: Request, held: (hash: BlockHash, group: number) => boolean): TierPlan | null {
    const maxBlocks = this.maxLookupBlocks(req);
    const inMemory = this.peekCachedTokens(req) / this.blockSize;
    if (maxBlocks <= inMemory) return null;
    const hashes = this.hashesOf(req);
    const numGroups = this.groups.groups.length;
    const cached = (i: number, g: number) => this.pool.hasCachedHash(hashes.hashAt(i), g);
    const known = new Map<number, boolean>();
    const available = (i: number, g: number): boolean => {
      let has = known.get(i * numGroups + g);
      if (has === undefined) {
        has = cached(i, g) || held(hashes.hashAt(i), g);
        known.set(i * numGroups + g, has);
      }
      return has;
    };
    let numBlocks = maxBlocks;
    for (let changed = true; changed; ) {
      changed = false;
      for (const manager of this.managers) {
        const length = manager.longestHeldHit(available, numBlocks);
        if (length < numBlocks) {
          numBlocks = length;
          changed = true;
        }
      }
    }
    if (numBlocks <= inMemory) return null;
    const keys: (readonly [number, KVBlockKey])[] = [];
    for (let i = 0; i < numBlocks; i++) {
      for (let g = 0; g < numGroups; g++) {
        if (i >= this.managerOf(g).firstHitBlock(numBlocks) && !cached(i, g)) keys.push([i, this.blockKey(req, i, g)]);
      }
    }
    return keys.length === 0 ? null : { numBlocks, keys };
  }

  /** The content key of the request's full block `index` in `group` (for a second tier). */
  blockKey(req: Request, index: number, group = 0): KVBlockKey {
    const hashes = this.hashesOf(req);
    const start = index * this.blockSize;
    return {
      hash: hashes.hashAt(index),
      parentHash: index === 0 ? ROOT_PARENT_HASH[this.hash] : hashes.hashAt(index - 1),
      tokens: Uint32Array.from(req.allTokenIds.slice(start, start + this.blockSize)),
      extraKeys: hashes.extraKeysOf(index).slice(),
      group,
    };
  }

  /**
   * Puts blocks a second tier holds into the pool as cached blocks of their groups, so the next
   * lookup for `req` finds them: walking the blocks a hit of `numBlocks` needs (a TierPlan's) from
   * the first, each group's block that memory holds (verified against the block before it) is
   * kept, and each missing one for which `kvOf(index, group)` has bytes gets a block popped from the
   * free queue, its KV written by `write`, and is cached as if computed. The walk stops at a
   * full-attention group's block that neither memory nor the tier has (no hit reaches past it), or
   * when no free block is left; a window's missing block leaves a gap (the lookup after finds what
   * hit remains). The adopted blocks and the memory hits among them go back to the
   * free queue (still cached, most recently used), like a finished request's. Returns how many
   * blocks were adopted.
   *
   * The memory hits are held while blocks are popped, so an adoption never evicts the prefix it
   * extends; an evicted block is reported to the listener before `write` overwrites it.
   */
  adoptBlocks(
    req: Request, numBlocks: number, kvOf: (index: number, group: number) => Uint8Array | null, write: (blockId: number, group: number, kv: Uint8Array) => void,
  ): number {
    if (!this.enableCaching) return 0;
    const maxBlocks = Math.min(numBlocks, this.maxLookupBlocks(req));
    const hashes = this.hashesOf(req);
    const tokens = req.allTokenIds;
    const held: KVCacheBlock[] = [];
    // The content of the block before: null before the first block; unknown where no group holds it.
    let parent: { readonly contentId: number | null } | null = { contentId: null };
    let adopted = 0;
    walk: for (let i = 0; i < maxBlocks; i++) {
      const start = i * this.blockSize;
      const hash = hashes.hashAt(i);
      const find = (g: number) => (parent === null
        ? this.pool.findCachedBlockAfterAnyParent(hash, tokens, start, hashes.extraKeysOf(i), g)
        : this.pool.findCachedBlock(hash, parent.contentId, tokens, start, hashes.extraKeysOf(i), g));
      let content: number | null = null;
      for (let g = 0; g < this.groups.groups.length; g++) {
        const manager = this.managerOf(g);
        if (i < manager.firstHitBlock(maxBlocks)) continue;
        const kv = kvOf(i, g);
        let block = find(g);
        if (block !== null) {
          this.pool.touch([block]);
        } else if (kv === null) {
          if (manager instanceof FullAttentionManager) break walk;
          continue;
        } else {
          if (this.pool.numFreeBlocks === 0) break walk;
          block = this.pool.getNewBlocks(1)[0] as KVCacheBlock;
          write(block.blockId, g, kv);
          const parentContentId = parent === null ? this.pool.unknownContentId() : parent.contentId;
          this.pool.cacheBlock(block, hash, parentContentId, tokens, start, hashes.extraKeysOf(i), g);
          block.loadedFromTier = true;
          adopted++;
        }
        held.push(block);
        content = block.contentId;
      }
      // No group took block i: a cached copy in whichever group holds one still names its content for the next block.
      if (content === null) content = this.groups.groups.map((_, g) => find(g)).find((b) => b !== null)?.contentId ?? null;
      parent = content === null ? null : { contentId: content };
    }
    this.pool.freeBlocks(held);
    return adopted;
  }

  /** The blocks cached now, in use or free (a tier saves them at shutdown). */
  cachedBlocks(): KVCacheBlock[] {
    return this.pool.blocks.filter((block) => block.blockHash !== null);
  }

  /**
   * How many of the hit's block indices a second tier supplied (in any group) and were not counted
   * yet; clears the marks.
   */
  private takeTierHits(hits: readonly GroupBlocks[]): number {
    let n = 0;
    for (let i = 0; i < hits[0]!.length; i++) {
      let fromTier = false;
      for (const blocks of hits) {
        const block = blocks[i];
        if (block === null || block === undefined) continue;
        if (block.loadedFromTier) fromTier = true;
        block.loadedFromTier = false;
      }
      if (fromTier) n++;
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

  private appendBlocks(kv: RequestKV, group: number, blocks: readonly (KVCacheBlock | null)[]): void {
    for (const block of blocks) {
      kv.groups[group]!.push(block);
      kv.blockIds[group]!.push(block === null ? SKIPPED_BLOCK_ID : block.blockId);
    }
  }

  /** Hashes and caches the request's blocks numCachedBlocks … ⌊numTokens / blockSize⌋ - 1, in every group. */
  private cacheFullBlocks(kv: RequestKV, hashes: RequestBlockHashes, numTokens: number): void {
    const numFull = Math.floor(numTokens / this.blockSize);
    const tokens = kv.request.allTokenIds;
    for (let i = kv.numCachedBlocks; i < numFull; i++) {
      // Block i - 1 is cached or a hit: its content is known even where a window no longer holds it.
      const parentContentId = i === 0 ? null : kv.contentIds[i - 1]!;
      const hash: BlockHash = hashes.hashAt(i);
      kv.groups.forEach((blocks, g) => {
        // Never null: a block that fills now is at or after the window of every query of the step.
        const block = blocks[i] as KVCacheBlock;
        this.pool.cacheBlock(block, hash, parentContentId, tokens, i * this.blockSize, hashes.extraKeysOf(i), g);
        kv.contentIds[i] = block.contentId!;
        this.listener?.blockCached(block, this.blockKey(kv.request, i, g));
      });
    }
    kv.numCachedBlocks = Math.max(kv.numCachedBlocks, numFull);
  }

  /** Rejects computed blocks that are not this request's current cache hits (stale, or for another request). */
  private checkComputedBlocks(req: Request, numHeld: number, hits: readonly GroupBlocks[]): void {
    if (!this.enableCaching) throw new Error("newComputedBlocks given while prefix caching is off");
    if (numHeld > 0 || req.numComputedTokens !== 0) {
      throw new Error(`request ${req.id}: newComputedBlocks are only accepted when the request is admitted`);
    }
    if (hits[0]!.length * this.blockSize >= req.numTokens) {
      throw new RangeError(`request ${req.id}: computed blocks must leave its last token to compute`);
    }
    const hashes = this.hashesOf(req);
    hits.forEach((blocks, g) => {
      blocks.forEach((block, i) => {
        if (block === null) return;
        // The parent is checked against the hit's block before it in any group (a window's run may
        // start after null entries; a model without full attention has none there to check).
        const parent = i === 0 ? null : hits.map((h) => h[i - 1] ?? null).find((b) => b !== null) ?? null;
        const parentContentId = i === 0 ? null : parent === null ? block.parentContentId : parent.contentId;
        const cached = this.pool.isCachedAs(block, hashes.hashAt(i), parentContentId, req.allTokenIds, i * this.blockSize, hashes.extraKeysOf(i), g);
        if (!cached) {
          throw new Error(
            `request ${req.id}: computed block ${block.blockId} no longer holds its tokens ${i * this.blockSize}…; call getComputedBlocks right before allocateSlots`,
          );
        }
      });
    });
  }
}

/** A manager per kind of group: full attention, and one per window. */
function managersOf(groups: KVCacheGroups, blockSize: number): SingleTypeKVCacheManager[] {
  const full: number[] = [];
  const windows = new Map<number, number[]>();
  groups.groups.forEach((g, i) => {
    if (g.attention.kind === "full") full.push(i);
    else windows.set(g.attention.window, [...(windows.get(g.attention.window) ?? []), i]);
  });
  return [
    ...(full.length > 0 ? [new FullAttentionManager(full)] : []),
    ...[...windows].map(([window, ids]) => new SlidingWindowManager(ids, window, blockSize)),
  ];
}

/** Whether a non-empty hit is a list per group rather than one group's blocks. */
function isGroupList(hit: readonly GroupBlocks[] | GroupBlocks): hit is readonly GroupBlocks[] {
  return Array.isArray(hit[0]);
}

function nonNull(blocks: readonly (KVCacheBlock | null)[]): KVCacheBlock[] {
  return blocks.filter((b): b is KVCacheBlock => b !== null);
}

function checkCount(name: string, value: number): void {
  if (!Number.isInteger(value) || value < 0) throw new RangeError(`${name} must be a non-negative integer, got ${value}`);
}
