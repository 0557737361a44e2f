/**
 * Batch invariance on the real models: a request's tokens do not depend on what else runs with it.
 * 64 requests (24 on the newer architectures' files) of varied prompt lengths and max_tokens run
 * together give, token for token, what each gives alone: with the prefix cache on and off, with a
 * KV pool so small that requests are preempted and recomputed, with a token budget so small that
 * prompts are prefilled in chunks while other requests decode, and when sampling with temperature
 * > 0 and a per-request seed; a prompt bounded to a few tokens a step beside a decoding request
 * (maxPrefillWhileDecoding) too.
 * A mixture-of-experts model (rnd-qwen3moe) too: a step groups its tokens by expert, and a
 * token's output must not depend on which other tokens shared its experts' products.
 * Each model's requests run alone once, in blocks of 16, and every config is compared with that
 * run, those in blocks of 4 too: attention's online softmax goes over fixed 16-position tiles, not
 * KV blocks (docs/architecture.md), so the block size changes no bit either.
 */
import { beforeAll, expect, test } from "bun:test";
import type { LLM, CompletionResult, GenerateRequest } from "../src/llm/llm.ts";
import type { StepReport } from "../src/llm/engine-client.ts";
import type { EngineOptions } from "../src/engine/engine-options.ts";
import type { KVType } from "../src/kv/kv-layout.ts";
import { openedLLMs } from "./helpers/llm.ts";
import { MODELS, TEXTS, TOKENIZER } from "./helpers/prefix.ts";
import { describeShared } from "./helpers/shared.ts";

const NUM_REQUESTS = 64;
/**
 * The newer architectures' files (larger vocabularies and layers than stories260K) run 24 of the
 * requests: their kernels' invariance is the same question, and 64 took minutes each in CI.
 */
const NEWER_REQUESTS = 24;
/** Per-test and per-hook limit (bun's default is 5 s, too tight for a loaded 2-core machine). */
const TIMEOUT_MS = 120_000;

const llms = openedLLMs();

function load(model: string, tokenizer: string, engine: Partial<EngineOptions>): LLM {
  return llms.load({ model, tokenizer, engine });
}

/**
 * 64 requests: prompts of 2 to 100 tokens (8 texts cut at many lengths, so many share prefixes),
 * max_tokens 20 to 120, so that they finish at different steps. Every other request samples
 * (temperature 0.9, top-p, min-p) with its own seed; the rest are greedy.
 */
function buildRequests(llm: LLM, count: number): GenerateRequest[] {
  const requests: GenerateRequest[] = [];
  for (let i = 0; i < count; i++) {
    const text = `${TEXTS[i % TEXTS.length]} ${TEXTS[(3 * i + 1) % TEXTS.length]}`;
    const len = 2 + ((i * 29) % 99);
    const maxTokens = 20 + ((i * 37) % 101);
    const request: GenerateRequest = { id: `r${i}`, promptTokenIds: llm.encode(text).slice(0, len), maxTokens, temperature: 0 };
    if (i % 2 === 1) Object.assign(request, { temperature: 0.9, topK: 0, topP: 0.95, minP: 0.02, seed: 1000 + i });
    requests.push(request);
  }
  return requests;
}

async function oneAtATime(llm: LLM, requests: GenerateRequest[]): Promise<CompletionResult[]> {
  const out: CompletionResult[] = [];
  for (const r of requests) out.push(...(await llm.generate([r])));
  return out;
}

function tokensOf(results: CompletionResult[]): { id: string; finish: string; tokens: number[]; text: string }[] {
  return results.map((r) => ({ id: r.id, finish: r.finish_reason, tokens: r.token_ids, text: r.text }));
}

interface Config {
  label: string;
  engine: Partial<EngineOptions>;
  /** The run must preempt (the pool is too small for every request at once). */
  preempts?: boolean;
  /** The run must prefill prompts in chunks in steps where other requests decode. */
  chunks?: boolean;
}

const TOGETHER_OFF: Config = { label: "all together, prefix cache off", engine: { enablePrefixCaching: false } };
const TOGETHER_ON: Config = { label: "all together, prefix cache on", engine: { enablePrefixCaching: true } };
// The preempting pools admit with the watermark alone (vLLM's): with room to finish (the default)
// admitted requests are not preempted.
const PREEMPT_OFF: Config = {
  label: "a pool of 20 blocks (preemption), prefix cache off", engine: { enablePrefixCaching: false, numBlocks: 20, admission: "watermark" }, preempts: true,
};
const PREEMPT_ON: Config = {
  label: "a pool of 20 blocks (preemption), prefix cache on", engine: { enablePrefixCaching: true, numBlocks: 20, admission: "watermark" }, preempts: true,
};
const CHUNKED_OFF: Config = {
  label: "32-token steps (chunked prefill), prefix cache off", engine: { enablePrefixCaching: false, maxNumBatchedTokens: 32 }, chunks: true,
};
const CHUNKED_ON: Config = {
  label: "32-token steps (chunked prefill), prefix cache on, LPM, 6 sequences",
  engine: { enablePrefixCaching: true, maxNumBatchedTokens: 32, maxNumSeqs: 6, schedule: "lpm" },
  chunks: true,
};
const PREEMPT_CHUNKED_ON: Config = {
  label: "a pool of 64 blocks and 24-token steps (preemption and chunks), prefix cache on",
  engine: { enablePrefixCaching: true, numBlocks: 64, maxNumBatchedTokens: 24, admission: "watermark" },
  preempts: true,
  chunks: true,
};

/** The block size of the requests' run alone; a config sets its own (16 unless it says 4). */
const REFERENCE_BLOCK_SIZE = 16;

/** `config` in blocks of 4 tokens (more block boundaries, and the alone run's 16 to be the same bits). */
const inBlocksOf4 = (config: Config): Config => ({ ...config, label: `blocks of 4: ${config.label}`, engine: { ...config.engine, blockSize: 4 } });

/**
 * Each model runs the requests alone once (the reference, in blocks of 16), then together under
 * each config, whatever its block size.
 */
const CASES: { name: string; model: string; tokenizer?: string; kvType?: KVType; configs: Config[] }[] = [
  {
    name: "stories260K (f32)",
    model: MODELS.stories260K,
    configs: [TOGETHER_ON, PREEMPT_ON, CHUNKED_OFF, inBlocksOf4(PREEMPT_CHUNKED_ON)],
  },
  {
    // The f16 cache rounds every K/V value: its own references, the same invariances.
    name: "stories260K (f32 weights, f16 KV cache)",
    model: MODELS.stories260K,
    kvType: "f16",
    configs: [TOGETHER_ON, PREEMPT_ON, CHUNKED_OFF],
  },
  {
    name: "llama2xs_h192 (f32)",
    model: MODELS.llama2xs,
    configs: [TOGETHER_OFF, PREEMPT_ON, CHUNKED_ON],
  },
  {
    name: "stories260K_q80 (int8)",
    model: MODELS.stories260K_q80,
    configs: [PREEMPT_OFF, CHUNKED_ON],
  },
  {
    // 8 experts, 2 per token, Q4_K experts; SmolLM2's vocabulary from the file; its own f16 KV cache.
    name: "rnd-qwen3moe Q4_K_M (mixture of experts)",
    model: "models/gguf/rnd-qwen3moe-Q4_K_M.gguf",
    tokenizer: "models/gguf/rnd-qwen3moe-Q4_K_M.gguf",
    configs: [TOGETHER_ON, CHUNKED_ON, inBlocksOf4(PREEMPT_CHUNKED_ON)],
  },
  {
    // gpt-oss: attention sinks, windows of 32 on the even layers (most requests outgrow them, and their local
    // blocks are released as they advance), YaRN, MXFP4 experts with biases (4 of 8 per token); stories260K's
    // vocabulary; a q8_0 KV cache. Two KV cache groups (global, local) of half the layers each: a block holds
    // half the layers, so the preempting pools have twice the blocks of the others' (the same bytes).
    name: "rnd-gptoss MXFP4_MOE (q8_0 KV cache)",
    model: "models/gguf/rnd-gptoss-MXFP4_MOE.gguf",
    tokenizer: "models/gguf/rnd-gptoss-MXFP4_MOE.gguf",
    kvType: "q8_0",
    configs: [
      TOGETHER_OFF, { ...PREEMPT_ON, label: "a pool of 40 blocks (preemption), prefix cache on", engine: { ...PREEMPT_ON.engine, numBlocks: 40 } }, CHUNKED_ON,
      inBlocksOf4({ ...PREEMPT_CHUNKED_ON, label: "a pool of 128 blocks and 24-token steps (preemption and chunks), prefix cache on", engine: { ...PREEMPT_CHUNKED_ON.engine, numBlocks: 128 } }),
    ],
  },
  {
    // Sliding-window layers (a window of 32: most requests outgrow it, and their local blocks are
    // released as they advance), GeGLU, post-norms; its own vocabulary. Four KV cache groups of one
    // layer each: a position needs a block in each, so the pools are larger for preemption to let one
    // request run (220 positions: 14 + 3 x 4 blocks of 16, 55 + 3 x 15 of 4).
    name: "rnd-gemma3-Q4_K_M (f16 KV cache)",
    model: "models/gguf/rnd-gemma3-Q4_K_M.gguf",
    tokenizer: "models/gguf/rnd-gemma3-Q4_K_M.gguf",
    kvType: "f16",
    configs: [
      TOGETHER_ON, { ...PREEMPT_ON, label: "a pool of 64 blocks (preemption), prefix cache on", engine: { ...PREEMPT_ON.engine, numBlocks: 64 } }, CHUNKED_OFF,
      inBlocksOf4({ ...PREEMPT_CHUNKED_ON, label: "a pool of 128 blocks and 24-token steps (preemption and chunks), prefix cache on", engine: { ...PREEMPT_CHUNKED_ON.engine, numBlocks: 128 } }),
    ],
  },
  {
    // Fused q/k/v and gate/up.
    name: "rnd-phi3-Q4_K_M (q8_0 KV cache)",
    model: "models/gguf/rnd-phi3-Q4_K_M.gguf",
    tokenizer: "models/gguf/rnd-phi3-Q4_K_M.gguf",
    kvType: "q8_0",
    configs: [TOGETHER_OFF, PREEMPT_ON, CHUNKED_ON],
  },
];

for (const { name, model, tokenizer, kvType, configs } of CASES) {
  const count = model.startsWith("models/gguf/rnd-") ? NEWER_REQUESTS : NUM_REQUESTS;
  describeShared(`batch invariance on ${name}`, [model, tokenizer ?? TOKENIZER], ([modelPath, tokPath]) => {
    let requests: GenerateRequest[] = [];
    let alone: ReturnType<typeof tokensOf> = [];
    beforeAll(async () => {
      const llm = load(modelPath!, tokPath!, { enablePrefixCaching: false, blockSize: REFERENCE_BLOCK_SIZE, kvType: kvType ?? null });
      requests = buildRequests(llm, count);
      const results = await oneAtATime(llm, requests);
      expect(results.every((r) => r.finish_reason === "length" || r.finish_reason === "stop")).toBe(true);
      alone = tokensOf(results);
      // the set is varied: requests end at many different lengths
      expect(new Set(results.map((r) => r.completion_tokens)).size).toBeGreaterThan(count / 3);
      // and the sampled requests do sample: greedy decoding of the first one gives other tokens
      const [greedy] = await llm.generate([{ ...requests[1]!, temperature: 0 }]);
      expect(greedy!.token_ids).not.toEqual(results[1]!.token_ids);
      llms.closeAll();
    }, TIMEOUT_MS);

    for (const { label, engine, preempts, chunks } of configs) {
      test(label, async () => {
        const llm = load(modelPath!, tokPath!, { blockSize: REFERENCE_BLOCK_SIZE, ...engine, kvType: kvType ?? null });
        const together = await llm.generate(requests);
        expect(tokensOf(together)).toEqual(alone);
        // How the engine composed its steps, from its statistics.
        const s = llm.stats();
        expect(s.blocksInUse).toBe(0);
        if (preempts) expect(s.preemptions).toBeGreaterThan(0);
        else expect(s.preemptions).toBe(0);
        expect(s.maxStepTokens).toBeLessThanOrEqual(engine.maxNumBatchedTokens ?? 512);
        if (chunks) {
          // prompts longer than the step budget were prefilled over several steps, in steps
          // where other requests decoded
          expect(s.partialPrefills).toBeGreaterThan(0);
          expect(s.mixedSteps).toBeGreaterThan(0);
        }
        if (engine.enablePrefixCaching === true) expect(s.prefixHits).toBeGreaterThan(0);
      }, TIMEOUT_MS);
    }
  });
}

describeShared("results in request order", [MODELS.stories260K, TOKENIZER], ([modelPath, tokPath]) => {
  test("generate returns results in request order, whichever finishes first, with or without ids", async () => {
    const llm = load(modelPath!, tokPath!, {});
    const reqs: GenerateRequest[] = [
      { prompt: TEXTS[0], maxTokens: 30, temperature: 0 },
      { prompt: TEXTS[1], maxTokens: 3, temperature: 0 },
      { prompt: TEXTS[2], maxTokens: 12, temperature: 0 },
    ];
    const named = await llm.generate(reqs.map((r, i) => ({ ...r, id: `n${i}` })));
    expect(named.map((r) => r.id)).toEqual(["n0", "n1", "n2"]);
    const unnamed = await llm.generate(reqs);
    expect(unnamed.map((r) => r.completion_tokens)).toEqual([30, 3, 12]);
    expect(unnamed.map((r) => r.token_ids)).toEqual(named.map((r) => r.token_ids));
    expect(new Set(unnamed.map((r) => r.id)).size).toBe(3);
  }, TIMEOUT_MS);
});

describeShared("a prompt computed while another request decodes", [MODELS.stories260K, TOKENIZER], ([modelPath, tokPath]) => {
  test("maxPrefillWhileDecoding: the prompt goes 5 tokens a step beside the decoding request, and gives the tokens it gives alone", async () => {
    const bound = 5;
    const llm = load(modelPath!, tokPath!, { enablePrefixCaching: false, maxPrefillWhileDecoding: bound });
    const long: GenerateRequest = { id: "long", promptTokenIds: llm.encode(`${TEXTS[1]} ${TEXTS[2]}`).slice(0, 61), maxTokens: 6, temperature: 0 };
    const [alone] = await llm.generate([long]);
    const before = llm.stats().partialPrefills;
    const steps: StepReport[] = [];
    const stopListening = llm.client.onStep((r) => steps.push(r));
    // A request decoding for longer than the prompt's 13 chunks take; the prompt is sent after its first token.
    const decoding = llm.client.submit({ id: "decoding", prompt: TEXTS[0], maxTokens: 60, temperature: 0 });
    let beside: Promise<CompletionResult[]> | null = null;
    for await (const o of decoding) if (beside === null && o.tokenIds.length > 0) beside = llm.generate([long]);
    const [together] = await beside!;
    stopListening();
    expect(together!.token_ids).toEqual(alone!.token_ids);
    // 61 prompt tokens in chunks of 5: 12 steps leave it partly computed, the 13th ends it.
    expect(llm.stats().partialPrefills - before).toBe(Math.ceil(61 / bound) - 1);
    // The steps that computed prompt tokens: the decoding request's whole prompt alone, then the
    // long prompt's chunks, each beside the one decode token (as the step reports tell them).
    const withPrompt = steps.filter((r) => r.promptTokens > 0).map((r) => [r.decodeTokens, r.promptTokens]);
    expect(withPrompt[0]![0]).toBe(0);
    expect(withPrompt.slice(1)).toEqual([...Array.from({ length: 12 }, () => [1, 5]), [1, 1]]);
    expect(steps.every((r) => r.endMs >= r.startMs)).toBe(true);
  }, TIMEOUT_MS);
});
