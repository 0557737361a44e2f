import { afterEach, describe, expect, mock, spyOn, test } from "bun:test";
import { createHash } from "node:crypto";
import {
  BlockPool,
  CacheSaltExtraKey,
  KVCacheManager,
  LoraExtraKey,
  LruEvictionPolicy,
  MultimodalExtraKey,
  ROOT_PARENT_HASH,
  Request,
  RequestBlockHashes,
  hashBlockTokens,
  type HashAlgorithm,
} from "../src/kv/index.ts";

const TOKENS = [11, 22, 33, 44];
const ALGORITHMS: HashAlgorithm[] = ["sha256", "xxh64"];

/** The hash input exactly as block-hash.ts documents it, built independently of the implementation. */
function referenceInput(parentHex: string, tokens: number[], keys: { tag: number; payload: Uint8Array }[]): Uint8Array {
  const parent = Buffer.from(parentHex, "hex");
  const parts: Buffer[] = [Buffer.from([parent.length]), parent];
  const tokenBytes = Buffer.alloc(4 + 4 * tokens.length);
  tokenBytes.writeUInt32LE(tokens.length, 0);
  tokens.forEach((t, i) => tokenBytes.writeUInt32LE(t, 4 + 4 * i));
  parts.push(tokenBytes);
  for (const key of keys) {
    const head = Buffer.alloc(5);
    head.writeUInt8(key.tag, 0);
    head.writeUInt32LE(key.payload.length, 1);
    parts.push(head, Buffer.from(key.payload));
  }
  return Buffer.concat(parts);
}

function referenceHash(algorithm: HashAlgorithm, input: Uint8Array): string {
  if (algorithm === "sha256") return createHash("sha256").update(input).digest("hex");
  return Bun.hash.xxHash64(input, 0n).toString(16).padStart(16, "0");
}

describe("hashBlockTokens", () => {
  for (const algorithm of ALGORITHMS) {
    describe(algorithm, () => {
      const digestChars = algorithm === "sha256" ? 64 : 16;

      test("is deterministic lowercase hex of the digest length", () => {
        const a = hashBlockTokens(null, TOKENS, null, algorithm);
        expect(a).toMatch(new RegExp(`^[0-9a-f]{${digestChars}}$`));
        expect(hashBlockTokens(null, [...TOKENS], [], algorithm)).toBe(a);
        expect(hashBlockTokens(null, new Uint32Array(TOKENS), null, algorithm)).toBe(a);
        expect(ROOT_PARENT_HASH[algorithm]).toMatch(new RegExp(`^[0-9a-f]{${digestChars}}$`));
      });

      test("a null parent means the fixed root parent", () => {
        expect(hashBlockTokens(ROOT_PARENT_HASH[algorithm], TOKENS, null, algorithm)).toBe(hashBlockTokens(null, TOKENS, null, algorithm));
      });

      test("matches the documented byte encoding", () => {
        const parent = hashBlockTokens(null, [1, 2, 3, 4], null, algorithm);
        const enc = new TextEncoder();
        const mmPayload = Buffer.alloc(8);
        mmPayload.writeInt32LE(-3, 0);
        mmPayload.writeUInt32LE(7, 4);
        const number = Buffer.alloc(8);
        number.writeDoubleLE(42, 0);
        const input = referenceInput(parent, [5, 0xffffffff, 0, 6], [
          { tag: 0x10, payload: enc.encode("adapter") },
          { tag: 0x11, payload: Buffer.concat([mmPayload, enc.encode("img")]) },
          { tag: 0x13, payload: Buffer.from("salt", "utf16le") },
          { tag: 0x01, payload: enc.encode("plain") },
          { tag: 0x02, payload: number },
        ]);
        const keys = [new LoraExtraKey("adapter"), new MultimodalExtraKey("img", -3, 7), new CacheSaltExtraKey("salt"), "plain", 42];
        expect(hashBlockTokens(parent, [5, 0xffffffff, 0, 6], keys, algorithm)).toBe(referenceHash(algorithm, input));
        expect(hashBlockTokens(null, TOKENS, null, algorithm)).toBe(referenceHash(algorithm, referenceInput(ROOT_PARENT_HASH[algorithm], TOKENS, [])));
      });

      test("changes with the parent, every token, the token count and order", () => {
        const base = hashBlockTokens(null, TOKENS, null, algorithm);
        const seen = new Set([base]);
        const variants: [string | null, number[]][] = [
          [hashBlockTokens(null, [9], null, algorithm), TOKENS],
          [null, [12, 22, 33, 44]],
          [null, [11, 22, 33, 45]],
          [null, [22, 11, 33, 44]],
          [null, [11, 22, 33]],
          [null, [11, 22, 33, 44, 0]],
          [null, []],
        ];
        for (const [parent, tokens] of variants) seen.add(hashBlockTokens(parent, tokens, null, algorithm));
        expect(seen.size).toBe(variants.length + 1);
      });

      test("changes with each extra key kind and value", () => {
        const keySets: unknown[][] = [
          [],
          [new LoraExtraKey("x")],
          [new LoraExtraKey("y")],
          [new CacheSaltExtraKey("x")],
          [new CacheSaltExtraKey("y")],
          ["x"],
          [new MultimodalExtraKey("x", 0, 4)],
          [new MultimodalExtraKey("y", 0, 4)],
          [new MultimodalExtraKey("x", 1, 4)],
          [new MultimodalExtraKey("x", -1, 4)],
          [new MultimodalExtraKey("x", 0, 5)],
          [1],
          [2],
          ["1"],
          ["ab"],
          ["a", "b"],
          [new LoraExtraKey("a"), "b"],
          [new LoraExtraKey("x"), new CacheSaltExtraKey("x")],
          [new CacheSaltExtraKey("x"), new LoraExtraKey("x")],
        ];
        const hashes = keySets.map((keys) => hashBlockTokens(null, TOKENS, keys, algorithm));
        expect(new Set(hashes).size).toBe(keySets.length);
      });

      test("salts are keyed on their exact code units: salts that UTF-8 would make one hash apart", () => {
        // UTF-8 turns every lone surrogate into U+FFFD: these pairs were one salt.
        const pairs = [["\ud800", "\ufffd"], ["x\udbff", "x\ud800"], ["\udc00\ud800", "\ufffd\ufffd"], ["a\ud83d", "a\ude00"]];
        for (const [a, b] of pairs) {
          expect(hashBlockTokens(null, TOKENS, [new CacheSaltExtraKey(a!)], algorithm)).not.toBe(hashBlockTokens(null, TOKENS, [new CacheSaltExtraKey(b!)], algorithm));
        }
        // A well-formed surrogate pair is its two code units, as any other string.
        const emoji = "\ud83d\ude00";
        const input = referenceInput(ROOT_PARENT_HASH[algorithm], TOKENS, [{ tag: 0x13, payload: new Uint8Array([0x3d, 0xd8, 0x00, 0xde]) }]);
        expect(hashBlockTokens(null, TOKENS, [new CacheSaltExtraKey(emoji)], algorithm)).toBe(referenceHash(algorithm, input));
      });

      test("a LoRA named x never collides with a salt x or a plain key x", () => {
        const lora = hashBlockTokens(null, TOKENS, [new LoraExtraKey("x")], algorithm);
        expect(hashBlockTokens(null, TOKENS, [new CacheSaltExtraKey("x")], algorithm)).not.toBe(lora);
        expect(hashBlockTokens(null, TOKENS, ["x"], algorithm)).not.toBe(lora);
      });
    });
  }

  test("sha256 and xxh64 differ", () => {
    expect(hashBlockTokens(null, TOKENS, null, "sha256")).not.toBe(hashBlockTokens(null, TOKENS, null, "xxh64"));
  });

  test("rejects bad tokens, parents and keys", () => {
    expect(() => hashBlockTokens(null, [1.5], null)).toThrow(RangeError);
    expect(() => hashBlockTokens(null, [-1], null)).toThrow(RangeError);
    expect(() => hashBlockTokens(null, [2 ** 32], null)).toThrow(RangeError);
    expect(() => hashBlockTokens("xyz", TOKENS, null)).toThrow(RangeError);
    expect(() => hashBlockTokens("abc", TOKENS, null)).toThrow(RangeError);
    expect(() => hashBlockTokens(null, TOKENS, [{}])).toThrow(TypeError);
    expect(() => hashBlockTokens(null, TOKENS, [null])).toThrow(TypeError);
  });
});

describe("request block hashes", () => {
  const promptTokenIds = Array.from({ length: 14 }, (_, i) => 100 + i);

  function managerHashes(manager: KVCacheManager, req: Request): (string | null)[] {
    const allocated = manager.allocateSlots(req, req.numTokens);
    expect(allocated).not.toBeNull();
    return manager.getBlocks(req).map((b) => b!.blockHash);
  }

  for (const algorithm of ALGORITHMS) {
    test(`${algorithm}: the manager hashes a request's blocks like hashBlockTokens with typed keys`, () => {
      const manager = new KVCacheManager({ numBlocks: 8, blockSize: 4, hash: algorithm });
      // Image at [2, 9): overlaps blocks 0 (offset 2), 1 (offset -2) and 2 (offset -6).
      const req = new Request({ id: "r", promptTokenIds, loraName: "ad", cacheSalt: "s", mmItems: [{ id: "img", offset: 2, length: 7 }] });
      const b0 = hashBlockTokens(null, promptTokenIds.slice(0, 4), [new LoraExtraKey("ad"), new MultimodalExtraKey("img", 2, 7), new CacheSaltExtraKey("s")], algorithm);
      const b1 = hashBlockTokens(b0, promptTokenIds.slice(4, 8), [new LoraExtraKey("ad"), new MultimodalExtraKey("img", -2, 7)], algorithm);
      const b2 = hashBlockTokens(b1, promptTokenIds.slice(8, 12), [new LoraExtraKey("ad"), new MultimodalExtraKey("img", -6, 7)], algorithm);
      expect(managerHashes(manager, req)).toEqual([b0, b1, b2, null]);
    });
  }

  test("the manager keys salts on their exact code units: salts UTF-8 would merge never share a block", () => {
    const manager = new KVCacheManager({ numBlocks: 16, blockSize: 4 });
    const first = new Request({ id: "a", promptTokenIds, cacheSalt: "\ud800" });
    expect(managerHashes(manager, first)[0]).toBe(hashBlockTokens(null, promptTokenIds.slice(0, 4), [new CacheSaltExtraKey("\ud800")]));
    for (const salt of ["\ufffd", "\udbff"]) {
      expect(manager.getComputedBlocks(new Request({ id: salt, promptTokenIds, cacheSalt: salt })).groups[0]!).toEqual([]);
    }
    expect(manager.getComputedBlocks(new Request({ id: "same", promptTokenIds, cacheSalt: "\ud800" })).groups[0]!.length).toBe(3);
  });

  test("without extra keys the chain is plain parent + tokens, and output tokens extend it", () => {
    const manager = new KVCacheManager({ numBlocks: 8, blockSize: 4 });
    const req = new Request({ id: "r", promptTokenIds });
    const b0 = hashBlockTokens(null, promptTokenIds.slice(0, 4), null);
    const b1 = hashBlockTokens(b0, promptTokenIds.slice(4, 8), null);
    const b2 = hashBlockTokens(b1, promptTokenIds.slice(8, 12), null);
    expect(managerHashes(manager, req)).toEqual([b0, b1, b2, null]);
    req.numComputedTokens = 14;
    req.appendOutputTokenIds([7, 8]);
    expect(manager.allocateSlots(req, 2)).toEqual([]);
    expect(manager.getBlocks(req)[3]!.blockHash).toBe(hashBlockTokens(b2, [112, 113, 7, 8], null));
  });

  test("each block is hashed once however often the request is looked up and extended", () => {
    const manager = new KVCacheManager({ numBlocks: 16, blockSize: 4 });
    const sha = spyOn(Bun.SHA256, "hash");
    try {
      const req = new Request({ id: "r", promptTokenIds }); // 3 full blocks
      manager.getComputedBlocks(req);
      manager.getComputedBlocks(req);
      manager.allocateSlots(req, 14);
      req.numComputedTokens = 14;
      for (let step = 0; step < 10; step++) {
        req.appendOutputTokenIds([1]);
        manager.allocateSlots(req, 1);
        req.numComputedTokens++;
      }
      // 24 tokens known = 6 full blocks, each digested exactly once.
      expect(sha).toHaveBeenCalledTimes(6);
    } finally {
      mock.restore();
    }
  });
});

describe("exact verification: a forged hash collision is never a hit", () => {
  afterEach(() => mock.restore());

  test("pool: same hash, different tokens or extra keys", () => {
    const pool = new BlockPool(4, 4, new LruEvictionPolicy(), { queries: 0, hits: 0, evictions: 0 });
    const [block] = pool.getNewBlocks(1);
    const noKeys = new Uint8Array(0);
    pool.cacheBlock(block!, "00".repeat(8), null, [1, 2, 3, 4], 0, noKeys);
    expect(pool.findCachedBlock("00".repeat(8), null, [1, 2, 3, 4], 0, noKeys)).toBe(block!);
    expect(pool.findCachedBlock("00".repeat(8), null, [1, 2, 3, 5], 0, noKeys)).toBeNull();
    expect(pool.findCachedBlock("00".repeat(8), null, [1, 2, 3, 4], 0, new Uint8Array([1, 0, 0, 0, 0]))).toBeNull();
    expect(pool.findCachedBlock("00".repeat(8), 0, [1, 2, 3, 4], 0, noKeys)).toBeNull();
  });

  test("pool: a collision in the parent does not let the child hit", () => {
    const pool = new BlockPool(8, 2, new LruEvictionPolicy(), { queries: 0, hits: 0, evictions: 0 });
    const noKeys = new Uint8Array(0);
    const [a0, a1, b0] = pool.getNewBlocks(3);
    pool.cacheBlock(a0!, "p", null, [1, 1], 0, noKeys); // prefix A
    pool.cacheBlock(a1!, "c", a0!.contentId, [5, 5], 0, noKeys);
    pool.cacheBlock(b0!, "p", null, [2, 2], 0, noKeys); // prefix B, same (forged) hash as A's first block
    expect(b0!.contentId).not.toBe(a0!.contentId);
    const hitB0 = pool.findCachedBlock("p", null, [2, 2], 0, noKeys);
    expect(hitB0).toBe(b0!);
    // B's second block has A's second block's tokens and hash, but follows a different prefix.
    expect(pool.findCachedBlock("c", hitB0!.contentId, [5, 5], 0, noKeys)).toBeNull();
    expect(pool.findCachedBlock("c", a0!.contentId, [5, 5], 0, noKeys)).toBe(a1!);
  });

  test("manager: with every block hashing to the same value, only exact prefixes hit", () => {
    spyOn(RequestBlockHashes.prototype, "hashAt").mockImplementation(() => "00".repeat(8));
    const manager = new KVCacheManager({ numBlocks: 32, blockSize: 2, hash: "xxh64" });
    const hits = (tokens: number[], opts: { loraName?: string; cacheSalt?: string } = {}): number[] => {
      const req = new Request({ id: `r${tokens.join(",")}${JSON.stringify(opts)}`, promptTokenIds: tokens, ...opts });
      return manager.getComputedBlocks(req).groups[0]!.map((b) => b!.blockId);
    };
    const a = new Request({ id: "a", promptTokenIds: [1, 2, 3, 4, 5, 6, 7] });
    manager.allocateSlots(a, 7); // blocks 0 (1,2) 1 (3,4) 2 (5,6) cached, 3 partial
    expect(manager.numCachedBlocks).toBe(3);
    expect(hits([1, 2, 3, 4, 5, 6, 7])).toEqual([0, 1, 2]);
    expect(hits([1, 2, 3, 4, 9, 9, 9])).toEqual([0, 1]);
    expect(hits([9, 9, 3, 4, 5, 6, 7])).toEqual([]);
    expect(hits([1, 2, 9, 9, 5, 6, 7])).toEqual([0]);
    expect(hits([3, 4, 5, 6, 7])).toEqual([]); // A's later blocks, shifted to the start
    expect(hits([1, 2, 3, 4, 5, 6, 7], { loraName: "x" })).toEqual([]);
    expect(hits([1, 2, 3, 4, 5, 6, 7], { cacheSalt: "x" })).toEqual([]);
  });
});
