/**
 * Parallel sampling (`n`): the samples of one prompt are forked from the first once its prompt is
 * computed, sharing its full KV blocks and copying a partly filled last one, so the prompt is
 * computed once. What must hold:
 *   - KVCacheManager.fork: exact block ids shared, the copy pair, ref counts, and nothing changed
 *     when the pool has no block for the copy;
 *   - each sample gives exactly the tokens a separate request with its seed gives (the copied KV
 *     is the same bits as recomputed KV), on WebAssembly and on WebGPU, with a pool so small that
 *     forks fall back to recomputing and samples are preempted;
 *   - the prompt is looked up in the prefix cache once; the scheduler keeps the forks' seats;
 *   - a request aborted before its prefill ends with all its samples and frees every block.
 * The engine is driven through its front door (EngineClient: `n` on the request).
 */
import { expect, test } from "bun:test";
import type { EngineOptions } from "../src/engine/engine-options.ts";
import type { EngineOutput } from "../src/engine/engine-output.ts";
import type { GenerateRequest } from "../src/llm/generate-request.ts";
import type { LLM } from "../src/llm/llm.ts";
import { DEFAULT_SPECULATIVE } from "../src/engine/speculative.ts";
import { RequestTooLongError } from "../src/errors.ts";
import { KVCacheManager, Request } from "../src/kv/index.ts";
import type { WebGpuBackend } from "../src/backend/webgpu/backend.ts";
import { allOutputs, openedLLMs } from "./helpers/llm.ts";
import { MODELS, TEXTS, TOKENIZER } from "./helpers/prefix.ts";
import { describeShared } from "./helpers/shared.ts";
import { describeGpu } from "./helpers/webgpu.ts";

const LIMIT_MS = 120_000;

test("fork shares the full blocks, copies the partly filled one, and changes nothing without a free block", () => {
  const kv = new KVCacheManager({ numBlocks: 5, blockSize: 4 });
  const prompt = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10];
  const parent = new Request({ id: "p", promptTokenIds: prompt });
  expect(kv.allocateSlots(parent, 10)!.map((b) => b.blockId)).toEqual([0, 1, 2]);
  parent.numComputedTokens = 10;
  const child = new Request({ id: "c", promptTokenIds: prompt });
  expect(kv.fork(parent, child)).toEqual({ copies: [{ src: 2, dst: 3 }] });
  expect(kv.getBlockIds(child)).toEqual([0, 1, 3]);
  expect([0, 1, 2, 3].map((id) => kv.block(id).refCnt)).toEqual([2, 2, 1, 1]);
  expect(kv.freeBlockIds()).toEqual([4]);
  const second = new Request({ id: "c2", promptTokenIds: prompt });
  expect(kv.fork(parent, second)).toEqual({ copies: [{ src: 2, dst: 4 }] });
  const third = new Request({ id: "c3", promptTokenIds: prompt });
  expect(kv.fork(parent, third)).toBeNull();
  expect(kv.getBlockIds(third)).toEqual([]);
  expect(kv.block(0).refCnt).toBe(3);
  // A different prompt cannot share the parent's KV.
  expect(() => kv.fork(parent, new Request({ id: "x", promptTokenIds: [1, 2, 3, 9, 5, 6, 7, 8, 9, 10] }))).toThrow("differs");
  for (const r of [child, second, parent]) kv.free(r);
  expect(kv.numFreeBlocks).toBe(5);
});

test("a prompt of whole blocks is shared without a copy", () => {
  const kv = new KVCacheManager({ numBlocks: 3, blockSize: 4 });
  const prompt = [1, 2, 3, 4, 5, 6, 7, 8];
  const parent = new Request({ id: "p", promptTokenIds: prompt });
  kv.allocateSlots(parent, 8);
  parent.numComputedTokens = 8;
  const child = new Request({ id: "c", promptTokenIds: prompt });
  expect(kv.fork(parent, child)).toEqual({ copies: [] });
  expect(kv.getBlockIds(child)).toEqual([0, 1]);
  expect(child.numCachedTokens).toBe(parent.numCachedTokens);
});

const llms = openedLLMs();

/** `n` samples of `prompt` seeded from `seed` (sample i draws with seed + i), with logprobs. */
function samples(id: string, prompt: number[], n: number, seed: number, maxTokens: number): GenerateRequest {
  return { id, promptTokenIds: prompt, n, seed, maxTokens, temperature: 1, topK: 0, topP: 1, minP: 0, logprobs: 1 };
}

/** Each sample's tokens and logprobs, in sample order. */
function bySample(outputs: readonly EngineOutput[]): string[] {
  const samples = new Map<number, { t: number[]; l: unknown[] }>();
  for (const o of outputs) {
    const s = samples.get(o.index) ?? { t: [], l: [] };
    s.t.push(...o.tokenIds);
    s.l.push(...(o.logprobs ?? []));
    samples.set(o.index, s);
  }
  return [...samples.keys()].sort((a, b) => a - b).map((i) => JSON.stringify(samples.get(i)));
}

/** n samples forked vs the same seeds one request at a time, in an engine with `engine` options. */
function forkMatchesSeparate(name: string, load: (engine: Partial<EngineOptions>) => LLM, engine: Partial<EngineOptions>): void {
  test(name, async () => {
    const llm = load(engine);
    const seed = 11;
    const n = 4;
    const prompts = TEXTS.slice(0, 3).map((t) => llm.encode(t));
    const queriesBefore = llm.stats().prefixQueries;
    const outputs = await allOutputs(llm, prompts.map((p, k) => samples(`f${k}`, p, n, seed, 30)));
    const forked = prompts.map((_, k) => bySample(outputs.filter((o) => o.requestId === `f${k}`)));
    const s = llm.stats();
    if (engine.speculative) expect(s.draftedTokens).toBeGreaterThan(0);
    if (engine.numBlocks !== undefined) {
      // Some forks found no free block for their copy and recomputed their prompt.
      expect(s.samplesRecomputed).toBeGreaterThan(0);
      expect(s.preemptions).toBeGreaterThan(0);
    } else {
      // Each prompt looked up once: its other samples were forked, not admitted.
      expect(s.prefixQueries - queriesBefore).toBe(prompts.reduce((n, p) => n + p.length, 0));
      expect(s.samplesForked).toBe(prompts.length * (n - 1));
    }
    for (const [k, p] of prompts.entries()) {
      const separate: string[] = [];
      for (let i = 0; i < n; i++) {
        expect(await llm.client.resetPrefixCache()).toBe(true);
        separate.push(...bySample(await allOutputs(llm, [samples(`s${k}-${i}`, p, 1, seed + i, 30)])));
      }
      expect(forked[k]).toEqual(separate);
    }
    expect(llm.stats().blocksInUse).toBe(0);
  }, LIMIT_MS);
}

describeShared("parallel sampling on WebAssembly", [MODELS.stories260K, TOKENIZER], ([model, tokenizer]) => {
  const load = (engine: Partial<EngineOptions>) => llms.load({ model: model!, tokenizer, engine });
  forkMatchesSeparate("each forked sample gives the tokens and logprobs of a separate request with its seed", load, {});
  // The watermark admission (vLLM's), under which running samples are preempted as the pool runs out.
  forkMatchesSeparate("the same in a pool so small that forks recompute and samples are preempted", load, { numBlocks: 14, blockSize: 8, maxNumBatchedTokens: 24, admission: "watermark" });
  forkMatchesSeparate("the same with speculative decoding (forked samples draft on their own)", load, {
    speculative: { ...DEFAULT_SPECULATIVE, adaptive: false },
  });
  // One memory per item (docs/large-models.md): a fork's block copy is made in every memory's arena.
  forkMatchesSeparate("the same with the model placed over one WebAssembly memory per layer", load, { wasmMemoryMb: 1 });

  test("n beyond --max-num-seqs can never run: RequestTooLongError; seats are kept for forks", async () => {
    const llm = load({ maxNumSeqs: 4 });
    const prompt = llm.encode(TEXTS[1]!);
    expect(() => llm.client.prepare(samples("big", prompt, 5, 1, 5))).toThrow(RequestTooLongError);
    // In the first step the four samples' seats are held: the other request waits.
    const firstStep = { running: -1, outputs: 0 };
    const stopListening = llm.client.onStep((r) => {
      if (firstStep.running >= 0) return;
      firstStep.running = llm.stats().numRunning;
      firstStep.outputs = r.outputs;
    });
    const outputs = await allOutputs(llm, [samples("four", prompt, 4, 1, 5), samples("other", llm.encode(TEXTS[2]!), 1, 9, 5)]);
    stopListening();
    expect(firstStep).toEqual({ running: 4, outputs: 4 });
    // The first step's outputs (the first in the stream) are the four samples'.
    expect(outputs.slice(0, 4).map((o) => [o.requestId, o.index])).toEqual([["four", 1], ["four", 2], ["four", 3], ["four", 0]]);
    const tokens = (id: string) => outputs.filter((o) => o.requestId === id).reduce((n, o) => n + o.tokenIds.length, 0);
    expect(tokens("four")).toBe(20);
    expect(tokens("other")).toBe(5);
  }, LIMIT_MS);

  test("a prompt that fills the whole pool with n = 2 is admitted into the idle pool; its fork finds no block and recomputes", async () => {
    // 39 tokens in blocks of 4: the pool's 10 blocks. The admission used to keep a block for the
    // fork even with nothing running, so the request never ran and the engine threw.
    const llm = load({ numBlocks: 10, blockSize: 4 });
    const prompt = llm.encode(TEXTS.join(" ")).slice(0, 39);
    const forked = bySample(await allOutputs(llm, [samples("full", prompt, 2, 3, 1)]));
    expect(llm.stats().samplesRecomputed).toBe(1);
    const separate: string[] = [];
    for (let i = 0; i < 2; i++) separate.push(...bySample(await allOutputs(llm, [samples(`s${i}`, prompt, 1, 3 + i, 1)])));
    expect(forked).toEqual(separate);
  }, LIMIT_MS);

  test("a request aborted before its prefill ends with all its samples, every block free", async () => {
    const llm = load({});
    const prompt = llm.encode(TEXTS[3]!);
    const stream = llm.client.submit(samples("a", prompt, 3, 1, 6));
    llm.client.abort("a");
    const outputs: EngineOutput[] = [];
    for await (const o of stream) outputs.push(o);
    expect(outputs.map((o) => [o.index, o.finishReason, o.tokenIds.length])).toEqual([[0, "abort", 0], [1, "abort", 0], [2, "abort", 0]]);
    expect(llm.stats().blocksInUse).toBe(0);
    expect(llm.stats().numWaiting).toBe(0);
  }, LIMIT_MS);
});

await describeGpu("parallel sampling on WebGPU", (gpu: WebGpuBackend) => {
  describeShared("(stories260K)", [MODELS.stories260K, TOKENIZER], ([model, tokenizer]) => {
    const load = (engine: Partial<EngineOptions>) => llms.load({ model: model!, tokenizer, engine: { threads: 1, ...engine }, gpu });
    forkMatchesSeparate("forked samples (KV blocks copied on the GPU) match separate requests", load, {});
  });
});
