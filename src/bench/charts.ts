/**
 * Which charts a run's results make (`--chart FILE.svg`): decode and prefill tokens/s against
 * threads next to the bandwidth and compute limits measured in the same run, tokens/s per tensor
 * type, aggregate throughput against batch size next to the roofline, TTFT against the cached
 * fraction of the prompt, and the kernels against the scalar loop. Drawing is chart-svg.ts's job.
 */
import type { ModelMix } from "../synth/gguf-model-writer.ts";
import type { BatchResult, BatchRun } from "./batch-decode.ts";
import { chartDocument, type BarChart, type Chart, type LineChart, type LineSeries } from "./chart-svg.ts";
import type { DecodeResult } from "./decode.ts";
import type { KernelsResult } from "./kernel-speed.ts";
import { machineLine } from "./machine.ts";
import type { PrefillResult } from "./prefill.ts";
import type { PrefixResult } from "./prefix.ts";
import { serveCharts } from "./serve/serve-report.ts";
import { threadScalingCharts } from "./thread-scaling.ts";
import { shortDate, threadsLabel } from "./bench-report.ts";
import { decodeResultsOf, prefillResultsOf, reportsOf, type AnyBenchReport, type BenchDocument } from "./schema.ts";

/** A model's name on a chart: its tensor type when every model has the same shape, else its label. */
function namer(models: readonly { model: string; gguf?: { shape: string; mix: ModelMix } }[]): (m: { model: string; gguf?: { mix: string } }) => string {
  const shapes = new Set(models.map((m) => m.gguf?.shape ?? m.model));
  return (m) => (shapes.size === 1 && m.gguf !== undefined ? m.gguf.mix : m.model);
}

function sortedThreads(rows: readonly { threads: number }[][]): number[] {
  return [...new Set(rows.flatMap((r) => r.map((x) => x.threads)))].sort((a, b) => a - b);
}

function shapeOf(m: { model: string; gguf?: { shape: string } }): string {
  return m.gguf?.shape ?? m.model;
}

export function decodeThreadsChart(models: readonly DecodeResult[]): LineChart {
  const name = namer(models);
  const series: LineSeries[] = models.flatMap((m, i) => [
    { name: `${name(m)} decode`, color: i, points: m.rows.map((x) => ({ x: x.threads, y: x.tokensPerSecond.median })) },
    { name: `${name(m)} bandwidth limit`, color: i, dashed: true, points: m.rows.map((x) => ({ x: x.threads, y: x.limitTokensPerSecond })) },
  ]);
  const shapes = [...new Set(models.map(shapeOf))];
  return {
    kind: "line", title: `Decode tokens/s, one sequence (${shapes.join(", ")})`, xLabel: "threads", yLabel: "tokens/s",
    xScale: "linear", xTicks: sortedThreads(models.map((m) => m.rows)), series,
  };
}

/** Prefill tokens/s next to the compute limit, one limit per shape (the best of its models' measurements). */
export function prefillThreadsChart(models: readonly PrefillResult[]): LineChart {
  const name = namer(models);
  const series: LineSeries[] = models.map((m, i) => ({
    name: `${name(m)} prefill`, color: i, points: m.rows.map((x) => ({ x: x.threads, y: x.prefillTokensPerSecond.median })),
  }));
  const shapes = [...new Set(models.map(shapeOf))];
  shapes.forEach((shape, si) => {
    const group = models.filter((m) => shapeOf(m) === shape);
    const threads = sortedThreads(group.map((m) => m.rows));
    const points = threads.map((t) => ({ x: t, y: Math.max(...group.flatMap((m) => m.rows.filter((x) => x.threads === t).map((x) => x.computeLimitTokensPerSecond))) }));
    series.push({ name: shapes.length === 1 ? "compute limit (f32 matmul)" : `${shape} compute limit`, color: models.length + si, dashed: true, points });
  });
  const prompt = [...new Set(models.map((m) => m.promptTokens))].join("/");
  return {
    kind: "line", title: `Prefill tokens/s, one ${prompt}-token prompt (${shapes.join(", ")})`, xLabel: "threads", yLabel: "tokens/s",
    xScale: "linear", xTicks: sortedThreads(models.map((m) => m.rows)), series,
  };
}

interface ModelRows<R> {
  model: string;
  gguf?: { shape: string; mix: ModelMix };
  rows: R[];
}

/** One bar series per thread count: `value` of each category's model at that count. */
function typeSeries<R extends { threads: number }>(
  what: string, list: readonly ModelRows<R>[], categories: readonly string[], name: (m: ModelRows<R>) => string, value: (row: R) => number,
): BarChart["series"] {
  return sortedThreads(list.map((m) => m.rows)).map((t) => ({
    name: `${what}, ${threadsLabel(t)}`,
    values: categories.map((c) => {
      const row = list.find((m) => name(m) === c)?.rows.find((x) => x.threads === t);
      return row === undefined ? null : value(row);
    }),
  }));
}

/** Tokens/s of each tensor type (of one shape, or each model), decode and prefill at each thread count. */
export function typesChart(decode: readonly DecodeResult[], prefill: readonly PrefillResult[]): BarChart {
  const all = [...decode, ...prefill];
  const name = namer(all);
  const categories = [...new Set(all.map(name))];
  const series = [
    ...typeSeries("decode", decode, categories, name, (row) => row.tokensPerSecond.median),
    ...typeSeries("prefill", prefill, categories, name, (row) => row.prefillTokensPerSecond.median),
  ];
  const shapes = [...new Set(all.map(shapeOf))];
  return { kind: "bar", title: `Tokens/s per tensor type (${shapes.join(", ")})`, yLabel: "tokens/s", categories, series };
}

/** Aggregate decode tokens/s against sequences decoding together, under the roofline min(bandwidth, compute). */
export function batchChart(r: BatchResult): LineChart {
  const models = [...new Set(r.runs.map((run) => run.model))];
  // One model: it goes in the title and the legend names thread counts only.
  const name = (run: BatchRun) => (models.length === 1 ? threadsLabel(run.threads) : `${run.model}, ${threadsLabel(run.threads)}`);
  const series: LineSeries[] = r.runs.flatMap((run, i) => [
    { name: `decode, ${name(run)}`, color: i, points: run.rows.map((x) => ({ x: x.seqs, y: x.decodeTokensPerSecond.median })) },
    {
      name: `roofline, ${name(run)}`, color: i, dashed: true,
      points: run.rows.map((x) => ({ x: x.seqs, y: Math.min(x.bandwidthLimitTokensPerSecond, x.computeLimitTokensPerSecond) })),
    },
  ]);
  const seqs = [...new Set(r.runs.flatMap((run) => run.rows.map((x) => x.seqs)))].sort((a, b) => a - b);
  return {
    kind: "line", title: `Aggregate decode tokens/s against batch size${models.length === 1 ? ` (${models[0]})` : ""}`, xLabel: "sequences decoding together (log scale)", yLabel: "tokens/s",
    xScale: "log2", xTicks: seqs, series,
  };
}

/** TTFT against the fraction of the prompt already cached, with the cache-off TTFT as a reference line. */
export function ttftChart(r: PrefixResult): LineChart {
  const points = r.ttftByCachedFraction.map((p) => ({ x: 100 * p.cachedFraction, y: p.ttftMs.median }));
  const series: LineSeries[] = [{ name: "TTFT, prefix cache on", color: 0, points }];
  const prompt = r.ttftByCachedFraction[0]?.promptTokens;
  if (prompt === r.ttft.promptTokens && points.length > 0) {
    const xs = points.map((p) => p.x);
    series.push({ name: "cache off", color: 2, dashed: true, points: [Math.min(...xs), Math.max(...xs)].map((x) => ({ x, y: r.ttft.uncachedMs.median })) });
  }
  return {
    kind: "line", title: `Time to first token of a ${prompt ?? "?"}-token prompt (${r.model}, ${threadsLabel(r.threads)})`,
    xLabel: "prompt tokens already cached (%)", yLabel: "TTFT ms", xScale: "linear", xTicks: [0, 25, 50, 75, 100], xTickLabel: (x) => `${x}%`, series,
  };
}

export function kernelsChart(r: KernelsResult): BarChart {
  return {
    kind: "bar", title: "f32 matrix-vector GFLOP/s, one thread: SIMD kernel vs scalar loop", yLabel: "GFLOP/s",
    categories: r.matvec.map((m) => `${m.n}x${m.d}`),
    series: [
      { name: "packed SIMD kernel", values: r.matvec.map((m) => m.kernelGflops.median) },
      { name: "scalar loop", values: r.matvec.map((m) => m.scalarGflops.median) },
    ],
  };
}

/** Every chart the reports make, in the order a reader wants them. */
export function chartsOf(reports: readonly AnyBenchReport[]): Chart[] {
  const decode: DecodeResult[] = [];
  const prefill: PrefillResult[] = [];
  const rest: Chart[] = [];
  for (const report of reports) {
    if (report.bench === "decode") decode.push(...decodeResultsOf(report.results));
    else if (report.bench === "prefill") prefill.push(...prefillResultsOf(report.results));
    else if (report.bench === "batch") rest.push(batchChart(report.results));
    else if (report.bench === "prefix") rest.push(ttftChart(report.results));
    else if (report.bench === "serve") rest.push(...serveCharts(report.results));
    else if (report.bench === "kernels") rest.push(kernelsChart(report.results));
    else if (report.bench === "threads") rest.push(...threadScalingCharts(report.results));
    // prefix-restart: two TTFTs and two read speeds, its table says it all; no chart.
  }
  const charts: Chart[] = [];
  if (decode.length > 0) charts.push(decodeThreadsChart(decode));
  if (prefill.length > 0) charts.push(prefillThreadsChart(prefill));
  const typed = [...decode, ...prefill].filter((m) => m.gguf !== undefined);
  if (new Set(typed.map((m) => m.gguf!.mix)).size > 1) charts.push(typesChart(decode.filter((m) => m.gguf), prefill.filter((m) => m.gguf)));
  return [...charts, ...rest];
}

/** The SVG document of a run: its charts under a heading naming the bench, and the machine line. */
export function chartSvg(doc: BenchDocument): string {
  const heading = doc.bench === "all" ? `pagellm bench all (${String(doc.settings.shape)})` : `pagellm bench ${doc.bench}`;
  return chartDocument(chartsOf(reportsOf(doc)), heading, machineLine(doc.machine, shortDate(doc.date)));
}
