/**
 * Prompt-lookup speculative decoding. What must hold:
 *   - the proposer: longest suffix first, its latest earlier occurrence, a loop's continuation
 *     copied past the end of the context; the drafter's draft length from its acceptance rate;
 *   - rollback: the blocks that held only rejected positions go back to the free queue (exact
 *     block ids), blocks the accepted tokens filled are cached, nothing else changes;
 *   - the output, greedy and seeded, with logprobs, stop strings and max_tokens, is the same with
 *     and without --speculate on every shared model (llama2.c checkpoints and GGUF files), in
 *     batches with prefix hits, in a pool so small that requests are preempted mid-speculation,
 *     and with a step budget so small that drafts are cut; stop strings fall inside accepted
 *     drafts; at PAGELLM_TEST_THREADS (CI runs 1 and 2) and on WebGPU;
 *   - the command line: --speculate ngram reports drafted/accepted per request in --json, and bad
 *     --spec-* values are one-line errors.
 */
import { describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { LLM, type CompletionResult, type GenerateRequest } from "../src/llm/llm.ts";
import type { EngineOptions } from "../src/engine/engine-options.ts";
import { proposeNgram } from "../src/engine/ngram-proposer.ts";
import { DEFAULT_SPECULATIVE, DRAFT_THRESHOLD, Drafter, PRIOR_RATE, type SpeculativeOptions } from "../src/engine/speculative.ts";
import { Request } from "../src/kv/request.ts";
import { KVCacheManager } from "../src/kv/kv-cache-manager.ts";
import type { WebGpuBackend } from "../src/backend/webgpu/backend.ts";
import { MODELS, TEXTS, TOKENIZER } from "./helpers/prefix.ts";
import { describeShared } from "./helpers/shared.ts";
import { testThreads } from "./helpers/threads.ts";
import { describeGpu } from "./helpers/webgpu.ts";
import { REPO_ROOT, runPagellm } from "./helpers/cli.ts";
import { InputError } from "../src/errors.ts";
import { startServer } from "./helpers/serve.ts";
import { allOutputs, comparable, openedLLMs } from "./helpers/llm.ts";

const THREADS = testThreads();
/** Per-test limit: many engine runs on a loaded 2-core machine (bun's 5 s default is far too tight). */
const TIMEOUT_MS = 180_000;
const SPEC: SpeculativeOptions = DEFAULT_SPECULATIVE;
/** Always K draft tokens: more drafts verified, and rejected, than the adaptive default. */
const EAGER: SpeculativeOptions = { ...DEFAULT_SPECULATIVE, adaptive: false };

// ---------------------------------------------------------------------------------------------
// proposer and drafter

describe("proposeNgram", () => {
  const range = { min: 1, max: 3 };
  test("the longest suffix with an earlier occurrence wins, and its latest occurrence", () => {
    // suffix [7, 8, 9] occurs at 0 (followed by 1, 2); [8, 9] also at 5 (followed by 5): 3-gram first.
    expect(proposeNgram([7, 8, 9, 1, 2, 8, 9, 5, 7, 8, 9], range, 2)).toEqual([1, 2]);
    // only the 1-gram [9] recurs; its latest earlier occurrence is at 4, followed by 6, 9, then the copy goes on.
    expect(proposeNgram([9, 3, 4, 5, 9, 6, 9], range, 4)).toEqual([6, 9, 6, 9]);
  });
  test("a loop's continuation is copied past the end of the context", () => {
    expect(proposeNgram([1, 2, 3, 1, 2, 3], range, 7)).toEqual([1, 2, 3, 1, 2, 3, 1]);
    expect(proposeNgram([5, 5], range, 3)).toEqual([5, 5, 5]);
  });
  test("no draft without an earlier occurrence of at least min tokens", () => {
    expect(proposeNgram([1, 2, 3, 4], range, 4)).toEqual([]);
    expect(proposeNgram([1, 2, 9, 2], { min: 2, max: 3 }, 4)).toEqual([]);
    expect(proposeNgram([1, 2, 9, 1, 2], { min: 2, max: 3 }, 4)).toEqual([9, 1, 2, 9]);
    expect(proposeNgram([4], range, 4)).toEqual([]);
    expect(proposeNgram([1, 1, 1], range, 0)).toEqual([]);
  });
});

describe("Drafter", () => {
  const loop = [1, 2, 1, 2, 1, 2];
  test("drafts the longest k <= K with rate^k >= DRAFT_THRESHOLD: one token at first, K once drafts keep being accepted", () => {
    const d = new Drafter(SPEC);
    expect(d.acceptanceRate).toBe(PRIOR_RATE);
    expect(d.propose(loop, 9)).toEqual([1]);
    const lengths: number[] = [];
    for (let i = 0; i < 12; i++) {
      const draft = d.propose(loop, 9);
      lengths.push(draft.length);
      d.record(draft.length, draft.length);
    }
    expect(lengths[0]).toBe(1);
    expect(lengths.slice(-3)).toEqual([SPEC.tokens, SPEC.tokens, SPEC.tokens]);
    for (let i = 1; i < lengths.length; i++) expect(lengths[i]!).toBeGreaterThanOrEqual(lengths[i - 1]!);
    for (const n of lengths) expect(n).toBeLessThanOrEqual(SPEC.tokens);
    expect(d.propose(loop, 2)).toEqual([1, 2]);
  });
  test("a sequence whose drafts keep failing stops drafting, then tries one token again after a pause", () => {
    const d = new Drafter(SPEC);
    let misses = 0;
    while (d.draftLength > 0) {
      d.record(d.draftLength, 0);
      misses++;
    }
    expect(misses).toBe(2); // 0.8 -> 0.72 -> 0.648: below the threshold
    expect(d.acceptanceRate).toBeLessThan(DRAFT_THRESHOLD);
    let paused = 0;
    while (d.propose(loop, 4).length === 0) paused++;
    expect(paused).toBeGreaterThan(0);
    // a sequence that failed more pauses longer
    const worse = new Drafter(SPEC);
    for (let i = 0; i < 8; i++) worse.record(1, 0);
    let pausedLonger = 0;
    while (worse.propose(loop, 4).length === 0) pausedLonger++;
    expect(pausedLonger).toBeGreaterThan(paused);
    expect(pausedLonger).toBeLessThan(200);
  });
  test("counts what was drafted and accepted; only verified positions move the rate", () => {
    const d = new Drafter(SPEC);
    d.record(4, 1);
    d.record(3, 3);
    expect(d.counts).toEqual({ drafted: 7, accepted: 4 });
    // verified: accept, reject (of the first draft), then three accepts
    let rate = PRIOR_RATE;
    for (const hit of [1, 0, 1, 1, 1]) rate = 0.9 * rate + 0.1 * hit;
    expect(d.acceptanceRate).toBeCloseTo(rate, 12);
  });
  test("never proposes more than the limit", () => {
    expect(new Drafter(SPEC).propose([3, 3, 3], 0)).toEqual([]);
  });
});

// ---------------------------------------------------------------------------------------------
// KV rollback

describe("KVCacheManager.rollback", () => {
  test("frees the blocks that held only rejected draft positions and caches the blocks accepted tokens filled", () => {
    const kv = new KVCacheManager({ numBlocks: 8, blockSize: 4 });
    const req = new Request({ id: "a", promptTokenIds: [1, 2, 3, 4, 5, 6] });
    expect(kv.allocateSlots(req, 6)!.map((b) => b.blockId)).toEqual([0, 1]);
    req.numComputedTokens = 6;
    req.appendOutputTokenIds([7]);
    // decode token 7 at position 6 plus a 5-token draft: positions 6..11, blocks 1 and 2 (new: 2)
    expect(kv.allocateSlots(req, 6)!.map((b) => b.blockId)).toEqual([2]);
    expect(kv.getBlockIds(req)).toEqual([0, 1, 2]);
    expect(kv.numCachedBlocks).toBe(1); // only block 0 is full of known tokens
    req.numComputedTokens += 6;
    // two draft tokens accepted (8, 9), then the sampled 10: known 1..10, KV of 1..9 kept
    req.appendOutputTokenIds([8, 9, 10]);
    kv.rollback(req, 9);
    expect(kv.getBlockIds(req)).toEqual([0, 1, 2]);
    expect(kv.numCachedBlocks).toBe(2); // block 1 is now full of accepted tokens 5..8
    // nothing accepted on the next draft of 4: positions 9..13 computed, block 3 allocated, then freed
    req.numComputedTokens = 9;
    expect(kv.allocateSlots(req, 5)!.map((b) => b.blockId)).toEqual([3]);
    req.appendOutputTokenIds([11]);
    kv.rollback(req, 10);
    expect(kv.getBlockIds(req)).toEqual([0, 1, 2]);
    expect(kv.numUsedBlocks).toBe(3);
    expect(kv.freeBlockIds()).toContain(3);
    expect(kv.block(3).blockHash).toBeNull();
    expect(() => kv.rollback(req, 12)).toThrow(RangeError);
  });
});

// ---------------------------------------------------------------------------------------------
// the engine: the same output with and without speculation

const llms = openedLLMs();
const closeAll = llms.closeAll;
const opened = llms.open;

function load(model: string, tokenizer: string | undefined, engine: Partial<EngineOptions>, gpu?: WebGpuBackend): LLM {
  // A small KV pool: these requests need a few MiB, and the machine's free memory is checked at load.
  return llms.load({ model, tokenizer, engine: { kvCacheMb: 32, ...engine }, gpu });
}

/**
 * Requests that loop and repeat their prompts (small models decoding greedily repeat themselves,
 * and the second text of each prompt is the first again): greedy, seeded with temperature, top-k,
 * top-p, min-p and a repetition penalty, some with logprobs, varied max_tokens.
 */
function requests(llm: LLM, n: number, maxTokens: number): GenerateRequest[] {
  return Array.from({ length: n }, (_, i): GenerateRequest => {
    const text = TEXTS[i % TEXTS.length]!;
    const r: GenerateRequest = { id: `r${i}`, promptTokenIds: llm.encode(`${text} ${text}`), maxTokens: maxTokens - (i % 3) * 7, temperature: 0 };
    if (i % 3 === 1) Object.assign(r, { temperature: 0.8, topK: 40, topP: 0.95, minP: 0.05, seed: 77 + i, logprobs: 2 });
    if (i % 3 === 2) Object.assign(r, { temperature: 0.6, topK: 0, topP: 1, minP: 0, repetitionPenalty: 1.1, repeatLastN: 16, seed: 5 + i });
    return r;
  });
}

function drafted(results: readonly CompletionResult[]): { drafted: number; accepted: number } {
  return results.reduce((t, r) => ({ drafted: t.drafted + r.speculative!.drafted, accepted: t.accepted + r.speculative!.accepted }), { drafted: 0, accepted: 0 });
}

/** Run `reqs` on a plain engine and a speculating one with the same options; expect the same results, and some drafts accepted. */
async function expectSameOutput(
  model: string, tokenizer: string | undefined, engine: Partial<EngineOptions>, build: (llm: LLM) => GenerateRequest[],
  opts: { gpu?: WebGpuBackend; compareCached?: boolean; speculative?: SpeculativeOptions; someAccepted?: boolean } = {},
): Promise<CompletionResult[]> {
  const plain = load(model, tokenizer, { ...engine, speculative: null }, opts.gpu);
  const reqs = build(plain);
  const want = await plain.generate(reqs);
  closeAll();
  const spec = load(model, tokenizer, { ...engine, speculative: opts.speculative ?? SPEC }, opts.gpu);
  const got = await spec.generate(reqs);
  const strip = (r: CompletionResult) => (opts.compareCached === false ? { ...comparable(r), cached_tokens: 0 } : comparable(r));
  expect(got.map(strip)).toEqual(want.map(strip));
  const t = drafted(got);
  expect(t.drafted).toBeGreaterThan(0);
  if (opts.someAccepted !== false) expect(t.accepted).toBeGreaterThan(0);
  expect(spec.stats().draftedTokens).toBe(t.drafted);
  expect(spec.stats().blocksInUse).toBe(0);
  return got;
}

const LLAMA2C_MODELS: [string, string][] = [
  ["stories260K", MODELS.stories260K], ["llama2xs_h192", MODELS.llama2xs], ["stories260K_q80", MODELS.stories260K_q80],
];
const GGUF_MODELS = [
  "stories260K", "stories260K-F16", "stories260K-BF16", "stories260K-Q8_0", "stories260K-Q4_0", "stories260K-Q4_1",
  "stories260K-Q5_0", "stories260K-Q5_1", "rnd-llama-Q2_K", "rnd-llama-Q4_K_M", "rnd-qwen2-Q5_K_M",
];
/** Random weights whose output does not repeat within these requests: every draft is rejected (the rollback path). */
const NO_ACCEPTED_DRAFTS = new Set(["rnd-llama-Q2_K", "rnd-llama-Q4_K_M"]);

for (const [name, rel] of LLAMA2C_MODELS) {
  describeShared(`speculative decoding on ${name} (${THREADS} thread(s))`, [rel, TOKENIZER], ([model, tokenizer]) => {
    test("greedy and seeded batches, logprobs included, give the same results as without", async () => {
      await expectSameOutput(model!, tokenizer!, {}, (llm) => requests(llm, 6, 48), { speculative: EAGER });
    }, TIMEOUT_MS);
    test("the same with adaptive draft lengths (the default)", async () => {
      await expectSameOutput(model!, tokenizer!, {}, (llm) => requests(llm, 4, 48), { someAccepted: false });
    }, TIMEOUT_MS);
  });
}

for (const name of GGUF_MODELS) {
  describeShared(`speculative decoding on ${name}.gguf (${THREADS} thread(s))`, [`models/gguf/${name}.gguf`], ([model]) => {
    test("greedy and seeded batches, logprobs included, give the same results as without", async () => {
      // A 32-token step budget prefills the prompts in chunks, so each prompt's last chunk carries a
      // draft looked up in the prompt (which repeats itself): every model verifies drafts.
      const engine = { maxNumBatchedTokens: 32 };
      await expectSameOutput(model!, undefined, engine, (llm) => requests(llm, 3, 40), { someAccepted: !NO_ACCEPTED_DRAFTS.has(name), speculative: EAGER });
    }, TIMEOUT_MS);
  });
}

describeShared(`speculative decoding in the engine (stories260K, ${THREADS} thread(s))`, [MODELS.stories260K, TOKENIZER], ([model, tokenizer]) => {
  test("with prefix hits, a pool so small that speculating requests are preempted, and drafts cut by a 24-token budget", async () => {
    // The watermark admission (vLLM's), so that running requests are preempted.
    const engine: Partial<EngineOptions> = { numBlocks: 24, blockSize: 8, maxNumBatchedTokens: 24, maxNumSeqs: 8, admission: "watermark" };
    let preemptions = 0;
    const build = (llm: LLM) => requests(llm, 12, 60);
    await expectSameOutput(model!, tokenizer!, engine, build, { compareCached: false, speculative: EAGER });
    preemptions = opened[0]!.stats().preemptions;
    expect(preemptions).toBeGreaterThan(0);
    expect(opened[0]!.stats().prefixHits).toBeGreaterThan(0);
  }, TIMEOUT_MS);

  test("over one WebAssembly memory per layer (docs/large-models.md), the same results as without", async () => {
    await expectSameOutput(model!, tokenizer!, { wasmMemoryMb: 1 }, (llm) => requests(llm, 6, 48));
    expect(opened[0]!.info.numMemories).toBeGreaterThan(2);
  }, TIMEOUT_MS);

  test("K = 7 and n-grams 2:5 give the same results too; caching off", async () => {
    const speculative: SpeculativeOptions = { method: "ngram", tokens: 7, ngram: { min: 2, max: 5 }, adaptive: false };
    await expectSameOutput(model!, tokenizer!, { enablePrefixCaching: false }, (llm) => requests(llm, 6, 64), { speculative });
  }, TIMEOUT_MS);

  test("max_tokens reached inside a run of accepted drafts ends exactly at max_tokens", async () => {
    const build = (llm: LLM) => [5, 9, 13, 17, 33].map((maxTokens, i): GenerateRequest => ({ id: `m${i}`, promptTokenIds: llm.encode(`${TEXTS[1]} ${TEXTS[1]}`), maxTokens, temperature: 0 }));
    const got = await expectSameOutput(model!, tokenizer!, {}, build, { speculative: EAGER });
    expect(got.map((r) => r.completion_tokens)).toEqual([5, 9, 13, 17, 33]);
  }, TIMEOUT_MS);
});

describeShared(`stop strings inside drafts (rnd-qwen2-Q5_K_M, ${THREADS} thread(s))`, ["models/gguf/rnd-qwen2-Q5_K_M.gguf"], ([model]) => {
  test("stop strings that fall inside accepted drafts cut the text exactly where they do without", async () => {
    // Its greedy output settles into a loop that drafts predict: pieces of it are the stop strings.
    const probe = load(model!, undefined, { speculative: null });
    const prompt = probe.encode(`${TEXTS[0]} ${TEXTS[0]}`);
    const [base] = await probe.generate([{ promptTokenIds: prompt, maxTokens: 100, temperature: 0 }]);
    const text = base!.text;
    const stops = Array.from({ length: 8 }, (_, i) => {
      const at = Math.floor(text.length * (0.3 + 0.08 * i));
      return text.slice(at, at + 5 + i);
    });
    closeAll();
    const build = () => stops.map((stop, i): GenerateRequest => ({ id: `s${i}`, promptTokenIds: prompt, maxTokens: 100, temperature: 0, stop: [stop] }));
    await expectSameOutput(model!, undefined, {}, build);
    // The same again, watching the outputs: some request stopped in a step that accepted draft tokens.
    const llm = opened[0]!;
    const outputs = await allOutputs(llm, build().map((r) => ({ ...r, id: `again-${r.id}` })));
    const ends = outputs.filter((o) => o.finishReason !== null);
    expect(ends.every((o) => o.finishReason === "stop")).toBe(true);
    expect(ends.some((o) => o.numSampled > 1)).toBe(true);
  }, TIMEOUT_MS);
});

describeShared(`speculative decoding with parallel sampling (stories260K, ${THREADS} thread(s))`, [MODELS.stories260K, TOKENIZER], ([model, tokenizer]) => {
  test("n samples forked from one prompt give the same tokens and logprobs with and without, in a pool small enough to preempt", async () => {
    const engine: Partial<EngineOptions> = { numBlocks: 40, blockSize: 8, maxNumBatchedTokens: 32, admission: "watermark" };
    const run = async (speculative: SpeculativeOptions | null) => {
      const llm = load(model!, tokenizer!, { ...engine, speculative });
      const outputs = await allOutputs(llm, TEXTS.slice(0, 3).map((text, k) => ({
        id: `p${k}`, promptTokenIds: llm.encode(`${text} ${text}`), n: 3, maxTokens: 40, temperature: 0.7, topK: 0, topP: 1, minP: 0, seed: 100, logprobs: 1,
      })));
      // Each sample's tokens, logprobs and finish reason, by request and sample.
      const samples = new Map<string, { t: number[]; l: unknown[]; f: string | null }>();
      for (const o of outputs) {
        const key = `${o.requestId}#${o.index}`;
        const s = samples.get(key) ?? { t: [], l: [], f: null };
        s.t.push(...o.tokenIds);
        s.l.push(...(o.logprobs ?? []));
        s.f = o.finishReason ?? s.f;
        samples.set(key, s);
      }
      const out = [...samples.keys()].sort().map((k) => JSON.stringify(samples.get(k)));
      const stats = llm.stats();
      closeAll();
      return { out, stats };
    };
    const plain = await run(null);
    const spec = await run(EAGER);
    expect(spec.out).toEqual(plain.out);
    expect(spec.stats.acceptedTokens).toBeGreaterThan(0);
    expect(spec.stats.preemptions + plain.stats.preemptions).toBeGreaterThan(0);
  }, TIMEOUT_MS);
});

describeShared(`serve --speculate (rnd-qwen2-Q5_K_M, ${THREADS} thread(s))`, ["models/gguf/rnd-qwen2-Q5_K_M.gguf"], ([model]) => {
  test("concurrent streamed completions, greedy and seeded with n = 2, give the same text and logprobs as a plain server", async () => {
    const ask = async (speculative: SpeculativeOptions | null) => {
      const s = await startServer(model!, {}, { speculative, kvCacheMb: 32 });
      try {
        const results = await Promise.all(TEXTS.slice(0, 4).map(async (prompt, i) => {
          const stream = await s.client.completions.create({
            model: "test-model", prompt, max_tokens: 32, stream: true, logprobs: 1,
            ...(i % 2 === 0 ? { temperature: 0 } : { temperature: 0.8, seed: 7 + i, n: 2 }),
          });
          const text = ["", ""];
          const logprobs: (number | null)[][] = [[], []];
          for await (const chunk of stream) {
            for (const c of chunk.choices) {
              text[c.index] += c.text;
              logprobs[c.index]!.push(...(c.logprobs?.token_logprobs ?? []));
            }
          }
          return { text, logprobs };
        }));
        return { results, accepted: s.llm.stats().acceptedTokens };
      } finally {
        await s.close();
      }
    };
    const plain = await ask(null);
    const spec = await ask(EAGER);
    expect(spec.results).toEqual(plain.results);
    expect(plain.results.some((r) => r.text[0]!.length > 0)).toBe(true);
    expect(spec.accepted).toBeGreaterThan(0);
  }, TIMEOUT_MS);
});

describeShared(`speculative decoding over the disk KV cache (stories260K, ${THREADS} thread(s))`, [MODELS.stories260K, TOKENIZER], ([model, tokenizer]) => {
  test("blocks that accepted drafts filled reach the disk with the right KV: a later process's follow-ups hit them and give a plain run's results", async () => {
    const dir = mkdtempSync(join(tmpdir(), "pagellm-spec-disk-"));
    try {
      const open = (speculative: SpeculativeOptions | null, kvCacheDir?: string) => {
        return llms.load({ model: model!, tokenizer: tokenizer!, engine: { kvCacheMb: 32, blockSize: 8, speculative }, kvCacheDir, onWarning: () => {} });
      };
      const first = open(EAGER, dir);
      const firstResults = await first.generate(requests(first, 4, 48));
      expect(drafted(firstResults).accepted).toBeGreaterThan(0);
      await first.flush();
      closeAll();
      // Follow-ups: each first prompt and its reply, then more text (a chat's next turn).
      const followUps = (llm: LLM) => requests(llm, 4, 48).map((r, i): GenerateRequest => ({
        ...r, id: `f${i}`, promptTokenIds: [...r.promptTokenIds!, ...firstResults[i]!.token_ids, ...llm.encode(TEXTS[(i + 2) % TEXTS.length]!).slice(1)],
      }));
      const plain = open(null);
      const want = await plain.generate(followUps(plain));
      closeAll();
      const spec = open(EAGER, dir);
      const got = await spec.generate(followUps(spec));
      const same = (r: CompletionResult) => ({ ids: r.token_ids, text: r.text, finish: r.finish_reason, logprobs: r.logprobs });
      expect(got.map(same)).toEqual(want.map(same));
      // Hits reach past the first prompts, into blocks of generated tokens.
      expect(got.some((r, i) => (r.cached_tokens_disk ?? 0) >= firstResults[i]!.prompt_tokens + 8)).toBe(true);
    } finally {
      closeAll();
      rmSync(dir, { recursive: true, force: true });
    }
  }, TIMEOUT_MS);
});

// ---------------------------------------------------------------------------------------------
// WebGPU

await describeGpu("speculative decoding on WebGPU", (gpu) => {
  describeShared("stories260K on WebGPU", [MODELS.stories260K, TOKENIZER], ([model, tokenizer]) => {
    test("greedy and seeded batches give the same results as without, with preemption", async () => {
      const engine: Partial<EngineOptions> = { threads: 1, numBlocks: 24, blockSize: 8, maxNumBatchedTokens: 32, maxNumSeqs: 6 };
      await expectSameOutput(model!, tokenizer!, engine, (llm) => requests(llm, 6, 40), { gpu, compareCached: false, speculative: EAGER });
    }, TIMEOUT_MS);
  });
});

// ---------------------------------------------------------------------------------------------
// library and command line

describeShared("the library's speculative option", [MODELS.stories260K, TOKENIZER], ([model, tokenizer]) => {
  test("LLM.load({ speculative }) fills in the defaults; bad values are InputErrors; results carry the counts", async () => {
    const llm = llms.load({ model: model!, tokenizer: tokenizer!, engine: { kvCacheMb: 32 }, speculative: { method: "ngram", tokens: 3 } });
    expect(llm.info.speculative).toEqual({ method: "ngram", tokens: 3, ngram: { min: 1, max: 4 }, adaptive: true });
    const [r] = await llm.generate([{ prompt: `${TEXTS[3]} ${TEXTS[3]}`, maxTokens: 30, temperature: 0 }]);
    expect(r!.speculative!.drafted).toBeGreaterThanOrEqual(r!.speculative!.accepted);
    for (const speculative of [{ method: "ngram" as const, tokens: 0 }, { method: "ngram" as const, ngram: { min: 3, max: 2 } }]) {
      expect(() => LLM.load({ model: model!, tokenizer: tokenizer!, engine: { threads: 1, kvCacheMb: 32 }, speculative })).toThrow(InputError);
    }
  }, TIMEOUT_MS);
});

describeShared("generate --speculate", [MODELS.stories260K, TOKENIZER], ([model, tokenizer]) => {
  const base = ["generate", "--model", model!, "--tokenizer", tokenizer!, "--threads", "1", "--max-tokens", "60", "--temperature", "0"];
  test("--json results carry drafted, accepted and the acceptance rate; the tokens are those of a plain run", () => {
    const prompt = ["--prompt", `${TEXTS[2]} ${TEXTS[2]}`, "--json"];
    const plain = runPagellm([...base, ...prompt]);
    const spec = runPagellm([...base, ...prompt, "--speculate", "ngram", "--spec-tokens", "3", "--spec-ngram", "1:3"]);
    expect(plain.exitCode).toBe(0);
    expect(spec.exitCode).toBe(0);
    const a = JSON.parse(plain.stdout) as CompletionResult;
    const b = JSON.parse(spec.stdout) as CompletionResult;
    expect(a.speculative).toBeUndefined();
    expect(b.token_ids).toEqual(a.token_ids);
    expect(b.speculative!.drafted).toBeGreaterThan(0);
    expect(b.speculative!.acceptance_rate).toBeCloseTo(b.speculative!.accepted / b.speculative!.drafted, 3);
    expect(spec.stderr).toMatch(/speculative \(ngram, up to 3 tokens\): \d+ drafted, \d+ accepted/);
  }, TIMEOUT_MS);

  test("chat --speculate: the same replies as a plain chat; each reply's line and /stats show drafted and accepted", async () => {
    const chat = async (extra: string[], stdin: string) => {
      const proc = Bun.spawn(["bun", "bin/pagellm", "chat", "--model", model!, "--tokenizer", tokenizer!, "--threads", "1", "--temperature", "0", "--max-tokens", "40", ...extra], {
        cwd: REPO_ROOT, stdin: "pipe", stdout: "pipe", stderr: "pipe", env: { ...process.env, PAGELLM_DEBUG: "" },
      });
      proc.stdin.write(stdin);
      await proc.stdin.end();
      const [stdout, stderr, code] = await Promise.all([new Response(proc.stdout).text(), new Response(proc.stderr).text(), proc.exited]);
      return { stdout, stderr, code };
    };
    const input = `${TEXTS[4]}\n${TEXTS[5]}\n`;
    const plain = await chat([], input);
    const spec = await chat(["--speculate", "ngram"], `${input}/stats\n`);
    expect(plain.code).toBe(0);
    expect(spec.code).toBe(0);
    expect(spec.stdout.startsWith(plain.stdout)).toBe(true);
    expect(spec.stderr).toMatch(/drafted \d+, accepted \d+/);
    expect(spec.stdout).toMatch(/speculative decoding: ngram, up to 4 draft tokens, n-grams 1:4; last reply drafted \d+, accepted \d+.*; this session drafted \d+, accepted \d+/);
  }, TIMEOUT_MS);

  test("bad --spec-* values are one-line errors with exit code 2", () => {
    for (const [extra, message] of [
      [["--spec-tokens", "4"], "--spec-tokens needs --speculate ngram"],
      [["--speculate", "eagle"], "--speculate must be one of ngram"],
      [["--speculate", "ngram", "--spec-ngram", "3:1"], "--spec-ngram must be MIN:MAX"],
      [["--speculate", "ngram", "--spec-tokens", "0"], "--spec-tokens expects a positive integer"],
    ] as const) {
      const r = runPagellm([...base, "--prompt", "x", ...extra]);
      expect(r.exitCode).toBe(2);
      expect(r.stderr).toContain(message);
      expect(r.stderr.trim().split("\n")).toHaveLength(1);
    }
  }, TIMEOUT_MS);
});
