/**
 * `pagellm bench embed`: the encoder writer's files read back as the shapes asked for, the inputs
 * have the token counts they were made for, llama-embedding's command line and report are read
 * as the peer needs, and the bench runs end to end on a tiny shape (few inputs, no peer) with a
 * table of every thread count x batch size and finite ratios. No timing thresholds.
 */
import { afterAll, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { readEncoderCheckpoint } from "../src/model/encoder.ts";
import { GGML_TYPE } from "../src/synth/quant/index.ts";
import { ensureRandomEncoder, parseEmbedShape } from "../src/bench/embed-models.ts";
import { embedInputs } from "../src/bench/embed-inputs.ts";
import { llamaEmbeddingArgs, parseLlamaEmbedding, parseLlamaVersion } from "../src/bench/peer-llama-embedding.ts";
import { figuresOf, type AnyBenchReport } from "../src/bench/schema.ts";
import type { EmbedResult } from "../src/bench/embed-throughput.ts";
import { describeShared } from "./helpers/shared.ts";
import { runPagellm } from "./helpers/cli.ts";
import { PROCESS_TEST_MS } from "./helpers/limits.ts";

const modelsDir = mkdtempSync(join(tmpdir(), "pagellm-bench-embed-"));
afterAll(() => rmSync(modelsDir, { recursive: true, force: true }));

const TINY_BERT = "bert:dim=32,layers=1,heads=2,hidden=64";
const TINY_NOMIC = "nomic-bert:dim=32,layers=2,heads=2,hidden=64";

describe("llama-embedding as the peer", () => {
  test("its command line: the file, the texts, the threads, 2048-token steps, the pooling, normalization off", () => {
    const args = llamaEmbeddingArgs({ model: "m.gguf", threads: 2, pooling: "cls" }, "in.txt");
    expect(args.join(" ")).toBe("-m m.gguf -f in.txt -t 2 -tb 2 -c 2048 -b 2048 -ub 2048 --pooling cls --embd-normalize -1 -lv 4 --log-timestamps --log-prefix");
  });

  test("its report: the time from its first step to its perf summary and the steps' tokens, nothing without them; its build from --version", () => {
    const output = [
      "0.00.271.507 I batch_decode: n_tokens = 2020, n_seq = 28",
      "0.04.867.072 I batch_decode: n_tokens = 363, n_seq = 4",
      "embedding 0: -0.315311 -0.850112",
      "1.05.392.826 I llama_perf_context_print:        load time =      75.81 ms",
      "1.05.392.900 I llama_perf_context_print: prompt eval time =     512.60 ms /  2383 tokens (    0.22 ms per token,  4648.89 tokens per second)",
    ].join("\n");
    const parsed = parseLlamaEmbedding(output)!;
    expect(parsed.tokens).toBe(2383);
    expect(parsed.ms).toBeCloseTo(65_392.826 - 271.507, 3);
    expect(parseLlamaEmbedding("0.00.271.507 I batch_decode: n_tokens = 9, n_seq = 2\nerror: unable to load model")).toBeNull();
    expect(parseLlamaEmbedding("0.00.184.262 I llama_perf_context_print:        load time =      75.81 ms")).toBeNull();
    expect(parseLlamaVersion("version: 0.5.0-dev (build 1, commit de3ff81)\nbuilt with GNU 12.2.0 for Linux x86_64")).toBe("commit de3ff81");
    expect(parseLlamaVersion("")).toBe("unknown build");
  });

  test("a missing binary is refused before anything runs", () => {
    const r = runPagellm(["bench", "embed", "--shape", TINY_BERT, "--models-dir", modelsDir, "--llama-embedding", join(modelsDir, "absent")]);
    expect(r.exitCode).not.toBe(0);
    expect(r.stderr).toContain("--llama-embedding");
    expect(r.stderr).toContain("no such file");
  }, PROCESS_TEST_MS);
});

describe("bad options", () => {
  test.each([
    [["--shape", "gpt:dim=32"], /expected bge-small \| nomic-embed-text/],
    [["--shape", "bert:dim=32,layers=1,heads=2"], /hidden= is missing/],
    [["--shape", TINY_BERT, "--type", "Q4_K_M"], /"Q4_K_M" is not one of F32, F16, Q8_0/],
    [["--model", "x.gguf", "--shape", TINY_BERT], /--shape and --type are for random encoders/],
    [["--shape", TINY_BERT, "--min-tokens", "2"], /the least is 3/],
  ])("%p", (extra, message) => {
    const r = runPagellm(["bench", "embed", "--models-dir", modelsDir, ...extra]);
    expect(r.exitCode).not.toBe(0);
    expect(r.stderr).toMatch(message);
  }, PROCESS_TEST_MS);
});

describeShared("random encoders and their inputs", ["vocab/ggml-vocab-bert-bge.gguf"], ([vocab]) => {
  const vocabDir = join(vocab!, "..");

  test.each([[TINY_BERT, "Q8_0"], [TINY_NOMIC, "F16"]] as const)("%s %s reads back as its shape", (spec, mix) => {
    const named = parseEmbedShape(spec);
    const ckpt = readEncoderCheckpoint(ensureRandomEncoder(named, mix, modelsDir, vocabDir, () => {}));
    const c = ckpt.config;
    expect([c.arch, c.dim, c.nLayers, c.nHeads, c.hiddenDim, c.vocabSize]).toEqual([named.shape.arch, 32, named.shape.nLayers, 2, named.shape.hiddenDim, 30522]);
    expect(c.pooling).toBe(named.shape.pooling);
    expect(ckpt.tensors.get("blk.0.ffn_up.weight")!.encoding).toEqual({ kind: "ggml", type: GGML_TYPE[mix] });
    expect(ckpt.tensors.get("token_types.weight")!.encoding).toEqual({ kind: "f32" });
  });

  test("inputs have the lengths asked for, [CLS] first and [SEP] last, the same for the same seed", () => {
    const file = ensureRandomEncoder(parseEmbedShape(TINY_BERT), "Q8_0", modelsDir, vocabDir, () => {});
    const inputs = embedInputs(file, 64, 16, 128, 1);
    const lengths = inputs.tokenIds.map((ids) => ids.length);
    expect(Math.min(...lengths)).toBeGreaterThanOrEqual(16);
    expect(Math.max(...lengths)).toBeLessThanOrEqual(128);
    expect(new Set(lengths).size).toBeGreaterThan(10);
    for (const [i, ids] of inputs.tokenIds.entries()) {
      expect([ids[0], ids.at(-1)]).toEqual([101, 102]);
      expect(inputs.texts[i]!.split(" ").length).toBe(ids.length - 2);
    }
    expect(embedInputs(file, 64, 16, 128, 1)).toEqual(inputs);
  });

  test("the bench runs end to end: every thread count x batch size, finite ratios, the figures --compare reads", () => {
    const r = runPagellm([
      "bench", "embed", "--json", "--reps", "1", "--warmup", "0", "--shape", TINY_BERT, "--shape", TINY_NOMIC, "--type", "Q8_0",
      "--models-dir", modelsDir, "--inputs", "12", "--min-tokens", "8", "--max-tokens", "40", "--batch", "1,5", "--threads", "1,2",
    ]);
    expect(r.exitCode, r.stderr).toBe(0);
    const report = JSON.parse(r.stdout) as AnyBenchReport;
    expect(report.bench).toBe("embed");
    const results = report.results as EmbedResult;
    expect(results.models.map((m) => m.model)).toEqual(["bert-d32-l1-q2-h64 Q8_0", "nomic-bert-d32-l2-q2-h64 Q8_0"]);
    for (const m of results.models) {
      expect(m.inputs).toBe(12);
      expect(m.rows.map((x) => [x.threads, x.batch])).toEqual([[1, 1], [1, 5], [2, 1], [2, 5]]);
      for (const x of m.rows) {
        for (const v of [x.inputsPerSecond.median, x.tokensPerSecond.median, x.vsFirstBatch, x.vsFirstThreads]) expect(Number.isFinite(v) && v > 0).toBe(true);
        expect(x.tokensPerSecond.median / x.inputsPerSecond.median).toBeCloseTo(m.tokens / m.inputs, 6);
        expect(x.peer).toBeNull();
      }
      expect(m.rows[0]!.vsFirstBatch).toBe(1);
      expect(m.rows[0]!.vsFirstThreads).toBe(1);
    }
    expect(figuresOf(report).length).toBe(2 * 4 * 2);
  }, PROCESS_TEST_MS);

  test("the text report has a table per model with every row", () => {
    const r = runPagellm([
      "bench", "embed", "--reps", "1", "--warmup", "0", "--shape", TINY_BERT, "--type", "Q8_0", "--models-dir", modelsDir,
      "--inputs", "6", "--min-tokens", "8", "--max-tokens", "20", "--batch", "1,3", "--threads", "1",
    ]);
    expect(r.exitCode, r.stderr).toBe(0);
    expect(r.stdout).toContain("embeddings of 6 inputs of 8-20 tokens");
    expect(r.stdout).toMatch(/threads\s+batch\s+inputs\/s\s+tokens\/s\s+vs batch 1\s+vs 1 thread/);
    expect(r.stdout.split("\n").filter((line) => /^\s+1\s+[13]\s+\d/.test(line)).length).toBe(2);
  }, PROCESS_TEST_MS);
});
