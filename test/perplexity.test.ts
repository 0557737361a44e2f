/**
 * Scoring (`LLM.score`, `pagellm perplexity`) and per-token log-probabilities (`--logprobs`):
 * the log-softmax helpers against plain loops, scores against llama.cpp's reference for the same
 * weights, and agreement between teacher-forced scores and what generation reported.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { LLM } from "../src/llm/llm.ts";
import { logSumExp, sampledLogprob, topKIds } from "../src/engine/logprobs.ts";
import { runPagellm } from "./helpers/cli.ts";
import { Xoshiro128 } from "../src/util/random.ts";
import { describeShared } from "./helpers/shared.ts";
import { testThreads } from "./helpers/threads.ts";
import { PROCESS_TEST_MS } from "./helpers/limits.ts";

const THREADS = testThreads();

describe("log-softmax helpers", () => {
  test("logSumExp equals the float64 sum it shifts, and survives huge logits", () => {
    const rng = new Xoshiro128(7);
    for (let iter = 0; iter < 200; iter++) {
      const n = 1 + Math.floor(rng.nextFloat() * 300);
      const x = Float32Array.from({ length: n }, () => (rng.nextFloat() - 0.5) * 40);
      const direct = Math.log(Array.from(x).reduce((a, v) => a + Math.exp(v), 0));
      expect(logSumExp(x)).toBeCloseTo(direct, 9);
    }
    expect(logSumExp([1000, 1000])).toBeCloseTo(1000 + Math.LN2, 9);
    expect(logSumExp([-Infinity, -Infinity])).toBe(-Infinity);
  });

  test("topKIds is the first k of a stable descending sort, ties to the lower id", () => {
    const rng = new Xoshiro128(11);
    for (let iter = 0; iter < 300; iter++) {
      const n = 1 + Math.floor(rng.nextFloat() * 200);
      // Few distinct values, so ties are common.
      const x = Float32Array.from({ length: n }, () => Math.floor(rng.nextFloat() * 8));
      const k = Math.floor(rng.nextFloat() * 25);
      const sorted = Array.from({ length: n }, (_, i) => i).sort((a, b) => x[b]! - x[a]! || a - b);
      expect(topKIds(x, k)).toEqual(sorted.slice(0, k));
    }
  });

  test("sampledLogprob: probabilities of the top tokens and the sampled one", () => {
    const logits = Float32Array.from([1, 3, 2, 3]);
    const z = Math.exp(1) + 2 * Math.exp(3) + Math.exp(2);
    const r = sampledLogprob(logits, 2, 2);
    expect(r.id).toBe(2);
    expect(r.logprob).toBeCloseTo(2 - Math.log(z), 12);
    expect(r.top.map((t) => t.id)).toEqual([1, 3]);
    expect(r.top[0]!.logprob).toBeCloseTo(3 - Math.log(z), 12);
  });
});

describeShared(
  "scoring a text with stories260K",
  ["models/llama2c/stories260K.bin", "models/llama2c/tok512.bin", "golden/llama-cpp/texts/story.txt", "golden/llama-cpp/refs/stories260K-F32.score.story.json"],
  ([model, tokenizer, story, ref]) => {
    let llm: LLM;
    beforeAll(() => {
      llm = LLM.load({ model: model!, tokenizer: tokenizer!, engine: { threads: THREADS } });
    });
    afterAll(() => llm.close());

    test("same tokens as llama.cpp and log-probabilities within its F32 rule", async () => {
      const want = JSON.parse(readFileSync(ref!, "utf8")) as { tokens: number[]; logprobs: [number, number][] };
      const got = await llm.score(readFileSync(story!, "utf8"));
      expect(got.tokens).toEqual(want.tokens);
      expect(got.token_logprobs.length).toBe(want.tokens.length - 1);
      const meanDiff = want.logprobs.reduce((a, [lp], i) => a + Math.abs(lp - got.token_logprobs[i]!), 0) / want.logprobs.length;
      const agree = want.logprobs.filter(([, am], i) => am === got.top_tokens[i]).length / want.logprobs.length;
      expect(meanDiff).toBeLessThan(0.02);
      expect(agree).toBeGreaterThanOrEqual(0.97);
      const mean = got.token_logprobs.reduce((a, b) => a + b, 0) / got.token_logprobs.length;
      expect(got.ppl).toBeCloseTo(Math.exp(-mean), 10);
    });

    test("windows: the first window scores what a single pass scores, bit for bit; every transition once", async () => {
      const text = readFileSync(story!, "utf8");
      const whole = await llm.score(text);
      const windowed = await llm.score(text, 100);
      expect(windowed.token_logprobs.length).toBe(whole.token_logprobs.length);
      expect(windowed.token_logprobs.slice(0, 100)).toEqual(whole.token_logprobs.slice(0, 100));
      // Later windows start with an empty cache, so they differ from the single pass.
      expect(windowed.token_logprobs.slice(100)).not.toEqual(whole.token_logprobs.slice(100));
    });

    test("scores do not depend on the chunk a scoring step takes", async () => {
      const text = readFileSync(story!, "utf8");
      const small = LLM.load({ model: model!, tokenizer: tokenizer!, engine: { threads: THREADS, maxNumSeqs: 7 } });
      try {
        expect((await small.score(text)).token_logprobs).toEqual((await llm.score(text)).token_logprobs);
      } finally {
        small.close();
      }
    });

    test("generation's logprobs equal teacher-forced scores of the generated text, bit for bit", async () => {
      const [r] = await llm.generate([{ prompt: "Once upon a time", maxTokens: 24, temperature: 0, logprobs: 3 }]);
      const prompt = llm.encode("Once upon a time");
      const scored = await llm.score([...prompt, ...r!.token_ids]);
      r!.logprobs!.forEach((entry, k) => {
        const i = prompt.length - 1 + k;
        expect(entry.token_id).toBe(r!.token_ids[k]!);
        expect(entry.logprob).toBe(scored.token_logprobs[i]!);
        // Greedy: the generated token is the top alternative.
        expect(entry.top_logprobs[0]!.token_id).toBe(entry.token_id);
        expect(entry.top_logprobs.length).toBe(3);
        expect(scored.top_tokens[i]).toBe(entry.token_id);
      });
      expect(r!.logprobs!.map((l) => l.token).join("")).toBe(r!.text);
    });

    test("results carry no logprobs unless asked, and a bad count is rejected", async () => {
      const [plain] = await llm.generate([{ prompt: "Hi", maxTokens: 2, temperature: 0 }]);
      expect(plain!.logprobs).toBeUndefined();
      const [bad] = await llm.generate([{ prompt: "Hi", maxTokens: 2, logprobs: 21 }]);
      expect(bad!.finish_reason).toBe("error");
      expect(bad!.error).toBe("logprobs must be at least 0 and at most 20, got 21");
    });
  },
);

describeShared(
  "pagellm perplexity and --logprobs on the command line",
  ["models/llama2c/stories260K.bin", "models/llama2c/tok512.bin", "golden/llama-cpp/texts/story.txt"],
  ([model, tokenizer, story]) => {
    const base = ["--model", model!, "--tokenizer", tokenizer!, "--threads", String(THREADS)];

    test("--json prints one object with every position", () => {
      const r = runPagellm(["perplexity", ...base, "--file", story!, "--json"]);
      expect(r.exitCode).toBe(0);
      const out = JSON.parse(r.stdout.trim()) as { model: string; tokens: number[]; token_logprobs: number[]; top_tokens: number[]; ppl: number };
      expect(out.model).toBe(model!);
      expect(out.tokens[0]).toBe(1); // BOS
      expect(out.token_logprobs.length).toBe(out.tokens.length - 1);
      expect(out.top_tokens.length).toBe(out.tokens.length - 1);
      expect(out.ppl).toBeGreaterThan(1);
    }, PROCESS_TEST_MS);

    test("text mode prints running and final perplexity", () => {
      const r = runPagellm(["perplexity", ...base, "--file", story!]);
      expect(r.exitCode).toBe(0);
      expect(r.stdout).toMatch(/^\[1\]\d+\.\d{4}\nFinal estimate: PPL = \d+\.\d{4} \+\/- \d+\.\d{5} \(294 tokens\)\n$/);
    }, PROCESS_TEST_MS);

    test("a missing text file is a one-line error", () => {
      const r = runPagellm(["perplexity", ...base, "--file", "/nonexistent/text.txt"]);
      expect(r.exitCode).toBe(2);
      expect(r.stderr.trim()).toBe("pagellm: error: /nonexistent/text.txt: text file not found");
    }, PROCESS_TEST_MS);

    test("generate --logprobs and a JSONL request's own logprobs", () => {
      const dir = mkdtempSync(join(tmpdir(), "pagellm-logprobs-"));
      const jsonl = join(dir, "requests.jsonl");
      writeFileSync(jsonl, [
        JSON.stringify({ id: "a", prompt: "The cat", max_tokens: 4, temperature: 0 }),
        JSON.stringify({ id: "b", prompt: "The cat", max_tokens: 4, temperature: 0, logprobs: 0 }),
      ].join("\n"));
      const r = runPagellm(["generate", ...base, "--prompts", jsonl, "--json", "--logprobs", "2"]);
      expect(r.exitCode).toBe(0);
      const results = r.stdout.trim().split("\n").map((l) => JSON.parse(l) as { id: string; logprobs: { top_logprobs: unknown[] }[] });
      const byId = new Map(results.map((x) => [x.id, x]));
      expect(byId.get("a")!.logprobs.length).toBe(4);
      expect(byId.get("a")!.logprobs.every((l) => l.top_logprobs.length === 2)).toBe(true);
      expect(byId.get("b")!.logprobs.every((l) => l.top_logprobs.length === 0)).toBe(true);
      const bad = runPagellm(["generate", ...base, "--prompt", "x", "--logprobs", "99"]);
      expect(bad.exitCode).toBe(2);
      expect(bad.stderr).toContain("--logprobs must be at least 0 and at most 20");
    }, PROCESS_TEST_MS);
  },
);
