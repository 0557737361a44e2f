/**
 * A run's memory is what `pagellm info` says plus little: a Qwen2.5-0.5B-shaped Q4_K_M file (random
 * blocks, ~400 MB, the shape once measured at 850 MB resident against 560 MiB reported) at a
 * 4096-token context, loaded and run in a child process, stays within 1.1x of info's total plus
 * 150 MB resident, after the load and after a generation. Also: the random blocks such files are
 * made of have the writer's standard deviation.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { GGUF_SHAPES } from "../src/bench/gguf-models.ts";
import { writeModelGGUF, type ModelToWrite } from "../src/synth/gguf-model-writer.ts";
import { withRandomBlocks } from "../src/synth/gguf-random-blocks.ts";
import { padVocabulary, tokenizerMetadata } from "../src/synth/gguf-tokenizer-metadata.ts";
import { makeConfig } from "../src/model/config.ts";
import { dequantize, GGML_TYPE, type QuantTypeName } from "../src/synth/quant/index.ts";
import { planMemory } from "../src/engine/memory-plan.ts";
import { kvLayout } from "../src/kv/kv-layout.ts";
import { openCheckpoint } from "../src/model/load.ts";
import { FAST_STORAGE, FILE_STORAGE, weightBytes } from "../src/backend/wasm/weights.ts";
import { describeShared } from "./helpers/shared.ts";

const REPO_ROOT = join(import.meta.dir, "..");
/** Writing ~400 MB and loading it in a child process on a loaded 2-core machine. */
const TIMEOUT_MS = 300_000;

describeShared("resident memory against pagellm info", ["vocab/ggml-vocab-smollm.gguf"], ([vocab]) => {
  let dir = "";
  let model = "";

  beforeAll(() => {
    dir = mkdtempSync(join(tmpdir(), "pagellm-memory-"));
    model = join(dir, "qwen2.5-0.5b-Q4_K_M.gguf");
    const m: ModelToWrite = {
      arch: "qwen2", name: "random qwen2.5-0.5b shape", mix: "Q4_K_M", seed: 5, config: GGUF_SHAPES["qwen2.5-0.5b"]!.config,
      tokenizer: padVocabulary(tokenizerMetadata(vocab!), GGUF_SHAPES["qwen2.5-0.5b"]!.config.vocabSize),
    };
    writeModelGGUF(model, m, withRandomBlocks(m));
  }, TIMEOUT_MS);

  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  test("Qwen2.5-0.5B's shape in Q4_K_M at --ctx-size 4096: within 1.1x info's total + 150 MB after load and after generating", async () => {
    const child = Bun.spawn(["bun", join(REPO_ROOT, "test/helpers/rss-probe.ts"), model, "4096"], { stdout: "pipe", stderr: "pipe", cwd: REPO_ROOT });
    const [code, out, err] = await Promise.all([child.exited, new Response(child.stdout).text(), new Response(child.stderr).text()]);
    expect(err).toBe("");
    expect(code).toBe(0);
    const r = JSON.parse(out) as { afterLoad: number; afterGenerate: number; infoTotal: number; infoWeights: number };
    const bound = 1.1 * r.infoTotal + 150e6;
    // The weights alone are resident (read once, straight to their place): the bound is not empty.
    expect(r.afterLoad).toBeGreaterThan(r.infoWeights);
    expect(r.afterLoad).toBeLessThan(bound);
    expect(r.afterGenerate).toBeLessThan(bound);
  }, TIMEOUT_MS);
});

describe("random blocks", () => {
  const config = makeConfig({ dim: 256, hiddenDim: 512, nLayers: 1, nHeads: 4, nKvHeads: 4, vocabSize: 256, seqLen: 64, sharedClassifier: false });
  const names = new Map<number, QuantTypeName>(Object.entries(GGML_TYPE).map(([name, code]) => [code, name as QuantTypeName]));

  test("each type's blocks hold values of mean ~0 and the writer's standard deviation, 1/sqrt(cols)", () => {
    const tokens = new Map([["tokenizer.ggml.tokens", { type: "array" as const, value: { itemType: "string" as const, items: [] } }]]);
    for (const mix of ["Q4_K_M", "Q8_0", "Q5_0"] as const) {
      const tensors = withRandomBlocks({ arch: "llama", name: "t", mix, seed: 1, config, tokenizer: tokens as never });
      for (const t of tensors) {
        const type = names.get(t.type)!;
        if (t.dims.length !== 2 || !["Q4_K", "Q6_K", "Q8_0", "Q5_0"].includes(type)) continue;
        const [cols, rows] = t.dims as [number, number];
        const chunks = typeof t.data === "function" ? t.data() : t.data;
        const bytes = chunks instanceof Uint8Array ? chunks : Buffer.concat([...chunks]);
        const x = dequantize(type, bytes, rows * cols);
        let sum = 0;
        let sq = 0;
        for (const v of x) {
          sum += v;
          sq += v * v;
        }
        const mean = sum / x.length;
        const std = Math.sqrt(sq / x.length - mean * mean);
        // Q5_0, Q6_K and Q8_0 centre on q - 16, 32, 0 of uniform q: a mean of -0.5 steps, up to 0.054 sd.
        expect(Math.abs(mean)).toBeLessThan(0.06 / Math.sqrt(cols));
        expect(std * Math.sqrt(cols)).toBeGreaterThan(0.95);
        expect(std * Math.sqrt(cols)).toBeLessThan(1.05);
      }
    }
  }, 60_000);
});

describeShared("Q5_0 as Q8_0", ["models/gguf/stories260K-Q5_0.gguf"], ([model]) => {
  test("kept when the machine has the memory, dropped (Q5_0 as in the file) when it is short, refused below that", () => {
    const ckpt = openCheckpoint(model!);
    const shape = { maxTokens: 64, maxSeqs: 4, maxLogits: 4, blockSize: 16, numBlocks: 32, kvBlockBytes: kvLayout(ckpt.config, 16, "f16").blockBytes, threads: 1 };
    const roomy = planMemory(ckpt, ckpt.config, shape, 1 << 30, 2 ** 40);
    expect(roomy.storage.q5_0AsQ8_0).toBe(true);
    expect(roomy.fastStorageExtraBytes).toBe(weightBytes(ckpt, FAST_STORAGE) - weightBytes(ckpt, FILE_STORAGE));
    expect(roomy.fastStorageExtraBytes).toBeGreaterThan(0);
    // Between the file's form and the faster one: the faster one is dropped.
    const short = planMemory(ckpt, ckpt.config, shape, 1 << 30, roomy.totalBytes - 1);
    expect(short.storage.q5_0AsQ8_0).toBe(false);
    expect(short.fastStorageDropped).toBe(true);
    expect(short.totalBytes).toBeLessThanOrEqual(roomy.totalBytes - roomy.fastStorageExtraBytes + 4096);
    expect(() => planMemory(ckpt, ckpt.config, shape, 1 << 30, short.totalBytes - 1)).toThrow(
      /needs [\d.]+ GiB \(weights [\d.]+ GiB, KV cache [\d.]+ GiB, buffers [\d.]+ GiB\), more than the [\d.]+ GiB this machine has available/,
    );
  });
});
