/**
 * KV cache management with automatic prefix caching: block pool, free queue, block hashing,
 * eviction policies and the manager the scheduler calls.
 */
export {
  type BlockHash,
  type ExtraKey,
  type HashAlgorithm,
  BlockHasher,
  CacheSaltExtraKey,
  DIGEST_BYTES,
  ExtraKeyEncoder,
  ExtraKeyTag,
  HASH_ALGORITHMS,
  LoraExtraKey,
  MultimodalExtraKey,
  ROOT_PARENT_HASH,
  hashBlockTokens,
} from "./block-hash.ts";
export { FreeListNode, KVCacheBlock } from "./block.ts";
export { BlockPool, type PrefixCacheStats } from "./block-pool.ts";
export {
  type EvictionPolicy,
  type EvictionPolicyName,
  EVICTION_POLICIES,
  LruEvictionPolicy,
  LruKeepCachedEvictionPolicy,
  createEvictionPolicy,
} from "./eviction.ts";
export { FreeKVCacheBlockQueue } from "./free-queue.ts";
export { measureHashCost } from "./hash-cost.ts";
export { type BlockCopy, ComputedBlocks, KVCacheManager, type KVCacheManagerOptions, type NewComputedBlocks } from "./kv-cache-manager.ts";
export { RequestBlockHashes } from "./request-hashes.ts";
export { type MultimodalItem, Request, type RequestOptions } from "./request.ts";
