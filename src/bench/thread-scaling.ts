/**
 * `pagellm bench threads`: how prefill, single-sequence decode and batched decode scale with
 * threads, from one up to the cores the machine has, each next to llama.cpp's own scaling on the
 * same file at the same counts in the same run (llama-bench for prefill and decode,
 * llama-batched-bench for the batch). Every figure is a speed-up over the same side's one-thread
 * speed, so the two engines' different per-thread speeds drop out and what is compared is what
 * each added thread buys. The floors: prefill and 16-sequence decode at two threads at least 1.8x
 * one thread; single-sequence decode's two-thread gain at least llama.cpp's.
 */
import type { BenchModel } from "./bench-models.ts";
import { runBatchBench, type BatchResult, type BatchRun } from "./batch-decode.ts";
import { runDecodeBench, type DecodeResult } from "./decode.ts";
import { runPrefillBench, type PrefillResult } from "./prefill.ts";
import type { LlamaCppPeer } from "./peer.ts";
import type { BatchedPeer } from "./peer-batched-bench.ts";
import type { RepeatOptions, Summary } from "./measure.ts";
import { figure, fmt, fmtRatio, fmtSpread, progress, threadsLabel, type Figure, type Table } from "./bench-report.ts";
import type { LineChart, LineSeries } from "./chart-svg.ts";

/** The floor on prefill's and batched decode's two-thread speed-up. */
export const TWO_THREAD_FLOOR = 1.8;

export type ScalingWorkload = "prefill" | "decode" | "batch";
export const SCALING_WORKLOADS: readonly ScalingWorkload[] = ["prefill", "decode", "batch"];

export interface ThreadScalingOptions extends RepeatOptions {
  /** One shape in several tensor types. */
  models: BenchModel[];
  /** Thread counts, ascending, starting at 1 (the baseline of every speed-up). */
  threads: number[];
  promptTokens: number;
  decodeTokens: number;
  batch: { seqs: number; promptTokens: number; steps: number; warmupSteps: number };
  streamBytes: number;
  seed: number;
  peer: LlamaCppPeer | null;
  batchedPeer: BatchedPeer | null;
}

/** One workload on one model at one thread count: its speed and speed-up, and llama.cpp's. */
export interface ScalingRow {
  workload: ScalingWorkload;
  model: string;
  threads: number;
  tokensPerSecond: Summary;
  /** tokens/s (median) over the one-thread figure's. */
  speedup: number;
  peer: { via: string; tokensPerSecond: Summary; speedup: number } | null;
}

/** A floor at two threads, checked. */
export interface ScalingFloor {
  workload: ScalingWorkload;
  model: string;
  speedup: number;
  /** What it must reach: TWO_THREAD_FLOOR, or llama.cpp's own speed-up in the run. */
  required: number;
  requiredBy: string;
  met: boolean;
}

export interface ThreadScalingResult {
  threads: number[];
  promptTokens: number;
  batchSeqs: number;
  prefill: PrefillResult[];
  decode: DecodeResult[];
  batch: BatchResult;
  rows: ScalingRow[];
  floors: ScalingFloor[];
}

/** 1, 2, 4, ... up to `cores`, and `cores` itself. */
export function defaultThreadCounts(cores: number): number[] {
  const counts: number[] = [];
  for (let t = 1; t < cores; t *= 2) counts.push(t);
  counts.push(Math.max(1, cores));
  return counts;
}

export async function runThreadScaling(o: ThreadScalingOptions): Promise<ThreadScalingResult> {
  if (o.threads[0] !== 1) throw new RangeError("runThreadScaling: the thread counts start at 1 (the baseline)");
  const rows: ScalingRow[] = [];
  const prefill: PrefillResult[] = [];
  const decode: DecodeResult[] = [];
  const runs: BatchRun[] = [];
  const common = { warmup: o.warmup, reps: o.reps, threads: o.threads, seed: o.seed, gpu: null, kvType: null };
  for (const model of o.models) {
    progress(`bench threads: ${model.label}`);
    const p = await runPrefillBench({ ...common, model, promptTokens: o.promptTokens, decodeTokens: 4, peer: o.peer });
    prefill.push(p);
    rows.push(...scaled("prefill", model.label, p.rows.map((x) => ({ threads: x.threads, ours: x.prefillTokensPerSecond, peer: x.peer }))));
    const d = await runDecodeBench({
      ...common, model, promptTokens: 8, genTokens: o.decodeTokens, streamBytes: o.streamBytes, runc: null, peer: o.peer, speculate: null,
      jsonSchema: null, kvContext: null, tools: false,
    });
    decode.push(d);
    rows.push(...scaled("decode", model.label, d.rows.map((x) => ({ threads: x.threads, ours: x.tokensPerSecond, peer: x.peer }))));
    const batchRows: { threads: number; ours: Summary; peer: { via: string; tokensPerSecond: Summary } | null }[] = [];
    for (const threads of o.threads) {
      // One thread count at a time, so llama.cpp's batch runs right after pagellm's at the same count.
      const b = await runBatchBench({
        ...common, threads: [threads], models: [model], batchSizes: [o.batch.seqs], promptTokens: o.batch.promptTokens, steps: o.batch.steps,
        warmupSteps: o.batch.warmupSteps, streamBytes: o.streamBytes,
      });
      runs.push(...b.runs);
      const ours = b.runs[0]!.rows[0]!.decodeTokensPerSecond;
      let peer = null;
      if (o.batchedPeer !== null) {
        progress(`${model.label}: ${o.batch.seqs} sequences by llama.cpp, ${threadsLabel(threads)}`);
        peer = o.batchedPeer.run({ model: model.path, threads, seqs: o.batch.seqs, promptTokens: o.batch.promptTokens, steps: o.batch.steps, reps: o.reps });
      }
      batchRows.push({ threads, ours, peer });
    }
    rows.push(...scaled("batch", model.label, batchRows));
  }
  const batch: BatchResult = { promptTokens: o.batch.promptTokens, steps: o.batch.steps, runs, webgpu: [] };
  return { threads: o.threads, promptTokens: o.promptTokens, batchSeqs: o.batch.seqs, prefill, decode, batch, rows, floors: scalingFloors(rows) };
}

/** Each thread count's speed over the first one's, on both sides. */
function scaled(
  workload: ScalingWorkload, model: string, points: readonly { threads: number; ours: Summary; peer: { via: string; tokensPerSecond: Summary } | null }[],
): ScalingRow[] {
  const first = points[0];
  if (first === undefined) return [];
  return points.map((x) => ({
    workload, model, threads: x.threads, tokensPerSecond: x.ours, speedup: x.ours.median / first.ours.median,
    peer: x.peer === null || first.peer === null
      ? null
      : { via: x.peer.via, tokensPerSecond: x.peer.tokensPerSecond, speedup: x.peer.tokensPerSecond.median / first.peer.tokensPerSecond.median },
  }));
}

/** The floors at two threads: prefill and batch against TWO_THREAD_FLOOR, decode against llama.cpp's gain (when it ran). */
export function scalingFloors(rows: readonly ScalingRow[]): ScalingFloor[] {
  return rows.filter((r) => r.threads === 2).flatMap((r): ScalingFloor[] => {
    if (r.workload !== "decode") {
      return [{ workload: r.workload, model: r.model, speedup: r.speedup, required: TWO_THREAD_FLOOR, requiredBy: "floor", met: r.speedup >= TWO_THREAD_FLOOR }];
    }
    if (r.peer === null) return [];
    return [{ workload: r.workload, model: r.model, speedup: r.speedup, required: r.peer.speedup, requiredBy: "llama.cpp's gain", met: r.speedup >= r.peer.speedup }];
  });
}

function workloadLabel(r: ThreadScalingResult, w: ScalingWorkload): string {
  if (w === "prefill") return `prefill of one ${r.promptTokens}-token prompt`;
  if (w === "batch") return `decode of ${r.batchSeqs} sequences together`;
  return "decode of one sequence";
}

export function threadScalingTables(r: ThreadScalingResult): Table[] {
  const tables: Table[] = SCALING_WORKLOADS.map((w) => ({
    title: `${workloadLabel(r, w)}: tokens/s and speed-up over one thread, pagellm and llama.cpp on the same file; median (min-max)`,
    columns: ["model", "threads", "pagellm tokens/s", "speed-up", "llama.cpp tokens/s", "llama.cpp speed-up", "pagellm / llama.cpp"],
    rows: r.rows.filter((x) => x.workload === w).map((x) => [
      x.model, String(x.threads), fmtSpread(x.tokensPerSecond), fmtRatio(x.speedup),
      x.peer === null ? "-" : fmtSpread(x.peer.tokensPerSecond), x.peer === null ? "-" : fmtRatio(x.peer.speedup),
      x.peer === null ? "-" : fmtRatio(x.tokensPerSecond.median / x.peer.tokensPerSecond.median),
    ]),
  }));
  if (r.floors.length > 0) {
    tables.push({
      title: "floors at two threads",
      columns: ["workload", "model", "speed-up", "required", "by", "met"],
      rows: r.floors.map((f) => [f.workload, f.model, fmtRatio(f.speedup), fmtRatio(f.required), f.requiredBy, f.met ? "yes" : "NO"]),
    });
  }
  return tables;
}

export function threadScalingNotes(r: ThreadScalingResult, peers: { llamaBench: boolean; batched: boolean }): string[] {
  const notes: string[] = [];
  if (!r.threads.includes(2)) notes.push("no two-thread figures: the floors are not checked");
  if (!peers.llamaBench) notes.push("no --peer-llama-bench: no llama.cpp figures for prefill and decode, and decode's floor (llama.cpp's gain) is not checked");
  if (!peers.batched) notes.push("no --peer-batched-bench: no llama.cpp figures for the batch");
  const missed = r.floors.filter((f) => !f.met);
  if (missed.length > 0) notes.push(`floors missed: ${missed.map((f) => `${f.workload} ${f.model} ${fmt(f.speedup)}x < ${fmt(f.required)}x`).join("; ")}`);
  return notes;
}

/** The figures --compare matches: each speed-up, and llama.cpp's beside it. */
export function threadScalingFigures(r: ThreadScalingResult): Figure[] {
  return r.rows.flatMap((x) => {
    const at = `${x.model}, ${threadsLabel(x.threads)}: ${x.workload}`;
    return [
      ...figure(`${at} tokens/s`, x.tokensPerSecond, "tokens/s"),
      ...figure(`${at} speed-up over 1 thread`, x.speedup, "x"),
      ...(x.peer === null ? [] : figure(`${at} llama.cpp speed-up over 1 thread`, x.peer.speedup, "x")),
    ];
  });
}

/** One chart per workload: speed-up against threads, pagellm solid, llama.cpp dashed in the same colour, and the linear ideal. */
export function threadScalingCharts(r: ThreadScalingResult): LineChart[] {
  return SCALING_WORKLOADS.map((w) => {
    const rows = r.rows.filter((x) => x.workload === w);
    const models = [...new Set(rows.map((x) => x.model))];
    const series: LineSeries[] = models.flatMap((model, i) => {
      const mine = rows.filter((x) => x.model === model);
      const ours: LineSeries = { name: `${model} pagellm`, color: i, points: mine.map((x) => ({ x: x.threads, y: x.speedup })) };
      const peerPoints = mine.flatMap((x) => (x.peer === null ? [] : [{ x: x.threads, y: x.peer.speedup }]));
      return peerPoints.length === 0 ? [ours] : [ours, { name: `${model} llama.cpp`, color: i, dashed: true, points: peerPoints }];
    });
    series.push({ name: "linear", color: models.length, dashed: true, points: r.threads.map((t) => ({ x: t, y: t })) });
    return {
      kind: "line", title: `Speed-up over one thread: ${workloadLabel(r, w)}`, xLabel: "threads", yLabel: "x one thread",
      xScale: "linear", xTicks: r.threads, series,
    };
  });
}
