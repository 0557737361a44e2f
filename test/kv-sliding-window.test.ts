/**
 * The KV cache of a model with sliding-window layers (src/kv/kv-groups.ts, sliding-window-manager.ts,
 * the KVCacheManager coordinating the groups), with exact block ids as test/kv-manager.test.ts:
 *   - how layers are grouped (vLLM's rule), and what a sequence holds at most;
 *   - a local group's blocks that fall out of the window go back to the pool as the request
 *     advances (still cached), their table entries skipped;
 *   - a prefix hit needs every full-attention block and only the window's worth of local ones,
 *     shortened until every group has what it needs;
 *   - forks copy the partly filled block of every group, rollbacks drop each group's tail, and the
 *     scheduler's free-block arithmetic counts the blocks a window releases.
 */
import { describe, expect, test } from "bun:test";
import { KVCacheGroups } from "../src/kv/kv-groups.ts";
import { KVCacheManager, SKIPPED_BLOCK_ID } from "../src/kv/kv-cache-manager.ts";
import { Request, type KVCacheBlock } from "../src/kv/index.ts";

const range = (start: number, count: number): number[] => Array.from({ length: count }, (_, i) => start + i);
const ids = (blocks: readonly (KVCacheBlock | null)[]): (number | null)[] => blocks.map((b) => b?.blockId ?? null);

/** rnd-gemma3's layout: layers 0, 1 and 3 local (a window of `window`), layer 2 global: four groups of one layer. */
function gemmaLike(window: number): KVCacheGroups {
  return KVCacheGroups.fromLayers(4, (l) => (l === 2 ? { kind: "full" } : { kind: "sliding", window }));
}

/** Blocks of 4 tokens, a window of 8 positions (a hit needs the last 2 blocks), lru. */
function manager(numBlocks = 40): KVCacheManager {
  return new KVCacheManager({ numBlocks, blockSize: 4, groups: gemmaLike(8), evictionPolicy: "lru" });
}

/** Computes `req`'s prompt (from its hits on), then `decodes` more tokens one at a time; false when a step found no room. */
function run(m: KVCacheManager, req: Request, decodes: number, firstToken = 5000): boolean {
  const hit = m.getComputedBlocks(req);
  if (m.allocateSlots(req, req.numTokens - hit.numComputedTokens, hit.numComputedTokens, hit.groups) === null) return false;
  req.numComputedTokens = req.numTokens;
  for (let i = 0; i < decodes; i++) {
    req.appendOutputTokenIds([firstToken + i]);
    if (m.allocateSlots(req, 1) === null) return false;
    req.numComputedTokens++;
  }
  return true;
}

describe("KV cache groups", () => {
  test("Gemma 3 1B: 26 layers, global 5, 11, 17, 23; groups of 4 (one global, six local, the last short); pages of 4 layers", () => {
    const groups = KVCacheGroups.fromLayers(26, (l) => (l % 6 === 5 ? { kind: "full" } : { kind: "sliding", window: 512 }));
    expect(groups.numSlots).toBe(4);
    expect(groups.groups.map((g) => g.layers)).toEqual([
      [5, 11, 17, 23],
      [0, 7, 14, 21], [1, 8, 15, 22], [2, 9, 16, 24], [3, 10, 18, 25], [4, 12, 19], [6, 13, 20],
    ]);
    expect([groups.groupOf[14], groups.slotOf[14], groups.groupOf[23], groups.slotOf[23]]).toEqual([1, 2, 0, 3]);
    // 32,768 tokens in steps of 512: 2048 global blocks, 6 x (ceil((511 + 512) / 16) + 1) local ones.
    expect(groups.blocksPerSequence(32768, 16, 512)).toBe(2048 + 6 * 65);
    // Pages of 4 layers against 26 layers a block with every layer global: 0.18x.
    expect((4 * groups.blocksPerSequence(32768, 16, 512)) / (26 * 2048)).toBeCloseTo(0.183, 3);
    expect(groups.maxPositions(2438, 16, 512, 131072)).toBe(32768);
    expect(groups.maxPositions(2437, 16, 512, 131072)).toBe(32752);
  });

  test("rnd-gemma3 (layer 2 global): four groups of one layer; counts within 1.25x share one group size; one kind is one group", () => {
    const g = gemmaLike(32);
    expect(g.groups.map((x) => [x.attention.kind, x.layers])).toEqual([["full", [2]], ["sliding", [0]], ["sliding", [1]], ["sliding", [3]]]);
    expect(g.numSlots).toBe(1);
    const near = KVCacheGroups.fromLayers(11, (l) => (l < 5 ? { kind: "full" } : { kind: "sliding", window: 64 }));
    expect(near.groups.map((x) => x.layers)).toEqual([[0, 1, 2, 3, 4], [5, 6, 7, 8, 9, 10]]);
    expect(near.numSlots).toBe(6);
    const plain = KVCacheGroups.fromLayers(3, () => ({ kind: "full" }));
    expect([plain.hybrid, plain.numSlots, plain.groups.length]).toEqual([false, 3, 1]);
  });
});

describe("a request's local blocks as it advances", () => {
  test("blocks wholly before the next query's window go back to the pool, still cached; their entries are skipped", () => {
    const m = manager();
    const req = new Request({ id: "a", promptTokenIds: range(100, 10) });
    // 10 tokens: 3 blocks per group, group after group; the two full blocks of each group cached.
    expect(ids(m.allocateSlots(req, 10)!)).toEqual(range(0, 12));
    req.numComputedTokens = 10;
    expect([0, 1, 2, 3].map((g) => m.getBlockIds(req, g))).toEqual([[0, 1, 2], [3, 4, 5], [6, 7, 8], [9, 10, 11]]);
    expect(m.numCachedBlocks).toBe(8);
    // Positions 10..14. The query at 11 reads from 4 on: block 0 of each local group (3, 6, 9) is
    // released; the one at 12 needs a fourth block in each group (12-15, from the head of the queue).
    for (let t = 0; t < 5; t++) {
      req.appendOutputTokenIds([200 + t]);
      expect(ids(m.allocateSlots(req, 1)!)).toEqual(t === 2 ? [12, 13, 14, 15] : []);
      req.numComputedTokens++;
    }
    expect(m.freeBlockIds().slice(-3)).toEqual([3, 6, 9]);
    // The query at 15 reads from 8 on: block 1 of each local group (4, 7, 10) goes too.
    req.appendOutputTokenIds([300]);
    expect(ids(m.allocateSlots(req, 1)!)).toEqual([]);
    req.numComputedTokens++;
    const S = SKIPPED_BLOCK_ID;
    expect([0, 1, 2, 3].map((g) => m.getBlockIds(req, g))).toEqual([[0, 1, 2, 12], [S, S, 5, 13], [S, S, 8, 14], [S, S, 11, 15]]);
    expect(ids(m.getBlocks(req, 1))).toEqual([null, null, 5, 13]);
    // At the tail of the free queue in the order released, still cached (findable) until reused.
    expect(m.freeBlockIds().slice(-6)).toEqual([3, 6, 9, 4, 7, 10]);
    for (const id of [3, 4, 6, 7, 9, 10]) expect([m.block(id).refCnt, m.block(id).blockHash !== null]).toEqual([0, true]);
    expect(m.numUsedBlocks).toBe(4 + 3 * 2);
    m.free(req);
    expect(m.numUsedBlocks).toBe(0);
  });

  test("the scheduler's free-block arithmetic counts what the window releases; a refused allocation still releases it", () => {
    const m = manager(16);
    const req = new Request({ id: "a", promptTokenIds: range(100, 15) });
    expect(ids(m.allocateSlots(req, 15)!)).toEqual(range(0, 16));
    req.numComputedTokens = 15;
    req.appendOutputTokenIds([1]);
    // The query at 15 reads from 8 on: blocks 0 and 1 of each local group (6) are released; position 15 is in block 3.
    expect(m.numFreeBlocks).toBe(0);
    expect(m.freeBlocksAfter(req, 1)).toBe(6);
    // 20 tokens at once would need 5 more blocks a group: refused, the window's blocks released all the same.
    expect(m.allocateSlots(req, 20)).toBeNull();
    expect(m.numFreeBlocks).toBe(6);
    expect(ids(m.allocateSlots(req, 1)!)).toEqual([]);
    req.numComputedTokens = 16;
    // The next token needs a block in each of the 4 groups: 2 would be left.
    req.appendOutputTokenIds([2]);
    expect(m.freeBlocksAfter(req, 1)).toBe(2);
  });
});

describe("prefix hits with a window", () => {
  test("a hit needs the full group's blocks and each local group's last 2 (the next query's window), nothing before", () => {
    const m = manager();
    const prompt = range(100, 20);
    const a = new Request({ id: "a", promptTokenIds: prompt });
    // One step of 20 tokens: blocks 0-4 (full group), 5-9, 10-14, 15-19 (local), all full and cached.
    expect(run(m, a, 0)).toBe(true);
    m.free(a);
    const b = new Request({ id: "b", promptTokenIds: [...prompt, ...range(900, 6)] });
    const hit = m.getComputedBlocks(b);
    expect(hit.numComputedTokens).toBe(20);
    expect(hit.groups.map(ids)).toEqual([[0, 1, 2, 3, 4], [null, null, null, 8, 9], [null, null, null, 13, 14], [null, null, null, 18, 19]]);
    const before = m.numFreeBlocks;
    // 26 tokens: 7 entries a group, 2 new ones each; only the touched hits leave the free queue.
    expect(ids(m.allocateSlots(b, 6, 20, hit.groups)!)).toEqual(range(20, 8));
    expect(m.numFreeBlocks).toBe(before - 8 - 5 - 3 * 2);
    expect(m.getBlockIds(b, 1)).toEqual([SKIPPED_BLOCK_ID, SKIPPED_BLOCK_ID, SKIPPED_BLOCK_ID, 8, 9, 22, 23]);
    expect(b.numCachedTokens).toBe(20);
  });

  test("every group's hits leave the free queue before any group takes new blocks (a local hit at the queue's head stays)", () => {
    // A pool of exactly a's 20 blocks: freed, the queue holds them last block first, group after group (lru):
    // 4 3 2 1 0, 9 8 7 6 5, 14 … 10, 19 … 15. b's hits: 0-4 and 8, 9, 13, 14, 18, 19. Had the full group taken its
    // two new blocks before the local groups' hits left the queue, it would have popped 9 and 8, evicting the first
    // local group's hit.
    const m = manager(20);
    const prompt = range(100, 20);
    const a = new Request({ id: "a", promptTokenIds: prompt });
    expect(run(m, a, 0)).toBe(true);
    m.free(a);
    expect(m.freeBlockIds()).toEqual([4, 3, 2, 1, 0, 9, 8, 7, 6, 5, 14, 13, 12, 11, 10, 19, 18, 17, 16, 15]);
    const b = new Request({ id: "b", promptTokenIds: [...prompt, ...range(900, 6)] });
    const hit = m.getComputedBlocks(b);
    expect(hit.groups.map(ids)).toEqual([[0, 1, 2, 3, 4], [null, null, null, 8, 9], [null, null, null, 13, 14], [null, null, null, 18, 19]]);
    expect(ids(m.allocateSlots(b, 6, 20, hit.groups)!)).toEqual([7, 6, 5, 12, 11, 10, 17, 16]);
    expect([0, 1, 2, 3].map((g) => m.getBlockIds(b, g))).toEqual([
      [0, 1, 2, 3, 4, 7, 6],
      [SKIPPED_BLOCK_ID, SKIPPED_BLOCK_ID, SKIPPED_BLOCK_ID, 8, 9, 5, 12],
      [SKIPPED_BLOCK_ID, SKIPPED_BLOCK_ID, SKIPPED_BLOCK_ID, 13, 14, 11, 10],
      [SKIPPED_BLOCK_ID, SKIPPED_BLOCK_ID, SKIPPED_BLOCK_ID, 18, 19, 17, 16],
    ]);
    // Every hit is still cached as its group's block, held once.
    for (const block of [8, 9, 13, 14, 18, 19]) expect([m.block(block).refCnt, m.block(block).blockHash !== null]).toEqual([1, true]);
    expect(m.freeBlockIds()).toEqual([15]);
  });

  test("local blocks that left the window were reused: a hit that needs them ends earlier, the full group's cut to match", () => {
    // A pool of 16 blocks. a: 12 prompt tokens (3 blocks a group: 0-2, 3-5, 6-8, 9-11), then positions 12..19 one
    // at a time: blocks 0 and 1 of the local groups leave the window (3, 6, 9, then 4, 7, 10) and the fifth
    // blocks, at 16, are the four popped from the queue's head (3, 6, 9, 4: evicting what they held); at 19
    // the third local blocks leave the window (5, 8, 11) and stay cached.
    const m = manager(16);
    const prompt = range(100, 12);
    const a = new Request({ id: "a", promptTokenIds: prompt });
    expect(run(m, a, 8, 500)).toBe(true);
    const S = SKIPPED_BLOCK_ID;
    expect([0, 1, 2, 3].map((g) => m.getBlockIds(a, g))).toEqual([[0, 1, 2, 12, 3], [S, S, S, 13, 6], [S, S, S, 14, 9], [S, S, S, 15, 4]]);
    m.free(a);
    const text = [...prompt, ...range(500, 4)];
    // 16 tokens cached in the full group; the window before position 16 is blocks 2 and 3 (5-13, 8-14, 11-15): a hit.
    const b = new Request({ id: "b", promptTokenIds: [...text, 9999, 9998] });
    const hitB = m.getComputedBlocks(b);
    expect(hitB.groups.map(ids)).toEqual([[0, 1, 2, 12], [null, null, 5, 13], [null, null, 8, 14], [null, null, 11, 15]]);
    expect(hitB.numComputedTokens).toBe(16);
    // 12 tokens: the window before position 12 is blocks 1 and 2, and block 1 of the local groups was reused
    // (4, 7, 10 gone): no end has its window, not even 3 blocks back, so nothing hits, the full group's 3 blocks neither.
    const c = new Request({ id: "c", promptTokenIds: [...prompt, 9999, 9998] });
    expect({ ...m.getComputedBlocks(c) }).toEqual({ groups: [[], [], [], []], numComputedTokens: 0 });
    // Computing c refills what it needs and caches it again: the same prompt then hits.
    expect(run(m, c, 0)).toBe(true);
    m.free(c);
    const d = new Request({ id: "d", promptTokenIds: [...prompt, 9999, 9998, 1] });
    expect(m.getComputedBlocks(d).numComputedTokens).toBe(12);
  });
});

describe("forks and rollbacks of every group", () => {
  test("a fork shares each group's full blocks (skipped ones stay skipped) and copies each group's partly filled one", () => {
    const m = manager();
    const parent = new Request({ id: "p", promptTokenIds: range(100, 18) });
    expect(run(m, parent, 0)).toBe(true);
    // Positions 0..17: 5 blocks a group (0-4, 5-9, 10-14, 15-19); block 4 of each holds 2 tokens.
    const child = new Request({ id: "c", promptTokenIds: range(100, 18) });
    expect(m.fork(parent, child)).toEqual({ copies: [{ src: 4, dst: 20 }, { src: 9, dst: 21 }, { src: 14, dst: 22 }, { src: 19, dst: 23 }] });
    expect(m.getBlockIds(child, 0)).toEqual([0, 1, 2, 3, 20]);
    expect(m.getBlockIds(child, 3)).toEqual([15, 16, 17, 18, 23]);
    expect([m.block(16).refCnt, m.block(19).refCnt]).toEqual([2, 1]);
    // The child advances alone: its local blocks leave the window, the shared ones stay with the parent.
    child.numComputedTokens = 18;
    child.appendOutputTokenIds([7]);
    expect(ids(m.allocateSlots(child, 1)!)).toEqual([]);
    expect(m.getBlockIds(child, 3)).toEqual([SKIPPED_BLOCK_ID, SKIPPED_BLOCK_ID, 17, 18, 23]);
    expect([m.block(15).refCnt, m.block(16).refCnt]).toEqual([1, 1]);
  });

  test("a rollback drops the rejected positions' blocks in every group", () => {
    const m = manager();
    const req = new Request({ id: "r", promptTokenIds: range(100, 7) });
    expect(run(m, req, 0)).toBe(true);
    // A draft of 6 tokens computed at positions 7..12: 4 blocks a group.
    req.appendOutputTokenIds([1]);
    expect(ids(m.allocateSlots(req, 6)!)).toEqual(range(8, 8));
    m.rollback(req, 8);
    expect([0, 1, 2, 3].map((g) => m.getBlockIds(req, g))).toEqual([[0, 1], [2, 3], [4, 5], [6, 7]]);
    expect(m.freeBlockIds().slice(-8)).toEqual([9, 8, 11, 10, 13, 12, 15, 14]);
  });
});
