/**
 * What `pagellm models` and `pagellm info` say about a GGUF file, read from its header only
 * (readGGUF never touches the tensor data): architecture, size, quantization, context, attention shape,
 * RoPE, vocabulary, special tokens, chat template, and the memory a given context needs.
 */
import { kvRowBytes, type KVType } from "../kv/kv-layout.ts";
import { readGGUF, type GGUFFile } from "../model/gguf.ts";
import { storedGGMLBytes } from "../backend/wasm/weights.ts";

/** llama.cpp's llama_ftype codes (general.file_type) by name; "MOSTLY_" dropped as ollama does. */
const FILE_TYPES: ReadonlyMap<number, string> = new Map([
  [0, "F32"], [1, "F16"], [2, "Q4_0"], [3, "Q4_1"], [7, "Q8_0"], [8, "Q5_0"], [9, "Q5_1"], [10, "Q2_K"],
  [11, "Q3_K_S"], [12, "Q3_K_M"], [13, "Q3_K_L"], [14, "Q4_K_S"], [15, "Q4_K_M"], [16, "Q5_K_S"], [17, "Q5_K_M"],
  [18, "Q6_K"], [19, "IQ2_XXS"], [20, "IQ2_XS"], [21, "Q2_K_S"], [22, "IQ3_XS"], [23, "IQ3_XXS"], [24, "IQ1_S"],
  [25, "IQ4_NL"], [26, "IQ3_S"], [27, "IQ3_M"], [28, "IQ2_S"], [29, "IQ2_M"], [30, "IQ4_XS"], [31, "IQ1_M"],
  [32, "BF16"], [36, "TQ1_0"], [37, "TQ2_0"], [38, "MXFP4_MOE"],
]);

/** Special token roles in tokenizer.ggml.<role>_token_id. */
const SPECIAL_ROLES = ["bos", "eos", "eot", "eom", "unknown", "seperator", "padding", "cls", "mask", "prefix", "suffix", "middle"] as const;

export interface TensorTypeShare {
  readonly type: string;
  readonly tensors: number;
  readonly bytes: number;
  /** Share of all tensor bytes, 0..1. */
  readonly fraction: number;
}

export interface SpecialToken {
  readonly role: string;
  readonly id: number;
  readonly text: string | null;
}

/** A mixture-of-experts model's experts, per layer. */
export interface ExpertsSummary {
  /** `expert_count` and `expert_used_count`. */
  readonly count: number;
  readonly used: number;
  /** Width of one expert's feed-forward (`expert_feed_forward_length`). */
  readonly feedForwardLength: number | null;
  /** One expert of one layer: its gate, up and down matrices (from the first layer's stacked tensors). */
  readonly parametersOfOne: number;
  readonly bytesOfOne: number;
  /** What a token runs: every tensor except the experts it does not use (and the embedding table, of which it reads one row). */
  readonly activeParameters: number;
}

export interface ModelSummary {
  readonly path: string;
  readonly fileBytes: number;
  readonly name: string | null;
  readonly architecture: string;
  /** From general.file_type, else the type holding most of the tensor bytes. */
  readonly quantization: string;
  readonly parameters: number;
  readonly contextLength: number | null;
  readonly embeddingLength: number | null;
  readonly layers: number | null;
  readonly feedForwardLength: number | null;
  readonly experts: ExpertsSummary | null;
  readonly heads: number | null;
  readonly kvHeads: number | null;
  readonly headDim: number | null;
  readonly rope: { readonly freqBase: number | null; readonly dims: number | null; readonly scaling: string | null; readonly scalingFactor: number | null; readonly originalContext: number | null };
  readonly tensorTypes: readonly TensorTypeShare[];
  /** Bytes of the tensors in memory as the CPU backend stores them (Q5_0 as Q8_0: backend/wasm/weights.ts). */
  readonly weightBytes: number;
  readonly vocabulary: { readonly kind: string | null; readonly pre: string | null; readonly size: number | null };
  readonly specialTokens: readonly SpecialToken[];
  readonly chatTemplate: string | null;
}

/** What the header of the GGUF file at `path` says; `gguf` is that header when the caller has read it already. */
export function summarizeModel(path: string, gguf: GGUFFile = readGGUF(path)): ModelSummary {
  const arch = gguf.getString("general.architecture", "unknown");
  const num = (key: string): number | null => optionalNumber(gguf, key);
  const embd = num(`${arch}.embedding_length`);
  const heads = num(`${arch}.attention.head_count`);
  const headDim = num(`${arch}.attention.key_length`) ?? (embd !== null && heads ? embd / heads : null);
  const tensorTypes = tensorShares(gguf);
  const fileType = num("general.file_type");
  return {
    path,
    fileBytes: gguf.fileSize,
    name: optionalString(gguf, "general.name"),
    architecture: arch,
    quantization: (fileType !== null ? FILE_TYPES.get(fileType) : undefined) ?? tensorTypes[0]?.type ?? "unknown",
    parameters: gguf.tensors.reduce((sum, t) => sum + t.nElements, 0),
    contextLength: num(`${arch}.context_length`),
    embeddingLength: embd,
    layers: num(`${arch}.block_count`),
    feedForwardLength: num(`${arch}.feed_forward_length`),
    experts: expertsSummary(gguf, arch),
    heads,
    kvHeads: num(`${arch}.attention.head_count_kv`) ?? heads,
    headDim,
    rope: {
      freqBase: num(`${arch}.rope.freq_base`),
      dims: num(`${arch}.rope.dimension_count`),
      scaling: optionalString(gguf, `${arch}.rope.scaling.type`),
      scalingFactor: num(`${arch}.rope.scaling.factor`),
      originalContext: num(`${arch}.rope.scaling.original_context_length`),
    },
    tensorTypes,
    weightBytes: gguf.tensors.reduce((sum, t) => sum + storedGGMLBytes(t.type, t.byteSize), 0),
    vocabulary: {
      kind: optionalString(gguf, "tokenizer.ggml.model"),
      pre: optionalString(gguf, "tokenizer.ggml.pre"),
      size: gguf.has("tokenizer.ggml.tokens") ? gguf.getStringArray("tokenizer.ggml.tokens").length : null,
    },
    specialTokens: specialTokens(gguf),
    chatTemplate: optionalString(gguf, "tokenizer.chat_template"),
  };
}

/** The experts of a mixture-of-experts model (null for a dense one), from the metadata and the stacked `*_exps` tensors. */
function expertsSummary(gguf: GGUFFile, arch: string): ExpertsSummary | null {
  const count = optionalNumber(gguf, `${arch}.expert_count`);
  const used = optionalNumber(gguf, `${arch}.expert_used_count`);
  if (count === null || used === null || count < 1) return null;
  const stacked = gguf.tensors.filter((t) => /_exps\.weight$/.test(t.name));
  const first = stacked.filter((t) => t.name.startsWith("blk.0."));
  const all = gguf.tensors.reduce((sum, t) => sum + t.nElements, 0);
  const experts = stacked.reduce((sum, t) => sum + t.nElements, 0);
  const embedding = gguf.tensor("token_embd.weight");
  const unread = gguf.tensor("output.weight") !== undefined && embedding !== undefined ? embedding.nElements : 0;
  return {
    count,
    used,
    feedForwardLength: optionalNumber(gguf, `${arch}.expert_feed_forward_length`),
    parametersOfOne: first.reduce((sum, t) => sum + t.nElements, 0) / count,
    bytesOfOne: first.reduce((sum, t) => sum + t.byteSize, 0) / count,
    activeParameters: all - unread - (experts * (count - Math.min(used, count))) / count,
  };
}

/** Bytes per tensor type, largest first. */
function tensorShares(gguf: GGUFFile): TensorTypeShare[] {
  const byType = new Map<string, { tensors: number; bytes: number }>();
  for (const t of gguf.tensors) {
    const entry = byType.get(t.typeName) ?? { tensors: 0, bytes: 0 };
    entry.tensors++;
    entry.bytes += t.byteSize;
    byType.set(t.typeName, entry);
  }
  const total = [...byType.values()].reduce((sum, e) => sum + e.bytes, 0);
  return [...byType.entries()]
    .map(([type, e]) => ({ type, tensors: e.tensors, bytes: e.bytes, fraction: total > 0 ? e.bytes / total : 0 }))
    .sort((a, b) => b.bytes - a.bytes);
}

function specialTokens(gguf: GGUFFile): SpecialToken[] {
  const tokens = gguf.has("tokenizer.ggml.tokens") ? gguf.getStringArray("tokenizer.ggml.tokens") : null;
  const out: SpecialToken[] = [];
  for (const role of SPECIAL_ROLES) {
    const id = optionalNumber(gguf, `tokenizer.ggml.${role}_token_id`);
    // -1 (often stored as u32 0xFFFFFFFF) means "no such token".
    if (id === null || id < 0 || id >= 0xffffffff || (tokens !== null && id >= tokens.length)) continue;
    const text = tokens !== null && id >= 0 && id < tokens.length ? tokens.get(id) : null;
    out.push({ role: role === "seperator" ? "separator" : role, id, text });
  }
  return out;
}

function optionalNumber(gguf: GGUFFile, key: string): number | null {
  const value = gguf.metadata.get(key);
  if (value === undefined) return null;
  if (typeof value.value === "bigint") return Number(value.value);
  return typeof value.value === "number" ? value.value : null;
}

function optionalString(gguf: GGUFFile, key: string): string | null {
  const value = gguf.metadata.get(key);
  return value !== undefined && value.type === "string" ? value.value : null;
}

/** Sliding-window attention as the model's architecture reads it (gemma3's local layers): what `info` shows. */
export interface WindowSummary {
  /** Positions a local layer's query sees, its own included. */
  readonly size: number;
  /** The local layers; the others see the whole context. */
  readonly localLayers: readonly number[];
}

export interface MemoryEstimate {
  readonly ctxSize: number;
  readonly weightBytes: number;
  /** The KV cache's element type (src/kv/kv-layout.ts). */
  readonly kvType: KVType;
  /**
   * K and V for every layer and position: 2 * ctx * kvHeads * (bytes of a head's row of kvType) per
   * layer, a sliding-window layer counted at min(ctx, window) positions (all it ever attends to).
   */
  readonly kvCacheBytes: number;
  /** The same with every layer counted at ctx (what a model without a window would need); equal when none is windowed. */
  readonly kvCacheAllGlobalBytes: number;
  /** One token's working buffers (residual, norms, q/k/v, attention scores, FFN, logits) at f32. */
  readonly activationBytes: number;
  readonly totalBytes: number;
}

/**
 * The memory a run at `ctxSize` positions with a KV cache of `kvType` needs; an estimate for
 * activations, exact for weights and KV (one sequence; local layers of `window` at the window).
 */
export function estimateMemory(s: ModelSummary, ctxSize: number, kvType: KVType, window: WindowSummary | null = null): MemoryEstimate {
  const layers = s.layers ?? 0;
  const kvHeads = s.kvHeads ?? 0;
  const headDim = s.headDim ?? 0;
  const positionBytes = 2 * kvHeads * kvRowBytes(kvType, headDim);
  const local = window === null ? 0 : window.localLayers.length;
  const kvCacheAllGlobalBytes = layers * ctxSize * positionBytes;
  const kvCacheBytes = (layers - local) * ctxSize * positionBytes + local * Math.min(ctxSize, window?.size ?? 0) * positionBytes;
  const embd = s.embeddingLength ?? 0;
  const ffn = s.feedForwardLength ?? 4 * embd;
  const heads = s.heads ?? 0;
  const vocab = s.vocabulary.size ?? 0;
  const activationFloats = 4 * embd + (heads + 2 * kvHeads) * headDim + 3 * ffn + heads * ctxSize + vocab;
  const activationBytes = activationFloats * 4;
  return { ctxSize, weightBytes: s.weightBytes, kvType, kvCacheBytes, kvCacheAllGlobalBytes, activationBytes, totalBytes: s.weightBytes + kvCacheBytes + activationBytes };
}
