/**
 * `pagellm bench`: smoke tests only. Each bench runs end to end through the CLI on a tiny model
 * (the real stories260K.bin, or a tiny random shape written to a temporary models folder) with
 * few tokens and one repetition, and its --json document has the expected fields, every figure
 * finite and positive. No timing thresholds: speed is the benches' business, not the tests'.
 */
import { afterAll, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { summarize } from "../src/bench/measure.ts";
import { parseShape } from "../src/bench/models.ts";
import { describeShared } from "./helpers/shared.ts";

const ROOT = resolve(import.meta.dir, "..");
const modelsDir = mkdtempSync(join(tmpdir(), "pagellm-bench-"));
afterAll(() => rmSync(modelsDir, { recursive: true, force: true }));

/** One repetition, no warm-up, small bandwidth buffer: end to end, not a measurement. */
const QUICK = ["--json", "--reps", "1", "--warmup", "0"];
/** Long enough a context for the prefix bench's 1024-token system prompts, tiny everything else. */
const TINY_SHAPE = "dim=32,hidden=64,layers=1,heads=2,kv=1,vocab=512,seq=2048";

function pagellm(args: string[]): { code: number; stdout: string; stderr: string } {
  const p = Bun.spawnSync(["bun", join(ROOT, "bin", "pagellm"), ...args], { cwd: ROOT, stdout: "pipe", stderr: "pipe" });
  return { code: p.exitCode ?? -1, stdout: p.stdout.toString(), stderr: p.stderr.toString() };
}

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
  const r = pagellm(args);
  if (r.code !== 0) throw new Error(`pagellm ${args.join(" ")} exited ${r.code}: ${r.stderr}`);
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
    const r = pagellm(["bench"]);
    expect(r.code).toBe(0);
    for (const name of ["kernels", "decode", "prefill", "batch", "prefix"]) expect(r.stdout).toContain(name);
  });

  test("every bench's --help lists its options", () => {
    const expected: Record<string, string[]> = {
      kernels: ["--threads", "--stream-mb", "--decode-tokens", "--model", "--shape", "--models-dir", "--tokenizer", "--json", "--reps"],
      decode: ["--threads", "--tokens", "--prompt-tokens", "--stream-mb", "--model", "--quant"],
      prefill: ["--threads", "--prompt-tokens", "--decode-tokens", "--model"],
      batch: ["--threads", "--seqs", "--steps", "--warmup-steps", "--shape"],
      prefix: ["--threads", "--prefix-tokens", "--suffix-tokens", "--workloads", "--requests", "--max-num-seqs", "--num-blocks", "--eviction-policies"],
    };
    for (const [bench, options] of Object.entries(expected)) {
      const r = pagellm(["bench", bench, "--help"]);
      expect(r.code).toBe(0);
      for (const o of options) expect(r.stdout, `${bench} ${o}`).toContain(o);
    }
  });

  test("a bad option is a one-line error", () => {
    const r = pagellm(["bench", "decode", "--threads", "0"]);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain("--threads");
  });

  test("custom shapes parse; a malformed one is an input error", () => {
    expect(parseShape(TINY_SHAPE).config.headDim).toBe(16);
    expect(parseShape("stories110M").config.dim).toBe(768);
    expect(() => parseShape("dim=32,hidden=64")).toThrow("lacks");
  });

  test("summaries", () => {
    const s = summarize([3, 1, 2]);
    expect([s.median, s.min, s.max]).toEqual([2, 1, 3]);
  });
});

describeShared("benches end to end", ["models/llama2c/stories260K.bin", "models/llama2c/tok512.bin"], ([model, tokenizer]) => {
  const onModel = ["--model", model!, "--tokenizer", tokenizer!];

  test("kernels", () => {
    expectFigures(["bench", "kernels", ...QUICK, ...onModel, "--stream-mb", "16", "--decode-tokens", "4", "--threads", "1,2"], [
      "matvec.*.kernelGflops.median", "matvec.*.kernelGBps.median", "matvec.*.scalarGflops.median", "matvec.*.speedup",
      "matmul.*.gflops.median", "stream.*.gbps.median", "decode.*.tokensPerSecond.median",
    ]);
  }, 30_000);

  test("decode", () => {
    expectFigures(["bench", "decode", ...QUICK, ...onModel, "--stream-mb", "16", "--tokens", "4", "--threads", "1,2"], [
      "bytesPerToken", "rows.*.tokensPerSecond.median", "rows.*.msPerToken.p99", "rows.*.bandwidthGBps.median",
      "rows.*.limitTokensPerSecond", "rows.*.fractionOfLimit", "rows.*.vsFirst",
    ]);
  }, 30_000);

  test("decode --runc: a missing baseline binary is a one-line input error", () => {
    const r = pagellm(["bench", "decode", ...QUICK, ...onModel, "--stream-mb", "16", "--tokens", "4", "--threads", "1", "--runc", join(modelsDir, "no-such-run")]);
    expect(r.code).toBe(2);
    expect(r.stderr.trim().split("\n").pop()).toMatch(/^pagellm: error: .*no-such-run: --runc binary not found$/);
  }, 30_000);

  test("prefill", () => {
    expectFigures(["bench", "prefill", ...QUICK, ...onModel, "--prompt-tokens", "64", "--decode-tokens", "4", "--threads", "1"], [
      "rows.*.ttftMs.median", "rows.*.prefillTokensPerSecond.median", "rows.*.decodeMsPerToken.median", "rows.*.prefillVsDecode", "target",
    ]);
  }, 30_000);

  test("batch", () => {
    expectFigures(["bench", "batch", ...QUICK, ...onModel, "--stream-mb", "16", "--seqs", "1,4", "--steps", "2", "--prompt-tokens", "8", "--threads", "1"], [
      "runs.*.roofline.bandwidthGBps.median", "runs.*.roofline.matmulGflops.median", "runs.*.rows.*.decodeTokensPerSecond.median",
      "runs.*.rows.*.prefillTokensPerSecond.median", "runs.*.rows.*.vsSingle", "runs.*.rows.*.fractionOfMatmul",
      "runs.*.rows.*.bandwidthLimitTokensPerSecond", "runs.*.rows.*.computeLimitTokensPerSecond",
    ]);
  }, 30_000);

  test("prefix, on a tiny random shape with a 2048-token context", () => {
    const doc = expectFigures([
      "bench", "prefix", ...QUICK, "--shape", TINY_SHAPE, "--tokenizer", tokenizer!, "--models-dir", modelsDir, "--threads", "1",
      "--prefix-tokens", "256", "--distinct-requests", "2", "--distinct-prompt-tokens", "64", "--distinct-output-tokens", "2",
      "--requests", "4", "--output-tokens", "2",
    ], [
      "ttft.cachedMs.median", "ttft.uncachedMs.median", "ttft.speedup", "ttft.hitRate", "hashing.*.nsPerToken",
      "zeroHit.cacheOnTokensPerSecond.median", "zeroHit.cacheOffTokensPerSecond.median", "zeroHit.ratioPerRep.median",
      "workloads.*.numBlocks", "workloads.*.configs.*.outputTokensPerSecond", "workloads.*.configs.*.ttftMs.p99",
    ]);
    // Cache off, then FCFS and LPM under each of the two eviction policies, for both workloads.
    expect(at(doc, "results.workloads.*.name")).toEqual(["prefix-repetition", "generated-shared-prefix"]);
    expect(at(doc, "results.workloads.*.configs.*.cache")).toEqual([false, true, true, true, true, false, true, true, true, true]);
    expect(at(doc, "results.zeroHit.hitRate")).toEqual([0]);
  }, 30_000);
});
