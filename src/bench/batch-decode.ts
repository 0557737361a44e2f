/**
 * `pagellm bench batch`: aggregate decode throughput of many sequences decoding together. A
 * batched step reads every weight once for all its tokens, so throughput should grow with the
 * batch until the matrix kernels' arithmetic, not memory, is the limit. Both ceilings are
 * measured in the same run on the engine's own threads: the streaming-read bandwidth (limit N ·
 * bandwidth / bytes per token) and the matrix-matrix kernel's GFLOP/s at T = 16 on the model's
 * feed-forward shape (limit GFLOP/s / (2 · params)).
 */
import type { KVType } from "../kv/kv-layout.ts";
import { batchPositions, measureBatch, withLLM } from "./engine-runs.ts";
import { ratio, type RepeatOptions, type Summary } from "./measure.ts";
import type { BenchModel } from "./bench-models.ts";
import { figure, fmt, fmtPct, fmtRatio, fmtSpread, progress, threadsLabel, type Figure, type Table } from "./bench-report.ts";
import { measureMatmulGflops, measureStreamBandwidth, withScratchBackend } from "./roofline.ts";
import { gpuRefusal, gpuTable, type BenchGpu, type GpuRow } from "./webgpu.ts";
import type { EngineOptions } from "../engine/engine-options.ts";

/** Sequences per step measured: one, then batches up to 64. */
export const BATCH_SIZES: readonly number[] = [1, 4, 16, 64];
/** The batch size the headline figures are given for. */
export const HEADLINE_BATCH = 16;
/** Tokens of the matrix-matrix kernel measurement: a 16-sequence decode step. */
const ROOFLINE_TOKENS = 16;
const BLOCK_SIZE = 16;

export interface BatchBenchOptions extends RepeatOptions {
  threads: number[];
  /** The KV cache type (null: the model's default). */
  kvType: KVType | null;
  models: BenchModel[];
  batchSizes: readonly number[];
  promptTokens: number;
  steps: number;
  warmupSteps: number;
  streamBytes: number;
  seed: number;
  /** WebGPU to measure next to WebAssembly (--device), or null. */
  gpu: BenchGpu | null;
}

/** Batched decode of one model on WebGPU, per batch size against WebAssembly's; or why the model has none. */
export type GpuBatch = { model: string; adapter: string; software: boolean; rows: GpuRow[] } | { model: string; adapter: string; refused: string };

export interface Roofline {
  bandwidthGBps: Summary;
  /** matmulF32 GFLOP/s at T = 16 on the model's hidden x dim matrix. */
  matmulGflops: Summary;
  matmulShape: [number, number];
}

export interface BatchRow {
  seqs: number;
  decodeTokensPerSecond: Summary;
  prefillTokensPerSecond: Summary;
  meanBatch: number;
  /** decode tokens/s against one sequence (medians, same run and threads). */
  vsSingle: number;
  /** 2 · params · tokens/s, the weight FLOPs of the steps. */
  weightGflops: number;
  /** weightGflops / the matrix kernel's GFLOP/s (best repetition). */
  fractionOfMatmul: number;
  /** seqs · bandwidth (best repetition) / bytes per token. */
  bandwidthLimitTokensPerSecond: number;
  /** matmul GFLOP/s (best repetition) / (2 · params). */
  computeLimitTokensPerSecond: number;
}

export interface BatchRun {
  model: string;
  threads: number;
  matmulParams: number;
  bytesPerToken: number;
  roofline: Roofline;
  rows: BatchRow[];
}

/** `results` of `bench batch`: one run per model and thread count. */
export interface BatchResult {
  promptTokens: number;
  steps: number;
  runs: BatchRun[];
  webgpu: GpuBatch[];
}

export async function runBatchBench(o: BatchBenchOptions): Promise<BatchResult> {
  const runs: BatchRun[] = [];
  const webgpu: GpuBatch[] = [];
  const maxSeqs = Math.max(...o.batchSizes);
  const budget = Math.max(512, maxSeqs);
  const blocksPerSeq = Math.ceil(batchPositions({ ...o, numSeqs: maxSeqs }, budget) / BLOCK_SIZE);
  for (const model of o.models) {
    for (const threads of o.threads) {
      const engine = {
        threads, blockSize: BLOCK_SIZE, maxNumSeqs: maxSeqs, maxNumBatchedTokens: budget, kvType: o.kvType,
        // Every sequence of the largest batch at full length, and a block each to spare.
        numBlocks: maxSeqs * (blocksPerSeq + 1),
      };
      const run = await withLLM(model, engine, async (llm): Promise<BatchRun> => {
        progress(`roofline on ${threads} thread(s)`);
        const c = llm.config;
        const roofline: Roofline = withScratchBackend(threads, (cpu) => ({
          bandwidthGBps: measureStreamBandwidth(cpu, o.reps, o.streamBytes),
          matmulGflops: measureMatmulGflops(cpu, c.hiddenDim, c.dim, ROOFLINE_TOKENS, o.reps),
          matmulShape: [c.hiddenDim, c.dim],
        }));
        // Warm the engine's code paths once (JIT tiers), so each batch size needs no warm-up repetition of its own.
        await measureBatch(llm, { ...o, numSeqs: Math.min(4, maxSeqs), steps: 2, warmupSteps: 0, warmup: 0, reps: 1 });
        const rows: BatchRow[] = [];
        for (const seqs of o.batchSizes) {
          progress(`${model.label}: ${seqs} sequence(s), ${threads} thread(s)`);
          const m = await measureBatch(llm, { ...o, numSeqs: seqs, seed: o.seed + seqs });
          const tps = m.decodeTokensPerSecond.median;
          const weightGflops = (2 * model.matmulParams * tps) / 1e9;
          // Ceilings are the best repetition: interference from other processes only ever slows one.
          const gflopsCeiling = roofline.matmulGflops.max;
          rows.push({
            seqs,
            decodeTokensPerSecond: m.decodeTokensPerSecond,
            prefillTokensPerSecond: m.prefillTokensPerSecond,
            meanBatch: m.meanBatch,
            vsSingle: Number.NaN,
            weightGflops,
            fractionOfMatmul: weightGflops / gflopsCeiling,
            bandwidthLimitTokensPerSecond: (seqs * roofline.bandwidthGBps.max * 1e9) / model.bytesPerToken,
            computeLimitTokensPerSecond: (gflopsCeiling * 1e9) / (2 * model.matmulParams),
          });
        }
        const single = rows.find((r) => r.seqs === 1);
        for (const r of rows) r.vsSingle = single ? ratio(r.decodeTokensPerSecond, single.decodeTokensPerSecond) : Number.NaN;
        return { model: model.label, threads, matmulParams: model.matmulParams, bytesPerToken: model.bytesPerToken, roofline, rows };
      });
      runs.push(run);
    }
    if (o.gpu !== null) webgpu.push(await gpuBatch(o, o.gpu, model, runs.filter((r) => r.model === model.label), { blockSize: BLOCK_SIZE, maxNumSeqs: maxSeqs, maxNumBatchedTokens: budget, numBlocks: maxSeqs * (blocksPerSeq + 1) }));
  }
  return { promptTokens: o.promptTokens, steps: o.steps, runs, webgpu };
}

/** The same batches on WebGPU, each against the WebAssembly run of the most threads at the same batch size. */
async function gpuBatch(o: BatchBenchOptions, gpu: BenchGpu, model: BenchModel, wasmRuns: readonly BatchRun[], engine: Partial<EngineOptions>): Promise<GpuBatch> {
  const refused = gpuRefusal(model);
  if (refused !== null) return { model: model.label, adapter: gpu.adapter, refused };
  const wasm = wasmRuns.reduce((a, b) => (b.threads > a.threads ? b : a));
  return await withLLM(model, { ...engine, threads: 1 }, async (llm): Promise<GpuBatch> => {
    const rows: GpuRow[] = [];
    await measureBatch(llm, { ...o, numSeqs: Math.min(4, Math.max(...o.batchSizes)), steps: 2, warmupSteps: 0, warmup: 0, reps: 1 });
    for (const seqs of o.batchSizes) {
      progress(`${model.label}: ${seqs} sequence(s) on WebGPU (${gpu.adapter})`);
      const m = await measureBatch(llm, { ...o, numSeqs: seqs, seed: o.seed + seqs });
      const w = wasm.rows.find((r) => r.seqs === seqs)!;
      rows.push({ label: `${seqs} seqs`, value: m.decodeTokensPerSecond, wasm: w.decodeTokensPerSecond, wasmThreads: wasm.threads, vsWasm: ratio(m.decodeTokensPerSecond, w.decodeTokensPerSecond) });
    }
    return { model: model.label, adapter: gpu.adapter, software: gpu.software, rows };
  }, gpu.backend);
}

/** The figures --compare matches: aggregate decode and prefill tokens/s at each batch size, and the roofline. */
export function batchFigures(r: BatchResult): Figure[] {
  // Documents written before the WebGPU path have no webgpu field.
  const gpu = (r.webgpu ?? []).flatMap((g) => ("rows" in g ? g.rows.flatMap((x) => figure(`${g.model}, webgpu, ${x.label}: decode tokens/s`, x.value, "tokens/s")) : []));
  return [...gpu, ...r.runs.flatMap((run) => {
    const at = `${run.model}, ${threadsLabel(run.threads)}`;
    return [
      ...figure(`${at}: stream GB/s`, run.roofline.bandwidthGBps, "GB/s"),
      ...figure(`${at}: matmul T=${ROOFLINE_TOKENS} GFLOP/s`, run.roofline.matmulGflops, "GFLOP/s"),
      ...run.rows.flatMap((x) => [
        ...figure(`${at}, ${x.seqs} seqs: decode tokens/s`, x.decodeTokensPerSecond, "tokens/s"),
        ...figure(`${at}, ${x.seqs} seqs: prefill tokens/s`, x.prefillTokensPerSecond, "tokens/s"),
      ]),
    ];
  })];
}

export function batchTables(r: BatchResult): Table[] {
  const tables: Table[] = r.runs.map((run) => ({
    title:
      `${run.model}, ${run.threads} thread(s): steady-state decode, ${r.steps} timed steps per repetition; ` +
      `roofline (best repetition): stream ${fmt(run.roofline.bandwidthGBps.max)} GB/s, matmul T=${ROOFLINE_TOKENS} ` +
      `${run.roofline.matmulShape.join("x")} ${fmt(run.roofline.matmulGflops.max)} GFLOP/s; median (min-max)`,
    columns: ["seqs", "decode tokens/s", "vs 1 seq", "weight GFLOP/s", "of matmul", "bandwidth limit", "compute limit", `prefill tokens/s (seqs x ${r.promptTokens})`],
    rows: run.rows.map((x) => [
      fmtSeqs(x), fmtSpread(x.decodeTokensPerSecond), fmtRatio(x.vsSingle), fmt(x.weightGflops), fmtPct(x.fractionOfMatmul),
      fmt(x.bandwidthLimitTokensPerSecond), fmt(x.computeLimitTokensPerSecond), fmtSpread(x.prefillTokensPerSecond),
    ]),
  }));
  const headline = r.runs.flatMap((run) => run.rows.filter((x) => x.seqs === HEADLINE_BATCH).map((x) => [
    run.model, String(run.threads), fmtSpread(x.decodeTokensPerSecond), fmtRatio(x.vsSingle), fmtPct(x.fractionOfMatmul),
  ]));
  if (headline.length > 0) {
    tables.push({
      title: `at ${HEADLINE_BATCH} sequences: throughput vs single-sequence decode, and fraction of the matmul kernel's GFLOP/s (2 x params x tokens)`,
      columns: ["model", "threads", "decode tokens/s", "vs 1 seq", "of matmul GFLOP/s"],
      rows: headline,
    });
  }
  for (const g of r.webgpu ?? []) if ("rows" in g) tables.push(gpuTable("decode tokens/s", g.model, g.adapter, g.software, g.rows));
  return tables;
}

/** The batch size, flagged when sequences stopped early (sampled a stop token) and the mean batch fell short. */
function fmtSeqs(x: BatchRow): string {
  return x.meanBatch < x.seqs - 0.05 ? `${x.seqs} (mean ${x.meanBatch.toFixed(1)})` : String(x.seqs);
}
