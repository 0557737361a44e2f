/**
 * What differs between the kinds of KV cache group (kv-groups.ts), behind one interface, as vLLM
 * v1's SingleTypeKVCacheManager: which of a request's blocks a step still reads, and how a prefix
 * hit is found. One manager serves every group of one kind (every full-attention group, or every
 * group of one window): a block index is a hit only when each of its groups holds it. The
 * KVCacheManager (kv-cache-manager.ts) coordinates the kinds over one block pool:
 *   - full-attention-manager.ts: every block, from the first; a hit is a prefix of cached blocks.
 *   - sliding-window-manager.ts: only the blocks of the window before the next query; a hit needs
 *     those and nothing before them.
 */
import type { KVCacheBlock } from "./block.ts";

/**
 * A request's blocks in one group, in token order: block i holds positions [i * blockSize, (i + 1)
 * * blockSize); null where the request holds no block because no query reads those positions
 * again (before a sliding window). Its block table has a placeholder there that is never read.
 */
export type GroupBlocks = (KVCacheBlock | null)[];

/** Cached-block lookups of one request (the manager's hashes and the pool's verified map). */
export interface BlockLookup {
  /**
   * The cached block of `group` holding the request's block `index`, its parent content checked
   * to be `parentContentId` (null: the first block); null when none is cached.
   */
  find(index: number, parentContentId: number | null, group: number): KVCacheBlock | null;
  /**
   * The cached block of `group` holding block `index`, its parent not checked (no block before it
   * is known: the start of a window's run in a model without full-attention layers).
   */
  findAfterAnyParent(index: number, group: number): KVCacheBlock | null;
}

export interface SingleTypeKVCacheManager {
  /** The groups this manager serves (indices into KVCacheGroups.groups). */
  readonly groups: readonly number[];
  /**
   * The request's longest cached prefix of at most `maxBlocks` blocks, per group of this manager
   * (all the same length): the blocks a step starting at its end reads, null where it reads none.
   * `chain[i]` is the verified contentId of block i of a longer hit when a full-attention group
   * found one (the blocks found here must continue it); shorter than the hit when there is none.
   */
  findLongestHit(lookup: BlockLookup, maxBlocks: number, chain: readonly number[]): GroupBlocks[];
  /** Index of the first block that a step computing from position `numComputedTokens` reads. */
  firstNeededBlock(numComputedTokens: number): number;
  /**
   * findLongestHit's rule over a predicate: the longest hit of at most `maxBlocks` blocks when
   * `held(index, group)` says which blocks are to be had (in memory or in a second tier). For
   * planning what to read from a tier; it checks no content (the lookup after the reads does).
   */
  longestHeldHit(held: (index: number, group: number) => boolean, maxBlocks: number): number;
  /** Index of the first block a hit of `numBlocks` blocks needs in this kind's groups (numBlocks when it needs none). */
  firstHitBlock(numBlocks: number): number;
}
