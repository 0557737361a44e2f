/**
 * vLLM v1's prefix-caching scenarios (tests/v1/core/test_prefix_caching.py: test_prefill,
 * test_prefill_plp, test_decode, test_evict, test_hash_block_correct_reuse,
 * test_computed_blocks_not_evicted, test_basic_prefix_caching_disabled) written against the KV
 * manager's single-group API, the form it had before KV cache groups and vLLM's KVCacheBlocks
 * keeps for one group: getComputedBlocks(req) gives the hit's `blocks`, `numComputedTokens` and
 * `getBlockIds()`, and allocateSlots takes those blocks (or the hit itself, as vLLM passes it).
 *
 * Block ids are vLLM's less one: vLLM's pool keeps block 0 as its null block, so a pool of 11 there
 * is 10 usable blocks, ids 1..10; here the same 10 blocks are ids 0..9. The free queue follows the
 * design document's order (a freed request's blocks go to the tail in reverse order), under vLLM's
 * plain LRU eviction ("lru").
 */
import { describe, expect, test } from "bun:test";
import { KVCacheManager, Request, hashBlockTokens, type KVCacheBlock } from "../src/kv/index.ts";
import { KVCacheGroups } from "../src/kv/kv-groups.ts";

const BLOCK = 16;
const range = (start: number, count: number): number[] => Array.from({ length: count }, (_, i) => start + i);
/** Block i of token i repeated: vLLM's `[i for i in range(3) for _ in range(16)]`. */
const COMMON = range(0, 3).flatMap((i) => Array<number>(BLOCK).fill(i));
const repeat = (token: number, count: number): number[] => Array<number>(count).fill(token);

const lruManager = (numBlocks: number, enableCaching = true, blockSize = BLOCK) =>
  new KVCacheManager({ numBlocks, blockSize, enableCaching, evictionPolicy: "lru" });
const request = (id: string, promptTokenIds: number[]) => new Request({ id, promptTokenIds });
const ids = (blocks: readonly (KVCacheBlock | null)[] | null): number[] | null => (blocks === null ? null : blocks.map((b) => b!.blockId));

describe("vLLM test_prefix_caching on the single-group API", () => {
  test("test_prefill: a miss, a hit while the blocks are in use, a hit after they are freed, then eviction order", () => {
    const manager = lruManager(10);
    const all0 = [...COMMON, ...repeat(3, 7)];
    const req0 = request("0", all0);
    const hit0 = manager.getComputedBlocks(req0);
    expect(hit0.blocks).toEqual([]);
    expect(hit0.numComputedTokens).toBe(0);
    expect(ids(manager.allocateSlots(req0, 55, hit0.blocks.length * BLOCK, hit0.blocks))).toEqual([0, 1, 2, 3]);
    // Full blocks are hashed on the chain of their parents and held once; the partial block is not hashed.
    let parent = null;
    for (const id of [0, 1, 2]) {
      parent = hashBlockTokens(parent, all0.slice(id * BLOCK, (id + 1) * BLOCK), null);
      expect(manager.block(id).blockHash).toBe(parent);
      expect(manager.block(id).refCnt).toBe(1);
    }
    expect(manager.block(3).blockHash).toBeNull();
    expect(manager.block(3).refCnt).toBe(1);

    // A hit on the common prefix while req0 still holds it.
    const req1 = request("1", [...COMMON, ...repeat(3, 5)]);
    const hit1 = manager.getComputedBlocks(req1);
    expect(hit1.getBlockIds()).toEqual([[0, 1, 2]]);
    expect(hit1.numComputedTokens).toBe(3 * BLOCK);
    expect(ids(manager.allocateSlots(req1, 53 - 3 * BLOCK, hit1.blocks.length * BLOCK, hit1.blocks))).toEqual([4]);
    for (const block of hit1.blocks) expect(block!.refCnt).toBe(2);
    expect(manager.numFreeBlocks).toBe(5);

    manager.free(req0);
    manager.free(req1);
    expect(manager.numFreeBlocks).toBe(10);
    // Never allocated (5..9), req0's unique block (3), req1's (4), the common blocks last to first.
    expect(manager.freeBlockIds()).toEqual([5, 6, 7, 8, 9, 3, 4, 2, 1, 0]);

    // A hit on the common prefix after it was freed: the hits leave the queue, the new block is its head.
    const req2 = request("2", [...COMMON, ...repeat(3, 6)]);
    const hit2 = manager.getComputedBlocks(req2);
    expect(hit2.getBlockIds()).toEqual([[0, 1, 2]]);
    expect(hit2.numComputedTokens).toBe(3 * BLOCK);
    expect(ids(manager.allocateSlots(req2, 53 - 3 * BLOCK, hit2.blocks.length * BLOCK, hit2.blocks))).toEqual([5]);
    expect(manager.numFreeBlocks).toBe(6);
    expect(manager.freeBlockIds().every((id) => manager.block(id).refCnt === 0)).toBe(true);
    manager.free(req2);

    // A miss that takes the whole pool: the allocation order is the eviction order.
    const req3 = request("3", repeat(99, BLOCK * 10));
    const hit3 = manager.getComputedBlocks(req3);
    expect(hit3.blocks).toEqual([]);
    expect(hit3.numComputedTokens).toBe(0);
    expect(ids(manager.allocateSlots(req3, BLOCK * 10, hit3.blocks.length * BLOCK, hit3.blocks))).toEqual([6, 7, 8, 9, 3, 4, 5, 2, 1, 0]);
    expect(manager.numFreeBlocks).toBe(0);
    expect(manager.freeBlockIds()).toEqual([]);
  });

  test("test_prefill_plp: a request that skips the cache (prompt logprobs) duplicates the cached blocks' hashes", () => {
    const manager = lruManager(10);
    // vLLM gives a prompt-logprobs request no hit; here that is the scheduler not asking for one.
    const req0 = request("0", [...COMMON, ...repeat(3, 7)]);
    const blocks0 = manager.allocateSlots(req0, 55);
    expect(ids(blocks0)).toEqual([0, 1, 2, 3]);
    const hashes0 = blocks0!.map((b) => b.blockHash);

    const req1 = request("1", [...COMMON, ...repeat(3, 5)]);
    const hit1 = manager.getComputedBlocks(req1);
    expect(hit1.getBlockIds()).toEqual([[0, 1, 2]]);
    expect(ids(manager.allocateSlots(req1, 53 - 3 * BLOCK, hit1.numComputedTokens, hit1.blocks))).toEqual([4]);
    for (const block of hit1.blocks) expect(block!.refCnt).toBe(2);
    expect(manager.numFreeBlocks).toBe(5);
    manager.free(req0);
    manager.free(req1);
    expect(manager.freeBlockIds()).toEqual([5, 6, 7, 8, 9, 3, 4, 2, 1, 0]);

    // No hit asked for: new blocks hold the same contents, with the same hashes, under other ids.
    const req2 = request("2", [...COMMON, ...repeat(3, 6)]);
    const blocks2 = manager.allocateSlots(req2, 54);
    expect(ids(blocks2)).toEqual([5, 6, 7, 8]);
    expect(blocks2!.slice(0, 3).map((b) => b.blockHash)).toEqual(hashes0.slice(0, 3));
    for (const block of blocks2!) expect(block.refCnt).toBe(1);
    manager.free(req2);
  });

  test("test_decode: decode tokens fill the last block before a new one is allocated; full blocks are cached", () => {
    const manager = lruManager(10);
    const req0 = request("0", [...COMMON, ...repeat(3, 7)]);
    const hit = manager.getComputedBlocks(req0);
    expect(hit.blocks).toEqual([]);
    expect(ids(manager.allocateSlots(req0, 55, hit.blocks.length * BLOCK, hit))).toEqual([0, 1, 2, 3]);

    // Four decode tokens fit block 3.
    req0.numComputedTokens = 55;
    req0.appendOutputTokenIds(repeat(8, 4));
    expect(ids(manager.allocateSlots(req0, 4))).toEqual([]);
    expect(manager.getBlocks(req0).at(-1)!.blockHash).toBeNull();

    // 19 more: 5 fill block 3 (now cached), 10 go to a new block 4, not full.
    req0.numComputedTokens = 59;
    req0.appendOutputTokenIds(repeat(7, 9 + 10));
    expect(ids(manager.allocateSlots(req0, 19))).toEqual([4]);
    expect(manager.getBlocks(req0).at(-2)!.blockHash).not.toBeNull();
    expect(manager.getBlocks(req0).at(-1)!.blockHash).toBeNull();
  });

  test("test_evict: freed blocks queue last to first behind the never-used ones; a hit touches them out", () => {
    const manager = lruManager(10);
    const last = 5 * BLOCK + 7;
    const req0 = request("0", range(0, last));
    const hit0 = manager.getComputedBlocks(req0);
    expect(hit0.blocks).toEqual([]);
    expect(manager.allocateSlots(req0, last, hit0.numComputedTokens, hit0.blocks)!.length).toBe(6);
    const req1 = request("1", range(last, 3 * BLOCK));
    const hit1 = manager.getComputedBlocks(req1);
    expect(hit1.blocks).toEqual([]);
    expect(manager.allocateSlots(req1, 3 * BLOCK, hit1.numComputedTokens, hit1.blocks)!.length).toBe(3);
    expect(manager.numFreeBlocks).toBe(1);

    manager.free(req0);
    expect(manager.freeBlockIds()).toEqual([9, 5, 4, 3, 2, 1, 0]);
    manager.free(req1);
    expect(manager.numFreeBlocks).toBe(10);
    expect(manager.freeBlockIds()).toEqual([9, 5, 4, 3, 2, 1, 0, 8, 7, 6]);

    const req2 = request("2", range(0, 2 * BLOCK + 3));
    const hit2 = manager.getComputedBlocks(req2);
    expect(hit2.getBlockIds()).toEqual([[0, 1]]);
    expect(hit2.numComputedTokens).toBe(2 * BLOCK);
    expect(ids(manager.allocateSlots(req2, 3, hit2.blocks.length * BLOCK, hit2.blocks))).toEqual([9]);
    expect(manager.numFreeBlocks).toBe(7);
  });

  test("test_hash_block_correct_reuse: a cached block reused as a new partial block loses its hash", () => {
    const manager = lruManager(1);
    const req = request("0", range(0, BLOCK));
    const hit = manager.getComputedBlocks(req);
    expect(hit.blocks).toEqual([]);
    expect(manager.allocateSlots(req, BLOCK, hit.numComputedTokens, hit.blocks)!.length).toBe(1);
    manager.free(req);

    const next = request("1", range(0, BLOCK - 1));
    const miss = manager.getComputedBlocks(next);
    expect(miss.blocks).toEqual([]);
    const blocks = manager.allocateSlots(next, BLOCK - 1, miss.numComputedTokens, miss.blocks);
    expect(blocks!.length).toBe(1);
    expect(manager.block(blocks![0]!.blockId).blockHash).toBeNull();
  });

  test("test_computed_blocks_not_evicted: a hit is not evicted to make room while another free block exists", () => {
    const manager = lruManager(2);
    const req0 = request("0", range(0, BLOCK));
    const hit0 = manager.getComputedBlocks(req0);
    expect(ids(manager.allocateSlots(req0, BLOCK, hit0.numComputedTokens, hit0.blocks))).toEqual([0]);
    const req1 = request("1", range(BLOCK, BLOCK));
    const hit1 = manager.getComputedBlocks(req1);
    expect(ids(manager.allocateSlots(req1, BLOCK, hit1.numComputedTokens, hit1.blocks))).toEqual([1]);
    manager.free(req0);
    manager.free(req1);

    const req2 = request("2", range(0, 2 * BLOCK));
    const hit2 = manager.getComputedBlocks(req2);
    expect(ids(hit2.blocks)).toEqual([0]);
    expect(hit2.numComputedTokens).toBe(BLOCK);
    expect(ids(manager.allocateSlots(req2, BLOCK, hit2.blocks.length * BLOCK, hit2.blocks))).toEqual([1]);
  });

  test("test_basic_prefix_caching_disabled: no hits, and a full pool refuses", () => {
    const manager = lruManager(4, false, 4);
    const req1 = request("1", range(0, 10));
    const hit1 = manager.getComputedBlocks(req1);
    expect(hit1.blocks).toEqual([]);
    expect(hit1.numComputedTokens).toBe(0);
    expect(manager.allocateSlots(req1, 10, hit1.numComputedTokens, hit1.blocks)!.length).toBe(3);
    manager.free(req1);

    const req2 = request("2", range(0, 16));
    const hit2 = manager.getComputedBlocks(req2);
    expect(hit2.blocks).toEqual([]);
    expect(hit2.numComputedTokens).toBe(0);
    expect(manager.allocateSlots(req2, 16, hit2.numComputedTokens, hit2.blocks)!.length).toBe(4);

    const req3 = request("3", range(0, 4));
    const hit3 = manager.getComputedBlocks(req3);
    expect(hit3.blocks).toEqual([]);
    expect(manager.allocateSlots(req3, 4, hit3.numComputedTokens, hit3.blocks)).toBeNull();
  });
});

describe("the hit's forms", () => {
  test("blocks, groups and the hit itself allocate the same blocks", () => {
    const allocations = (["blocks", "groups", "hit"] as const).map((form) => {
      const manager = lruManager(10);
      manager.allocateSlots(request("a", [...COMMON, 7]), 49);
      const b = request("b", [...COMMON, 8, 9]);
      const hit = manager.getComputedBlocks(b);
      const given = form === "blocks" ? hit.blocks : form === "groups" ? hit.groups : hit;
      return { free: manager.freeBlocksAfter(b, 2, hit.numComputedTokens, given), new: ids(manager.allocateSlots(b, 2, hit.numComputedTokens, given)), table: manager.getBlockIds(b) };
    });
    expect(allocations[0]).toEqual({ free: 5, new: [4], table: [0, 1, 2, 4] });
    expect(allocations[1]).toEqual(allocations[0]!);
    expect(allocations[2]).toEqual(allocations[0]!);
  });

  test("a cache of several KV cache groups has its hit per group: one flat list is refused", () => {
    const groups = KVCacheGroups.of({ nLayers: 2, slidingWindow: { size: 2 * BLOCK, local: [false, true] } });
    const manager = new KVCacheManager({ numBlocks: 20, blockSize: BLOCK, groups, evictionPolicy: "lru" });
    manager.allocateSlots(request("a", [...COMMON, 7]), 49);
    const b = request("b", [...COMMON, 8]);
    const hit = manager.getComputedBlocks(b);
    expect(hit.numComputedTokens).toBe(3 * BLOCK);
    expect(() => hit.blocks).toThrow(RangeError);
    expect(() => manager.allocateSlots(b, 1, hit.numComputedTokens, hit.groups[0]!)).toThrow(/2 KV cache groups: pass the hit's groups/);
    expect(ids(manager.allocateSlots(b, 1, hit.numComputedTokens, hit))).toEqual([8, 9]);
  });
});
