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
import { ensureInstructionEmbedder, INSTRUCTION_TOKENS, instructionInputs, parseInstructionShape, QUERY_TOKENS, QWEN3_EMBEDDING_SHAPE } from "../src/bench/embed-instruction.ts";
import { readGGUF } from "../src/model/gguf.ts";
import { filePooling } from "../src/model/pooling-type.ts";
import { loadTokenizer } from "../src/tokenizer/load.ts";
import { runPagellm } from "./helpers/cli.ts";
import { PROCESS_TEST_MS } from "./helpers/limits.ts";

const modelsDir = mkdtempSync(join(tmpdir(), "pagellm-bench-embed-"));
afterAll(() => rmSync(modelsDir, { recursive: true, force: true }));

const TINY_BERT = "bert:dim=32,layers=1,heads=2,hidden=64";
const TINY_NOMIC = "nomic-bert:dim=32,layers=2,heads=2,hidden=64";
const TINY_QWEN3 = "dim=64,layers=1,heads=2,kv=1,head=32,hidden=128";

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

describe("the instruction case's shapes and inputs", () => {
  test("Qwen3-Embedding-0.6B's shape, --layers in place of its 28, custom shapes and their refusals", () => {
    expect(parseInstructionShape("qwen3-embedding-0.6b")).toEqual({ name: "qwen3-embedding-0.6b", shape: QWEN3_EMBEDDING_SHAPE });
    expect(parseInstructionShape("qwen3-embedding-0.6b", 4)).toEqual({ name: "qwen3-embedding-0.6b-l4", shape: { ...QWEN3_EMBEDDING_SHAPE, layers: 4 } });
    expect(parseInstructionShape(TINY_QWEN3).shape).toEqual({ dim: 64, layers: 1, heads: 2, kvHeads: 1, headDim: 32, hidden: 128 });
    expect(() => parseInstructionShape("dim=64,layers=1")).toThrow(/kv= is missing|heads= is missing/);
    expect(() => parseInstructionShape("dim=64,layers=1,heads=3,kv=2,head=32,hidden=128")).toThrow(/multiple of kv/);
    expect(() => parseInstructionShape("bge-small")).toThrow(/expected qwen3-embedding-0.6b/);
  });

  test("every input is the one instruction, a short query and the EOS; each repetition has queries of its own", () => {
    const a = instructionInputs(7, 20, 1, 0);
    const again = instructionInputs(7, 20, 1, 0);
    const next = instructionInputs(7, 20, 1, 1);
    expect(again).toEqual(a);
    expect(a.instruction.length).toBe(INSTRUCTION_TOKENS);
    expect(next.instruction).toEqual(a.instruction);
    for (const ids of a.inputs) {
      expect(ids.slice(0, INSTRUCTION_TOKENS)).toEqual(a.instruction);
      expect(ids.at(-1)).toBe(7);
      expect(ids.length - INSTRUCTION_TOKENS - 1).toBeGreaterThanOrEqual(QUERY_TOKENS.min);
      expect(ids.length - INSTRUCTION_TOKENS - 1).toBeLessThanOrEqual(QUERY_TOKENS.max);
    }
    expect(new Set(a.inputs.map((ids) => ids.length)).size).toBeGreaterThan(3);
    const queries = (x: typeof a) => x.inputs.map((ids) => ids.slice(INSTRUCTION_TOKENS).join(","));
    expect(queries(next).filter((q) => queries(a).includes(q))).toEqual([]);
  });
});

describeShared("the instruction case end to end", ["vocab/ggml-vocab-qwen2.gguf"], ([vocab]) => {
  const vocabDir = join(vocab!, "..");

  test("the random embedder is qwen3 with last-token pooling and an EOS after every text", () => {
    const file = ensureInstructionEmbedder(parseInstructionShape(TINY_QWEN3), "Q8_0", modelsDir, vocabDir, () => {});
    const gguf = readGGUF(file);
    expect(gguf.getString("general.architecture")).toBe("qwen3");
    expect(gguf.getU32("qwen3.block_count")).toBe(1);
    expect(filePooling(gguf, "qwen3")).toBe("last");
    const { tokenizer, addEos } = loadTokenizer(file, {});
    expect(addEos).toBe(true);
    const ids = tokenizer.encode("how do vaccines work", { addBos: false, addEos });
    expect(ids.at(-1)).toBe(gguf.getU32("tokenizer.ggml.eos_token_id"));
  });

  test("cache off and on in one run: every query served its instruction from the cache when on, finite rates, the figures --compare reads", () => {
    const r = runPagellm([
      "bench", "embed", "--json", "--reps", "2", "--warmup", "1", "--workload", "instruction", "--instruction-shape", TINY_QWEN3,
      "--models-dir", modelsDir, "--queries", "6", "--threads", "1",
    ]);
    expect(r.exitCode, r.stderr).toBe(0);
    const report = JSON.parse(r.stdout) as AnyBenchReport;
    const results = report.results as EmbedResult;
    expect(results.models).toEqual([]);
    expect(results.instruction!.length).toBe(1);
    const x = results.instruction![0]!;
    expect([x.model, x.layers, x.threads, x.queries]).toEqual(["qwen3-d64-l1-q2-kv1-h32-f128 Q8_0", 1, 1, 6]);
    // 64 tokens are four whole KV blocks of 16: a hit serves all of them.
    expect(x.cachedPerQuery).toBe(INSTRUCTION_TOKENS);
    expect(x.tokens).toBeGreaterThanOrEqual(6 * (INSTRUCTION_TOKENS + QUERY_TOKENS.min + 1));
    for (const v of [x.cacheOff.median, x.cacheOn.median, x.ratio]) expect(Number.isFinite(v) && v > 0).toBe(true);
    expect(figuresOf(report).map((f) => f.key)).toEqual([
      "qwen3-d64-l1-q2-kv1-h32-f128 Q8_0 instruction case, 1 thread: queries/s, prefix cache off",
      "qwen3-d64-l1-q2-kv1-h32-f128 Q8_0 instruction case, 1 thread: queries/s, prefix cache on",
      "qwen3-d64-l1-q2-kv1-h32-f128 Q8_0 instruction case, 1 thread: prefix cache on vs off",
    ]);
  }, PROCESS_TEST_MS);
});
