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
 *   - a parent aborted before its prefill leaves its samples to run as requests of their own.
 */
import { afterEach, expect, test } from "bun:test";
import type { EngineOptions, NewRequest } from "../src/engine/engine.ts";
import { LLM } from "../src/engine/llm.ts";
import { DEFAULT_SAMPLING } from "../src/engine/sampler.ts";
import { DEFAULT_SPECULATIVE } from "../src/engine/speculative.ts";
import type { Sequence } from "../src/engine/sequence.ts";
import { RequestTooLongError } from "../src/errors.ts";
import { KVCacheManager, Request } from "../src/kv/index.ts";
import type { WebGpuBackend } from "../src/backend/webgpu/backend.ts";
import { MODELS, TEXTS, TOKENIZER } from "./helpers/prefix.ts";
import { describeShared } from "./helpers/shared.ts";
import { testThreads } from "./helpers/threads.ts";
import { describeGpu } from "./helpers/webgpu.ts";

const LIMIT_MS = 120_000;

test("fork shares the full blocks, copies the partly filled one, and changes nothing without a free block", () => {
  const kv = new KVCacheManager({ numBlocks: 5, blockSize: 4 });
  const prompt = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10];
  const parent = new Request({ id: "p", promptTokenIds: prompt });
  expect(kv.allocateSlots(parent, 10)!.map((b) => b.blockId)).toEqual([0, 1, 2]);
  parent.numComputedTokens = 10;
  const child = new Request({ id: "c", promptTokenIds: prompt });
  expect(kv.fork(parent, child)).toEqual({ copy: { src: 2, dst: 3 } });
  expect(kv.getBlockIds(child)).toEqual([0, 1, 3]);
  expect([0, 1, 2, 3].map((id) => kv.block(id).refCnt)).toEqual([2, 2, 1, 1]);
  expect(kv.freeBlockIds()).toEqual([4]);
  const second = new Request({ id: "c2", promptTokenIds: prompt });
  expect(kv.fork(parent, second)).toEqual({ copy: { src: 2, dst: 4 } });
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
  expect(kv.fork(parent, child)).toEqual({ copy: null });
  expect(kv.getBlockIds(child)).toEqual([0, 1]);
  expect(child.numCachedTokens).toBe(parent.numCachedTokens);
});

const opened: LLM[] = [];
afterEach(() => {
  for (const llm of opened.splice(0)) llm.close();
});

function samples(prompt: number[], seeds: number[], maxTokens: number, tag: string): NewRequest[] {
  return seeds.map((seed, i) => ({
    id: `${tag}-${i}`, promptTokenIds: prompt,
    params: { maxTokens, stop: [], sampling: { ...DEFAULT_SAMPLING, temperature: 1, topK: 0, topP: 1, minP: 0, seed }, logprobs: 1 },
  }));
}

async function runAll(llm: LLM): Promise<void> {
  while (llm.engine.hasUnfinished) await llm.engine.step();
}

const outputs = (seqs: readonly Sequence[]) => seqs.map((s) => JSON.stringify({ t: s.outputTokenIds, l: s.logprobs }));

/** n samples forked vs the same seeds one request at a time, in an engine with `engine` options. */
function forkMatchesSeparate(name: string, load: (engine: Partial<EngineOptions>) => LLM, engine: Partial<EngineOptions>): void {
  test(name, async () => {
    const llm = load(engine);
    const seeds = [11, 12, 13, 14];
    const prompts = TEXTS.slice(0, 3).map((t) => llm.encode(t));
    // Count the forks that found no free block for their copy (and recompute their prompt).
    const kv = llm.engine.kv;
    const fork = kv.fork.bind(kv);
    let fallbacks = 0;
    kv.fork = (parent, child) => {
      const shared = fork(parent, child);
      if (shared === null) fallbacks++;
      return shared;
    };
    const forked = prompts.map((p, k) => llm.engine.addParallelSampling(samples(p, seeds, 30, `f${k}`)));
    const queriesBefore = llm.engine.stats.prefixQueries;
    await runAll(llm);
    if (engine.speculative) expect(llm.engine.stats.draftedTokens).toBeGreaterThan(0);
    if (engine.numBlocks !== undefined) {
      expect(fallbacks).toBeGreaterThan(0);
      expect(llm.engine.stats.preemptions).toBeGreaterThan(0);
    } else {
      // Each prompt looked up once: its other samples were forked, not admitted.
      expect(llm.engine.stats.prefixQueries - queriesBefore).toBe(prompts.reduce((n, p) => n + p.length, 0));
    }
    const separate: Sequence[][] = [];
    for (const [k, p] of prompts.entries()) {
      const one: Sequence[] = [];
      for (const [i, req] of samples(p, seeds, 30, `s${k}`).entries()) {
        llm.engine.resetPrefixCache();
        one.push(llm.engine.addRequest({ ...req, id: `s${k}-${i}` }));
        await runAll(llm);
      }
      separate.push(one);
    }
    forked.forEach((group, k) => expect(outputs(group)).toEqual(outputs(separate[k]!)));
    expect(llm.engine.stats.blocksInUse).toBe(0);
  }, LIMIT_MS);
}

describeShared("parallel sampling on WebAssembly", [MODELS.stories260K, TOKENIZER], ([model, tokenizer]) => {
  const load = (engine: Partial<EngineOptions>) => {
    const llm = LLM.load({ model: model!, tokenizer, engine: { threads: testThreads(), ...engine } });
    opened.push(llm);
    return llm;
  };
  forkMatchesSeparate("each forked sample gives the tokens and logprobs of a separate request with its seed", load, {});
  forkMatchesSeparate("the same in a pool so small that forks recompute and samples are preempted", load, { numBlocks: 14, blockSize: 8, maxNumBatchedTokens: 24 });
  forkMatchesSeparate("the same with speculative decoding (forked samples draft on their own)", load, {
    speculative: { ...DEFAULT_SPECULATIVE, adaptive: false },
  });
  // One memory per item (docs/large-models.md): a fork's block copy is made in every memory's arena.
  forkMatchesSeparate("the same with the model placed over one WebAssembly memory per layer", load, { wasmMemoryMb: 1 });

  test("n beyond --max-num-seqs can never run: RequestTooLongError; seats are kept for forks", async () => {
    const llm = load({ maxNumSeqs: 4 });
    const prompt = llm.encode(TEXTS[1]!);
    expect(() => llm.engine.addParallelSampling(samples(prompt, [1, 2, 3, 4, 5], 5, "big"))).toThrow(RequestTooLongError);
    const four = llm.engine.addParallelSampling(samples(prompt, [1, 2, 3, 4], 5, "four"));
    const other = llm.engine.addRequest(samples(llm.encode(TEXTS[2]!), [9], 5, "other")[0]!);
    await llm.engine.step();
    // The four samples' seats are held: the other request waits.
    expect(llm.engine.stats.numRunning).toBe(4);
    expect(other.numComputedTokens).toBe(0);
    await runAll(llm);
    expect(four.every((s) => s.outputTokenIds.length === 5)).toBe(true);
    expect(other.outputTokenIds.length).toBe(5);
  }, LIMIT_MS);

  test("a parent aborted before its prefill leaves its samples to run on their own", async () => {
    const llm = load({});
    const prompt = llm.encode(TEXTS[3]!);
    const [parent, ...children] = llm.engine.addParallelSampling(samples(prompt, [1, 2, 3], 6, "a"));
    llm.engine.abort(parent!);
    await runAll(llm);
    expect(parent!.finishReason).toBe("abort");
    for (const child of children) expect(child.outputTokenIds.length).toBe(6);
    expect(llm.engine.stats.blocksInUse).toBe(0);
  }, LIMIT_MS);
});

await describeGpu("parallel sampling on WebGPU", (gpu: WebGpuBackend) => {
  describeShared("(stories260K)", [MODELS.stories260K, TOKENIZER], ([model, tokenizer]) => {
    const load = (engine: Partial<EngineOptions>) => {
      const llm = LLM.load({ model: model!, tokenizer, engine: { threads: 1, ...engine }, gpu });
      opened.push(llm);
      return llm;
    };
    forkMatchesSeparate("forked samples (KV blocks copied on the GPU) match separate requests", load, {});
  });
});
