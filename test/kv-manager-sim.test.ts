/**
 * Randomized scheduler simulation against a fake KV arena: each slot records which exact prefix
 * (extra keys + tokens up to and including its position) was computed into it. A cache hit whose
 * slots hold anything else, or a write into a block someone else reads, fails the test.
 */
import { afterEach, describe, expect, mock, spyOn, test } from "bun:test";
import { KVCacheManager, Request, RequestBlockHashes, type EvictionPolicyName, type HashAlgorithm } from "../src/kv/index.ts";

function makeRandom(seed: number): (n: number) => number {
  let state = seed >>> 0 || 1;
  return (n) => {
    state ^= state << 13;
    state ^= state >>> 17;
    state ^= state << 5;
    return (state >>> 0) % n;
  };
}

interface SimOptions {
  policy: EvictionPolicyName;
  hash: HashAlgorithm;
  blockSize: number;
  enableCaching: boolean;
  seed: number;
}

function simulate(opts: SimOptions): { hits: number; evictions: number; preemptions: number } {
  const { blockSize } = opts;
  const numBlocks = 24;
  const random = makeRandom(opts.seed);
  const manager = new KVCacheManager({ numBlocks, blockSize, evictionPolicy: opts.policy, hash: opts.hash, enableCaching: opts.enableCaching });
  const arena: (string | null)[] = new Array(numBlocks * blockSize).fill(null);
  const prefixes = [[], [1, 2, 3, 1, 2, 3, 1], [1, 2, 3, 1, 2, 0, 0, 0, 2, 1], [3, 3, 3, 3, 3, 3, 3, 3, 3]];
  const running: Request[] = [];
  const waiting: Request[] = [];
  let nextId = 0;
  let preemptions = 0;

  const contentKey = (req: Request, pos: number): string =>
    `${req.loraName}|${req.cacheSalt}|${JSON.stringify(req.mmItems)}|${req.allTokenIds.slice(0, pos + 1).join(",")}`;

  const slotOf = (req: Request, pos: number): number => {
    const blockId = manager.getBlockIds(req)[Math.floor(pos / blockSize)];
    if (blockId === undefined) throw new Error(`request ${req.id} has no block for position ${pos}`);
    return blockId * blockSize + (pos % blockSize);
  };

  const compute = (req: Request, count: number): void => {
    for (let pos = req.numComputedTokens; pos < req.numComputedTokens + count; pos++) {
      const slot = slotOf(req, pos);
      // Only the writer may hold a block while it is being written (hits are never rewritten).
      expect(manager.block(Math.floor(slot / blockSize)).refCnt).toBe(1);
      arena[slot] = contentKey(req, pos);
    }
    req.numComputedTokens += count;
  };

  const admit = (req: Request): boolean => {
    const hit = manager.getComputedBlocks(req);
    for (let pos = 0; pos < hit.numComputedTokens; pos++) {
      const block = hit.groups[0]![Math.floor(pos / blockSize)]!;
      expect(arena[block.blockId * blockSize + (pos % blockSize)]).toBe(contentKey(req, pos));
    }
    expect(hit.numComputedTokens).toBeLessThan(req.numTokens);
    // Chunked prefill now and then: admit with part of the remaining tokens.
    const remaining = req.numTokens - hit.numComputedTokens;
    const chunk = random(3) === 0 ? 1 + random(remaining) : remaining;
    if (manager.allocateSlots(req, chunk, hit.numComputedTokens, hit.groups) === null) return false;
    req.numComputedTokens = hit.numComputedTokens;
    compute(req, chunk);
    return true;
  };

  const checkInvariants = (): void => {
    const holders = new Array<number>(numBlocks).fill(0);
    for (const req of running) for (const id of manager.getBlockIds(req)) holders[id]!++;
    const free = manager.freeBlockIds();
    expect(free.length).toBe(manager.numFreeBlocks);
    expect(new Set(free).size).toBe(free.length);
    for (let id = 0; id < numBlocks; id++) {
      expect(manager.block(id).refCnt).toBe(holders[id]!);
      expect(free.includes(id)).toBe(holders[id] === 0);
      if (!opts.enableCaching) expect(manager.block(id).blockHash).toBeNull();
    }
    for (const req of running) {
      expect(manager.getBlockIds(req).length).toBeGreaterThanOrEqual(Math.ceil(req.numComputedTokens / blockSize));
      for (let pos = 0; pos < req.numComputedTokens; pos++) expect(arena[slotOf(req, pos)]).toBe(contentKey(req, pos));
    }
  };

  for (let step = 0; step < 250; step++) {
    const action = random(10);
    if (action < 3) {
      const prompt = [...prefixes[random(prefixes.length)]!];
      for (let n = 1 + random(6); n > 0; n--) prompt.push(random(4));
      const req = new Request({
        id: `r${nextId++}`,
        promptTokenIds: prompt,
        cacheSalt: random(4) === 0 ? "tenant" : undefined,
        loraName: random(5) === 0 ? "adapter" : undefined,
        mmItems: random(5) === 0 && prompt.length > 3 ? [{ id: `img${random(2)}`, offset: 1, length: 2 }] : undefined,
      });
      waiting.push(req);
    } else if (action < 4 && running.length > 0) {
      const req = running.splice(random(running.length), 1)[0]!;
      manager.free(req);
    } else {
      // One engine step: waiting requests first (FIFO), then every running request.
      while (waiting.length > 0 && admit(waiting[0]!)) running.push(waiting.shift()!);
      for (const req of [...running]) {
        if (req.numComputedTokens < req.numTokens) {
          // Unfinished chunked prefill: the rest of the prompt (or output tokens restored after preemption).
          const rest = req.numTokens - req.numComputedTokens;
          if (manager.allocateSlots(req, rest) !== null) compute(req, rest);
          continue;
        }
        req.appendOutputTokenIds([random(4)]);
        if (manager.allocateSlots(req, 1) === null) {
          // Preempt (recompute): drop its blocks, re-admit later through the cache.
          manager.free(req);
          req.numComputedTokens = 0;
          running.splice(running.indexOf(req), 1);
          waiting.push(req);
          preemptions++;
          continue;
        }
        compute(req, 1);
      }
    }
    checkInvariants();
  }
  for (const req of running) manager.free(req);
  expect(manager.numFreeBlocks).toBe(numBlocks);
  if (opts.enableCaching) expect(manager.resetPrefixCache()).toBe(true);
  return { hits: manager.stats.hits, evictions: manager.stats.evictions, preemptions };
}

describe("randomized scheduler simulation", () => {
  afterEach(() => mock.restore());

  const combos: [EvictionPolicyName, HashAlgorithm, number][] = [
    ["lru", "sha256", 2],
    ["lru", "xxh64", 4],
    ["lru-keep-cached", "sha256", 4],
    ["lru-keep-cached", "xxh64", 2],
  ];
  for (const [policy, hash, blockSize] of combos) {
    test(`${policy}, ${hash}, block size ${blockSize}: hits always hold the request's prefix`, () => {
      let totals = { hits: 0, evictions: 0, preemptions: 0 };
      for (let seed = 1; seed <= 6; seed++) {
        const r = simulate({ policy, hash, blockSize, enableCaching: true, seed });
        totals = { hits: totals.hits + r.hits, evictions: totals.evictions + r.evictions, preemptions: totals.preemptions + r.preemptions };
      }
      // The workload is built to exercise every path.
      expect(totals.hits).toBeGreaterThan(0);
      expect(totals.evictions).toBeGreaterThan(0);
      expect(totals.preemptions).toBeGreaterThan(0);
    });
  }

  test("every block hashing to one value (forged collisions) still never gives a wrong hit", () => {
    spyOn(RequestBlockHashes.prototype, "hashAt").mockImplementation(() => "0123456789abcdef");
    let hits = 0;
    for (let seed = 1; seed <= 4; seed++) hits += simulate({ policy: "lru", hash: "xxh64", blockSize: 2, enableCaching: true, seed }).hits;
    expect(hits).toBeGreaterThan(0);
  });

  test("caching off", () => {
    for (let seed = 1; seed <= 3; seed++) {
      expect(simulate({ policy: "lru", hash: "sha256", blockSize: 2, enableCaching: false, seed }).hits).toBe(0);
    }
  });
});
