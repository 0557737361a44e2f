/**
 * `pagellm info MODEL`: what `ollama show` prints and more, from the GGUF header: architecture,
 * parameters, tensor types and their share of the bytes, context, attention shape, RoPE, vocabulary,
 * special tokens, the start of the chat template, and the memory a run at --ctx-size needs.
 */
import { defineCommand, type ArgsDef } from "citty";
import { formatBytes } from "../hub/progress.ts";
import { estimateMemory, summarizeModel, type MemoryEstimate, type ModelSummary, type WindowSummary } from "../hub/summary.ts";
import type { ModelConfig } from "../model/config.ts";
import { contextLength, DEFAULT_CONTEXT, DEFAULT_ENGINE_OPTIONS, defaultNumBlocks, withContext } from "../engine/engine-options.ts";
import { planMemory } from "../engine/memory-plan.ts";
import { describePart, memoryLimitBytes } from "../backend/wasm/placement.ts";
import type { Checkpoint } from "../model/checkpoint.ts";
import { readGGUF } from "../model/gguf.ts";
import { readGGUFCheckpoint } from "../model/gguf-checkpoint.ts";
import { modelFileKind } from "../model/load.ts";
import { InputError } from "../errors.ts";
import { isEncoderFile, readEncoderCheckpoint, type EncoderConfig } from "../model/encoder.ts";
import { resolveModelSpec } from "./load.ts";
import { checkKnownOptions, kvTypeOption, numberOption } from "./options.ts";
import { escapeControls, quoteFileText, showFileText, terminalSafeJson } from "../util/file-text.ts";
import { defaultKVType, KV_TYPES, kvLayout, Q8_0_BLOCK, type KVType } from "../kv/kv-layout.ts";

const infoArgs = {
  model: { type: "positional", description: "A path, hf:OWNER/REPO/FILE.gguf, hf:OWNER/REPO:QUANT or a URL (downloaded when not cached)", valueHint: "model", required: true },
  "ctx-size": { type: "string", description: `Context length for the memory estimate, as generate takes it (default ${DEFAULT_CONTEXT}, or the model's own if smaller; 0 = the model's full context)`, valueHint: "n" },
  "kv-type": {
    type: "string",
    description: `KV cache type for the memory estimate, as generate takes it: ${KV_TYPES.join(" | ")} (default f16, as for any GGUF model; q8_0 on heads that are not whole 32-value blocks is f16)`,
    valueHint: "type",
  },
  json: { type: "boolean", description: "Print JSON instead of text" },
} as const satisfies ArgsDef;

const TEMPLATE_LINES = 6;

export const infoCommand = defineCommand({
  meta: { name: "info", description: "Show a model's architecture, tensors, tokenizer, chat template and memory needs" },
  args: infoArgs,
  async run({ args, rawArgs }) {
    checkKnownOptions(rawArgs, infoArgs);
    const ctxOption = numberOption(args, "ctx-size", "int", { min: 0 }) ?? null;
    const path = await resolveModelSpec(args.model);
    if (modelFileKind(path) === "llama2c") throw new InputError(`${path}: a llama2.c checkpoint; info reads the metadata of GGUF files only`);
    const header = readGGUF(path);
    const summary = summarizeModel(path, header);
    if (isEncoderFile(header)) {
      printEncoderInfo(summary, readEncoderCheckpoint(path, header).config, args.json === true);
      return;
    }
    const asked = kvTypeOption(args) ?? defaultKVType("GGUF");
    // As the engine resolves it (kv-layout.ts): q8_0 needs heads of whole 32-value blocks.
    const kvType = asked === "q8_0" && (summary.headDim ?? 0) % Q8_0_BLOCK !== 0 ? "f16" : asked;
    // The header alone can be read where the model cannot run (an architecture or tensor type
    // pagellm lacks, tensors that overlap or miss): what was read is shown, then why, exit 2.
    let checkpoint: Checkpoint | null = null;
    let failure: unknown = null;
    try {
      checkpoint = readGGUFCheckpoint(path, header);
    } catch (e) {
      failure = e;
    }
    const layerNotes = checkpoint === null ? NO_LAYER_NOTES : layerNotesOf(checkpoint.config);
    const memory = estimateMemory(summary, contextLength(summary.contextLength ?? DEFAULT_CONTEXT, ctxOption), kvType, layerNotes.slidingWindow);
    const placement = checkpoint === null ? null : placementOf(checkpoint, ctxOption, kvType);
    const shown = { ...summary, ...layerNotes };
    if (args.json === true) process.stdout.write(`${terminalSafeJson(JSON.stringify({ ...shown, memory, ...(placement === null ? {} : { placement }) }, null, 2))}\n`);
    else process.stdout.write(formatInfo(shown, memory) + (placement === null ? "" : formatPlacement(placement)));
    if (failure !== null) throw failure;
  },
});

/** What an embedding model is asked for: its pooling, width, context and labels (an encoder keeps no KV cache, so no memory plan). */
export interface EncoderInfo {
  pooling: string;
  width: number;
  maxTokens: number;
  labels: string[] | null;
}

function printEncoderInfo(summary: ModelSummary, config: EncoderConfig, json: boolean): void {
  const embedding: EncoderInfo = { pooling: config.pooling, width: config.dim, maxTokens: config.contextLength, labels: config.classifier?.labels ?? null };
  if (json) {
    process.stdout.write(`${terminalSafeJson(JSON.stringify({ ...summary, embedding }, null, 2))}\n`);
    return;
  }
  const labels = embedding.labels === null ? [] : [`    labels       ${embedding.labels.map((l) => showFileText(l)).join(", ")}`];
  const rows = [
    "",
    "  Embedding",
    `    pooling      ${embedding.pooling}${embedding.pooling === "rank" ? " (a reranker)" : ""}`,
    `    width        ${embedding.width}`,
    `    max tokens   ${embedding.maxTokens} per input`,
    ...labels,
    "    runs on      WebAssembly, no KV cache",
    "",
  ];
  process.stdout.write(formatInfo(summary, null) + rows.join("\n"));
}

/** How a run with the default options at --ctx-size would place the model in WebAssembly memory. */
export interface PlacementInfo {
  /** The largest memory (PAGELLM_WASM_MEMORY_MB or the default). */
  limitBytes: number;
  /** Q5_0 tensors kept as Q8_0 (faster products), and the bytes that costs; dropped when memory is short. */
  q5_0AsQ8_0: boolean;
  q5_0AsQ8_0ExtraBytes: number;
  totalBytes: number;
  memories: { holds: string; bytes: number; weightBytes: number; kvBytes: number; bufferBytes: number }[];
}

function placementOf(checkpoint: Checkpoint, ctxOption: number | null, kvType: KVType): PlacementInfo {
  const o = DEFAULT_ENGINE_OPTIONS;
  const c = withContext(checkpoint.config, ctxOption);
  const kv = kvLayout(c, o.blockSize, kvType);
  const numBlocks = defaultNumBlocks(c, o, kv, Infinity);
  const shape = {
    maxTokens: o.maxNumBatchedTokens, maxSeqs: o.maxNumSeqs, maxLogits: o.maxNumSeqs, blockSize: o.blockSize, numBlocks, kvBlockBytes: kv.blockBytes,
    threads: o.threads,
  };
  const limitBytes = memoryLimitBytes(o.wasmMemoryMb);
  const plan = planMemory(checkpoint, c, shape, limitBytes, Infinity);
  return {
    limitBytes,
    q5_0AsQ8_0: plan.storage.q5_0AsQ8_0,
    q5_0AsQ8_0ExtraBytes: plan.fastStorageExtraBytes,
    totalBytes: plan.totalBytes,
    memories: plan.placement.memories.map((m) => ({
      holds: describePart(m.part), bytes: m.totalBytes, weightBytes: m.weightBytes, kvBytes: m.kvBytes, bufferBytes: m.bufferBytes,
    })),
  };
}

/** The placement section: one line per memory, and the Q5_0-as-Q8_0 choice with its cost. */
export function formatPlacement(p: PlacementInfo): string {
  const out = ["", `  WebAssembly memories (default options; largest ${formatBytes(p.limitBytes)})`];
  p.memories.forEach((m, i) => {
    out.push(`    ${String(i + 1).padStart(2)}  ${formatBytes(m.bytes).padStart(10)}  ${m.holds}  (weights ${formatBytes(m.weightBytes)}, KV ${formatBytes(m.kvBytes)}, buffers ${formatBytes(m.bufferBytes)})`);
  });
  out.push(`    total  ${formatBytes(p.totalBytes)}`);
  if (p.q5_0AsQ8_0ExtraBytes > 0) {
    out.push(`    Q5_0 tensors held as Q8_0 (faster products): +${formatBytes(p.q5_0AsQ8_0ExtraBytes)}, dropped when memory is short`);
  }
  out.push("");
  return out.join("\n");
}

/** What the architecture makes of the layers beyond the header's plain keys (null where it does not apply). */
interface LayerNotes {
  /** gemma3's sliding window and its local layers. */
  slidingWindow: WindowSummary | null;
  /** The local layers' own RoPE. */
  localRope: string | null;
  /** Layers without RoPE (smollm3). */
  noRopeLayers: number[] | null;
  /** Phi-3's LongRoPE. */
  longRope: string | null;
}

const NO_LAYER_NOTES: LayerNotes = { slidingWindow: null, localRope: null, noRopeLayers: null, longRope: null };

function layerNotesOf(c: ModelConfig): LayerNotes {
  const w = c.slidingWindow;
  const noRope = c.noRopeLayers?.flatMap((none, l) => (none ? [l] : [])) ?? [];
  return {
    slidingWindow: w === undefined ? null : { size: w.size, localLayers: w.local.flatMap((local, l) => (local ? [l] : [])) },
    localRope: w?.rope === undefined ? null : `base ${w.rope.theta}${w.rope.freqScale === 1 ? ", no scaling" : `, linear x${1 / w.rope.freqScale}`}`,
    noRopeLayers: noRope.length === 0 ? null : noRope,
    longRope: c.longRope === undefined ? null :
      `long factors past ${c.longRope.originalContext} positions, short ones up to it; attn_factor ${(c.ropeAttnFactor ?? 1).toFixed(4)}`,
  };
}

/** "512 tokens on 22 of 26 layers (global: 5, 11, 17, 23)". */
function describeWindow(w: WindowSummary, layers: number): string {
  const globals = Array.from({ length: layers }, (_, l) => l).filter((l) => !w.localLayers.includes(l));
  return `${w.size} tokens on ${w.localLayers.length} of ${layers} layers (global: ${globals.length === 0 ? "none" : globals.join(", ")})`;
}

export function formatInfo(s: ModelSummary & Partial<LayerNotes>, m: MemoryEstimate | null): string {
  const out: string[] = [];
  const section = (title: string, rows: [string, string | number | null][]): void => {
    const shown = rows.filter((r): r is [string, string | number] => r[1] !== null);
    if (shown.length === 0) return;
    out.push(`  ${title}`);
    const width = Math.max(...shown.map(([k]) => k.length));
    for (const [k, v] of shown) out.push(`    ${k.padEnd(width)}  ${v}`);
    out.push("");
  };
  section("Model", [
    ["file", s.path],
    ["name", s.name === null ? null : showFileText(s.name)],
    ["architecture", showFileText(s.architecture)],
    ["parameters", formatCount(s.parameters)],
    ["quantization", s.quantization],
    ["file size", formatBytes(s.fileBytes)],
    ["context length", s.contextLength],
    ["embedding length", s.embeddingLength],
    ["layers", s.layers],
    ["feed forward", s.experts === null ? s.feedForwardLength : s.experts.feedForwardLength],
    ...expertRows(s),
    ["heads (q/kv)", s.heads === null ? null : `${s.heads}/${s.kvHeads}`],
    ["head dim", s.headDim],
    ["sliding window", s.slidingWindow == null ? null : describeWindow(s.slidingWindow, s.layers ?? s.slidingWindow.localLayers.length)],
  ]);
  section("RoPE", [
    ["freq base", s.rope.freqBase],
    ["dimensions", s.rope.dims],
    ["scaling", s.rope.scaling === null ? null : `${showFileText(s.rope.scaling)}${s.rope.scalingFactor === null ? "" : ` x${s.rope.scalingFactor}`}`],
    ["original context", s.rope.originalContext],
    ["local layers", s.localRope ?? null],
    ["LongRoPE", s.longRope ?? null],
    ["no RoPE on layers", s.noRopeLayers == null ? null : s.noRopeLayers.join(", ")],
  ]);
  section("Tensors", s.tensorTypes.map((t) => [t.type, `${(100 * t.fraction).toFixed(1).padStart(5)}%  ${formatBytes(t.bytes).padStart(10)}  ${t.tensors} tensors`]));
  section("Vocabulary", [
    ["kind", s.vocabulary.kind === null ? null : showFileText(s.vocabulary.kind)],
    ["pre-tokenizer", s.vocabulary.pre === null ? null : showFileText(s.vocabulary.pre)],
    ["size", s.vocabulary.size],
    ...s.specialTokens.map((t): [string, string] => [`${t.role} token`, `${t.id}${t.text === null ? "" : ` ${quoteFileText(t.text)}`}`]),
  ]);
  if (s.chatTemplate !== null) {
    const lines = s.chatTemplate.split("\n");
    out.push("  Chat template");
    for (const line of lines.slice(0, TEMPLATE_LINES)) out.push(`    ${escapeControls(line.length > 100 ? `${line.slice(0, 100)}…` : line)}`);
    if (lines.length > TEMPLATE_LINES) out.push(`    … (${lines.length - TEMPLATE_LINES} more lines; --json shows it all)`);
    out.push("");
  }
  if (m === null) return out.join("\n");
  section(`Memory at --ctx-size ${m.ctxSize}`, [
    ["weights", formatBytes(m.weightBytes)],
    [`KV cache (${m.kvType})`, formatBytes(m.kvCacheBytes) +
      (m.kvCacheBytes === m.kvCacheAllGlobalBytes ? "" : `  (local layers at the window; ${formatBytes(m.kvCacheAllGlobalBytes)} with every layer global)`)],
    ["activations (est.)", formatBytes(m.activationBytes)],
    ["total", formatBytes(m.totalBytes)],
  ]);
  return out.join("\n");
}

/** A mixture of experts: how many, how many a token uses, one expert's size, what a token runs. */
function expertRows(s: ModelSummary): [string, string][] {
  const e = s.experts;
  if (e === null) return [];
  return [
    ["experts", `${e.count}, ${e.used} used per token`],
    ["one expert", `${formatCount(e.parametersOfOne)} parameters, ${formatBytes(e.bytesOfOne)} per layer`],
    ["active parameters", `${formatCount(e.activeParameters)} per token`],
  ];
}

function formatCount(n: number): string {
  if (n >= 1e9) return `${(n / 1e9).toFixed(2)}B`;
  if (n >= 1e6) return `${(n / 1e6).toFixed(2)}M`;
  if (n >= 1e3) return `${(n / 1e3).toFixed(1)}K`;
  return String(n);
}
