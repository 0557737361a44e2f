/**
 * The engine keeps a sliding-window model's local layers at the window (kv-groups.ts, the
 * KVCacheManager's groups wired through the arena and the forward pass), on rnd-gemma3 (a window of
 * 32 on layers 0, 1 and 3, layer 2 global: four KV cache groups of one layer). With blocks of 16 and
 * 16-token steps, a sequence of 160 positions holds 10 global blocks and 4 of each local group: a
 * pool of 22 blocks, where keeping every layer's blocks would take 40.
 *   - a request of 160 positions generates in that pool without preemption (its local blocks behind
 *     the window go back to the pool as it advances), with the bits of a run in a pool of any size
 *     without the prefix cache;
 *   - a second request that continues it hits its 144 computed full-block tokens, though the pool
 *     cannot hold 4 x 9 blocks: the hit needs the global blocks and only the window's local ones;
 *   - scoring 160 tokens fits the same pool (chunk by chunk) and gives the generating run's logits.
 */
import { describe, expect, test } from "bun:test";
import type { EngineOptions } from "../src/engine/engine-options.ts";
import { KVCacheGroups } from "../src/kv/kv-groups.ts";
import { comparable, openedLLMs } from "./helpers/llm.ts";
import { TEXTS } from "./helpers/prefix.ts";
import { describeShared } from "./helpers/shared.ts";

const llms = openedLLMs();
const MODEL = "models/gguf/rnd-gemma3-Q4_K_M.gguf";
const STEP = { blockSize: 16, maxNumBatchedTokens: 16, kvType: "f32" } as const satisfies Partial<EngineOptions>;
const PROMPT_TOKENS = 20;
const MAX_TOKENS = 140;
const TIMEOUT_MS = 60_000;

describe("a window's blocks per sequence", () => {
  test("rnd-gemma3's four groups at 160 positions in 16-token steps: 10 global blocks, 4 per local group", () => {
    const groups = KVCacheGroups.fromLayers(4, (l) => (l === 2 ? { kind: "full" } : { kind: "sliding", window: 32 }));
    expect(groups.blocksPerSequence(160, 16, 16)).toBe(10 + 3 * 4);
    expect(groups.maxPositions(22, 16, 16, 4096)).toBe(160);
  });
});

describeShared("sliding-window layers in the engine's KV cache", [MODEL], ([model]) => {
  const open = (engine: Partial<EngineOptions>) => llms.load({ model: model!, tokenizer: model!, engine: { ...STEP, ...engine } });

  test("a request generates in a pool of the global blocks and the window's local ones; a continuation hits all its full blocks", async () => {
    const small = open({ numBlocks: 22, enablePrefixCaching: true });
    const prompt = small.encode(`${TEXTS[0]} ${TEXTS[1]}`).slice(0, PROMPT_TOKENS);
    expect(prompt.length).toBe(PROMPT_TOKENS);
    const [first] = await small.generate([{ id: "a", promptTokenIds: prompt, maxTokens: MAX_TOKENS, temperature: 0 }]);
    expect(first!.finish_reason).toBe("length");
    expect(first!.completion_tokens).toBe(MAX_TOKENS);
    // 159 positions computed: 9 full blocks; the continuation's hit is those, global and local alike.
    const next = [...prompt, ...first!.token_ids.slice(0, -1), first!.token_ids.at(-1)!];
    const [second] = await small.generate([{ id: "b", promptTokenIds: next, maxTokens: 1, temperature: 0 }]);
    expect(second!.cached_tokens).toBe(144);
    const stats = small.stats();
    expect(stats.preemptions).toBe(0);
    expect(stats.blocksInUse).toBe(0);

    const big = open({ enablePrefixCaching: false });
    const [firstAlone] = await big.generate([{ id: "a", promptTokenIds: prompt, maxTokens: MAX_TOKENS, temperature: 0 }]);
    const [secondAlone] = await big.generate([{ id: "b", promptTokenIds: next, maxTokens: 1, temperature: 0 }]);
    expect(comparable(first!)).toEqual(comparable(firstAlone!));
    expect(second!.token_ids).toEqual(secondAlone!.token_ids);
  }, TIMEOUT_MS);

  test("scoring 160 tokens fits the same pool, chunk by chunk, with the logits of a large pool", async () => {
    const small = open({ numBlocks: 22 });
    const tokens = small.encode(TEXTS.join(" ")).slice(0, 160);
    expect(tokens.length).toBe(160);
    const scored = await small.score(tokens);
    const big = open({});
    const reference = await big.score(tokens);
    expect(scored.token_logprobs).toEqual(reference.token_logprobs);
    expect(scored.top_tokens).toEqual(reference.top_tokens);
  }, TIMEOUT_MS);
});
