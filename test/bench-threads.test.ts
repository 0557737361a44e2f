/**
 * `pagellm bench threads`: the thread counts, the speed-ups and floors computed from the figures,
 * llama-batched-bench's arguments and output, and the bench end to end on a tiny random GGUF model
 * (with llama.cpp's tools where a build of them is found beside the repository).
 */
import { afterAll, describe, expect, test } from "bun:test";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { batchedBenchArgs, parseBatchedBench } from "../src/bench/peer-batched-bench.ts";
import { defaultThreadCounts, scalingFloors, type ScalingRow } from "../src/bench/thread-scaling.ts";
import { summarize } from "../src/bench/measure.ts";
import { readBenchDocument } from "../src/bench/schema.ts";
import { describeShared } from "./helpers/shared.ts";
import { REPO_ROOT, runPagellm } from "./helpers/cli.ts";
import { LONG_PROCESS_TEST_MS, PROCESS_TEST_MS } from "./helpers/limits.ts";

const modelsDir = mkdtempSync(join(tmpdir(), "pagellm-bench-threads-"));
afterAll(() => rmSync(modelsDir, { recursive: true, force: true }));

const TINY_GGUF_SHAPE = "dim=64,hidden=256,layers=2,heads=4,kv=2,vocab=32000,seq=256";
const QUICK = ["--reps", "1", "--warmup", "0", "--stream-mb", "16", "--prompt-tokens", "16", "--tokens", "4", "--seqs", "4", "--steps", "2"];

function row(workload: ScalingRow["workload"], threads: number, tps: number, peerTps: number | null, first: { ours: number; peer: number | null }): ScalingRow {
  return {
    workload, model: "m", threads, tokensPerSecond: summarize([tps]), speedup: tps / first.ours,
    peer: peerTps === null || first.peer === null ? null : { via: "x", tokensPerSecond: summarize([peerTps]), speedup: peerTps / first.peer },
  };
}

describe("bench threads: counts, speed-ups and floors", () => {
  test("the default counts double up to the cores and end at the cores", () => {
    expect(defaultThreadCounts(1)).toEqual([1]);
    expect(defaultThreadCounts(2)).toEqual([1, 2]);
    expect(defaultThreadCounts(6)).toEqual([1, 2, 4, 6]);
    expect(defaultThreadCounts(16)).toEqual([1, 2, 4, 8, 16]);
  });

  test("prefill and batch are held to 1.8x at two threads, decode to llama.cpp's own gain; a decode without llama.cpp is not judged", () => {
    const floors = scalingFloors([
      row("prefill", 1, 100, null, { ours: 100, peer: null }), row("prefill", 2, 179, null, { ours: 100, peer: null }),
      row("batch", 1, 50, null, { ours: 50, peer: null }), row("batch", 2, 90, null, { ours: 50, peer: null }),
      row("decode", 1, 40, 50, { ours: 40, peer: 50 }), row("decode", 2, 50, 60, { ours: 40, peer: 50 }),
      row("decode", 4, 90, 90, { ours: 40, peer: 50 }),
    ]);
    expect(floors.map((f) => [f.workload, f.met])).toEqual([["prefill", false], ["batch", true], ["decode", true]]);
    expect(floors[2]!.required).toBeCloseTo(1.2, 10);
    expect(floors[2]!.speedup).toBeCloseTo(1.25, 10);
    expect(scalingFloors([row("decode", 2, 50, null, { ours: 40, peer: null })])).toEqual([]);
  });

  test("llama-batched-bench runs the same sequences, prompts and steps, and its JSON line of that batch gives the decode speed", () => {
    expect(batchedBenchArgs({ model: "m.gguf", threads: 2, seqs: 16, promptTokens: 16, steps: 8, reps: 3 })).toEqual([
      "-m", "m.gguf", "-t", "2", "-tb", "2", "-c", String(16 * 24 + 16), "-b", "512", "-ub", "512",
      "-npp", "16", "-ntg", "8", "-npl", "16", "-ctk", "f16", "-ctv", "f16", "--output-format", "jsonl",
    ]);
    const out = [
      "main: n_kv_max = 400",
      '{"n_kv_max": 400, "pp": 16, "tg": 8, "pl": 4, "speed_tg": 12.5}',
      '{"n_kv_max": 400, "pp": 16, "tg": 8, "pl": 16, "speed_tg": 99.25}',
    ].join("\n");
    expect(parseBatchedBench(out, 16)).toBe(99.25);
    expect(parseBatchedBench(out, 4)).toBe(12.5);
    for (const bad of ["", "{", '{"pl": 16, "speed_tg": 0}', '{"pl": "16", "speed_tg": 3}']) expect(parseBatchedBench(bad, 16), bad).toBeNull();
  });
});

describeShared("bench threads end to end", ["vocab/ggml-vocab-llama-spm.gguf"], () => {
  const tiny = ["--shape", TINY_GGUF_SHAPE, "--models-dir", modelsDir];

  test("one and two threads of prefill, decode and the batch, the speed-ups, the floors and one chart per workload", () => {
    const json = join(modelsDir, "threads.json");
    const chart = join(modelsDir, "threads.svg");
    const r = runPagellm(["bench", "threads", ...QUICK, ...tiny, "--type", "F32", "--threads", "1,2", "--json", json, "--chart", chart]);
    expect(r.exitCode, r.stderr).toBe(0);
    expect(r.stdout).toContain("floors at two threads");
    const doc = readBenchDocument(json);
    if (doc.bench !== "threads") throw new Error(`bench ${doc.bench}`);
    const rows = doc.results.rows;
    expect(rows.map((x) => `${x.workload} ${x.threads}`)).toEqual(["prefill 1", "prefill 2", "decode 1", "decode 2", "batch 1", "batch 2"]);
    for (const x of rows) {
      expect(x.tokensPerSecond.median).toBeGreaterThan(0);
      expect(x.speedup).toBeCloseTo(x.tokensPerSecond.median / rows.find((y) => y.workload === x.workload && y.threads === 1)!.tokensPerSecond.median, 10);
    }
    expect(doc.results.floors.map((f) => f.workload)).toEqual(["prefill", "batch"]);
    expect(doc.notes.join("\n")).toContain("no --peer-llama-bench");
    const svg = readFileSync(chart, "utf8");
    for (const title of ["Speed-up over one thread: prefill", "Speed-up over one thread: decode of one sequence", "Speed-up over one thread: decode of 4 sequences"]) {
      expect(svg).toContain(title);
    }
  }, LONG_PROCESS_TEST_MS);

  test("thread counts that do not start at 1 or do not ascend, and a missing llama-batched-bench, are one-line input errors", () => {
    const cases: [string[], RegExp][] = [
      [["--threads", "2,4"], /--threads 2,4: ascending counts starting at 1/],
      [["--threads", "1,2,2"], /--threads 1,2,2: ascending counts starting at 1/],
      [["--threads", "1", "--peer-batched-bench", join(modelsDir, "none")], /--peer-batched-bench .*none: no such file/],
    ];
    for (const [args, message] of cases) {
      const r = runPagellm(["bench", "threads", ...QUICK, ...tiny, "--type", "F32", ...args]);
      expect(r.exitCode, args.join(" ")).toBe(2);
      expect(r.stderr.trim().split("\n").pop()).toMatch(message);
    }
  }, PROCESS_TEST_MS);

  // llama.cpp's tools are the machine's, never dependencies: beside the repository in ../llama-ref
  // (../shared/tools/llama-ref's build, plus its llama-batched-bench target), or where the variables say.
  const bin = resolve(REPO_ROOT, "..", "llama-ref", "llama.cpp", "build", "bin");
  const llamaBench = process.env.PAGELLM_LLAMA_BENCH ?? join(bin, "llama-bench");
  const batched = process.env.PAGELLM_LLAMA_BATCHED_BENCH ?? join(bin, "llama-batched-bench");
  const hasPeers = existsSync(llamaBench) && existsSync(batched);
  if (!hasPeers) console.warn(`[skip] bench threads with llama.cpp: no llama-bench and llama-batched-bench in ${bin} (set PAGELLM_LLAMA_BENCH, PAGELLM_LLAMA_BATCHED_BENCH)`);
  test.skipIf(!hasPeers)("with llama-bench and llama-batched-bench: llama.cpp's speed-ups beside pagellm's, and decode's floor judged", () => {
    const r = runPagellm(["bench", "threads", ...QUICK, ...tiny, "--type", "Q8_0", "--threads", "1,2", "--json", "--peer-llama-bench", llamaBench, "--peer-batched-bench", batched]);
    expect(r.exitCode, r.stderr).toBe(0);
    const doc = JSON.parse(r.stdout) as { results: { rows: ScalingRow[]; floors: { workload: string }[] } };
    const q8 = doc.results.rows.filter((x) => x.model.endsWith("Q8_0"));
    expect(q8.length).toBe(6);
    for (const x of q8) expect(x.peer?.tokensPerSecond.median ?? 0).toBeGreaterThan(0);
    expect(doc.results.floors.filter((f) => f.workload === "decode").length).toBeGreaterThan(0);
  }, LONG_PROCESS_TEST_MS);
});
