/**
 * `pagellm bench decode`: single-sequence decode speed next to its memory-bandwidth limit. A
 * decode step multiplies one token by every weight matrix, so it must read all of them: at best
 * tokens/s = bandwidth / bytes of weights per token, with the bandwidth of a plain streaming read
 * measured in the same run, on the same threads.
 */
import { measureDecode, withLLM } from "./engine-runs.ts";
import { ratio, summarize, type RepeatOptions, type Summary } from "./measure.ts";
import type { BenchModel } from "./bench-models.ts";
import type { ModelMix } from "../synth/gguf-model-writer.ts";
import { figure, fmt, fmtPct, fmtRatio, fmtSpread, progress, threadsLabel, type Figure, type Table } from "./bench-report.ts";
import { measureStreamBandwidth, withScratchBackend } from "./roofline.ts";
import { peerTable, type LlamaCppPeer, type PeerFigure } from "./peer.ts";
import { runcTokensPerSecond } from "./runc.ts";
import { TokenSource } from "./token-source.ts";
import { runSpeculativeDecode, speculativeFigures, speculativeTable, type SpeculativeDecode } from "./speculative-decode.ts";
import type { SpeculativeOptions } from "../engine/speculative.ts";
import { kvContextFigures, kvContextTables, runKVContextBench, type KVContextResult } from "./kv-context.ts";
import { runStructuredDecode, structuredFigures, structuredTable, type StructuredDecode } from "./structured.ts";
import { runToolCallDecode, toolCallFigures, toolCallTable, type ToolCallDecode } from "./tool-call-cost.ts";
import { kvLayout, type KVType } from "../kv/kv-layout.ts";

/** Decode steps timed per repetition at a long context (one step is tens of milliseconds there). */
const KV_CONTEXT_STEPS = 4;
import { countDecodeStep, gpuCountsTable, gpuRefusal, gpuTable, type BenchGpu, type GpuRow, type GpuStepCounts } from "./webgpu.ts";

export interface DecodeOptions extends RepeatOptions {
  threads: number[];
  model: BenchModel;
  promptTokens: number;
  genTokens: number;
  streamBytes: number;
  seed: number;
  /** A llama2.c `run` binary to time on the same file, alternating with pagellm (null: none). */
  runc: string | null;
  /** llama.cpp (--peer-llama-bench, --peer-nlc): its decode on the same GGUF file, at each thread count (null: none). */
  peer: LlamaCppPeer | null;
  /** WebGPU to measure next to WebAssembly (--device), or null. */
  gpu: BenchGpu | null;
  /** --speculate: decode with and without speculation on three workloads at the first thread count, or null. */
  speculate: { options: SpeculativeOptions; storiesModel: string | null } | null;
  /** --json-schema: decode with this schema and without in the same run at the first thread count, or null. */
  jsonSchema: { text: string; name: string } | null;
  /** The KV cache type of the plain decode (null: the model's default). */
  kvType: KVType | null;
  /** Decode at long contexts for each KV type (--context, --kv-type), or null. */
  kvContext: { contexts: number[]; kvTypes: KVType[] } | null;
  /** --tools: decode with tool_choice auto and required against the same prompts plain, at the first thread count. */
  tools: boolean;
}

export interface DecodeRow {
  threads: number;
  tokensPerSecond: Summary;
  msPerToken: Summary;
  generatedTokens: number;
  /** Streaming-read bandwidth on the engine's own threads, GB/s. */
  bandwidthGBps: Summary;
  /** bandwidth (best repetition) / bytes per token. */
  limitTokensPerSecond: number;
  /** achieved (median) / limit. */
  fractionOfLimit: number;
  /** tokens/s against the first thread count. */
  vsFirst: number;
  /** llama2.c run's tokens/s at the same thread count, and ours / its (when --runc was given). */
  runc: { tokensPerSecond: Summary; ratio: number } | null;
  /** llama.cpp's tokens/s at the same thread count, and ours / its (when a peer was given). */
  peer: PeerFigure | null;
}

/** Decode on WebGPU: the figure against WebAssembly's, and the GPU work per step; or why the model has none. */
export type GpuDecode =
  | { adapter: string; software: boolean; row: GpuRow; msPerToken: Summary; perStep: GpuStepCounts }
  | { adapter: string; refused: string };

/** One model's decode at each thread count: `results` of `bench decode` with one model. */
export interface DecodeResult {
  model: string;
  /** Shape and tensor type of a random GGUF model (--type, --f32-baseline); absent for other models. */
  gguf?: { shape: string; mix: ModelMix };
  bytesPerToken: number;
  rows: DecodeRow[];
  webgpu: GpuDecode | null;
  /** With and without speculative decoding (--speculate); absent when not asked for. */
  speculative?: SpeculativeDecode;
  /** Decode at long contexts by KV cache type (--context); absent without it. */
  kvContext?: KVContextResult;
  /** With and without a JSON Schema constraint (--json-schema); absent when not asked for. */
  structured?: StructuredDecode;
  /** Tool-call parsing and constraint against plain decode (--tools); absent when not asked for. */
  toolCalls?: ToolCallDecode;
}

export async function runDecodeBench(o: DecodeOptions): Promise<DecodeResult> {
  // A KV type the model cannot take (q8_0 on heads that are not whole blocks) is refused before anything runs.
  for (const type of o.kvContext?.kvTypes ?? []) kvLayout(o.model.config, 16, type);
  const rows: DecodeRow[] = [];
  for (const threads of o.threads) {
    progress(`decode of ${o.model.label}, ${threads} thread(s)`);
    const row = await withLLM(o.model, { threads, kvType: o.kvType }, async (llm): Promise<DecodeRow> => {
      // With a baseline, ours and run alternate repetition by repetition, so both see the same machine.
      const runc = o.runc;
      const ours: Summary[] = [];
      const theirs: number[] = [];
      let d = await measureDecode(llm, o);
      if (runc !== null) {
        for (let r = 0; r < o.reps; r++) {
          theirs.push(runcTokensPerSecond(runc, o.model.path, o.model.tokenizer, o.promptTokens + o.genTokens, threads));
          d = await measureDecode(llm, { ...o, warmup: 0, reps: 1 });
          ours.push(d.tokensPerSecond);
        }
        const tps = summarize(ours.map((x) => x.median));
        d = { ...d, tokensPerSecond: tps, msPerToken: summarize(ours.map((x) => 1000 / x.median)) };
      }
      const bw = withScratchBackend(threads, (cpu) => measureStreamBandwidth(cpu, o.reps, o.streamBytes));
      // A ceiling is the best repetition: interference from other processes only ever slows one.
      const limit = (bw.max * 1e9) / o.model.bytesPerToken;
      const baseline = theirs.length === 0 ? null : summarize(theirs);
      return {
        threads, tokensPerSecond: d.tokensPerSecond, msPerToken: d.msPerToken, generatedTokens: d.generatedTokens,
        bandwidthGBps: bw, limitTokensPerSecond: limit, fractionOfLimit: d.tokensPerSecond.median / limit, vsFirst: 1,
        runc: baseline === null ? null : { tokensPerSecond: baseline, ratio: ratio(d.tokensPerSecond, baseline) }, peer: null,
      };
    });
    if (o.peer !== null) {
      progress(`decode of ${o.model.label} by llama.cpp, ${threads} thread(s)`);
      const peer = o.peer.run({
        model: o.model.path, threads, mode: "decode", promptTokens: o.promptTokens, genTokens: o.genTokens,
        warmup: o.warmup, reps: o.reps, vocabSize: o.model.config.vocabSize, seed: o.seed, kvType: o.kvType,
      });
      row.peer = { ...peer, ratio: ratio(row.tokensPerSecond, peer.tokensPerSecond) };
    }
    row.vsFirst = rows.length === 0 ? 1 : ratio(row.tokensPerSecond, rows[0]!.tokensPerSecond);
    rows.push(row);
  }
  const webgpu = o.gpu === null ? null : await gpuDecode(o, o.gpu, rows);
  const result: DecodeResult = { model: o.model.label, gguf: o.model.gguf, bytesPerToken: o.model.bytesPerToken, rows, webgpu };
  if (o.speculate !== null) {
    result.speculative = await runSpeculativeDecode(o.model, {
      warmup: o.warmup, reps: o.reps, threads: o.threads[0]!, speculative: o.speculate.options, genTokens: o.genTokens,
      promptTokens: o.promptTokens, seed: o.seed, storiesModel: o.speculate.storiesModel,
    });
  }
  if (o.jsonSchema !== null) {
    result.structured = await runStructuredDecode(o.model, {
      warmup: o.warmup, reps: o.reps, threads: o.threads[0]!, schema: o.jsonSchema, genTokens: o.genTokens, promptTokens: o.promptTokens, seed: o.seed,
    });
  }
  if (o.tools) result.toolCalls = await runToolCallDecode(o.model, { warmup: o.warmup, reps: o.reps, threads: o.threads[0]!, genTokens: o.genTokens });
  if (o.kvContext !== null) result.kvContext = await runKVContextBench({ ...o, ...o.kvContext, steps: KV_CONTEXT_STEPS });
  return result;
}

/** The same decode on WebGPU, against the WebAssembly row of the most threads. */
async function gpuDecode(o: DecodeOptions, gpu: BenchGpu, rows: readonly DecodeRow[]): Promise<GpuDecode> {
  const refused = gpuRefusal(o.model);
  if (refused !== null) return { adapter: gpu.adapter, refused };
  progress(`decode of ${o.model.label} on WebGPU (${gpu.adapter})`);
  return await withLLM(o.model, { threads: 1, kvType: o.kvType }, async (llm): Promise<GpuDecode> => {
    const d = await measureDecode(llm, o);
    const perStep = await countDecodeStep(llm, gpu, new TokenSource(o.seed, llm.config.vocabSize).prompt(o.promptTokens), 4);
    const wasm = rows.reduce((a, b) => (b.threads > a.threads ? b : a));
    return {
      adapter: gpu.adapter, software: gpu.software, msPerToken: d.msPerToken, perStep,
      row: { label: "decode", value: d.tokensPerSecond, wasm: wasm.tokensPerSecond, wasmThreads: wasm.threads, vsWasm: ratio(d.tokensPerSecond, wasm.tokensPerSecond) },
    };
  }, gpu.backend);
}

/** The figures --compare matches: tokens/s, stream GB/s, the baselines' ratios when given, WebGPU's tokens/s. */
export function decodeFigures(r: DecodeResult): Figure[] {
  // Documents written before the WebGPU path have no webgpu field.
  const g = r.webgpu ?? null;
  const gpu = g !== null && "row" in g ? figure(`${r.model}, webgpu: decode tokens/s`, g.row.value, "tokens/s") : [];
  const spec = r.speculative === undefined ? [] : speculativeFigures(r.model, r.speculative);
  const structured = r.structured === undefined ? [] : structuredFigures(r.model, r.structured);
  const tools = r.toolCalls === undefined ? [] : toolCallFigures(r.model, r.toolCalls);
  return [...gpu, ...spec, ...structured, ...tools, ...(r.kvContext === undefined ? [] : kvContextFigures(r.kvContext)), ...r.rows.flatMap((x) => {
    const at = `${r.model}, ${threadsLabel(x.threads)}`;
    return [
      ...figure(`${at}: decode tokens/s`, x.tokensPerSecond, "tokens/s"),
      ...figure(`${at}: stream GB/s`, x.bandwidthGBps, "GB/s"),
      ...(x.runc === null ? [] : figure(`${at}: decode vs llama2.c run`, x.runc.ratio, "x")),
      ...(x.peer === null ? [] : figure(`${at}: decode vs llama.cpp`, x.peer.ratio, "x")),
    ];
  })];
}

export function decodeTables(r: DecodeResult): Table[] {
  const tables: Table[] = [{
    title: `single-sequence decode of ${r.model} (${fmt(r.bytesPerToken / 2 ** 20, 4)} MiB of weights per token) vs the bandwidth limit (best stream repetition); median (min-max)`,
    columns: ["threads", "tokens/s", "ms/token", "stream GB/s", "limit tokens/s", "of limit", `vs ${r.rows[0]?.threads ?? 1} thread(s)`],
    rows: r.rows.map((x) => [
      String(x.threads), fmtSpread(x.tokensPerSecond), fmtSpread(x.msPerToken), fmtSpread(x.bandwidthGBps),
      fmt(x.limitTokensPerSecond), fmtPct(x.fractionOfLimit), fmtRatio(x.vsFirst),
    ]),
  }];
  if (r.rows.some((x) => x.runc !== null)) {
    tables.push({
      title: "against llama2.c run (--runc) on the same file, repetitions alternating; median (min-max)",
      columns: ["threads", "pagellm tokens/s", "run tokens/s", "pagellm / run"],
      rows: r.rows.filter((x) => x.runc !== null).map((x) => [
        String(x.threads), fmtSpread(x.tokensPerSecond), fmtSpread(x.runc!.tokensPerSecond), fmtRatio(x.runc!.ratio),
      ]),
    });
  }
  const g = r.webgpu ?? null;
  if (g !== null && "row" in g) {
    tables.push(gpuTable("decode tokens/s", r.model, g.adapter, g.software, [g.row]), gpuCountsTable(r.model, g.perStep));
  }
  if (r.speculative !== undefined) tables.push(speculativeTable(r.speculative));
  if (r.structured !== undefined) tables.push(structuredTable(r.model, r.structured));
  if (r.toolCalls !== undefined) tables.push(toolCallTable(r.toolCalls));
  if (r.rows.some((x) => x.peer !== null)) {
    tables.push(peerTable(`decode of ${r.model}`, r.rows.map((x) => ({ threads: x.threads, ours: x.tokensPerSecond, peer: x.peer }))));
  }
  if (r.kvContext !== undefined) tables.push(...kvContextTables(r.kvContext));
  return tables;
}
