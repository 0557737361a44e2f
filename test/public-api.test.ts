/**
 * The library API as outside code sees it: only names exported from src/index.ts, with the
 * signatures the KV cache promises (vLLM v1's names, docs/architecture.md).
 */
import { describe, expect, test } from "bun:test";
import {
  hashBlockTokens, KVCacheBlock, KVCacheManager, LLM, Request, type BlockHash, type CompletionResult,
} from "../src/index.ts";
import { describeShared } from "./helpers/shared.ts";
import { testThreads } from "./helpers/threads.ts";

describe("KV cache API from src/index.ts", () => {
  test("a request's prefix is found, allocated, cached and freed with the specified names", () => {
    const kv = new KVCacheManager({ numBlocks: 10, blockSize: 4, enableCaching: true, evictionPolicy: "lru", hash: "sha256" });
    const a = new Request({ id: "a", promptTokenIds: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10] });
    const none = kv.getComputedBlocks(a);
    expect({ ...none }).toEqual({ groups: [[]], numComputedTokens: 0 });
    const blocks = kv.allocateSlots(a, 10, 0, []);
    expect(blocks?.map((b: KVCacheBlock) => b.blockId)).toEqual([0, 1, 2]);
    a.numComputedTokens += 10;
    a.appendOutputTokenIds([11]);
    expect(a.numTokens).toBe(11);
    expect(kv.getBlockIds(a)).toEqual([0, 1, 2]);
    expect(kv.numFreeBlocks).toBe(7);

    const b = new Request({ id: "b", promptTokenIds: [1, 2, 3, 4, 5, 6, 7, 8, 42] });
    const hit = kv.getComputedBlocks(b);
    expect(hit.numComputedTokens).toBe(8);
    expect(hit.groups[0]!.map((x) => x!.blockId)).toEqual([0, 1]);
    expect(kv.allocateSlots(b, 1, hit.numComputedTokens, hit.groups)?.map((x) => x.blockId)).toEqual([3]);
    expect(kv.getBlockIds(b)).toEqual([0, 1, 3]);
    expect(kv.block(0).refCnt).toBe(2);
    expect(kv.stats).toEqual({ queries: 19, hits: 8, evictions: 0 });

    expect(kv.resetPrefixCache()).toBe(false);
    kv.free(a);
    kv.free(b);
    // tail block first: a's [2, 1, 0] then b's [3] (0 and 1 were still b's when a left)
    expect(kv.freeBlockIds()).toEqual([4, 5, 6, 7, 8, 9, 2, 3, 1, 0]);
    expect(kv.resetPrefixCache()).toBe(true);
    expect(kv.block(0).blockHash).toBeNull();
  });

  test("hashBlockTokens: hex digests chained by parent, separated by extra keys and hash", () => {
    const first: BlockHash = hashBlockTokens(null, [1, 2, 3, 4], null);
    expect(first).toMatch(/^[0-9a-f]{64}$/);
    expect(hashBlockTokens(first, [5, 6, 7, 8], null)).not.toBe(hashBlockTokens(null, [5, 6, 7, 8], null));
    expect(hashBlockTokens(null, [1, 2, 3, 4], ["lora-x"])).not.toBe(first);
    expect(hashBlockTokens(null, [1, 2, 3, 4], null, "xxh64")).toMatch(/^[0-9a-f]{16}$/);
  });

  test("cache salt, LoRA and multimodal items isolate requests", () => {
    const kv = new KVCacheManager({ numBlocks: 16, blockSize: 4 });
    const tokens = [1, 2, 3, 4, 5, 6, 7, 8, 9];
    const base = new Request({ id: "base", promptTokenIds: tokens });
    kv.allocateSlots(base, 9);
    for (const opts of [{ cacheSalt: "x" }, { loraName: "x" }, { mmItems: [{ id: "img", offset: 0, length: 2 }] }]) {
      const other = new Request({ id: JSON.stringify(opts), promptTokenIds: tokens, ...opts });
      expect(kv.getComputedBlocks(other).numComputedTokens).toBe(0);
    }
    expect(kv.getComputedBlocks(new Request({ id: "same", promptTokenIds: tokens })).numComputedTokens).toBe(8);
  });
});

describeShared("LLM from src/index.ts", ["models/llama2c/stories260K.bin", "models/llama2c/tok512.bin"], ([model, tokenizer]) => {
  test("load, tokenize, generate, stream", async () => {
    const llm = LLM.load({ model: model!, tokenizer: tokenizer!, engine: { threads: testThreads() } });
    try {
      expect(llm.encode("Once upon a time")).toEqual([1, 403, 407, 261, 378]);
      const [r]: CompletionResult[] = await llm.generate([{ prompt: "Once upon a time", maxTokens: 8, temperature: 0 }]);
      expect(r!.text).toStartWith(", there was a little girl");
      let streamed = "";
      for await (const ev of llm.stream([{ prompt: "Once upon a time", maxTokens: 8, temperature: 0 }])) {
        if (ev.kind === "text") streamed += ev.delta;
      }
      expect(streamed).toBe(r!.text);
    } finally {
      llm.close();
    }
  });
});
