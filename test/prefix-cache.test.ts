/**
 * Automatic prefix caching on the real models: prompts sharing prefixes of every kind (ending
 * inside a block, exactly at a block boundary, a prompt that is all of another, identical prompts,
 * prompts that continue an earlier request's output) give greedy outputs token-identical to the
 * prefix cache off, run together or one after another, and `cached_tokens` is exactly the longest
 * prefix already computed, in whole blocks, leaving the last prompt token to compute.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { LLM, type CompletionResult, type GenerateRequest } from "../src/llm/llm.ts";
import { MODELS, TEXTS, TOKENIZER, computedTokens, expectedCachedTokens, lcp, withoutTimings } from "./helpers/prefix.ts";
import { describeShared } from "./helpers/shared.ts";
import type { KVType } from "../src/kv/kv-layout.ts";
import type { ChatMessage } from "../src/chat/jinja-template.ts";
import type { EngineOptions } from "../src/engine/engine-options.ts";
import { testThreads } from "./helpers/threads.ts";
import { openedLLMs } from "./helpers/llm.ts";

const THREADS = testThreads();
const REPO = resolve(import.meta.dir, "..");
/** Per-test and per-hook limit (bun's default is 5 s, too tight for a loaded 2-core machine). */
const TIMEOUT_MS = 120_000;

interface Prompt {
  id: string;
  ids: number[];
  maxTokens: number;
}

/** Engines loaded and not closed yet; each test closes its own (afterEach), even when it fails. */
const llms = openedLLMs();

function load(model: string, tokenizer: string, engine: Partial<EngineOptions>, kvType: KVType | null = null): LLM {
  return llms.load({ model, tokenizer, engine: { maxNumBatchedTokens: 2048, kvType, ...engine } });
}

const greedy = (p: Prompt): GenerateRequest => ({ id: p.id, promptTokenIds: p.ids, maxTokens: p.maxTokens, temperature: 0, seed: 1 });

/**
 * The prompt set, in token ids. `firstOutput` is the greedy output of prompt "base48" alone, so
 * that two prompts continue it (their prefix is cached from output blocks when run after it).
 */
function buildPrompts(llm: LLM, firstOutput: readonly number[] | null): Prompt[] {
  const base = llm.encode(`${TEXTS[0]} ${TEXTS[1]}`); // 94 tokens, BOS first
  const tail = (i: number, n: number) => llm.encode(TEXTS[i]!).slice(1, 1 + n); // no BOS
  const prompts: Prompt[] = [
    { id: "base48", ids: base.slice(0, 48), maxTokens: 40 },
    // shares 21 tokens with base48: the shared part ends inside a block (16 and 4)
    { id: "inside-block", ids: [...base.slice(0, 21), ...tail(2, 14)], maxTokens: 30 },
    // shares exactly 32 tokens: a block boundary for 16 and 4
    { id: "at-boundary", ids: [...base.slice(0, 32), ...tail(3, 9)], maxTokens: 25 },
    // all of it is base48's first 32 tokens: every block cached, the last one recomputed
    { id: "whole-prefix-aligned", ids: base.slice(0, 32), maxTokens: 33 },
    // all of it is base48's first 37 tokens (not block-aligned)
    { id: "whole-prefix-37", ids: base.slice(0, 37), maxTokens: 20 },
    // identical to base48
    { id: "identical", ids: base.slice(0, 48), maxTokens: 40 },
    // base48 is all of its prefix
    { id: "extends", ids: [...base.slice(0, 48), ...tail(4, 11)], maxTokens: 28 },
    // one block in common
    { id: "one-block", ids: [...base.slice(0, 16), ...tail(5, 20)], maxTokens: 22 },
    // nothing in common but BOS
    { id: "unrelated", ids: llm.encode(TEXTS[6]!), maxTokens: 35 },
    // the whole base text
    { id: "base94", ids: base, maxTokens: 24 },
  ];
  if (firstOutput !== null) {
    const continued = [...prompts[0]!.ids, ...firstOutput];
    // continues base48 with 21 of its generated tokens, then goes elsewhere
    prompts.push({ id: "continues-output", ids: [...continued.slice(0, 48 + 21), ...tail(7, 10)], maxTokens: 26 });
    // base48 and all its output (whose last token base48 never computed)
    prompts.push({ id: "continues-all", ids: continued, maxTokens: 18 });
  }
  return prompts;
}

async function runTogether(llm: LLM, prompts: Prompt[]): Promise<CompletionResult[]> {
  return llm.generate(prompts.map(greedy));
}

async function runOneByOne(llm: LLM, prompts: Prompt[]): Promise<CompletionResult[]> {
  const out: CompletionResult[] = [];
  for (const p of prompts) out.push(...(await llm.generate([greedy(p)])));
  return out;
}

function expectSameTokens(actual: CompletionResult[], expected: CompletionResult[]): void {
  expect(actual.map((r) => r.id)).toEqual(expected.map((r) => r.id));
  for (let i = 0; i < expected.length; i++) {
    const a = actual[i]!;
    const e = expected[i]!;
    expect({ id: a.id, tokens: a.token_ids, finish: a.finish_reason, text: a.text }).toEqual({
      id: e.id, tokens: e.token_ids, finish: e.finish_reason, text: e.text,
    });
  }
}

const CASES: { name: string; model: string; kvType?: KVType }[] = [
  { name: "stories260K (f32)", model: MODELS.stories260K },
  { name: "stories260K (f32 weights, f16 KV cache)", model: MODELS.stories260K, kvType: "f16" },
  { name: "llama2xs_h192 (f32)", model: MODELS.llama2xs },
  { name: "stories260K_q80 (int8)", model: MODELS.stories260K_q80 },
];

for (const { name, model, kvType } of CASES) {
  describeShared(`prefix cache on ${name}`, [model, TOKENIZER], ([modelPath, tokPath]) => {
    for (const blockSize of [16, 4]) {
      describe(`block size ${blockSize}`, () => {
        let prompts: Prompt[] = [];
        let reference: CompletionResult[] = [];
        beforeAll(async () => {
          const off = load(modelPath!, tokPath!, { enablePrefixCaching: false, blockSize }, kvType ?? null);
          const [first] = await runOneByOne(off, buildPrompts(off, null).slice(0, 1));
          prompts = buildPrompts(off, first!.token_ids);
          reference = await runOneByOne(off, prompts);
          // the reference itself: nothing cached, and batching changes nothing
          expect(reference.every((r) => r.cached_tokens === 0 && r.finish_reason !== "error")).toBe(true);
          expectSameTokens(await runTogether(off, prompts), reference);
          expect(off.stats().prefixQueries).toBe(0);
        }, TIMEOUT_MS);

        test("all prompts in one generate call: same tokens, cached_tokens from the prompts admitted before", async () => {
          const llm = load(modelPath!, tokPath!, { enablePrefixCaching: true, blockSize }, kvType ?? null);
          const results = await runTogether(llm, prompts);
          expectSameTokens(results, reference);
          // Every prompt is admitted in the first step (the token budget covers them all), in order;
          // a prompt's full blocks are cached as soon as they are allocated.
          const expected = prompts.map((p, i) => expectedCachedTokens(p.ids, prompts.slice(0, i).map((q) => q.ids), blockSize));
          expect(results.map((r) => r.cached_tokens)).toEqual(expected);
          expect(results.map((r) => r.prompt_tokens)).toEqual(prompts.map((p) => p.ids.length));
          const s = llm.stats();
          expect(s.evictions).toBe(0);
          expect(s.preemptions).toBe(0);
          expect(s.blocksInUse).toBe(0);
          expect(s.prefixHits).toBe(expected.reduce((a, b) => a + b, 0));
          expect(s.prefixQueries).toBe(prompts.reduce((n, p) => n + p.ids.length, 0));
          // the cases the prompt set is meant to cover really occur
          const cached = new Map(results.map((r) => [r.id, r.cached_tokens]));
          expect(cached.get("inside-block")).toBe(Math.floor(21 / blockSize) * blockSize);
          expect(cached.get("at-boundary")).toBe(32);
          expect(cached.get("whole-prefix-aligned")).toBe(32 - blockSize); // its last block is computed again
          expect(cached.get("whole-prefix-37")).toBe(Math.floor(36 / blockSize) * blockSize);
          expect(cached.get("identical")).toBe(48 - blockSize);
          expect(cached.get("extends")).toBe(48);
          expect(cached.get("one-block")).toBe(16);
          expect(cached.get("unrelated")).toBe(0);
        }, TIMEOUT_MS);

        test("one generate call after another: same tokens, later prompts hit earlier prompts' and outputs' blocks", async () => {
          const llm = load(modelPath!, tokPath!, { enablePrefixCaching: true, blockSize }, kvType ?? null);
          const results = await runOneByOne(llm, prompts);
          expectSameTokens(results, reference);
          const history: number[][] = [];
          const expected: number[] = [];
          prompts.forEach((p, i) => {
            expected.push(expectedCachedTokens(p.ids, history, blockSize));
            history.push(computedTokens(p.ids, results[i]!));
          });
          expect(results.map((r) => r.cached_tokens)).toEqual(expected);
          expect(llm.stats().evictions).toBe(0);
          expect(llm.stats().blocksInUse).toBe(0);
          // Hits from generated tokens: "continues-all" is base48 plus its whole output, so it
          // hits past the prompt into the output blocks.
          const i = prompts.findIndex((p) => p.id === "continues-all");
          expect(results[i]!.cached_tokens).toBeGreaterThan(48);
          const j = prompts.findIndex((p) => p.id === "continues-output");
          expect(results[j]!.cached_tokens).toBe(Math.floor((48 + 21) / blockSize) * blockSize);
        }, TIMEOUT_MS);

        test("the same requests again: everything but each prompt's last block is served from the cache", async () => {
          const llm = load(modelPath!, tokPath!, { enablePrefixCaching: true, blockSize }, kvType ?? null);
          await runTogether(llm, prompts);
          const again = await runTogether(llm, prompts);
          expectSameTokens(again, reference);
          expect(again.map((r) => r.cached_tokens)).toEqual(
            prompts.map((p) => Math.floor((p.ids.length - 1) / blockSize) * blockSize),
          );
        }, TIMEOUT_MS);

        test("longest-prefix-match scheduling gives the same tokens", async () => {
          const llm = load(modelPath!, tokPath!, { enablePrefixCaching: true, blockSize, schedule: "lpm" }, kvType ?? null);
          const results = await runTogether(llm, prompts);
          expectSameTokens(results, reference);
          for (let i = 0; i < prompts.length; i++) {
            expect(results[i]!.cached_tokens).toBeLessThanOrEqual(Math.floor((prompts[i]!.ids.length - 1) / blockSize) * blockSize);
            expect(results[i]!.cached_tokens % blockSize).toBe(0);
          }
        }, TIMEOUT_MS);
      });
    }
  });
}

describeShared("cache_salt isolates cached blocks", [MODELS.stories260K, TOKENIZER], ([modelPath, tokPath]) => {
  test("same prompt, different salt: nothing cached; same salt: cached", async () => {
    const llm = load(modelPath!, tokPath!, { enablePrefixCaching: true, blockSize: 16 });
    const ids = llm.encode(TEXTS[0]!); // 40 tokens
    const req = (id: string, cacheSalt?: string): GenerateRequest => ({
      id, promptTokenIds: ids, maxTokens: 12, temperature: 0, ...(cacheSalt === undefined ? {} : { cacheSalt }),
    });
    const [a] = await llm.generate([req("a", "tenant-a")]);
    expect(a!.cached_tokens).toBe(0);
    const [b] = await llm.generate([req("b", "tenant-b")]);
    expect(b!.cached_tokens).toBe(0);
    const [none] = await llm.generate([req("none")]);
    expect(none!.cached_tokens).toBe(0);
    const [a2] = await llm.generate([req("a2", "tenant-a")]);
    expect(a2!.cached_tokens).toBe(32);
    const [none2] = await llm.generate([req("none2", "")]); // empty salt = no salt
    expect(none2!.cached_tokens).toBe(32);
    // in one batch: each salt hits only its own tenant's blocks
    const batch = await llm.generate([req("c", "tenant-c"), req("c2", "tenant-c"), req("d", "tenant-d")]);
    expect(batch.map((r) => r.cached_tokens)).toEqual([0, 32, 0]);
    // the salt changes what is shared, never the output
    for (const r of [b, none, a2, none2, ...batch]) expect(r!.token_ids).toEqual(a!.token_ids);
  }, TIMEOUT_MS);
});

describeShared("a chat's replies sent back as messages", [MODELS.stories260K, TOKENIZER], ([modelPath, tokPath]) => {
  // What a chat client does (bench serve's chat workload): each turn sends the whole history, the
  // earlier replies as their text. A trained model's reply tokenizes back to the ids it was
  // generated as, so each turn's prompt extends the last turn's prompt and reply, and the cache
  // serves every full block of them (bench serve's chat floor, cached turns at most 0.15x cold, rests on this).
  test("each turn's prompt extends the last prompt and its generated ids; cached_tokens is all their full blocks", async () => {
    const llm = load(modelPath!, tokPath!, { enablePrefixCaching: true, blockSize: 16 });
    const messages: ChatMessage[] = [{ role: "system", content: TEXTS[0]! }];
    let computed: number[] | null = null;
    for (const [turn, user] of [TEXTS[1]!, TEXTS[2]!, TEXTS[3]!].entries()) {
      messages.push({ role: "user", content: user });
      const prompt = llm.messagesPromptIds(messages);
      const [r] = await llm.generate([{ id: `turn-${turn + 1}`, messages, maxTokens: 24, temperature: 0, ignoreEos: true }]);
      expect(r!.prompt_tokens).toBe(prompt.length);
      expect(r!.text).not.toBe("");
      if (computed !== null) {
        expect(lcp(prompt, computed)).toBe(computed.length);
        expect(r!.cached_tokens).toBe(expectedCachedTokens(prompt, [computed], 16));
      }
      computed = computedTokens(prompt, r!);
      messages.push({ role: "assistant", content: r!.text });
    }
  }, TIMEOUT_MS);
});

describeShared("generate CLI and the prefix cache", [MODELS.stories260K, TOKENIZER], ([modelPath, tokPath]) => {
  let dir = "";
  beforeAll(() => {
    dir = mkdtempSync(join(tmpdir(), "pagellm-prefix-cli-"));
  });
  afterAll(() => {
    if (dir !== "") rmSync(dir, { recursive: true, force: true });
  });

  async function cli(args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
    const proc = Bun.spawn([process.execPath, join(REPO, "bin/pagellm"), "generate", "--model", modelPath!, "--tokenizer", tokPath!,
      "--threads", String(THREADS), "--temperature", "0", ...args], { cwd: REPO, stdout: "pipe", stderr: "pipe" });
    const [stdout, stderr, code] = await Promise.all([new Response(proc.stdout).text(), new Response(proc.stderr).text(), proc.exited]);
    return { code, stdout, stderr };
  }

  const PROMPTS = [
    { id: "p0", prompt: `${TEXTS[0]} ${TEXTS[1]}`, max_tokens: 30 },
    { id: "p1", prompt: TEXTS[0], max_tokens: 40 },
    { id: "p2", prompt: `${TEXTS[0]} ${TEXTS[3]}`, max_tokens: 20 },
    { id: "p3", prompt: TEXTS[5], max_tokens: 25 },
    { id: "p4", prompt: `${TEXTS[0]} ${TEXTS[1]}`, max_tokens: 30 },
  ];

  test("--no-prefix-cache prints the same text; --json reports cached_tokens", async () => {
    const jsonl = join(dir, "requests.jsonl");
    writeFileSync(jsonl, PROMPTS.map((p) => JSON.stringify(p)).join("\n") + "\n");
    const on = await cli(["--prompts", jsonl]);
    const off = await cli(["--prompts", jsonl, "--no-prefix-cache"]);
    expect(on.code).toBe(0);
    expect(off.code).toBe(0);
    expect(on.stdout).toContain("==> p0 <==");
    expect(off.stdout).toBe(on.stdout);

    const single = ["--prompt", TEXTS[2]!, "--max-tokens", "40"];
    const singleOn = await cli(single);
    const singleOff = await cli([...single, "--no-prefix-cache"]);
    expect(singleOn.code).toBe(0);
    expect(singleOn.stdout.length).toBeGreaterThan(10);
    expect(singleOff.stdout).toBe(singleOn.stdout);

    for (const blockSize of [16, 4]) {
      const jsonOn = await cli(["--prompts", jsonl, "--json", "--block-size", String(blockSize)]);
      const jsonOff = await cli(["--prompts", jsonl, "--json", "--block-size", String(blockSize), "--no-prefix-cache"]);
      expect(jsonOn.code).toBe(0);
      expect(jsonOff.code).toBe(0);
      const parse = (s: string) => new Map(s.trim().split("\n").map((l) => JSON.parse(l) as CompletionResult).map((r) => [r.id, r]));
      const resOn = parse(jsonOn.stdout);
      const resOff = parse(jsonOff.stdout);
      expect([...resOn.keys()].sort()).toEqual(PROMPTS.map((p) => p.id));
      // expected hits from the prompts' token ids, all admitted in the first step in file order
      const llm = load(modelPath!, tokPath!, { enablePrefixCaching: false });
      const ids = PROMPTS.map((p) => llm.encode(p.prompt));
      for (let i = 0; i < PROMPTS.length; i++) {
        const id = PROMPTS[i]!.id;
        const cached = expectedCachedTokens(ids[i]!, ids.slice(0, i), blockSize);
        expect(withoutTimings(resOn.get(id)!)).toEqual({
          ...withoutTimings(resOff.get(id)!),
          cached_tokens: cached,
          cached_tokens_memory: cached,
        });
        expect(resOff.get(id)!.cached_tokens).toBe(0);
      }
      // the set does share prefixes
      expect(lcp(ids[0]!, ids[1]!)).toBeGreaterThan(blockSize);
      expect(resOn.get("p4")!.cached_tokens).toBeGreaterThan(0);
      expect(jsonOn.stderr).toContain("prefix cache: hit rate");
    }
  }, TIMEOUT_MS);
});
