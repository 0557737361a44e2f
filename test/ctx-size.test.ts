/**
 * --ctx-size: the context the engine runs at (default 4096, or the model's own when smaller; 0 = the
 * model's full context), which sizes the RoPE tables and the KV pool and bounds every request; and a
 * GGUF model loaded without --tokenizer (its own vocabulary, its EOS).
 */
import { expect, test } from "bun:test";
import { DEFAULT_CONTEXT, withContext } from "../src/engine/engine-options.ts";
import { LLM } from "../src/llm/llm.ts";
import { makeConfig } from "../src/model/config.ts";
import { runPagellm } from "./helpers/cli.ts";
import { describeShared } from "./helpers/shared.ts";
import { testThreads } from "./helpers/threads.ts";
import { PROCESS_TEST_MS } from "./helpers/limits.ts";

const THREADS = testThreads();

test("withContext: default min(4096, model), 0 = the model's, N = min(N, model); bad values refused", () => {
  const big = makeConfig({ dim: 8, hiddenDim: 8, nLayers: 1, nHeads: 2, nKvHeads: 2, vocabSize: 4, seqLen: 131072, sharedClassifier: true });
  const small = { ...big, seqLen: 2048 };
  expect(DEFAULT_CONTEXT).toBe(4096);
  expect(withContext(big, null).seqLen).toBe(4096);
  expect(withContext(small, null).seqLen).toBe(2048);
  expect(withContext(big, 0).seqLen).toBe(131072);
  expect(withContext(big, 1000).seqLen).toBe(1000);
  expect(withContext(small, 9999).seqLen).toBe(2048);
  expect(() => withContext(big, -1)).toThrow(/context size/);
  expect(() => withContext(big, 2.5)).toThrow(/context size/);
});

describeShared("--ctx-size on stories260K.gguf (context 2048 in the file)", ["models/gguf/stories260K.gguf"], ([model]) => {
  const loaded = (ctxSize: number | null) => LLM.load({ model: model!, engine: { threads: 1, ctxSize } });

  test("the engine's context follows the option, and the KV pool is sized for it", () => {
    const sizes = [null, 0, 100].map((ctx) => {
      const llm = loaded(ctx);
      try {
        return [llm.config.seqLen, llm.info.numBlocks];
      } finally {
        llm.close();
      }
    });
    expect(sizes.map(([seqLen]) => seqLen)).toEqual([2048, 2048, 100]);
    // the default pool is capped at what max-num-seqs full contexts use: a 100-token context needs fewer blocks
    expect(sizes[2]![1]!).toBeLessThan(sizes[0]![1]!);
  });

  test("a request longer than the context is refused with the context in the reason", async () => {
    const llm = loaded(16);
    try {
      const [r] = await llm.generate([{ promptTokenIds: Array.from({ length: 20 }, () => 300), maxTokens: 1 }]);
      expect(r!.finish_reason).toBe("error");
      expect(r!.error).toMatch(/16/);
    } finally {
      llm.close();
    }
  });

  test("no --tokenizer: the model's own vocabulary; greedy text is the same at --ctx-size 64 and at the full context", () => {
    const run = (ctx: string) =>
      runPagellm(["generate", "--model", model!, "--prompt", "Once upon a time", "--max-tokens", "30", "--temperature", "0",
        "--ctx-size", ctx, "--threads", String(THREADS)]);
    const full = run("0");
    const short = run("64");
    expect(full.exitCode).toBe(0);
    expect(full.stdout.length).toBeGreaterThan(20);
    expect(short.stdout).toBe(full.stdout);
  }, PROCESS_TEST_MS);

  test("--ctx-size above the model's context runs at the model's, and says so on stderr", () => {
    const r = runPagellm(["generate", "--model", model!, "--prompt", "Once", "--max-tokens", "2", "--temperature", "0", "--ctx-size", "100000", "--threads", String(THREADS)]);
    expect(r.exitCode).toBe(0);
    expect(r.stderr).toContain("note: --ctx-size 100000 is more than stories260K.gguf's own context of 2048 tokens; running at 2048");
  }, PROCESS_TEST_MS);

  test("info's memory estimate takes --ctx-size as generate does: default min(4096, model), 0 = the model's", () => {
    const kvBytes = (ctx: string[]) => (JSON.parse(runPagellm(["info", model!, "--json", ...ctx]).stdout) as { memory: { ctxSize: number } }).memory.ctxSize;
    expect(kvBytes([])).toBe(2048);
    expect(kvBytes(["--ctx-size", "0"])).toBe(2048);
    expect(kvBytes(["--ctx-size", "100"])).toBe(100);
    expect(kvBytes(["--ctx-size", "99999"])).toBe(2048);
  }, PROCESS_TEST_MS);

  test("--logprobs without --json or --output is an option error: text output has no place for them", () => {
    const r = runPagellm(["generate", "--model", model!, "--prompt", "Once", "--logprobs", "2"]);
    expect(r.exitCode).toBe(2);
    expect(r.stderr.trim().split("\n")).toEqual(["pagellm: error: --logprobs adds log-probabilities to JSON results: give --json or --output FILE too"]);
  }, PROCESS_TEST_MS);

  test("--ctx-size -3 is a one-line option error (exit 2)", () => {
    const r = runPagellm(["generate", "--model", model!, "--prompt", "x", "--ctx-size", "-3"]);
    expect(r.exitCode).toBe(2);
    expect(r.stderr.trim().split("\n")).toHaveLength(1);
    expect(r.stderr).toMatch(/--ctx-size/);
  }, PROCESS_TEST_MS);
});
