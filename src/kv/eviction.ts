/**
 * Eviction policy: where a block goes in the free queue when its last user frees it.
 *
 * The pool always reuses the queue's head and evicts a cached block only when it reaches the head,
 * so the position a policy gives a freed block decides how long its KV stays findable. Touching a
 * cached block (a hit) takes it out of the queue wherever it is; that part is the same for every
 * policy and lives in the pool.
 */
import type { KVCacheBlock } from "./block.ts";
import type { FreeKVCacheBlockQueue } from "./free-queue.ts";

export type EvictionPolicyName = "lru" | "lru-keep-cached";

export const EVICTION_POLICIES: readonly EvictionPolicyName[] = ["lru", "lru-keep-cached"];

export interface EvictionPolicy {
  readonly name: EvictionPolicyName;
  /**
   * Puts blocks whose ref count just reached zero into `queue`. `freed` is in eviction priority
   * order: freed[0] should go first. A request frees its blocks tail first, because its last block
   * hashes the longest prefix and is the least likely to be shared.
   */
  release(queue: FreeKVCacheBlockQueue, freed: readonly KVCacheBlock[]): void;
}

/**
 * vLLM v1's policy: every freed block goes to the tail, in priority order. The head is then the
 * least recently used block, and among blocks freed together the one ending the longest prefix.
 */
export class LruEvictionPolicy implements EvictionPolicy {
  readonly name = "lru";

  release(queue: FreeKVCacheBlockQueue, freed: readonly KVCacheBlock[]): void {
    for (const block of freed) queue.append(block);
  }
}

/**
 * LRU for cached blocks, but a freed block that never filled (no hash: nothing can ever hit it)
 * goes to the head, so it is reused before any cached block is evicted. Under plain LRU such a block
 * waits at the tail while cached blocks in front of it are evicted.
 */
export class LruKeepCachedEvictionPolicy implements EvictionPolicy {
  readonly name = "lru-keep-cached";

  release(queue: FreeKVCacheBlockQueue, freed: readonly KVCacheBlock[]): void {
    for (const block of freed) if (block.blockHash !== null) queue.append(block);
    // Walk backwards so the uncached blocks end up at the head in priority order.
    for (let i = freed.length - 1; i >= 0; i--) {
      const block = freed[i] as KVCacheBlock;
      if (block.blockHash === null) queue.appendLeft(block);
    }
  }
}

export function createEvictionPolicy(name: EvictionPolicyName): EvictionPolicy {
  switch (name) {
    case "lru":
      return new LruEvictionPolicy();
    case "lru-keep-cached":
      return new LruKeepCachedEvictionPolicy();
    default:
      throw new RangeError(`unknown eviction policy ${String(name)}; use one of ${EVICTION_POLICIES.join(", ")}`);
  }
}
