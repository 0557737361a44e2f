/**
 * `pagellm bench`: smoke tests only. Each bench runs end to end through the CLI on a tiny model
 * (the real stories260K.bin, or a tiny random shape written to a temporary models folder) with
 * few tokens and one repetition, and its --json document has the expected fields, every figure
 * finite and positive. No timing thresholds: speed is the benches' business, not the tests'.
 */
import { afterAll, describe, expect, test } from "bun:test";
import { mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { existsSync, statSync } from "node:fs";
import { readGGUF } from "../src/model/gguf.ts";
import { ggufShapeOf, GGUF_SHAPES } from "../src/bench/gguf-models.ts";
import { summarize } from "../src/bench/measure.ts";
import { parseShape } from "../src/bench/bench-models.ts";
import { withF32Baseline } from "../src/cli/bench-options.ts";
import { llamaBenchArgs, parseLlamaBench } from "../src/bench/peer-llama-bench.ts";
import { decodeFloorChecks, typeComparisonTables } from "../src/bench/type-comparison.ts";
import { compareRuns, overallChange } from "../src/bench/compare.ts";
import { machineInfo } from "../src/bench/machine.ts";
import { BENCH_SCHEMA } from "../src/bench/bench-report.ts";
import { figuresOf, parseBenchDocument, readBenchDocument, reportsOf, type AllDocument, type AnyBenchReport } from "../src/bench/schema.ts";
import { readFileSync, writeFileSync } from "node:fs";
import { describeShared } from "./helpers/shared.ts";
import { REPO_ROOT, runPagellm } from "./helpers/cli.ts";
import { LONG_PROCESS_TEST_MS, PROCESS_TEST_MS } from "./helpers/limits.ts";

const modelsDir = mkdtempSync(join(tmpdir(), "pagellm-bench-"));
afterAll(() => rmSync(modelsDir, { recursive: true, force: true }));

/** One repetition, no warm-up, small bandwidth buffer: end to end, not a measurement. */
const QUICK = ["--json", "--reps", "1", "--warmup", "0"];
/** Long enough a context for the prefix bench's 1024-token system prompts, tiny everything else. */
const TINY_SHAPE = "dim=32,hidden=64,layers=1,heads=2,kv=1,vocab=512,seq=2048";

type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

/** Values at a dotted path; `*` walks every element of an array. */
function at(value: Json, path: string): Json[] {
  let current: Json[] = [value];
  for (const key of path.split(".")) {
    current = current.flatMap((v): Json[] => {
      if (key === "*") return Array.isArray(v) ? v : [];
      if (v !== null && typeof v === "object" && !Array.isArray(v) && key in v) return [v[key]!];
      return [];
    });
  }
  return current;
}

/** Run a bench with --json and check that every path holds at least one finite positive number (and nothing else). */
function expectFigures(args: string[], paths: string[]): Json {
  const r = runPagellm(args);
  if (r.exitCode !== 0) throw new Error(`pagellm ${args.join(" ")} exited ${r.exitCode}: ${r.stderr}`);
  const doc = JSON.parse(r.stdout) as Json;
  expect(at(doc, "bench")).toEqual([args[1]!]);
  expect(at(doc, "machine.cores")[0]).toBeGreaterThan(0);
  for (const path of paths) {
    const values = at(doc, `results.${path}`);
    expect(values.length, `results.${path}`).toBeGreaterThan(0);
    for (const v of values) {
      expect(typeof v, `results.${path}`).toBe("number");
      expect(Number.isFinite(v) && (v as number) > 0, `results.${path} = ${v}`).toBe(true);
    }
  }
  return doc;
}

describe("bench command", () => {
  test("with no subcommand it lists the benches", () => {
    const r = runPagellm(["bench"]);
    expect(r.exitCode).toBe(0);
    for (const name of ["kernels", "decode", "prefill", "batch", "prefix", "embed", "all", "compare", "chart"]) expect(r.stdout).toContain(name);
  }, PROCESS_TEST_MS);

  test("every bench's --help lists its options", () => {
    const expected: Record<string, string[]> = {
      kernels: ["--threads", "--stream-mb", "--decode-tokens", "--model", "--shape", "--models-dir", "--tokenizer", "--json", "--reps"],
      decode: ["--threads", "--tokens", "--prompt-tokens", "--stream-mb", "--model", "--quant", "--type", "--peer-nlc", "--peer-llama-bench", "--speculate", "--spec-tokens", "--spec-stories", "--json-schema", "--tools"],
      prefill: ["--threads", "--prompt-tokens", "--decode-tokens", "--model", "--type", "--peer-nlc", "--peer-llama-bench"],
      batch: ["--threads", "--seqs", "--steps", "--warmup-steps", "--shape"],
      prefix: ["--threads", "--prefix-tokens", "--suffix-tokens", "--workloads", "--requests", "--max-num-seqs", "--num-blocks", "--eviction-policies"],
      embed: ["--threads", "--batch", "--inputs", "--min-tokens", "--max-tokens", "--shape", "--type", "--model", "--models-dir", "--llama-embedding"],
    };
    expected.all = ["--quick", "--shape", "--type", "--threads", "--models-dir"];
    for (const [bench, options] of Object.entries(expected)) {
      const r = runPagellm(["bench", bench, "--help"]);
      expect(r.exitCode).toBe(0);
      for (const o of [...options, "--json", "--chart", "--compare"]) expect(r.stdout, `${bench} ${o}`).toContain(o);
    }
  }, PROCESS_TEST_MS);

  test("a bad option is a one-line error", () => {
    const r = runPagellm(["bench", "decode", "--threads", "0"]);
    expect(r.exitCode).toBe(2);
    expect(r.stderr).toContain("--threads");
  }, PROCESS_TEST_MS);

  test("custom shapes parse; a malformed one is an input error", () => {
    expect(parseShape(TINY_SHAPE).config.headDim).toBe(16);
    expect(parseShape("stories110M").config.dim).toBe(768);
    expect(() => parseShape("dim=32,hidden=64")).toThrow("lacks");
  });

  test("the GGUF shapes are the real models' configs", () => {
    const smol = GGUF_SHAPES["smollm2-135m"]!;
    expect([smol.arch, smol.config.dim, smol.config.nLayers, smol.config.nHeads, smol.config.nKvHeads, smol.config.hiddenDim, smol.config.vocabSize]).toEqual(["llama", 576, 30, 9, 3, 1536, 49152]);
    expect([smol.config.ropeTheta, smol.config.sharedClassifier, smol.vocabFile]).toEqual([100000, true, "ggml-vocab-smollm.gguf"]);
    const qwen = GGUF_SHAPES["qwen2.5-0.5b"]!;
    expect([qwen.arch, qwen.config.dim, qwen.config.nLayers, qwen.config.nHeads, qwen.config.nKvHeads, qwen.config.hiddenDim, qwen.config.vocabSize]).toEqual(["qwen2", 896, 24, 14, 2, 4864, 151936]);
    expect([qwen.config.qkvBias, qwen.config.sharedClassifier, qwen.config.ropeTheta, qwen.config.normEps, qwen.config.headDim]).toEqual([true, true, 1e6, 1e-6, 64]);
    const stories = GGUF_SHAPES.stories110M!;
    expect([stories.arch, stories.config.dim, stories.config.nLayers, stories.config.nHeads, stories.config.hiddenDim, stories.config.vocabSize]).toEqual(["llama", 768, 12, 12, 2048, 32000]);
    expect(ggufShapeOf(parseShape("dim=64,hidden=256,layers=1,heads=4,kv=2,vocab=32000,seq=64")).vocabFile).toBe("ggml-vocab-llama-spm.gguf");
    expect(() => ggufShapeOf(parseShape(TINY_SHAPE))).toThrow("vocab must be at least 32000");
  });

  test("a quantized --type is measured next to F32 of the same shape", () => {
    expect(withF32Baseline(["Q4_K_M"])).toEqual(["F32", "Q4_K_M"]);
    expect(withF32Baseline(["Q8_0", "F32"])).toEqual(["Q8_0", "F32"]);
    expect(withF32Baseline(["F16"])).toEqual(["F16"]);
    const s = (x: number) => summarize([x]);
    const figure = (mix: "F32" | "Q8_0" | "Q4_K_M" | "Q6_K", shape: string, t1: number) => ({
      label: `${shape} ${mix}`, gguf: { shape, mix }, rows: [{ threads: 1, value: s(t1) }, { threads: 2, value: s(2 * t1) }],
    });
    const items = [figure("Q8_0", "a", 30), figure("F32", "a", 10), figure("Q4_K_M", "a", 14), figure("Q6_K", "a", 40), figure("F32", "b", 5), figure("Q8_0", "b", 9)];
    expect(decodeFloorChecks(items)).toEqual([
      { label: "a Q8_0", ratio: 3, met: true }, { label: "a Q4_K_M", ratio: 1.4, met: false }, { label: "b Q8_0", ratio: 1.8, met: true },
    ]);
    const tables = typeComparisonTables("decode tokens/s", items);
    expect(tables.map((t) => t.columns)).toEqual([
      ["threads", "F32", "Q8_0", "vs F32", "Q4_K_M", "vs F32", "Q6_K", "vs F32"], ["threads", "F32", "Q8_0", "vs F32"],
    ]);
    expect(tables[0]!.rows[1]).toEqual(["2", "20.0 (20.0-20.0)", "60.0 (60.0-60.0)", "3.00x", "28.0 (28.0-28.0)", "1.40x", "80.0 (80.0-80.0)", "4.00x"]);
  });

  test("bad --type, --peer-nlc and GGUF-only shapes are one-line input errors", () => {
    const cases: [string[], RegExp][] = [
      [["bench", "decode", "--type", "Q4_K_X"], /--type: "Q4_K_X" is not one of F32, F16/],
      [["bench", "decode", "--shape", "qwen2.5-0.5b"], /the qwen2\.5-0\.5b shape exists as GGUF only: give --type/],
      [["bench", "decode", "--type", "Q8_0", "--quant", "q8"], /--quant is for llama2\.c models, --type for GGUF/],
      [["bench", "prefill", "--shape", TINY_SHAPE, "--type", "Q8_0", "--models-dir", modelsDir], /vocab must be at least 32000/],
    ];
    for (const [args, message] of cases) {
      const r = runPagellm(args);
      expect(r.exitCode, args.join(" ")).toBe(2);
      expect(r.stderr.trim().split("\n").pop()).toMatch(message);
    }
  }, PROCESS_TEST_MS);

  test("--compare matches figures by bench and key, lists what either side lacks, and names a different machine", () => {
    const machine = machineInfo();
    const report = (bench: "decode" | "batch", figures: [string, number][], m = machine): AnyBenchReport => ({
      schema: BENCH_SCHEMA, bench, date: "2026-11-24T10:00:00.000Z", machine: m, settings: {}, notes: [],
      results: {} as AnyBenchReport["results"], figures: figures.map(([key, value]) => ({ key, value, unit: key.endsWith("ms") ? "ms" : "tokens/s", better: key.endsWith("ms") ? "lower" : "higher" })),
    }) as AnyBenchReport;
    const old = { ...report("decode", [["a: decode tokens/s", 50], ["b: TTFT ms", 200], ["gone: decode tokens/s", 1]], { ...machine, cpu: "Old CPU" }) };
    const oldAll: AllDocument = { schema: BENCH_SCHEMA, bench: "all", date: old.date, machine: old.machine, elapsedSeconds: 1, settings: {}, notes: [], reports: [old, report("batch", [["x", 1]])] };
    const now = [report("decode", [["a: decode tokens/s", 75], ["b: TTFT ms", 100], ["new: decode tokens/s", 2]])];
    const c = compareRuns(now, machine, oldAll, "old.json");
    expect(c.figures.map((f) => [f.key, f.ratio])).toEqual([["a: decode tokens/s", 1.5], ["b: TTFT ms", 0.5]]);
    expect([c.onlyOld, c.onlyNew, c.notRun]).toEqual([["decode: gone: decode tokens/s"], ["decode: new: decode tokens/s"], ["batch"]]);
    expect(c.machineChanges).toEqual([`cpu: Old CPU -> ${machine.cpu}`]);
    // 1.5x the tokens/s and half the TTFT: twice as good, geometrically 1.5 * 2 = 3 -> sqrt(3).
    const [overall] = overallChange(c);
    expect([overall!.bench, overall!.figures]).toEqual(["decode", 2]);
    expect(overall!.factor).toBeCloseTo(Math.sqrt(3), 12);
  });

  test("a document that is not a pagellm bench document is a one-line error naming the file, checked before the bench runs", () => {
    const file = (name: string, text: string) => {
      const path = join(modelsDir, name);
      writeFileSync(path, text);
      return path;
    };
    const cases: [string, RegExp][] = [
      [join(modelsDir, "absent.json"), /absent\.json: file not found \(--compare: a --json document of an earlier run\)/],
      [file("not-json.json", "{"), /not-json\.json: not JSON/],
      [file("schema.json", JSON.stringify({ schema: "pagellm-bench/99", bench: "decode", results: {} })), /schema "pagellm-bench\/99"; this pagellm reads pagellm-bench\/1/],
      [file("other.json", JSON.stringify({ bench: "sprint", results: {} })), /"bench" is "sprint", not one of kernels, decode, prefill, batch, prefix, serve, prefix-restart, embed, threads, all/],
      [file("old.json", JSON.stringify({ bench: "decode", results: { rows: "?" } })), /its decode results lack the fields/],
    ];
    for (const [path, message] of cases) {
      const r = runPagellm(["bench", "decode", "--threads", "1", "--compare", path]);
      expect(r.exitCode, path).toBe(2);
      expect(r.stderr.trim().split("\n").pop()).toMatch(message);
      expect(r.stderr).not.toContain("[bench] decode of");
    }
    const noDir = runPagellm(["bench", "decode", "--json", join(modelsDir, "no-such-dir", "out.json")]);
    expect(noDir.exitCode).toBe(2);
    expect(noDir.stderr).toMatch(/--json .*out\.json: folder .*no-such-dir does not exist/);
    const chartDir = runPagellm(["bench", "all", "--chart", modelsDir]);
    expect(chartDir.stderr).toMatch(/--chart .*: is a folder; give a file name/);
  }, PROCESS_TEST_MS);

  test("summaries", () => {
    const s = summarize([3, 1, 2]);
    expect([s.median, s.min, s.max]).toEqual([2, 1, 3]);
  });
});

describeShared("benches end to end", ["models/llama2c/stories260K.bin", "models/llama2c/tok512.bin"], ([model, tokenizer]) => {
  const onModel = ["--model", model!, "--tokenizer", tokenizer!];

  test("kernels", () => {
    const chart = join(modelsDir, "kernels.svg");
    expectFigures(["bench", "kernels", ...QUICK, ...onModel, "--stream-mb", "16", "--decode-tokens", "4", "--threads", "1,2", "--chart", chart], [
      "matvec.*.kernelGflops.median", "matvec.*.kernelGBps.median", "matvec.*.scalarGflops.median", "matvec.*.speedup",
      "matmul.*.gflops.median", "stream.*.gbps.median", "decode.*.tokensPerSecond.median",
    ]);
    const svg = readFileSync(chart, "utf8");
    for (const s of ["pagellm bench kernels", "SIMD kernel vs scalar loop", "288x288", "2048x768", "scalar loop"]) expect(svg).toContain(s);
  }, PROCESS_TEST_MS);

  test("decode, with --json-schema: constrained and unconstrained decode at the first thread count", () => {
    const schema = join(REPO_ROOT, "docs", "examples", "person.schema.json");
    const doc = expectFigures(["bench", "decode", ...QUICK, ...onModel, "--stream-mb", "16", "--tokens", "4", "--threads", "1,2", "--json-schema", schema], [
      "bytesPerToken", "rows.*.tokensPerSecond.median", "rows.*.msPerToken.p99", "rows.*.bandwidthGBps.median",
      "rows.*.limitTokensPerSecond", "rows.*.fractionOfLimit", "rows.*.vsFirst",
      "structured.unconstrained.median", "structured.constrained.median", "structured.ratio", "structured.cpuRatio", "structured.compileMs",
    ]);
    expect(at(doc, "results.structured.threads")).toEqual([1]);
    expect(at(doc, "results.structured.schema")).toEqual(["person.schema.json"]);
  }, PROCESS_TEST_MS);

  test("decode --context --kv-type: a step at each written context for each KV type, against the first type; q8_0 on heads of 8 is one line", () => {
    const doc = expectFigures(["bench", "decode", ...QUICK, ...onModel, "--stream-mb", "16", "--tokens", "4", "--threads", "1", "--context", "64,200", "--kv-type", "f32,f16"], [
      "kvContext.rows.*.msPerToken.median", "kvContext.rows.*.tokensPerSecond.median", "kvContext.rows.*.vsFirst", "kvContext.rows.*.kvBytes",
    ]);
    expect(at(doc, "results.kvContext.rows.*.context")).toEqual([64, 64, 200, 200]);
    expect(at(doc, "results.kvContext.rows.*.kvType")).toEqual(["f32", "f16", "f32", "f16"]);
    // The f32 row is its own baseline; f16's cache is half of f32's.
    expect((at(doc, "results.kvContext.rows.*.vsFirst") as number[])[0]).toBe(1);
    const bytes = at(doc, "results.kvContext.rows.*.kvBytes") as number[];
    expect(bytes[1]! * 2).toBe(bytes[0]!);
    const r = runPagellm(["bench", "decode", ...onModel, "--context", "64", "--kv-type", "q8_0"]);
    expect(r.exitCode).toBe(2);
    expect(r.stderr.trim()).toBe("pagellm: error: --kv-type q8_0 needs a head dimension that is a multiple of 32; this model's is 8");
  }, PROCESS_TEST_MS);

  test("decode --speculate: three workloads with and without speculation, their acceptance rates, the same tokens", () => {
    const doc = expectFigures(["bench", "decode", ...QUICK, ...onModel, "--stream-mb", "16", "--tokens", "24", "--threads", "1", "--speculate", "--spec-stories", model!], [
      "speculative.rows.*.plain.median", "speculative.rows.*.speculative.median", "speculative.rows.*.speedup",
    ]);
    expect(at(doc, "results.speculative.rows.*.workload")).toEqual(["stories", "repeating", "no-repetition"]);
    expect(at(doc, "results.speculative.rows.*.identical")).toEqual([true, true, true]);
    expect(at(doc, "results.speculative.threads")).toEqual([1]);
    const r = runPagellm(["bench", "decode", ...onModel, "--spec-tokens", "3"]);
    expect(r.exitCode).toBe(2);
    expect(r.stderr.trim()).toBe("pagellm: error: --spec-tokens needs --speculate");
  }, PROCESS_TEST_MS);

  test("decode --tools: auto and required against the same prompts as plain ids, the time ratios, auto's tokens the same", () => {
    const doc = expectFigures([
      "bench", "decode", ...QUICK, "--shape", TINY_SHAPE, "--tokenizer", tokenizer!, "--models-dir", modelsDir, "--stream-mb", "16", "--tokens", "6", "--threads", "1", "--tools",
    ], ["toolCalls.rows.*.plain.median", "toolCalls.rows.*.tools.median", "toolCalls.rows.*.timeRatio", "toolCalls.rows.*.cpuRatio", "toolCalls.rows.*.replayFraction"]);
    expect(at(doc, "results.toolCalls.rows.*.workload")).toEqual(["auto", "required"]);
    expect(at(doc, "results.toolCalls.rows.*.identical")).toEqual([true, null]);
    expect((at(doc, "results.toolCalls.rows.*.calls") as number[])[0]).toBe(0);
  }, PROCESS_TEST_MS);

  test("decode --json FILE: the typed document round-trips, tables stay on stdout, and --compare / bench compare / bench chart read it", () => {
    const first = join(modelsDir, "decode-1.json");
    const second = join(modelsDir, "decode-2.json");
    const chart = join(modelsDir, "decode.svg");
    const args = ["bench", "decode", "--reps", "1", "--warmup", "0", ...onModel, "--stream-mb", "16", "--tokens", "4", "--threads", "1,2"];
    const a = runPagellm([...args, "--json", first]);
    expect(a.exitCode, a.stderr).toBe(0);
    expect(a.stdout).toContain("single-sequence decode of stories260K.bin");
    const doc = readBenchDocument(first);
    if (doc.bench !== "decode") throw new Error(`bench ${doc.bench}`);
    expect(doc.schema).toBe(BENCH_SCHEMA);
    expect(Number.isNaN(Date.parse(doc.date))).toBe(false);
    const m = doc.machine;
    expect(typeof m.cpu).toBe("string");
    expect([m.cores > 0, m.memoryBytes > 2 ** 20, m.bun === Bun.version, m.os.length > 0]).toEqual([true, true, true, true]);
    expect(m.commit).toMatch(/^([0-9a-f]{40}(\+dirty)?|unknown)$/);
    expect(a.stdout.split("\n")[0]).toContain(`${m.cores} cores`);
    // The figures are what the results give, and name the model, the thread count and the quantity.
    expect(doc.figures).toEqual(figuresOf(doc));
    expect(doc.figures.map((f) => f.key)).toContain("stories260K.bin, 2 threads: decode tokens/s");
    // A document from before figures existed gets them from its results.
    const { figures: _, schema: __, ...legacy } = doc;
    expect(reportsOf(parseBenchDocument(JSON.stringify(legacy), "legacy.json"))[0]!.figures).toEqual(doc.figures);

    const b = runPagellm([...args, "--json", second, "--chart", chart, "--compare", first]);
    expect(b.exitCode, b.stderr).toBe(0);
    expect(b.stdout).toContain(`against ${first}`);
    expect(b.stdout).toContain(`note: ${doc.figures.length} figures matched, 0 only in ${first}, 0 only in this run`);
    expect(readFileSync(chart, "utf8")).toContain("Decode tokens/s, one sequence");

    const trimmed = join(modelsDir, "decode-trimmed.json");
    writeFileSync(trimmed, JSON.stringify({ ...doc, figures: [...doc.figures.slice(1), { key: "retired figure", value: 1, unit: "x", better: "higher" }] }));
    const c = runPagellm(["bench", "compare", second, trimmed]);
    expect(c.exitCode, c.stderr).toBe(0);
    expect(c.stdout).toContain(`missing from this run (only in ${trimmed})\nfigure`);
    expect(c.stdout).toContain("decode: retired figure");
    expect(c.stdout).toContain(`new in this run (not in ${trimmed})`);
    expect(c.stdout).toContain(`decode: ${doc.figures[0]!.key}`);
    const svg = join(modelsDir, "again.svg");
    expect(runPagellm(["bench", "chart", second, svg]).exitCode).toBe(0);
    expect(readFileSync(svg, "utf8")).toContain("<svg");
  }, LONG_PROCESS_TEST_MS);

  test("decode --runc: a missing baseline binary is a one-line input error", () => {
    const r = runPagellm(["bench", "decode", ...QUICK, ...onModel, "--stream-mb", "16", "--tokens", "4", "--threads", "1", "--runc", join(modelsDir, "no-such-run")]);
    expect(r.exitCode).toBe(2);
    expect(r.stderr.trim().split("\n").pop()).toMatch(/^pagellm: error: .*no-such-run: --runc binary not found$/);
  }, PROCESS_TEST_MS);

  test("prefill", () => {
    expectFigures(["bench", "prefill", ...QUICK, ...onModel, "--prompt-tokens", "64", "--decode-tokens", "4", "--threads", "1"], [
      "rows.*.ttftMs.median", "rows.*.prefillTokensPerSecond.median", "rows.*.decodeMsPerToken.median", "rows.*.prefillVsDecode", "target",
      "rows.*.matmulGflops.median", "rows.*.computeLimitTokensPerSecond", "rows.*.fractionOfLimit",
    ]);
  }, PROCESS_TEST_MS);

  test("batch", () => {
    expectFigures(["bench", "batch", ...QUICK, ...onModel, "--stream-mb", "16", "--seqs", "1,4", "--steps", "2", "--prompt-tokens", "8", "--threads", "1"], [
      "runs.*.roofline.bandwidthGBps.median", "runs.*.roofline.matmulGflops.median", "runs.*.rows.*.decodeTokensPerSecond.median",
      "runs.*.rows.*.prefillTokensPerSecond.median", "runs.*.rows.*.vsSingle", "runs.*.rows.*.fractionOfMatmul",
      "runs.*.rows.*.bandwidthLimitTokensPerSecond", "runs.*.rows.*.computeLimitTokensPerSecond",
    ]);
  }, PROCESS_TEST_MS);

  test("prefix, on a tiny random shape with a 2048-token context", () => {
    const doc = expectFigures([
      "bench", "prefix", ...QUICK, "--shape", TINY_SHAPE, "--tokenizer", tokenizer!, "--models-dir", modelsDir, "--threads", "1",
      "--prefix-tokens", "256", "--distinct-requests", "2", "--distinct-prompt-tokens", "64", "--distinct-output-tokens", "2",
      "--requests", "4", "--output-tokens", "2",
    ], [
      "ttft.cachedMs.median", "ttft.uncachedMs.median", "ttft.speedup", "ttft.hitRate", "hashing.*.nsPerToken",
      "ttftByCachedFraction.*.ttftMs.median", "ttftByCachedFraction.*.promptTokens",
      "zeroHit.cacheOnTokensPerSecond.median", "zeroHit.cacheOffTokensPerSecond.median", "zeroHit.ratioPerRep.median",
      "workloads.*.numBlocks", "workloads.*.configs.*.outputTokensPerSecond", "workloads.*.configs.*.ttftMs.p99",
    ]);
    // Cache off, then FCFS and LPM under each of the two eviction policies, for both workloads.
    expect(at(doc, "results.workloads.*.name")).toEqual(["prefix-repetition", "generated-shared-prefix"]);
    expect(at(doc, "results.workloads.*.configs.*.cache")).toEqual([false, true, true, true, true, false, true, true, true, true]);
    expect(at(doc, "results.zeroHit.hitRate")).toEqual([0]);
    // Each fraction's prefix is cached in whole blocks and nothing else hits: 0, 64, 128, 192, 256 of 288 tokens.
    expect(at(doc, "results.ttftByCachedFraction.*.cachedTokens")).toEqual([0, 64, 128, 192, 256]);
  }, PROCESS_TEST_MS);

  test("prefix --restart: fresh processes, cold vs the disk KV cache warm, and the read speeds", () => {
    const args = [
      "bench", "prefix", "--restart", ...QUICK, "--shape", TINY_SHAPE, "--tokenizer", tokenizer!, "--models-dir", modelsDir, "--threads", "1",
      "--prefix-tokens", "256",
    ];
    const r = runPagellm(args);
    if (r.exitCode !== 0) throw new Error(`pagellm ${args.join(" ")} exited ${r.exitCode}: ${r.stderr}`);
    const doc = JSON.parse(r.stdout) as Json;
    expect(at(doc, "bench")).toEqual(["prefix-restart"]);
    for (const path of ["coldTtftMs.median", "restartTtftMs.median", "ratioPerRep.median", "diskReadMBps.median", "streamReadMBps.median", "diskBytesRead"]) {
      const [v] = at(doc, `results.${path}`);
      expect(typeof v === "number" && Number.isFinite(v) && v > 0, `results.${path} = ${v}`).toBe(true);
    }
    // The restart process read the whole 256-token prefix from disk.
    expect(at(doc, "results.diskCachedTokens")).toEqual([256]);
    // Its block files were removed afterwards.
    expect(readdirSync(modelsDir).filter((name) => name.startsWith("kv-restart-"))).toEqual([]);
  }, PROCESS_TEST_MS);
});

/** A tiny llama shape whose GGUF form has Llama 2's vocabulary. */
const TINY_GGUF_SHAPE = "dim=64,hidden=256,layers=2,heads=4,kv=2,vocab=32000,seq=256";

const SHARED = resolve(REPO_ROOT, "..", "shared");

describeShared("GGUF benches end to end (--type)", ["vocab/ggml-vocab-llama-spm.gguf", "models/llama2c/stories260K.bin", "models/gguf/rnd-llama-Q4_K_M.gguf"], ([, llama2c]) => {
  const tiny = ["--shape", TINY_GGUF_SHAPE, "--models-dir", modelsDir, "--threads", "1"];

  test("decode --type Q8_0,Q4_K_M writes the models once and checks the floor against F32", () => {
    const doc = expectFigures(["bench", "decode", ...QUICK, ...tiny, "--type", "Q8_0,Q4_K_M", "--stream-mb", "16", "--tokens", "4"], [
      "models.*.bytesPerToken", "models.*.rows.*.tokensPerSecond.median", "models.*.rows.*.limitTokensPerSecond", "floor.*.ratio",
    ]);
    const base = "d64-h256-l2-q4-kv2-v32000-s256";
    expect(at(doc, "results.models.*.model")).toEqual([`${base} F32`, `${base} Q8_0`, `${base} Q4_K_M`]);
    expect(at(doc, "results.floor.*.label")).toEqual([`${base} Q8_0`, `${base} Q4_K_M`]);
    const file = join(modelsDir, `random-${base}-Q4_K_M.gguf`);
    const written = statSync(file).mtimeMs;
    expectFigures(["bench", "prefill", ...QUICK, ...tiny, "--type", "Q4_K_M", "--prompt-tokens", "16", "--decode-tokens", "4"], [
      "models.*.rows.*.prefillTokensPerSecond.median", "models.*.rows.*.prefillVsDecode",
    ]);
    expect(statSync(file).mtimeMs).toBe(written);
  }, LONG_PROCESS_TEST_MS);

  test("bench all --quick: one document with every sub-benchmark, one chart file with every chart, the elapsed time", () => {
    const json = join(modelsDir, "all.json");
    const chart = join(modelsDir, "all.svg");
    const r = runPagellm(["bench", "all", "--quick", "--models-dir", modelsDir, "--json", json, "--chart", chart]);
    expect(r.exitCode, r.stderr).toBe(0);
    expect(r.stdout).toMatch(/\nbench all took \d+ min \d+ s\n$/);
    const doc = readBenchDocument(json);
    if (doc.bench !== "all") throw new Error(`bench ${doc.bench}`);
    expect(doc.elapsedSeconds).toBeGreaterThan(0);
    expect(doc.reports.map((x) => x.bench)).toEqual(["decode", "prefill", "batch", "prefix"]);
    for (const report of doc.reports) {
      expect(report.figures.length, report.bench).toBeGreaterThan(0);
      expect(report.figures).toEqual(figuresOf(report));
    }
    const base = "d64-h256-l2-q4-kv2-v32000-s256";
    const decode = doc.reports[0]!.results as unknown as Json;
    expect(at(decode, "models.*.model")).toEqual([`${base} F32`, `${base} Q8_0`, `${base} Q4_K_M`]);
    expect(at(decode, "models.*.rows.*.threads")).toEqual([1, 2, 1, 2, 1, 2]);
    // speculation is measured on Q8_0 only, on its three workloads
    expect(at(decode, "models.*.speculative.rows.*.workload")).toEqual(["stories", "repeating", "no-repetition"]);
    const svg = readFileSync(chart, "utf8");
    for (const title of ["Decode tokens/s", "Prefill tokens/s", "Tokens/s per tensor type", "Aggregate decode tokens/s against batch size", "Time to first token"]) {
      expect(svg).toContain(title);
    }
    expect(svg).toContain("bandwidth limit");
    expect(svg).toContain("compute limit");
  }, LONG_PROCESS_TEST_MS);

  test("--model FILE.gguf --f32-baseline measures the file next to random F32 weights of its exact shape", () => {
    const file = join(SHARED, "models", "gguf", "rnd-llama-Q4_K_M.gguf");
    const doc = expectFigures(["bench", "decode", ...QUICK, "--model", file, "--f32-baseline", "--models-dir", modelsDir, "--threads", "1", "--stream-mb", "16", "--tokens", "4"], [
      "models.*.rows.*.tokensPerSecond.median", "floor.*.ratio",
    ]);
    expect(at(doc, "results.models.*.model")).toEqual(["rnd-llama-Q4_K_M.gguf F32 twin", "rnd-llama-Q4_K_M.gguf"]);
    const twin = readGGUF(join(modelsDir, "random-twin-rnd-llama-Q4_K_M-F32.gguf"));
    const original = readGGUF(file);
    expect(twin.tensors.map((t) => `${t.name} ${t.dims.join("x")}`).sort()).toEqual(original.tensors.map((t) => `${t.name} ${t.dims.join("x")}`).sort());
    expect(new Set(twin.tensors.map((t) => t.typeName))).toEqual(new Set(["F32"]));
  }, LONG_PROCESS_TEST_MS);

  test("--peer-nlc: a folder without node-llama-cpp, or a llama2.c model, is a one-line input error", () => {
    const missing = runPagellm(["bench", "decode", ...QUICK, ...tiny, "--type", "F32", "--peer-nlc", join(modelsDir, "no-peer")]);
    expect(missing.exitCode).toBe(2);
    expect(missing.stderr.trim().split("\n").pop()).toMatch(/no-peer: no node_modules\/node-llama-cpp there; install it outside the project/);
    const foreign = runPagellm(["bench", "decode", ...QUICK, "--model", llama2c!, "--peer-nlc", join(modelsDir, "no-peer")]);
    expect(foreign.exitCode).toBe(2);
    expect(foreign.stderr).toContain("--peer-nlc runs llama.cpp on GGUF files");
  }, PROCESS_TEST_MS);

  // node-llama-cpp is never a dependency of the project: this runs only where it was installed
  // outside it (PAGELLM_PEER_NLC, default /tmp/peers), and says so when skipped.
  const peerDir = process.env.PAGELLM_PEER_NLC ?? "/tmp/peers";
  const hasPeer = existsSync(join(peerDir, "node_modules", "node-llama-cpp", "package.json"));
  if (!hasPeer) console.warn(`[skip] --peer-nlc end to end: node-llama-cpp is not installed in ${peerDir} (set PAGELLM_PEER_NLC)`);
  test.skipIf(!hasPeer)("decode and prefill --peer-nlc report pagellm / llama.cpp on the same file", () => {
    expectFigures(["bench", "decode", ...QUICK, ...tiny, "--type", "Q8_0", "--stream-mb", "16", "--tokens", "6", "--peer-nlc", peerDir], [
      "models.*.rows.*.peer.tokensPerSecond.median", "models.*.rows.*.peer.ratio",
    ]);
    expectFigures(["bench", "prefill", ...QUICK, ...tiny, "--type", "F32", "--prompt-tokens", "16", "--decode-tokens", "4", "--peer-nlc", peerDir], [
      "rows.*.peer.tokensPerSecond.median", "rows.*.peer.ratio",
    ]);
  }, LONG_PROCESS_TEST_MS);

  test("--peer-llama-bench: a missing binary, a llama2.c model or two peers at once is a one-line input error", () => {
    const cases: [string[], RegExp][] = [
      [[...tiny, "--type", "F32", "--peer-llama-bench", join(modelsDir, "no-llama-bench")], /--peer-llama-bench .*no-llama-bench: no such file/],
      [["--model", llama2c!, "--peer-llama-bench", join(modelsDir, "no-llama-bench")], /--peer-llama-bench runs llama\.cpp on GGUF files/],
      [[...tiny, "--type", "F32", "--peer-llama-bench", "x", "--peer-nlc", "y"], /give one llama\.cpp peer per run/],
    ];
    for (const [args, message] of cases) {
      const r = runPagellm(["bench", "decode", ...QUICK, ...args]);
      expect(r.exitCode, args.join(" ")).toBe(2);
      expect(r.stderr.trim().split("\n").pop()).toMatch(message);
    }
  }, PROCESS_TEST_MS);

  test("llama-bench's arguments time what pagellm's decode and prefill time, and its JSON gives the samples", () => {
    const run = { model: "m.gguf", threads: 2, promptTokens: 8, genTokens: 16, warmup: 1, reps: 3, vocabSize: 512, seed: 1, kvType: null };
    expect(llamaBenchArgs({ ...run, mode: "decode" })).toEqual(["-m", "m.gguf", "-t", "2", "-r", "3", "-o", "json", "-p", "0", "-n", "16", "-d", "8"]);
    expect(llamaBenchArgs({ ...run, mode: "prefill", warmup: 0, kvType: "q8_0" })).toEqual([
      "-m", "m.gguf", "-t", "2", "-r", "3", "-o", "json", "-p", "8", "-n", "0", "-ctk", "q8_0", "-ctv", "q8_0", "--no-warmup",
    ]);
    expect(parseLlamaBench('[{"build_commit": "de3ff81", "n_gen": 16, "samples_ts": [7.5, 8.25]}]')).toEqual({ build: "de3ff81", rates: [7.5, 8.25] });
    for (const bad of ["", "[]", '[{"samples_ts": []}]', '[{"samples_ts": [0]}]', '{"samples_ts": [1]}']) expect(parseLlamaBench(bad), bad).toBeNull();
  });

  // llama-bench is a tool of the machine, never a dependency: at $PAGELLM_LLAMA_BENCH, else beside the
  // repository in ../llama-ref (../shared/tools/llama-ref's build); skipped, saying why, without it.
  const llamaBench = process.env.PAGELLM_LLAMA_BENCH ?? resolve(REPO_ROOT, "..", "llama-ref", "llama.cpp", "build", "bin", "llama-bench");
  const hasLlamaBench = existsSync(llamaBench);
  if (!hasLlamaBench) console.warn(`[skip] --peer-llama-bench end to end: no llama-bench at ${llamaBench} (set PAGELLM_LLAMA_BENCH)`);
  test.skipIf(!hasLlamaBench)("decode --peer-llama-bench reports pagellm / llama.cpp on the same file", () => {
    expectFigures(["bench", "decode", ...QUICK, ...tiny, "--type", "Q8_0", "--stream-mb", "16", "--tokens", "4", "--peer-llama-bench", llamaBench], [
      "models.*.rows.*.peer.tokensPerSecond.median", "models.*.rows.*.peer.ratio",
    ]);
  }, LONG_PROCESS_TEST_MS);
});
