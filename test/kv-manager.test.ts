import { describe, expect, test } from "bun:test";
import { KVCacheManager, Request, hashBlockTokens, type EvictionPolicyName, type KVCacheBlock } from "../src/kv/index.ts";

const range = (start: number, count: number): number[] => Array.from({ length: count }, (_, i) => start + i);

/** Admits a request the way the scheduler does: look up hits, allocate the rest of the prompt, compute it. */
function prefill(manager: KVCacheManager, req: Request): KVCacheBlock[] | null {
  const hit = manager.getComputedBlocks(req);
  const allocated = manager.allocateSlots(req, req.numTokens - hit.numComputedTokens, hit.numComputedTokens, hit.groups);
  if (allocated !== null) req.numComputedTokens = req.numTokens;
  return allocated;
}

/** One decode step: the sampled token is appended, then its slot is allocated and it is computed. */
function decode(manager: KVCacheManager, req: Request, token: number): KVCacheBlock[] | null {
  req.appendOutputTokenIds([token]);
  const allocated = manager.allocateSlots(req, 1);
  if (allocated !== null) req.numComputedTokens++;
  return allocated;
}

/** Block ids in order (null for a block a window skipped). */
const ids = (blocks: readonly (KVCacheBlock | null)[] | null): (number | null)[] | null => (blocks === null ? null : blocks.map((b) => b?.blockId ?? null));

function cachedIds(manager: KVCacheManager): number[] {
  return range(0, manager.numBlocks).filter((id) => manager.block(id).blockHash !== null);
}

function snapshot(manager: KVCacheManager, requests: Request[]) {
  return {
    free: manager.freeBlockIds(),
    stats: { ...manager.stats },
    blocks: range(0, manager.numBlocks).map((id) => ({ ref: manager.block(id).refCnt, hash: manager.block(id).blockHash })),
    tables: requests.map((r) => manager.getBlockIds(r)),
    cached: requests.map((r) => r.numCachedTokens),
  };
}

describe("vLLM design doc worked example (block size 4, 10 blocks, lru)", () => {
  test("times 1 to 6 step by step", () => {
    const manager = new KVCacheManager({ numBlocks: 10, blockSize: 4, evictionPolicy: "lru" });
    const prompt0 = range(1000, 15);

    // Time 1: the cache is empty; request 0 (15 prompt tokens) gets 4 blocks, 3 full and cached.
    const req0 = new Request({ id: "req0", promptTokenIds: prompt0 });
    expect({ ...manager.getComputedBlocks(req0) }).toEqual({ groups: [[]], numComputedTokens: 0 });
    expect(ids(manager.allocateSlots(req0, 15))).toEqual([0, 1, 2, 3]);
    req0.numComputedTokens = 15;
    expect(manager.getBlockIds(req0)).toEqual([0, 1, 2, 3]);
    expect(cachedIds(manager)).toEqual([0, 1, 2]);
    expect(manager.freeBlockIds()).toEqual([4, 5, 6, 7, 8, 9]);
    expect(req0.numCachedTokens).toBe(0);

    // Time 2: request 0's first decode step computes its 16th token, which fills block 3: cached,
    // no new block. The next decode step needs a slot for token 17: block 4.
    expect(ids(decode(manager, req0, 2000))).toEqual([]);
    expect(cachedIds(manager)).toEqual([0, 1, 2, 3]);
    expect(ids(decode(manager, req0, 2001))).toEqual([4]);
    expect(manager.getBlockIds(req0)).toEqual([0, 1, 2, 3, 4]);
    expect(cachedIds(manager)).toEqual([0, 1, 2, 3]);
    expect(manager.freeBlockIds()).toEqual([5, 6, 7, 8, 9]);

    // Time 3: request 1 (14 prompt tokens, the first 10 as request 0's) hits 2 blocks: the third
    // matches only 2 of 4 tokens.
    const req1 = new Request({ id: "req1", promptTokenIds: [...prompt0.slice(0, 10), ...range(3000, 4)] });
    const hit1 = manager.getComputedBlocks(req1);
    expect(ids(hit1.groups[0]!)).toEqual([0, 1]);
    expect(hit1.numComputedTokens).toBe(8);
    expect(ids(manager.allocateSlots(req1, 6, 8, hit1.groups))).toEqual([5, 6]);
    req1.numComputedTokens = 14;
    expect(req1.numCachedTokens).toBe(8);
    expect(manager.getBlockIds(req1)).toEqual([0, 1, 5, 6]);
    expect(manager.freeBlockIds()).toEqual([7, 8, 9]);
    expect(cachedIds(manager)).toEqual([0, 1, 2, 3, 5]);
    expect([0, 1, 2, 3, 4, 5, 6].map((id) => manager.block(id).refCnt)).toEqual([2, 2, 1, 1, 1, 1, 1]);

    // Time 4: request 0 finishes. Blocks 4, 3, 2 go to the free queue in reverse order (2 and 3
    // still cached); 0 and 1 stay with request 1.
    manager.free(req0);
    expect(manager.freeBlockIds()).toEqual([7, 8, 9, 4, 3, 2]);
    expect(cachedIds(manager)).toEqual([0, 1, 2, 3, 5]);
    expect([0, 1].map((id) => manager.block(id).refCnt)).toEqual([1, 1]);

    // Time 5: request 1 finishes.
    manager.free(req1);
    expect(manager.freeBlockIds()).toEqual([7, 8, 9, 4, 3, 2, 6, 5, 1, 0]);
    expect(manager.numFreeBlocks).toBe(10);

    // Time 6: request 2 (29 prompt tokens, the first 12 as request 0's) hits 0, 1, 2; they are
    // touched out of the queue (leaving 7 8 9 4 3 6 5), then 7 8 9 4 3 are popped, evicting 3.
    const req2 = new Request({ id: "req2", promptTokenIds: [...prompt0.slice(0, 12), ...range(4000, 17)] });
    const hit2 = manager.getComputedBlocks(req2);
    expect(ids(hit2.groups[0]!)).toEqual([0, 1, 2]);
    expect(hit2.numComputedTokens).toBe(12);
    expect(manager.stats.evictions).toBe(0);
    expect(ids(manager.allocateSlots(req2, 17, 12, hit2.groups))).toEqual([7, 8, 9, 4, 3]);
    expect(manager.getBlockIds(req2)).toEqual([0, 1, 2, 7, 8, 9, 4, 3]);
    expect(manager.freeBlockIds()).toEqual([6, 5]);
    expect(manager.stats.evictions).toBe(1);
    // 28 of 29 tokens are in full blocks: 7 8 9 4 are cached now; block 3 holds the last token.
    expect(cachedIds(manager)).toEqual([0, 1, 2, 4, 5, 7, 8, 9]);
    expect(manager.stats).toEqual({ queries: 15 + 14 + 29, hits: 8 + 12, evictions: 1 });
  });
});

describe("KVCacheManager", () => {
  test("a fresh pool hands out blocks in id order", () => {
    const manager = new KVCacheManager({ numBlocks: 6, blockSize: 4, evictionPolicy: "lru" });
    const a = new Request({ id: "a", promptTokenIds: range(0, 5) });
    const b = new Request({ id: "b", promptTokenIds: range(100, 9) });
    expect(manager.getBlockIds(a)).toEqual([]);
    expect(ids(prefill(manager, a))).toEqual([0, 1]);
    expect(ids(prefill(manager, b))).toEqual([2, 3, 4]);
    expect(manager.numFreeBlocks).toBe(1);
    expect(manager.numUsedBlocks).toBe(5);
    expect(manager.freeBlockIds()).toEqual([5]);
  });

  test("decode allocates a block exactly when it crosses a block boundary and caches blocks as they fill", () => {
    const manager = new KVCacheManager({ numBlocks: 8, blockSize: 4, evictionPolicy: "lru" });
    const a = new Request({ id: "a", promptTokenIds: range(0, 6) });
    expect(ids(prefill(manager, a))).toEqual([0, 1]);
    const allocations = [6, 7, 8, 9, 10].map((t) => ids(decode(manager, a, t)));
    // Tokens 7 and 8 fit block 1; token 9 needs block 2; 10 and 11 fit it.
    expect(allocations).toEqual([[], [], [2], [], []]);
    expect(manager.getBlockIds(a)).toEqual([0, 1, 2]);
    // 11 tokens computed: blocks 0 and 1 full and cached, block 1 with two output tokens in it.
    expect(cachedIds(manager)).toEqual([0, 1]);
    expect(manager.block(1).blockHash).toBe(hashBlockTokens(hashBlockTokens(null, [0, 1, 2, 3], null), [4, 5, 6, 7], null));
    // A new request whose prompt is a's prompt plus outputs hits both blocks.
    const b = new Request({ id: "b", promptTokenIds: range(0, 11) });
    expect(ids(manager.getComputedBlocks(b).groups[0]!)).toEqual([0, 1]);
  });

  test("free puts blocks at the tail in reverse order; cached blocks stay findable until popped", () => {
    const manager = new KVCacheManager({ numBlocks: 6, blockSize: 2, evictionPolicy: "lru" });
    const a = new Request({ id: "a", promptTokenIds: range(0, 7) });
    expect(ids(prefill(manager, a))).toEqual([0, 1, 2, 3]);
    manager.free(a);
    manager.free(a); // freeing twice is harmless
    expect(manager.getBlockIds(a)).toEqual([]);
    expect(manager.freeBlockIds()).toEqual([4, 5, 3, 2, 1, 0]);
    expect(cachedIds(manager)).toEqual([0, 1, 2]);
    const again = new Request({ id: "again", promptTokenIds: range(0, 7) });
    expect(ids(manager.getComputedBlocks(again).groups[0]!)).toEqual([0, 1, 2]);

    // An unrelated request takes 4 blocks: 4, 5, 3 (uncached) and 2, which is evicted.
    const other = new Request({ id: "other", promptTokenIds: range(50, 8) });
    expect(ids(prefill(manager, other))).toEqual([4, 5, 3, 2]);
    expect(manager.stats.evictions).toBe(1);
    expect(manager.block(2).blockHash).not.toBeNull(); // re-cached with other's content
    expect(ids(manager.getComputedBlocks(again).groups[0]!)).toEqual([0, 1]);
  });

  test("a fully cached prompt still recomputes its last token", () => {
    const manager = new KVCacheManager({ numBlocks: 10, blockSize: 4, evictionPolicy: "lru" });
    const first = new Request({ id: "first", promptTokenIds: range(0, 8) });
    expect(ids(prefill(manager, first))).toEqual([0, 1]);
    expect(cachedIds(manager)).toEqual([0, 1]);

    // Same 8 tokens: at most 7 can be hits, so only block 0 is; block 1's tokens are recomputed
    // into a new block, which duplicates block 1 (same hash, both cached: tables are append-only).
    const same = new Request({ id: "same", promptTokenIds: range(0, 8) });
    const hit = manager.getComputedBlocks(same);
    expect(ids(hit.groups[0]!)).toEqual([0]);
    expect(hit.numComputedTokens).toBe(4);
    expect(ids(manager.allocateSlots(same, 4, 4, hit.groups))).toEqual([2]);
    expect(same.numCachedTokens).toBe(4);
    expect(manager.block(2).blockHash).toBe(manager.block(1).blockHash);
    expect(cachedIds(manager)).toEqual([0, 1, 2]);

    // 9 tokens: both full blocks can be hits, the 9th token is computed.
    const longer = new Request({ id: "longer", promptTokenIds: range(0, 9) });
    const hit9 = manager.getComputedBlocks(longer);
    expect(hit9.numComputedTokens).toBe(8);
    expect(ids(manager.allocateSlots(longer, 1, 8, hit9.groups))).toEqual([3]);

    // A prompt shorter than a block can never hit.
    const short = new Request({ id: "short", promptTokenIds: range(0, 4) });
    expect(manager.getComputedBlocks(short).numComputedTokens).toBe(0);
  });

  test("duplicated blocks (design doc): the second identical request caches a duplicate of block 1", () => {
    const manager = new KVCacheManager({ numBlocks: 8, blockSize: 4, evictionPolicy: "lru" });
    const [A, B, C, D, E, F, G, H, I] = range(1, 9) as [number, number, number, number, number, number, number, number, number];
    const run = (id: string): Request => {
      const req = new Request({ id, promptTokenIds: [A, B, C, D, E, F] });
      prefill(manager, req);
      decode(manager, req, G);
      decode(manager, req, H);
      decode(manager, req, I);
      return req;
    };
    const req1 = run("req1");
    expect(manager.getBlockIds(req1)).toEqual([0, 1, 2]);
    expect(cachedIds(manager)).toEqual([0, 1]);
    const req2 = run("req2");
    expect(manager.getBlockIds(req2)).toEqual([0, 3, 4]);
    expect(cachedIds(manager)).toEqual([0, 1, 3]);
    expect(manager.block(3).blockHash).toBe(manager.block(1).blockHash);
    manager.free(req1);
    manager.free(req2);
    expect(manager.freeBlockIds()).toEqual([5, 6, 7, 2, 1, 4, 3, 0]);
    // Evict block 1 (pop 5 6 7 2 1): its duplicate 3 still serves hits.
    const filler = new Request({ id: "filler", promptTokenIds: range(100, 20) });
    expect(ids(prefill(manager, filler))).toEqual([5, 6, 7, 2, 1]);
    const req3 = new Request({ id: "req3", promptTokenIds: [A, B, C, D, E, F, G, H, I] });
    expect(ids(manager.getComputedBlocks(req3).groups[0]!)).toEqual([0, 3]);
  });

  test("requests allocated back to back in one step share the blocks the first just cached", () => {
    const manager = new KVCacheManager({ numBlocks: 10, blockSize: 4, evictionPolicy: "lru" });
    const a = new Request({ id: "a", promptTokenIds: [...range(0, 8), 90, 91] });
    const b = new Request({ id: "b", promptTokenIds: [...range(0, 8), 80, 81, 82] });
    const hitA = manager.getComputedBlocks(a);
    expect(ids(manager.allocateSlots(a, 10, hitA.numComputedTokens, hitA.groups))).toEqual([0, 1, 2]);
    // Same step: a's KV is not computed yet, but its full blocks are cached already.
    const hitB = manager.getComputedBlocks(b);
    expect(ids(hitB.groups[0]!)).toEqual([0, 1]);
    expect(ids(manager.allocateSlots(b, 3, 8, hitB.groups))).toEqual([3]);
    expect(manager.getBlockIds(b)).toEqual([0, 1, 3]);
    expect([0, 1, 2, 3].map((id) => manager.block(id).refCnt)).toEqual([2, 2, 1, 1]);
  });

  test("chunked prefill caches only the blocks the computed tokens fill", () => {
    const manager = new KVCacheManager({ numBlocks: 10, blockSize: 4, evictionPolicy: "lru" });
    const a = new Request({ id: "a", promptTokenIds: range(0, 14) });
    expect(ids(manager.allocateSlots(a, 6))).toEqual([0, 1]);
    expect(cachedIds(manager)).toEqual([0]);
    a.numComputedTokens = 6;
    expect(ids(manager.allocateSlots(a, 6))).toEqual([2]);
    expect(cachedIds(manager)).toEqual([0, 1, 2]);
    a.numComputedTokens = 12;
    expect(ids(manager.allocateSlots(a, 2))).toEqual([3]);
    expect(cachedIds(manager)).toEqual([0, 1, 2]);
  });

  test("a failed allocation changes nothing", () => {
    const manager = new KVCacheManager({ numBlocks: 6, blockSize: 4, evictionPolicy: "lru" });
    const a = new Request({ id: "a", promptTokenIds: range(0, 16) });
    expect(ids(prefill(manager, a))).toEqual([0, 1, 2, 3]);
    manager.free(a); // free queue: 4 5 3 2 1 0, blocks 0-3 cached
    const running = new Request({ id: "running", promptTokenIds: range(500, 4) });
    expect(ids(prefill(manager, running))).toEqual([4]); // free queue: 5 3 2 1 0

    // 3 hits (blocks 0 1 2, all in the free queue) + 3 new blocks: 5 free blocks, but touching the
    // hits leaves only 2 to allocate from.
    const b = new Request({ id: "b", promptTokenIds: [...range(0, 12), ...range(700, 12)] });
    const hit = manager.getComputedBlocks(b);
    expect(ids(hit.groups[0]!)).toEqual([0, 1, 2]);
    const before = snapshot(manager, [a, running, b]);
    expect(manager.allocateSlots(b, 12, 12, hit.groups)).toBeNull();
    expect(snapshot(manager, [a, running, b])).toEqual(before);
    expect(b.numCachedTokens).toBeNull();

    // A running request that needs more blocks than are free.
    running.numComputedTokens = 4;
    expect(manager.allocateSlots(running, 100)).toBeNull();
    expect(snapshot(manager, [a, running, b])).toEqual(before);

    // Exactly enough: 3 hits + 2 new.
    const c = new Request({ id: "c", promptTokenIds: [...range(0, 12), ...range(800, 8)] });
    const hitC = manager.getComputedBlocks(c);
    expect(ids(manager.allocateSlots(c, 8, 12, hitC.groups))).toEqual([5, 3]);
    expect(manager.freeBlockIds()).toEqual([]);
    expect(manager.stats.evictions).toBe(1); // block 3 was cached
  });

  test("counts queries and hits in tokens, evictions in blocks", () => {
    const manager = new KVCacheManager({ numBlocks: 4, blockSize: 2, evictionPolicy: "lru" });
    const a = new Request({ id: "a", promptTokenIds: range(0, 5) });
    prefill(manager, a);
    expect(manager.stats).toEqual({ queries: 5, hits: 0, evictions: 0 });
    const b = new Request({ id: "b", promptTokenIds: range(0, 7) });
    expect(manager.getComputedBlocks(b).numComputedTokens).toBe(4);
    expect(manager.stats).toEqual({ queries: 12, hits: 4, evictions: 0 });
    manager.free(a);
    const c = new Request({ id: "c", promptTokenIds: range(100, 8) });
    prefill(manager, c); // reuses 3 (never cached) 2, 1, 0 (cached: evicted)
    expect(manager.stats).toEqual({ queries: 20, hits: 4, evictions: 2 });
  });

  test("resetPrefixCache refuses while blocks are in use, then forgets every cached block", () => {
    const manager = new KVCacheManager({ numBlocks: 6, blockSize: 2, evictionPolicy: "lru" });
    const a = new Request({ id: "a", promptTokenIds: range(0, 5) });
    prefill(manager, a);
    expect(manager.numCachedBlocks).toBe(2);
    expect(manager.resetPrefixCache()).toBe(false);
    expect(manager.numCachedBlocks).toBe(2);
    manager.free(a);
    const queue = manager.freeBlockIds();
    expect(manager.resetPrefixCache()).toBe(true);
    expect(manager.numCachedBlocks).toBe(0);
    expect(cachedIds(manager)).toEqual([]);
    expect(manager.freeBlockIds()).toEqual(queue);
    const again = new Request({ id: "again", promptTokenIds: range(0, 5) });
    expect(manager.getComputedBlocks(again).groups[0]!).toEqual([]);
    expect(ids(prefill(manager, again))).toEqual([3, 4, 5]);
    expect(manager.stats.evictions).toBe(0); // reset blocks are not evictions
  });

  test("enableCaching: false allocates from the same pool without hashing or hits", () => {
    const manager = new KVCacheManager({ numBlocks: 6, blockSize: 2, enableCaching: false, evictionPolicy: "lru" });
    const a = new Request({ id: "a", promptTokenIds: range(0, 5) });
    expect(ids(prefill(manager, a))).toEqual([0, 1, 2]);
    expect(ids(decode(manager, a, 9))).toEqual([]);
    expect(ids(decode(manager, a, 9))).toEqual([3]);
    expect(cachedIds(manager)).toEqual([]);
    manager.free(a);
    expect(manager.freeBlockIds()).toEqual([4, 5, 3, 2, 1, 0]);
    const b = new Request({ id: "b", promptTokenIds: range(0, 5) });
    expect({ ...manager.getComputedBlocks(b) }).toEqual({ groups: [[]], numComputedTokens: 0 });
    expect(ids(prefill(manager, b))).toEqual([4, 5, 3]);
    expect(manager.stats).toEqual({ queries: 0, hits: 0, evictions: 0 });
    expect(manager.resetPrefixCache()).toBe(false);
  });

  test("LoRA, salt and multimodal items isolate cached blocks", () => {
    const manager = new KVCacheManager({ numBlocks: 40, blockSize: 4, evictionPolicy: "lru" });
    const tokens = range(0, 13);
    const hits = (opts: Omit<ConstructorParameters<typeof Request>[0], "id" | "promptTokenIds">, id: string): number => {
      const req = new Request({ id, promptTokenIds: tokens, ...opts });
      const n = manager.getComputedBlocks(req).numComputedTokens;
      prefill(manager, req);
      return n;
    };
    expect(hits({}, "base")).toBe(0);
    expect(hits({}, "base2")).toBe(12);
    expect(hits({ loraName: "x" }, "lora-x")).toBe(0);
    expect(hits({ cacheSalt: "x" }, "salt-x")).toBe(0);
    expect(hits({ loraName: "x" }, "lora-x2")).toBe(12);
    expect(hits({ cacheSalt: "x" }, "salt-x2")).toBe(12);
    expect(hits({ cacheSalt: "y" }, "salt-y")).toBe(0);
    const image = (id: string, offset: number) => ({ mmItems: [{ id, offset, length: 3 }] });
    // The image covers [5, 8): block 0 has no image in it and is shared with the base requests.
    expect(hits(image("img1", 5), "mm1")).toBe(4);
    expect(hits(image("img1", 5), "mm1b")).toBe(12);
    // A different image in block 1 still shares block 0.
    expect(hits(image("img2", 5), "mm2")).toBe(4);
    // The same image one token later also changes block 1 only.
    expect(hits(image("img1", 6), "mm1-shifted")).toBe(4);
  });

  test("rejects inconsistent calls", () => {
    const manager = new KVCacheManager({ numBlocks: 10, blockSize: 4, evictionPolicy: "lru" });
    const a = new Request({ id: "a", promptTokenIds: range(0, 9) });
    prefill(manager, a);
    const b = new Request({ id: "b", promptTokenIds: range(0, 9) });
    const hit = manager.getComputedBlocks(b);
    expect(() => manager.allocateSlots(b, 1, 4, hit.groups)).toThrow(RangeError);
    expect(() => manager.allocateSlots(b, -1)).toThrow(RangeError);
    expect(() => manager.allocateSlots(a, 1, 8, hit.groups)).toThrow("only accepted when the request is admitted");
    const impostor = new Request({ id: "a", promptTokenIds: range(0, 9) });
    expect(() => manager.allocateSlots(impostor, 1)).toThrow("another Request");
    const preempted = new Request({ id: "p", promptTokenIds: range(0, 9) });
    preempted.numComputedTokens = 5;
    expect(() => manager.allocateSlots(preempted, 4)).toThrow("computed tokens");

    // Stale hits: block 1 is evicted and reused between getComputedBlocks and allocateSlots.
    manager.free(a);
    const c = new Request({ id: "c", promptTokenIds: range(0, 9) });
    const stale = manager.getComputedBlocks(c);
    expect(ids(stale.groups[0]!)).toEqual([0, 1]);
    const filler = new Request({ id: "filler", promptTokenIds: range(100, 36) });
    expect(ids(prefill(manager, filler))).toEqual([3, 4, 5, 6, 7, 8, 9, 2, 1]);
    expect(() => manager.allocateSlots(c, 1, 8, stale.groups)).toThrow("no longer holds");
  });
});

describe("eviction policies", () => {
  /** Pool of 4, block size 4: a and b each cache one block and leave one partial block. */
  function scenario(policy: EvictionPolicyName) {
    const manager = new KVCacheManager({ numBlocks: 4, blockSize: 4, evictionPolicy: policy });
    const a = new Request({ id: "a", promptTokenIds: range(0, 6) });
    const b = new Request({ id: "b", promptTokenIds: range(100, 6) });
    const aBlocks = ids(prefill(manager, a));
    manager.free(a);
    const afterA = manager.freeBlockIds();
    const bBlocks = ids(prefill(manager, b));
    manager.free(b);
    const afterB = manager.freeBlockIds();
    const d = new Request({ id: "d", promptTokenIds: range(200, 6) });
    const dBlocks = ids(prefill(manager, d));
    const aStillCached = new Request({ id: "a2", promptTokenIds: range(0, 6) });
    return { aBlocks, afterA, bBlocks, afterB, dBlocks, evictions: manager.stats.evictions, aHits: manager.getComputedBlocks(aStillCached).numComputedTokens };
  }

  test("lru: an unfilled freed block waits at the tail while a cached block ahead of it is evicted", () => {
    expect(scenario("lru")).toEqual({
      aBlocks: [0, 1],
      afterA: [2, 3, 1, 0],
      bBlocks: [2, 3],
      afterB: [1, 0, 3, 2],
      dBlocks: [1, 0], // evicts a's cached block 0
      evictions: 1,
      aHits: 0,
    });
  });

  test("lru-keep-cached is the default (the README gives the measurements)", () => {
    expect(new KVCacheManager({ numBlocks: 4, blockSize: 2 }).evictionPolicy).toBe("lru-keep-cached");
  });

  test("lru-keep-cached: unfilled freed blocks are reused before any cached block is evicted", () => {
    expect(scenario("lru-keep-cached")).toEqual({
      aBlocks: [0, 1],
      afterA: [1, 2, 3, 0],
      bBlocks: [1, 2],
      afterB: [2, 3, 0, 1],
      dBlocks: [2, 3],
      evictions: 0,
      aHits: 4,
    });
  });

  test("lru-keep-cached keeps the free order of several unfilled blocks (caching off)", () => {
    const manager = new KVCacheManager({ numBlocks: 5, blockSize: 2, enableCaching: false, evictionPolicy: "lru-keep-cached" });
    const a = new Request({ id: "a", promptTokenIds: range(0, 5) });
    prefill(manager, a);
    manager.free(a);
    expect(manager.freeBlockIds()).toEqual([2, 1, 0, 3, 4]);
  });

  test("rejects unknown policies and hash functions", () => {
    expect(() => new KVCacheManager({ numBlocks: 4, blockSize: 4, evictionPolicy: "fifo" as EvictionPolicyName })).toThrow(RangeError);
    expect(() => new KVCacheManager({ numBlocks: 4, blockSize: 4, hash: "md5" as "sha256", evictionPolicy: "lru" })).toThrow(RangeError);
    expect(() => new KVCacheManager({ numBlocks: 0, blockSize: 4, evictionPolicy: "lru" })).toThrow(RangeError);
  });
});
