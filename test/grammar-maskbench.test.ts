/**
 * MaskBench's method (src/bench/grammar.ts) on a fixed subset of the shared sample with Llama 3's
 * vocabulary: no invalid instance is ever accepted (0 invalidation errors), and most schemas pass.
 * The subset (every 10th file by name) bounds the work; nothing here reads a clock.
 */
import { expect, test } from "bun:test";
import { pagellmEngine, readMaskBenchFiles, runMaskBench } from "../src/bench/grammar.ts";
import { TokenVocabulary } from "../src/grammar/vocabulary.ts";
import { loadGGUFTokenizer } from "../src/tokenizer/gguf-vocab.ts";
import { describeShared } from "./helpers/shared.ts";
import { COMPUTE_TEST_MS } from "./helpers/limits.ts";

describeShared("MaskBench on the shared sample", ["grammar/maskbench-sample", "vocab/ggml-vocab-llama-bpe.gguf"], ([dir, vocabPath]) => {
  test("a subset: 0 invalidation errors, at least 80% of the schemas pass", async () => {
    const vocab = TokenVocabulary.fromTokenizer(loadGGUFTokenizer(vocabPath!).tokenizer);
    const files = readMaskBenchFiles(dir!).filter((_, i) => i % 10 === 0);
    const r = await runMaskBench(files, pagellmEngine(vocab), vocab.encode);
    expect(r.schemas).toBe(files.length);
    expect(r.invalidation_error).toBe(0);
    expect(r.failures.filter((f) => f.kind === "invalidation_error")).toEqual([]);
    expect(r.passing).toBeGreaterThanOrEqual(Math.ceil(0.8 * files.length));
    expect(r.passing + r.compile_error + r.validation_error + r.invalidation_error).toBe(files.length);
    expect(r.tokens).toBeGreaterThan(0);
  }, COMPUTE_TEST_MS);
});
