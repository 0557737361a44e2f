/**
 * Per-step buffers sized by what a step can use: a vocabulary of millions of
 * rows would take gigabytes of logits at 64 rows a step (and the sampler's work arrays as much
 * again, per sequence); the engine lowers the sequences a step holds to keep the logits within
 * LOGIT_BUDGET_BYTES, shares one set of sampler arrays, and the memory check counts what it allocates.
 */
import { afterAll, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { DEFAULT_ENGINE_OPTIONS, fitToVocabulary, LOGIT_BUDGET_BYTES } from "../src/engine/engine-options.ts";
import { planMemory } from "../src/engine/memory-plan.ts";
import { kvLayout } from "../src/kv/kv-layout.ts";
import { LLM } from "../src/llm/llm.ts";
import { DEFAULT_SPECULATIVE } from "../src/engine/speculative.ts";
import { makeConfig, type ModelConfig } from "../src/model/config.ts";
import { writeModelGGUF } from "../src/synth/gguf-model-writer.ts";
import { tokenizerMetadata } from "../src/synth/gguf-tokenizer-metadata.ts";
import { openCheckpoint } from "../src/model/load.ts";
import { declareHugeTensor } from "./helpers/hostile-gguf.ts";
import { expectModelFormatError } from "./helpers/errors.ts";
import { describeShared } from "./helpers/shared.ts";

const shape = (vocabSize: number): ModelConfig =>
  makeConfig({ dim: 32, hiddenDim: 64, nLayers: 1, nHeads: 4, nKvHeads: 2, vocabSize, seqLen: 256, normEps: 1e-5, sharedClassifier: true });

describe("the sequences of a step, fitted to the vocabulary", () => {
  test("a real vocabulary keeps every sequence, with or without speculation", () => {
    for (const vocab of [32000, 151936, 262144]) {
      expect(fitToVocabulary(DEFAULT_ENGINE_OPTIONS, shape(vocab)).maxNumSeqs).toBe(64);
    }
    expect(fitToVocabulary({ ...DEFAULT_ENGINE_OPTIONS, speculative: DEFAULT_SPECULATIVE }, shape(151936)).maxNumSeqs).toBe(64);
  });

  test("a vocabulary of millions: fewer sequences, logits within the budget", () => {
    for (const log2 of [21, 22, 23, 26]) {
      const c = shape(2 ** log2);
      const o = fitToVocabulary(DEFAULT_ENGINE_OPTIONS, c);
      expect(o.maxNumSeqs).toBe(Math.max(1, Math.floor(LOGIT_BUDGET_BYTES / (4 * (2 ** log2 + 32)))));
      const logits = 4 * o.maxNumSeqs * (c.vocabSize + c.dim);
      expect(logits).toBeLessThanOrEqual(Math.max(LOGIT_BUDGET_BYTES, 4 * (c.vocabSize + c.dim)));
    }
  });
});

describeShared("a model whose vocabulary has 2^22 rows (sparse)", ["models/gguf/stories260K.gguf"], ([stories]) => {
  const dir = mkdtempSync(join(tmpdir(), "pagellm-logit-buffers-"));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));
  const path = join(dir, "vocab-2^22.gguf");
  writeModelGGUF(path, { arch: "llama", name: "wide", config: shape(512), mix: "Q4_0", pure: true, tokenizer: tokenizerMetadata(stories!), seed: 1 });
  // 2^22 embedding rows of 18 bytes (Q4_0), zeros, sparse: the classifier too (shared).
  declareHugeTensor(path, "token_embd.weight", [32n, 1n << 22n]);

  test("runs four requests with its logits in 256 MiB, not 1 GiB; the sampler's arrays shared", async () => {
    const llm = LLM.load({ model: path, engine: { threads: 1, kvCacheMb: 8 } });
    try {
      expect(llm.config.vocabSize).toBe(2 ** 22);
      expect(llm.info.maxNumSeqs).toBe(15);
      const results = await llm.generate(Array.from({ length: 4 }, (_, i) => ({ prompt: `Once ${i}`, maxTokens: 3, temperature: 1, seed: i })));
      for (const r of results) {
        expect(r.finish_reason).toBe("length");
        expect(Math.max(...r.token_ids)).toBeLessThan(512);
      }
      // Weights (75 MiB), 15 logit rows of 16 MiB, the KV pool and activations: well under the 1 GiB
      // of logits alone that 64 rows took.
      expect(llm.stats().memoryBytes).toBeLessThan(600 << 20);
    } finally {
      llm.close();
    }
  }, 120_000);

  test("the memory plan counts the logit rows, and a refusal gives advice for its largest part", () => {
    const ckpt = openCheckpoint(path);
    const shape = { maxTokens: 64, maxSeqs: 64, maxLogits: 64, blockSize: 16, numBlocks: 16, kvBlockBytes: kvLayout(ckpt.config, 16, "f16").blockBytes, threads: 1 };
    const fitted = { ...shape, maxSeqs: 15, maxLogits: 15 };
    const limit = 4 * 2 ** 30;
    // 49 logit rows of 2^22 floats fewer: 784 MiB less.
    const saved = planMemory(ckpt, ckpt.config, shape, limit, 64 * 2 ** 30).totalBytes - planMemory(ckpt, ckpt.config, fitted, limit, 64 * 2 ** 30).totalBytes;
    expect(saved).toBeGreaterThanOrEqual(49 * 4 * 2 ** 22);
    expectModelFormatError(() => planMemory(ckpt, ckpt.config, shape, limit, 512 << 20), path,
      /buffers [\d.]+ GiB\), more than the 0\.50 GiB this machine has available; lower --max-num-batched-tokens \(64\) or --max-num-seqs \(64\)$/);
    expectModelFormatError(() => planMemory(ckpt, ckpt.config, { ...fitted, numBlocks: 1_000_000 }, limit, 1 << 30), path, /; lower --ctx-size or --kv-cache-mb/);
  });
});
