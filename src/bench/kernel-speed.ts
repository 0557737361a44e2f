/**
 * `pagellm bench kernels`: the f32 matrix kernels against a plain scalar loop and against the
 * machine's streaming-read bandwidth, all in the same run, then a whole model's decode speed.
 */
import { CpuBackend } from "../backend/wasm/cpu.ts";
import { measureDecode, withLLM } from "./engine-runs.ts";
import { rateSummary, ratio, type RepeatOptions, type Summary } from "./measure.ts";
import type { BenchModel } from "./bench-models.ts";
import { figure, fmt, fmtRatio, fmtSpread, progress, threadsLabel, type Figure, type Table } from "./bench-report.ts";
import { allocMatrix, matmulGflops, measureStreamBandwidth, timeMatmul, timeScalarMatvec } from "./roofline.ts";

/** Matrix shapes, n x d = rows x cols: the stories15M and stories110M projections. */
export const KERNEL_SHAPES: readonly (readonly [number, number])[] = [[288, 288], [768, 768], [768, 2048], [2048, 768]];
/** Token counts of the matrix-matrix kernel (a batched decode step, a prefill chunk). */
export const MATMUL_TOKENS: readonly number[] = [16, 64];

export interface KernelsOptions extends RepeatOptions {
  threads: number[];
  shapes: readonly (readonly [number, number])[];
  streamBytes: number;
  /** The model whose decode speed closes the report. */
  model: BenchModel;
  decodeTokens: number;
  seed: number;
}

export interface MatvecResult {
  n: number;
  d: number;
  /** matmulF32 with T = 1 on the packed matrix, one thread. */
  kernelGflops: Summary;
  kernelGBps: Summary;
  /** matvecScalarF32 on the same matrix, row-major. */
  scalarGflops: Summary;
  scalarGBps: Summary;
  /** kernel / scalar (medians). */
  speedup: number;
}

export interface MatmulResult {
  n: number;
  d: number;
  tokens: number;
  threads: number;
  gflops: Summary;
}

export interface StreamResult {
  threads: number;
  bytes: number;
  gbps: Summary;
  /** Against the first thread count measured. */
  vsFirst: number;
}

export interface ModelDecodeResult {
  model: string;
  threads: number;
  tokensPerSecond: Summary;
  vsFirst: number;
}

export interface KernelsResult {
  matvec: MatvecResult[];
  matmul: MatmulResult[];
  stream: StreamResult[];
  decode: ModelDecodeResult[];
}

export async function runKernelsBench(o: KernelsOptions): Promise<KernelsResult> {
  const single = new CpuBackend(1);
  const matvec: MatvecResult[] = [];
  try {
    for (const [n, d] of o.shapes) {
      progress(`matrix-vector ${n}x${d}`);
      const m = allocMatrix(single, n, d);
      const kernel = timeMatmul(single, m, 1, o.reps);
      const scalar = timeScalarMatvec(single, m, o.reps);
      const bytes = (4 * n * d) / 1e9;
      const r: MatvecResult = {
        n, d,
        kernelGflops: matmulGflops(kernel, n, d, 1),
        kernelGBps: rateSummary(kernel, bytes),
        scalarGflops: matmulGflops(scalar, n, d, 1),
        scalarGBps: rateSummary(scalar, bytes),
        speedup: 0,
      };
      r.speedup = ratio(r.kernelGflops, r.scalarGflops);
      matvec.push(r);
    }
  } finally {
    single.close();
  }

  const matmul: MatmulResult[] = [];
  const stream: StreamResult[] = [];
  for (const threads of o.threads) {
    const backend = new CpuBackend(threads);
    try {
      for (const [n, d] of o.shapes) {
        progress(`matrix-matrix ${n}x${d}, ${threads} thread(s)`);
        const m = allocMatrix(backend, n, d);
        for (const T of MATMUL_TOKENS) matmul.push({ n, d, tokens: T, threads, gflops: matmulGflops(timeMatmul(backend, m, T, o.reps), n, d, T) });
      }
      progress(`streaming read of ${(o.streamBytes / 2 ** 20).toFixed(0)} MiB, ${threads} thread(s)`);
      const gbps = measureStreamBandwidth(backend, o.reps, o.streamBytes);
      stream.push({ threads, bytes: o.streamBytes, gbps, vsFirst: stream.length === 0 ? 1 : ratio(gbps, stream[0]!.gbps) });
    } finally {
      backend.close();
    }
  }

  const decode: ModelDecodeResult[] = [];
  for (const threads of o.threads) {
    progress(`decode of ${o.model.label}, ${threads} thread(s)`);
    const tps = await withLLM(o.model, { threads }, async (llm) =>
      (await measureDecode(llm, { warmup: o.warmup, reps: o.reps, promptTokens: 8, genTokens: o.decodeTokens, seed: o.seed })).tokensPerSecond,
    );
    decode.push({ model: o.model.label, threads, tokensPerSecond: tps, vsFirst: decode.length === 0 ? 1 : ratio(tps, decode[0]!.tokensPerSecond) });
  }
  return { matvec, matmul, stream, decode };
}

export function kernelsTables(r: KernelsResult): Table[] {
  const firstThreads = r.stream[0]?.threads ?? 1;
  return [
    {
      title: "f32 matrix-vector (T=1, one thread): packed SIMD kernel vs plain scalar loop on the same matrix; median (min-max)",
      columns: ["n x d", "MiB", "kernel GFLOP/s", "kernel GB/s", "scalar GFLOP/s", "scalar GB/s", "speedup"],
      rows: r.matvec.map((m) => [
        `${m.n}x${m.d}`, fmt((4 * m.n * m.d) / 2 ** 20), fmtSpread(m.kernelGflops), fmtSpread(m.kernelGBps), fmtSpread(m.scalarGflops), fmtSpread(m.scalarGBps), fmtRatio(m.speedup),
      ]),
    },
    {
      title: "f32 matrix-matrix (matmulF32, T tokens): GFLOP/s, median (min-max)",
      columns: ["n x d", "threads", ...MATMUL_TOKENS.map((T) => `T=${T}`)],
      rows: groupMatmul(r.matmul).map(({ n, d, threads, byT }) => [
        `${n}x${d}`, String(threads), ...MATMUL_TOKENS.map((T) => (byT.has(T) ? fmtSpread(byT.get(T)!) : "-")),
      ]),
    },
    {
      title: "memory bandwidth: streaming read (streamSumF32), median (min-max)",
      columns: ["threads", "MiB", "GB/s", `vs ${firstThreads} thread(s)`],
      rows: r.stream.map((s) => [String(s.threads), String(Math.round(s.bytes / 2 ** 20)), fmtSpread(s.gbps), fmtRatio(s.vsFirst)]),
    },
    {
      title: "whole-model decode (one sequence, greedy), median (min-max)",
      columns: ["model", "threads", "tokens/s", `vs ${r.decode[0]?.threads ?? 1} thread(s)`],
      rows: r.decode.map((x) => [x.model, String(x.threads), fmtSpread(x.tokensPerSecond), fmtRatio(x.vsFirst)]),
    },
  ];
}

/** The figures --compare matches: kernel and scalar GFLOP/s, matmul GFLOP/s, stream GB/s, decode tokens/s. */
export function kernelsFigures(r: KernelsResult): Figure[] {
  return [
    ...r.matvec.flatMap((m) => [
      ...figure(`matvec ${m.n}x${m.d}, 1 thread: kernel GFLOP/s`, m.kernelGflops, "GFLOP/s"),
      ...figure(`matvec ${m.n}x${m.d}, 1 thread: scalar GFLOP/s`, m.scalarGflops, "GFLOP/s"),
    ]),
    ...r.matmul.flatMap((m) => figure(`matmul ${m.n}x${m.d} T=${m.tokens}, ${threadsLabel(m.threads)}: GFLOP/s`, m.gflops, "GFLOP/s")),
    ...r.stream.flatMap((s) => figure(`stream ${Math.round(s.bytes / 2 ** 20)} MiB, ${threadsLabel(s.threads)}: GB/s`, s.gbps, "GB/s")),
    ...r.decode.flatMap((x) => figure(`${x.model}, ${threadsLabel(x.threads)}: decode tokens/s`, x.tokensPerSecond, "tokens/s")),
  ];
}

/** Why a small matrix can read faster than memory streams. */
export function kernelsNotes(r: KernelsResult): string[] {
  const cached = r.matvec.filter((m) => r.stream.length > 0 && m.kernelGBps.median > Math.max(...r.stream.map((s) => s.gbps.max)));
  return cached.length === 0
    ? []
    : [`${cached.map((m) => `${m.n}x${m.d}`).join(", ")}: faster than the streaming read because the matrix stays in cache between repetitions`];
}

function groupMatmul(rows: MatmulResult[]): { n: number; d: number; threads: number; byT: Map<number, Summary> }[] {
  const groups = new Map<string, { n: number; d: number; threads: number; byT: Map<number, Summary> }>();
  for (const m of rows) {
    const key = `${m.n}x${m.d}@${m.threads}`;
    let g = groups.get(key);
    if (!g) groups.set(key, (g = { n: m.n, d: m.d, threads: m.threads, byT: new Map() }));
    g.byT.set(m.tokens, m.gflops);
  }
  return [...groups.values()];
}
