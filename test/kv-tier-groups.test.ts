/**
 * A second tier (the disk) under a KV cache with several groups (kv-groups.ts), with exact block
 * ids as test/kv-sliding-window.test.ts: what KVCacheManager.blocksToLoad plans to read (the
 * full-attention group's blocks of the whole hit, each local group's window before its end, only
 * those memory lacks), what adoptBlocks writes where, the hit the lookup then finds, and the plan
 * made again around a block that failed to read.
 */
import { describe, expect, test } from "bun:test";
import { KVCacheGroups } from "../src/kv/kv-groups.ts";
import { KVCacheManager } from "../src/kv/kv-cache-manager.ts";
import { Request, type KVCacheBlock } from "../src/kv/index.ts";

const range = (start: number, count: number): number[] => Array.from({ length: count }, (_, i) => start + i);
const ids = (blocks: readonly (KVCacheBlock | null)[]): (number | null)[] => blocks.map((b) => b?.blockId ?? null);

/** rnd-gemma3's layout (layer 2 global, the others local): four groups of one layer. Blocks of 4, a window of 8: a hit needs each local group's last 2 blocks. */
function gemmaLike(numBlocks = 40): KVCacheManager {
  const groups = KVCacheGroups.fromLayers(4, (l) => (l === 2 ? { kind: "full" } : { kind: "sliding", window: 8 }));
  return new KVCacheManager({ numBlocks, blockSize: 4, groups, evictionPolicy: "lru" });
}

/** A tier holding `stored` (hash/group) with a byte per block, and the writes adoptBlocks makes. */
function tierOf(stored: Set<string>) {
  const writes: [number, number][] = [];
  return {
    stored,
    writes,
    held: (hash: string, group: number) => stored.has(`${hash}/${group}`),
    kvOf: (m: KVCacheManager, req: Request) => (i: number, g: number) => (stored.has(`${m.blockKey(req, i, g).hash}/${g}`) ? new Uint8Array([i, g]) : null),
    write: (blockId: number, group: number) => void writes.push([blockId, group]),
  };
}

/** Every block of `req`'s first `numBlocks` in every group of `m`, as a tier that wrote them all holds them. */
function everyBlock(m: KVCacheManager, req: Request, numBlocks: number): Set<string> {
  const stored = new Set<string>();
  for (let i = 0; i < numBlocks; i++) for (let g = 0; g < m.groups.groups.length; g++) stored.add(`${m.blockKey(req, i, g).hash}/${g}`);
  return stored;
}

const plan = (p: ReturnType<KVCacheManager["blocksToLoad"]>) => (p === null ? null : { numBlocks: p.numBlocks, keys: p.keys.map(([i, key]) => [i, key.group]) });

describe("a second tier under several KV cache groups", () => {
  test("after a restart: the full group's 5 blocks and each local group's last 2 are read, adopted in order, and hit", () => {
    const m = gemmaLike();
    const req = new Request({ id: "a", promptTokenIds: range(100, 22) });
    const tier = tierOf(everyBlock(m, req, 5));
    const p = m.blocksToLoad(req, tier.held);
    expect(plan(p)).toEqual({
      numBlocks: 5,
      keys: [[0, 0], [1, 0], [2, 0], [3, 0], [3, 1], [3, 2], [3, 3], [4, 0], [4, 1], [4, 2], [4, 3]],
    });
    expect(m.adoptBlocks(req, p!.numBlocks, tier.kvOf(m, req), tier.write)).toBe(11);
    expect(tier.writes).toEqual([[0, 0], [1, 0], [2, 0], [3, 0], [4, 1], [5, 2], [6, 3], [7, 0], [8, 1], [9, 2], [10, 3]]);
    const hit = m.getComputedBlocks(req);
    expect(hit.numComputedTokens).toBe(20);
    expect(hit.groups.map(ids)).toEqual([[0, 1, 2, 3, 7], [null, null, null, 4, 8], [null, null, null, 5, 9], [null, null, null, 6, 10]]);
    expect(m.allocateSlots(req, 2, hit.numComputedTokens, hit.groups)).not.toBeNull();
    expect(req.numTierCachedTokens).toBe(20);
    // Memory now holds the hit: nothing more to read.
    expect(m.blocksToLoad(new Request({ id: "b", promptTokenIds: range(100, 22) }), tier.held)).toBeNull();
  });

  test("a local block that fails to read: the hit ends earlier, and the plan made again reads that window's blocks", () => {
    const m = gemmaLike();
    const req = new Request({ id: "a", promptTokenIds: range(100, 22) });
    const tier = tierOf(everyBlock(m, req, 5));
    const p = m.blocksToLoad(req, tier.held)!;
    // Block 4 of group 2 is damaged: its read fails and its file is removed.
    tier.stored.delete(`${m.blockKey(req, 4, 2).hash}/2`);
    expect(m.adoptBlocks(req, p.numBlocks, tier.kvOf(m, req), tier.write)).toBe(10);
    // No hit of 5 blocks (group 2 lacks block 4), and none of 4 (no group holds block 2 of a window yet).
    expect(m.peekCachedTokens(req)).toBe(0);
    const again = m.blocksToLoad(req, tier.held);
    expect(plan(again)).toEqual({ numBlocks: 4, keys: [[2, 1], [2, 2], [2, 3]] });
    tier.writes.length = 0;
    expect(m.adoptBlocks(req, again!.numBlocks, tier.kvOf(m, req), tier.write)).toBe(3);
    expect(tier.writes).toEqual([[10, 1], [11, 2], [12, 3]]);
    const hit = m.getComputedBlocks(req);
    expect(hit.numComputedTokens).toBe(16);
    expect(hit.groups.map(ids)).toEqual([[0, 1, 2, 3], [null, null, 10, 4], [null, null, 11, 5], [null, null, 12, 6]]);
  });

  test("a full-attention block missing from the tier ends the hit there: the windows before it are read instead", () => {
    const m = gemmaLike();
    const req = new Request({ id: "a", promptTokenIds: range(100, 22) });
    const stored = everyBlock(m, req, 5);
    stored.delete(`${m.blockKey(req, 2, 0).hash}/0`);
    const tier = tierOf(stored);
    const p = m.blocksToLoad(req, tier.held);
    expect(plan(p)).toEqual({ numBlocks: 2, keys: [[0, 0], [0, 1], [0, 2], [0, 3], [1, 0], [1, 1], [1, 2], [1, 3]] });
    expect(m.adoptBlocks(req, p!.numBlocks, tier.kvOf(m, req), tier.write)).toBe(8);
    expect(m.getComputedBlocks(req).numComputedTokens).toBe(8);
  });

  test("memory's blocks are not read again: a request that computed the first 12 tokens leaves the rest to read", () => {
    const m = gemmaLike();
    const first = new Request({ id: "a", promptTokenIds: range(100, 12) });
    expect(m.allocateSlots(first, 12)).not.toBeNull();
    first.numComputedTokens = 12;
    m.free(first);
    const req = new Request({ id: "b", promptTokenIds: range(100, 22) });
    // Memory's hit: the first request's 3 blocks, cached in every group.
    expect(m.peekCachedTokens(req)).toBe(12);
    const tier = tierOf(everyBlock(m, req, 5));
    expect(plan(m.blocksToLoad(req, tier.held))).toEqual({
      numBlocks: 5,
      keys: [[3, 0], [3, 1], [3, 2], [3, 3], [4, 0], [4, 1], [4, 2], [4, 3]],
    });
  });

  test("a model whose every layer is windowed: the run's first block is adopted after a parent no block holds", () => {
    const groups = KVCacheGroups.fromLayers(2, () => ({ kind: "sliding", window: 8 }));
    const m = new KVCacheManager({ numBlocks: 8, blockSize: 4, groups, evictionPolicy: "lru" });
    const req = new Request({ id: "a", promptTokenIds: range(100, 22) });
    const tier = tierOf(everyBlock(m, req, 5));
    const p = m.blocksToLoad(req, tier.held);
    expect(plan(p)).toEqual({ numBlocks: 5, keys: [[3, 0], [4, 0]] });
    expect(m.adoptBlocks(req, p!.numBlocks, tier.kvOf(m, req), tier.write)).toBe(2);
    expect(tier.writes).toEqual([[0, 0], [1, 0]]);
    const hit = m.getComputedBlocks(req);
    expect(hit.numComputedTokens).toBe(20);
    expect(hit.groups.map(ids)).toEqual([[null, null, null, 0, 1]]);
  });
});
