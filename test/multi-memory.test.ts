/**
 * A model placed over several WebAssembly memories gives the same bits as in one memory: every
 * shared GGUF model and a llama2.c checkpoint, split so that each layer, the embedding and the
 * classifier take a memory of their own (wasmMemoryMb 1), against the same model in one memory.
 * Compared: the logits of every position when scoring (perplexity's path), and whole results of
 * batched generation (greedy and sampled, with logprobs) with chunked prefill, with and without a
 * KV pool so small that requests are preempted and recomputed.
 */
import { kvLayout } from "../src/kv/kv-layout.ts";
import { describe, expect, test } from "bun:test";
import { LLM, type CompletionResult, type GenerateRequest } from "../src/llm/llm.ts";
import type { EngineOptions } from "../src/engine/engine-options.ts";
import { describePart, memoryLimitBytes, placeModel } from "../src/backend/wasm/placement.ts";
import { CpuBackend } from "../src/backend/wasm/cpu.ts";
import { LinearMemory } from "../src/backend/wasm/wasm.ts";
import { PagellmError } from "../src/errors.ts";
import { WasmForward } from "../src/backend/wasm/wasm-forward.ts";
import { StepBatch } from "../src/model/batch.ts";
import { wholeModel } from "../src/backend/wasm/llama.ts";
import { openCheckpoint } from "../src/model/load.ts";
import { loadWeights } from "../src/backend/wasm/weights.ts";
import { describeShared } from "./helpers/shared.ts";
import { TEXTS, withoutTimings } from "./helpers/prefix.ts";
import { testThreads } from "./helpers/threads.ts";
import { openedLLMs } from "./helpers/llm.ts";

const THREADS = testThreads();
const TIMEOUT_MS = 180_000;

const GGUF_MODELS = [
  "rnd-llama-Q2_K.gguf", "rnd-llama-Q4_K_M.gguf", "rnd-qwen2-Q5_K_M.gguf", "rnd-qwen3moe-Q4_K_M.gguf", "stories260K.gguf", "stories260K-BF16.gguf",
  "stories260K-F16.gguf", "stories260K-Q4_0.gguf", "stories260K-Q4_1.gguf", "stories260K-Q5_0.gguf", "stories260K-Q5_1.gguf",
  "stories260K-Q8_0.gguf",
];

const llms = openedLLMs();

/** Small buffers and a 256-token context: 64-token steps, so prompts are prefilled in chunks. */
const BASE: Partial<EngineOptions> = { threads: THREADS, ctxSize: 256, maxNumBatchedTokens: 64, maxNumSeqs: 8, kvCacheMb: 4 };

function load(model: string, tokenizer: string | undefined, engine: Partial<EngineOptions>): LLM {
  return llms.load({ model, ...(tokenizer === undefined ? {} : { tokenizer }), engine: { ...BASE, ...engine } });
}

/** Every position's logits when scoring `tokens`, as their bits. */
async function scoredBits(llm: LLM, tokens: readonly number[]): Promise<Uint32Array[]> {
  const { logits } = await llm.client.score({ tokens, logits: true });
  return logits!.map((row) => new Uint32Array(row.buffer));
}

/** Twelve requests of varied lengths, every other one sampled with its own seed, all with logprobs. */
function requests(llm: LLM): GenerateRequest[] {
  return Array.from({ length: 12 }, (_, i) => {
    const promptTokenIds = llm.encode(`${TEXTS[i % TEXTS.length]} ${TEXTS[(i + 3) % TEXTS.length]}`).slice(0, 3 + ((i * 17) % 70));
    const r: GenerateRequest = { id: `r${i}`, promptTokenIds, maxTokens: 6 + ((i * 7) % 20), temperature: 0, logprobs: 3 };
    if (i % 2 === 1) Object.assign(r, { temperature: 0.8, topP: 0.95, seed: 100 + i });
    return r;
  });
}

async function generated(llm: LLM): Promise<Omit<CompletionResult, "ttft_ms" | "latency_ms">[]> {
  return (await llm.generate(requests(llm))).map(withoutTimings);
}

function checkSplitAgainstWhole(name: string, model: string, tokenizer?: string, kv: Partial<EngineOptions> = {}): void {
  test(`${name}: the same bits over one memory per item as in one memory`, async () => {
    const whole = load(model, tokenizer, { ...kv, wasmMemoryMb: null });
    const split = load(model, tokenizer, { ...kv, wasmMemoryMb: 1 });
    const c = whole.config;
    expect(whole.info.numMemories).toBe(1);
    if (kv.kvType !== undefined && kv.kvType !== null) expect([whole.info.kvLayout.type, split.info.kvLayout.type]).toEqual([kv.kvType, kv.kvType]);
    // Embedding, each layer, and (unless it is the embedding) the classifier: one memory each.
    expect(split.info.numMemories).toBe(c.nLayers + (c.sharedClassifier ? 1 : 2));
    expect(split.info.placement!.memories.map((m) => describePart(m.part))[1]).toBe("layer 0");

    const tokens = whole.encode(TEXTS.join(" ")).slice(0, 150);
    const a = await scoredBits(whole, tokens);
    const b = await scoredBits(split, tokens);
    expect(b.length).toBe(tokens.length);
    for (let i = 0; i < a.length; i++) expect(b[i]!).toEqual(a[i]!);

    expect(await generated(split)).toEqual(await generated(whole));
  }, TIMEOUT_MS);

  test(`${name}: preempted and recomputed over several memories, the same results as in one`, async () => {
    // 16 blocks of 8 tokens for 12 requests of up to ~97 tokens: admitted with the watermark alone, requests are preempted.
    const small = { numBlocks: 16, blockSize: 8, admission: "watermark" } as const;
    const whole = load(model, tokenizer, { ...kv, wasmMemoryMb: null, ...small });
    const split = load(model, tokenizer, { ...kv, wasmMemoryMb: 1, ...small });
    const expected = await generated(whole);
    expect(whole.stats().preemptions).toBeGreaterThan(0);
    expect(await generated(split)).toEqual(expected);
    expect(split.stats().preemptions).toBe(whole.stats().preemptions);
  }, TIMEOUT_MS);
}

for (const file of GGUF_MODELS) {
  describeShared(`multi-memory ${file}`, [`models/gguf/${file}`], ([model]) => checkSplitAgainstWhole(file, model!));
}

// GGUF models run an f16 KV cache by default and llama2.c ones f32: the other types too (rnd-llama's
// heads are whole q8_0 blocks; stories260K's are not, and fall back to f16).
for (const kvType of ["f32", "q8_0"] as const) {
  describeShared(`multi-memory rnd-llama-Q4_K_M.gguf, ${kvType} KV`, ["models/gguf/rnd-llama-Q4_K_M.gguf"], ([model]) =>
    checkSplitAgainstWhole(`rnd-llama-Q4_K_M.gguf (${kvType} KV)`, model!, undefined, { kvType }));
}
describeShared("multi-memory llama2.c, f16 KV", ["models/llama2c/llama2xs_h192.bin", "models/llama2c/tok512.bin"], ([model, tokenizer]) => {
  checkSplitAgainstWhole("llama2xs_h192.bin (f16 KV)", model!, tokenizer!, { kvType: "f16" });
});

describeShared("multi-memory llama2.c", ["models/llama2c/stories260K.bin", "models/llama2c/tok512.bin"], ([model, tokenizer]) => {
  checkSplitAgainstWhole("stories260K.bin", model!, tokenizer!);
});

describeShared("addresses past 2 GiB", ["models/gguf/rnd-qwen2-Q5_K_M.gguf"], ([model]) => {
  /** Logits of every position of `tokens` with the model's buffers `pad` bytes up its memory (the pad is never touched). */
  const logitsAfter = async (pad: number, tokens: number[]): Promise<Float32Array[]> => {
    const backend = new CpuBackend(THREADS);
    try {
      backend.mem.alloc(pad);
      const ckpt = openCheckpoint(model!);
      const c = { ...ckpt.config, seqLen: 64 };
      const weights = loadWeights({ ...ckpt, config: c }, backend.mem, backend.kernels);
      const batch = new StepBatch(backend.mem, 64, 1, 4, 16, 64);
      const forward = new WasmForward(c, weights, [backend], [wholeModel(c)], batch, 64, 8, kvLayout(c, 16, "f32"));
      batch.addSequence(tokens, 0, [[7, 5, 3, 1]], "all");
      await forward.forward(batch);
      return tokens.map((_, r) => Float32Array.from(forward.logitsRow(r)));
    } finally {
      backend.close();
    }
  };

  test("a model whose weights, KV, batch and logits lie past 2 GiB of its memory gives the same logits", async () => {
    const tokens = Array.from({ length: 40 }, (_, i) => (i * 7919) % 1000);
    const high = await logitsAfter(2 ** 31 + 4096, tokens);
    const low = await logitsAfter(0, tokens);
    for (let i = 0; i < tokens.length; i++) expect(high[i]!).toEqual(low[i]!);
  }, TIMEOUT_MS);
});

describe("placement", () => {
  const sizes = (layers: number[], shared: boolean) => ({
    weights: { embedding: 100, layers, output: 50 },
    sharedClassifier: shared,
    kvBytes: (first: number, end: number) => 10 * (end - first),
    fixedBytes: (part: { firstLayer: number; endLayer: number; classify: boolean }) => 20 + (part.endLayer > part.firstLayer ? 5 : 0) + (part.classify ? 7 : 0),
  });

  test("fills memories in model order, each within the limit", () => {
    // embedding 100 + output 50 (shared) + 32 fixed with layers = 182; each layer 40 + 10 KV.
    const p = placeModel("m", 4, sizes([40, 40, 40, 40], true), 300);
    expect(p.memories.map((m) => describePart(m.part))).toEqual(["embedding, layers 0-1, output", "layers 2-3"]);
    expect(p.memories.map((m) => m.totalBytes)).toEqual([100 + 50 + 100 + 20 + 5 + 7, 100 + 20 + 5]);
    expect(p.weights).toEqual({ embedding: 0, layers: [0, 0, 1, 1], output: 0 });
  });

  test("an unshared classifier comes last; an item larger than the limit takes a memory alone", () => {
    const p = placeModel("m", 3, sizes([40, 500, 40], false), 300);
    expect(p.memories.map((m) => describePart(m.part))).toEqual(["embedding, layer 0", "layer 1", "layer 2, output"]);
    expect(p.memories[1]!.totalBytes).toBe(500 + 10 + 25);
    expect(p.weights).toEqual({ embedding: 0, layers: [0, 1, 2], output: 2 });
  });

  test("an item larger than 4 GiB is refused with its size, before anything is allocated", () => {
    expect(() => placeModel("big.gguf", 2, sizes([40, 5 * 2 ** 30], false), 300)).toThrow(
      /^big\.gguf: layer 1 needs 5\.00 GiB with its buffers, more than the 4 GiB a WebAssembly memory holds/,
    );
  });

  test("a memory the runtime will not grow is a one-line PagellmError naming the sizes", () => {
    const mem = new LinearMemory();
    (mem.memory as { grow: (pages: number) => number }).grow = () => {
      throw new RangeError("Out of memory");
    };
    expect(() => mem.alloc(64 << 20)).toThrow(PagellmError);
    expect(() => mem.alloc(64 << 20)).toThrow(/^WebAssembly memory could not grow from [\d.]+ GiB to [\d.]+ GiB: Out of memory$/);
  });

  test("PAGELLM_WASM_MEMORY_MB sets the largest memory; the option wins; never above 4 GiB", () => {
    const saved = process.env.PAGELLM_WASM_MEMORY_MB;
    try {
      process.env.PAGELLM_WASM_MEMORY_MB = "64";
      expect(memoryLimitBytes()).toBe(64 * 2 ** 20);
      expect(memoryLimitBytes(8)).toBe(8 * 2 ** 20);
      process.env.PAGELLM_WASM_MEMORY_MB = "100000";
      expect(memoryLimitBytes()).toBeLessThan(4 * 2 ** 30);
      process.env.PAGELLM_WASM_MEMORY_MB = "lots";
      expect(() => memoryLimitBytes()).toThrow(/PAGELLM_WASM_MEMORY_MB must be a positive number of MiB, got "lots"/);
    } finally {
      if (saved === undefined) delete process.env.PAGELLM_WASM_MEMORY_MB;
      else process.env.PAGELLM_WASM_MEMORY_MB = saved;
    }
  });
});
