/**
 * `pagellm bench prefill`: how fast a long prompt is read. Prefill multiplies every weight by
 * many tokens at once, so per token it should beat decode (one token per weight read) by a wide
 * margin; the bar is 3.5x for a 512-token prompt. Measured as the time to first token of
 * a single request with the prefix cache off and a step budget that holds the whole prompt.
 */
import type { KVType } from "../kv/kv-layout.ts";
import { measureDecode, measureTtft, withLLM } from "./engine-runs.ts";
import { ratio, summarize, type RepeatOptions, type Summary } from "./measure.ts";
import type { BenchModel } from "./bench-models.ts";
import type { ModelMix } from "../synth/gguf-model-writer.ts";
import { figure, fmt, fmtPct, fmtRatio, fmtSpread, progress, threadsLabel, type Figure, type Table } from "./bench-report.ts";
import { measureMatmulGflops, withScratchBackend } from "./roofline.ts";
import { peerTable, type LlamaCppPeer, type PeerFigure } from "./peer.ts";
import { TokenSource } from "./token-source.ts";
import { gpuRefusal, gpuTable, type BenchGpu, type GpuRow } from "./webgpu.ts";

/** The bar this bench checks: prefill per token at least this many times faster than decode per token. */
export const PREFILL_VS_DECODE_TARGET = 3.5;
/** Tokens of the matrix-matrix kernel measurement that bounds prefill: a prefill chunk. */
export const PREFILL_ROOFLINE_TOKENS = 64;

export interface PrefillOptions extends RepeatOptions {
  threads: number[];
  /** The KV cache type (null: the model's default). */
  kvType: KVType | null;
  model: BenchModel;
  promptTokens: number;
  /** Tokens generated to measure decode per token in the same run. */
  decodeTokens: number;
  seed: number;
  /** llama.cpp (--peer-llama-bench, --peer-nlc): its prefill on the same GGUF file, at each thread count (null: none). */
  peer: LlamaCppPeer | null;
  /** WebGPU to measure next to WebAssembly (--device), or null. */
  gpu: BenchGpu | null;
}

/** Prefill on WebGPU against WebAssembly's, or why the model has none. */
export type GpuPrefill = { adapter: string; software: boolean; row: GpuRow; ttftMs: Summary } | { adapter: string; refused: string };

export interface PrefillRow {
  threads: number;
  ttftMs: Summary;
  prefillTokensPerSecond: Summary;
  decodeMsPerToken: Summary;
  /** decode ms per token / prefill ms per token (medians): how much faster a prompt token is. */
  prefillVsDecode: number;
  /** prefill tokens/s against the first thread count. */
  vsFirst: number;
  /** matmulF32 GFLOP/s at T = 64 on the model's hidden x dim matrix, on the engine's threads. */
  matmulGflops: Summary;
  /**
   * The compute limit: matmul GFLOP/s (best repetition) / (2 · params), what prefill would reach
   * if every weight product ran at the f32 kernel's speed and attention cost nothing.
   */
  computeLimitTokensPerSecond: number;
  /** prefill tokens/s (median) / that limit. */
  fractionOfLimit: number;
  /** llama.cpp's prefill tokens/s of a prompt as long, and ours / its (when a peer was given). */
  peer: PeerFigure | null;
}

/** One model's prefill at each thread count: `results` of `bench prefill` with one model. */
export interface PrefillResult {
  model: string;
  /** Shape and tensor type of a random GGUF model (--type, --f32-baseline); absent for other models. */
  gguf?: { shape: string; mix: ModelMix };
  /** Weight parameters a token multiplies (2 · this = the weight FLOPs per token). */
  matmulParams: number;
  promptTokens: number;
  target: number;
  rows: PrefillRow[];
  webgpu: GpuPrefill | null;
}

export async function runPrefillBench(o: PrefillOptions): Promise<PrefillResult> {
  const rows: PrefillRow[] = [];
  for (const threads of o.threads) {
    progress(`prefill of ${o.promptTokens} tokens on ${o.model.label}, ${threads} thread(s)`);
    const engine = { threads, enablePrefixCaching: false, maxNumBatchedTokens: Math.max(512, o.promptTokens), kvType: o.kvType };
    const row = await withLLM(o.model, engine, async (llm): Promise<PrefillRow> => {
      const source = new TokenSource(o.seed, llm.config.vocabSize);
      const ttft = await measureTtft(llm, o, () => source.prompt(o.promptTokens));
      const decode = await measureDecode(llm, { ...o, promptTokens: 8, genTokens: o.decodeTokens });
      const c = llm.config;
      const matmulGflops = withScratchBackend(threads, (cpu) => measureMatmulGflops(cpu, c.hiddenDim, c.dim, PREFILL_ROOFLINE_TOKENS, o.reps));
      const ttftMs = summarize(ttft);
      const prefillMsPerToken = ttftMs.median / o.promptTokens;
      const prefillTokensPerSecond = summarize(ttft.map((ms) => (1000 * o.promptTokens) / ms));
      // A ceiling is the best repetition: interference from other processes only ever slows one.
      const computeLimitTokensPerSecond = (matmulGflops.max * 1e9) / (2 * o.model.matmulParams);
      return {
        threads, ttftMs, prefillTokensPerSecond,
        decodeMsPerToken: decode.msPerToken,
        prefillVsDecode: decode.msPerToken.median / prefillMsPerToken,
        vsFirst: 1, matmulGflops, computeLimitTokensPerSecond,
        fractionOfLimit: prefillTokensPerSecond.median / computeLimitTokensPerSecond, peer: null,
      };
    });
    if (o.peer !== null) {
      progress(`prefill of ${o.promptTokens} tokens on ${o.model.label} by llama.cpp, ${threads} thread(s)`);
      const peer = o.peer.run({
        model: o.model.path, threads, mode: "prefill", promptTokens: o.promptTokens, genTokens: 1,
        warmup: o.warmup, reps: o.reps, vocabSize: o.model.config.vocabSize, seed: o.seed, kvType: o.kvType,
      });
      row.peer = { ...peer, ratio: ratio(row.prefillTokensPerSecond, peer.tokensPerSecond) };
    }
    row.vsFirst = rows.length === 0 ? 1 : ratio(row.prefillTokensPerSecond, rows[0]!.prefillTokensPerSecond);
    rows.push(row);
  }
  const webgpu = o.gpu === null ? null : await gpuPrefill(o, o.gpu, rows);
  return { model: o.model.label, gguf: o.model.gguf, matmulParams: o.model.matmulParams, promptTokens: o.promptTokens, target: PREFILL_VS_DECODE_TARGET, rows, webgpu };
}

/** The same prefill on WebGPU, against the WebAssembly row of the most threads. */
async function gpuPrefill(o: PrefillOptions, gpu: BenchGpu, rows: readonly PrefillRow[]): Promise<GpuPrefill> {
  const refused = gpuRefusal(o.model);
  if (refused !== null) return { adapter: gpu.adapter, refused };
  progress(`prefill of ${o.promptTokens} tokens on ${o.model.label} on WebGPU (${gpu.adapter})`);
  const engine = { threads: 1, enablePrefixCaching: false, maxNumBatchedTokens: Math.max(512, o.promptTokens), kvType: o.kvType };
  return await withLLM(o.model, engine, async (llm): Promise<GpuPrefill> => {
    const source = new TokenSource(o.seed, llm.config.vocabSize);
    const ttft = await measureTtft(llm, o, () => source.prompt(o.promptTokens));
    const value = summarize(ttft.map((ms) => (1000 * o.promptTokens) / ms));
    const wasm = rows.reduce((a, b) => (b.threads > a.threads ? b : a));
    return {
      adapter: gpu.adapter, software: gpu.software, ttftMs: summarize(ttft),
      row: { label: `${o.promptTokens}-token prompt`, value, wasm: wasm.prefillTokensPerSecond, wasmThreads: wasm.threads, vsWasm: ratio(value, wasm.prefillTokensPerSecond) },
    };
  }, gpu.backend);
}

/** The figures --compare matches: TTFT, prefill tokens/s, prefill vs decode per token, matmul GFLOP/s, WebGPU's prefill tokens/s. */
export function prefillFigures(r: PrefillResult): Figure[] {
  // Documents written before the WebGPU path have no webgpu field.
  const g = r.webgpu ?? null;
  const gpu = g !== null && "row" in g ? figure(`${r.model}, ${r.promptTokens}-token prompt, webgpu: prefill tokens/s`, g.row.value, "tokens/s") : [];
  return [...gpu, ...r.rows.flatMap((x) => {
    const at = `${r.model}, ${r.promptTokens}-token prompt, ${threadsLabel(x.threads)}`;
    return [
      ...figure(`${at}: TTFT ms`, x.ttftMs, "ms", "lower"),
      ...figure(`${at}: prefill tokens/s`, x.prefillTokensPerSecond, "tokens/s"),
      ...figure(`${at}: prefill/decode speed per token`, x.prefillVsDecode, "x"),
      ...figure(`${at}: matmul T=${PREFILL_ROOFLINE_TOKENS} GFLOP/s`, x.matmulGflops, "GFLOP/s"),
      ...(x.peer === null ? [] : figure(`${at}: prefill vs llama.cpp`, x.peer.ratio, "x")),
    ];
  })];
}

export function prefillTables(r: PrefillResult): Table[] {
  const tables: Table[] = [{
    title:
      `prefill of one ${r.promptTokens}-token prompt on ${r.model} (prefix cache off) vs the compute limit ` +
      `(f32 matmul T=${PREFILL_ROOFLINE_TOKENS} GFLOP/s, best repetition, / 2 x params); median (min-max)`,
    columns: [
      "threads", "TTFT ms", "prefill tokens/s", `vs ${r.rows[0]?.threads ?? 1} thread(s)`, "compute limit", "of limit", "decode ms/token", "prefill ms/token",
      `prefill/decode speed (target >= ${r.target}x)`,
    ],
    rows: r.rows.map((x) => [
      String(x.threads), fmtSpread(x.ttftMs), fmtSpread(x.prefillTokensPerSecond), fmtRatio(x.vsFirst),
      fmt(x.computeLimitTokensPerSecond), fmtPct(x.fractionOfLimit),
      fmtSpread(x.decodeMsPerToken), fmt(x.ttftMs.median / r.promptTokens), fmtRatio(x.prefillVsDecode),
    ]),
  }];
  const g = r.webgpu ?? null;
  if (g !== null && "row" in g) tables.push(gpuTable("prefill tokens/s", r.model, g.adapter, g.software, [g.row]));
  if (r.rows.some((x) => x.peer !== null)) {
    tables.push(peerTable(`prefill of ${r.promptTokens} tokens on ${r.model}`, r.rows.map((x) => ({ threads: x.threads, ours: x.prefillTokensPerSecond, peer: x.peer }))));
  }
  return tables;
}
