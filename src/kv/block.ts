/**
 * One physical KV cache block and the intrusive links that thread it into the free queue.
 */
import type { BlockHash } from "./block-hash.ts";

/**
 * A node of the free queue's doubly linked list. KVCacheBlock extends it; the queue's two sentinel
 * nodes (fake head and tail) are bare FreeListNodes, so they need no fake block id.
 *
 * Both links are null exactly when the node is not in a queue (a block in use, or a sentinel's
 * outward side: head.prevFree and tail.nextFree stay null forever).
 */
export class FreeListNode {
  prevFree: FreeListNode | null = null;
  nextFree: FreeListNode | null = null;
}

/**
 * A physical block: room for `blockSize` tokens of K and V in the layers of one KV cache group
 * (every layer when the model has one group; kv-groups.ts). The KV data itself lives in the
 * engine's arena at index `blockId`; this object only carries the bookkeeping.
 *
 * All blocks are created once, by the BlockPool, and live as long as it does. Only the pool writes
 * the fields below; everything else reads them.
 */
export class KVCacheBlock extends FreeListNode {
  /** Index of the block in the KV arena, 0 to numBlocks-1. */
  readonly blockId: number;
  /** Number of running requests whose block table holds this block. 0 ⇔ the block is in the free queue. */
  refCnt = 0;
  /**
   * Hash of the block's content (parent hash, tokens, extra keys), set when the block becomes full
   * and is cached, cleared when it is evicted. Non-null ⇔ the block is in the pool's hash map.
   */
  blockHash: BlockHash | null = null;
  /**
   * Exact identity of the cached content: two cached blocks have the same contentId only if their
   * whole token prefix and extra keys are identical. Lookups compare it, never only the hash, so a
   * hash collision cannot produce a false hit. Null while blockHash is null.
   */
  contentId: number | null = null;
  /** contentId of the block before this one in the request that cached it; null for a first block. Meaningful only while cached. */
  parentContentId: number | null = null;
  /** Framed extra keys of the cached content (see block-hash.ts); null when it had none. Its tokens live in the pool's token store. */
  extraKeys: Uint8Array | null = null;
  /**
   * The KV cache group (kv-groups.ts) whose layers the cached content is: a lookup for one group
   * never hits another's block, whose slots hold other layers. Meaningful only while cached.
   */
  group = 0;
  /**
   * The cached content was read from a second tier (the disk) rather than computed, and no request
   * has been admitted with it since: the first one to hit it counts its tokens as tier hits.
   */
  loadedFromTier = false;

  constructor(blockId: number) {
    super();
    this.blockId = blockId;
  }
}
