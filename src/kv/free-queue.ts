/**
 * The free block queue: an intrusive doubly linked list of the blocks nobody uses (ref count 0),
 * ordered by when they should be reused. Modelled on vLLM v1's FreeKVCacheBlockQueue.
 */
import { FreeListNode, KVCacheBlock } from "./block.ts";

/**
 * Doubly linked list threaded through the blocks themselves (KVCacheBlock.prevFree/nextFree), so
 * moving a block costs no allocation and removing one from the middle (a cache hit on a free block)
 * is O(1), which an array or deque cannot do.
 *
 * Two sentinel nodes, a fake head and a fake tail, are always present: every real block in the
 * queue has a non-null prev and next, so popLeft, append, appendLeft and remove never branch on
 * "first/last element" cases.
 *
 * Invariants, between calls:
 * - head.nextFree … tail, following nextFree, visits exactly the free blocks, `length` of them;
 *   following prevFree from tail visits the same blocks in reverse.
 * - head.prevFree and tail.nextFree are null.
 * - A block is in the queue ⇔ its prevFree and nextFree are non-null; a block outside has both null.
 * The head is the next block to reuse (evict); the tail is the last.
 */
export class FreeKVCacheBlockQueue {
  private readonly head = new FreeListNode();
  private readonly tail = new FreeListNode();
  private numFree = 0;

  /** Links `blocks` in the given order; they must not be in any queue. */
  constructor(blocks: readonly KVCacheBlock[]) {
    this.head.nextFree = this.tail;
    this.tail.prevFree = this.head;
    for (const block of blocks) this.append(block);
  }

  /** Number of blocks in the queue. */
  get length(): number {
    return this.numFree;
  }

  /** Removes and returns the head block (the next to reuse). Throws when the queue is empty. */
  popLeft(): KVCacheBlock {
    // Every node between the sentinels is a KVCacheBlock: only blocks are ever linked in.
    const first = this.head.nextFree as KVCacheBlock;
    if (first === this.tail) throw new Error("free block queue is empty");
    this.unlink(first);
    return first;
  }

  /** Removes `block` from wherever it is in the queue. Throws when it is not in the queue. */
  remove(block: KVCacheBlock): void {
    if (block.prevFree === null) throw new Error(`block ${block.blockId} is not in the free queue`);
    this.unlink(block);
  }

  /** Puts `block` at the tail: it is reused after every block already queued. */
  append(block: KVCacheBlock): void {
    this.insertBetween(block, this.tail.prevFree as FreeListNode, this.tail);
  }

  /** Puts `block` at the head: it is the next block reused. */
  appendLeft(block: KVCacheBlock): void {
    this.insertBetween(block, this.head, this.head.nextFree as FreeListNode);
  }

  /** The queued blocks from head (next to reuse) to tail. Allocates; for inspection and tests. */
  toArray(): KVCacheBlock[] {
    const blocks: KVCacheBlock[] = [];
    for (let node = this.head.nextFree; node !== this.tail && node !== null; node = node.nextFree) {
      blocks.push(node as KVCacheBlock);
    }
    return blocks;
  }

  private insertBetween(block: KVCacheBlock, prev: FreeListNode, next: FreeListNode): void {
    if (block.prevFree !== null) throw new Error(`block ${block.blockId} is already in the free queue`);
    block.prevFree = prev;
    block.nextFree = next;
    prev.nextFree = block;
    next.prevFree = block;
    this.numFree++;
  }

  private unlink(block: KVCacheBlock): void {
    // Both links are non-null for a queued block (sentinels guarantee a neighbour on each side).
    const prev = block.prevFree as FreeListNode;
    const next = block.nextFree as FreeListNode;
    prev.nextFree = next;
    next.prevFree = prev;
    block.prevFree = null;
    block.nextFree = null;
    this.numFree--;
  }
}
