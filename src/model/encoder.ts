/**
 * Encoder models (GGUF `bert` and `nomic-bert`, llama.cpp's LLM_ARCH_BERT and NOMIC_BERT): their
 * shape, read from the file's `{arch}.*` keys, and every tensor the forward pass reads, each
 * checked against the shape the keys imply before anything is allocated. An encoder attends in
 * both directions, keeps no KV cache, and ends in pooling (and a BERT reranker's `cls` heads)
 * instead of a classifier over the vocabulary.
 *
 * bert: learned positions and token types added to the token embedding, LayerNorm, then per layer
 * post-norm attention (q, k, v, output with biases) and a GELU feed-forward (up, down with biases).
 * nomic-bert: token types but no position table; one fused qkv, NEOX RoPE, SwiGLU without biases.
 */
import { ModelFormatError } from "../errors.ts";
import type { TensorInfo } from "./checkpoint.ts";
import { tensorInfo, typeSummary } from "./gguf-checkpoint.ts";
import { readGGUF, type GGUFFile } from "./gguf.ts";
import { filePooling, type PoolingType } from "./pooling-type.ts";
import { positiveKeyReader } from "./arch/hparams.ts";

export type EncoderArch = "bert" | "nomic-bert";
export const ENCODER_ARCHS: ReadonlySet<string> = new Set<EncoderArch>(["bert", "nomic-bert"]);

export interface EncoderConfig {
  arch: EncoderArch;
  dim: number;
  nLayers: number;
  nHeads: number;
  headDim: number;
  /** Width of the feed-forward's inner layer. */
  hiddenDim: number;
  vocabSize: number;
  /** The most tokens one sequence may have: bert's position table, nomic-bert's trained context. */
  contextLength: number;
  /** LayerNorm's epsilon. */
  normEps: number;
  /** bert: rows of position_embd added to the input; nomic-bert: NEOX RoPE of `ropeDim` dims per head. */
  positions: { kind: "learned" } | { kind: "rope"; ropeDim: number; theta: number };
  /** bert: GELU of up (with biases everywhere); nomic-bert: SwiGLU of gate and up (no biases). */
  ffn: "gelu" | "swiglu";
  /** q, k, v, output, up and down have biases (bert). */
  biases: boolean;
  /** q, k and v are rows of one attn_qkv (nomic-bert). */
  fusedQkv: boolean;
  /** Rows of token_types.weight (0: none); its row 0 is added to every token (llama.cpp's "Sentence A"). */
  tokenTypes: number;
  /** The file's pooling (`{arch}.pooling_type`); mean when the file says none. */
  pooling: PoolingType;
  /** The rerank head (cls.weight/bias then cls.output.weight/bias) and its labels, or null. */
  classifier: { labels: string[] } | null;
}

/** Tensor names, as llama.cpp's LLM_TENSOR_NAMES for these architectures. */
export const EncoderTensor = {
  tokenEmbedding: "token_embd.weight",
  tokenTypes: "token_types.weight",
  positions: "position_embd.weight",
  embedNorm: "token_embd_norm.weight",
  embedNormBias: "token_embd_norm.bias",
  q: (l: number) => `blk.${l}.attn_q.weight`,
  k: (l: number) => `blk.${l}.attn_k.weight`,
  v: (l: number) => `blk.${l}.attn_v.weight`,
  qBias: (l: number) => `blk.${l}.attn_q.bias`,
  kBias: (l: number) => `blk.${l}.attn_k.bias`,
  vBias: (l: number) => `blk.${l}.attn_v.bias`,
  qkv: (l: number) => `blk.${l}.attn_qkv.weight`,
  output: (l: number) => `blk.${l}.attn_output.weight`,
  outputBias: (l: number) => `blk.${l}.attn_output.bias`,
  attnNorm: (l: number) => `blk.${l}.attn_output_norm.weight`,
  attnNormBias: (l: number) => `blk.${l}.attn_output_norm.bias`,
  up: (l: number) => `blk.${l}.ffn_up.weight`,
  upBias: (l: number) => `blk.${l}.ffn_up.bias`,
  gate: (l: number) => `blk.${l}.ffn_gate.weight`,
  down: (l: number) => `blk.${l}.ffn_down.weight`,
  downBias: (l: number) => `blk.${l}.ffn_down.bias`,
  layerNorm: (l: number) => `blk.${l}.layer_output_norm.weight`,
  layerNormBias: (l: number) => `blk.${l}.layer_output_norm.bias`,
  cls: "cls.weight",
  clsBias: "cls.bias",
  clsOutput: "cls.output.weight",
  clsOutputBias: "cls.output.bias",
} as const;

export interface EncoderCheckpoint {
  file: string;
  format: string;
  config: EncoderConfig;
  tensors: Map<string, TensorInfo>;
}

/** Whether the GGUF file's architecture is an encoder's. */
export function isEncoderFile(file: GGUFFile): boolean {
  return file.has("general.architecture") && ENCODER_ARCHS.has(file.getString("general.architecture"));
}

/** The encoder in the GGUF file at `path` (`file`: its header, when read already). */
export function readEncoderCheckpoint(path: string, file: GGUFFile = readGGUF(path)): EncoderCheckpoint {
  const config = readEncoderConfig(file);
  const tensors = new Map<string, TensorInfo>();
  for (const [name, shape, f32] of expectedEncoderTensors(config)) {
    const info = tensorInfo(file, name, shape);
    if (f32 && info.encoding.kind !== "f32") throw new ModelFormatError(path, `tensor ${name} must be F32 (it is read as rows of floats)`);
    tensors.set(name, info);
  }
  return { file: path, format: `GGUF v${file.version} ${config.arch} ${typeSummary(tensors)}`, config, tensors };
}

function readEncoderConfig(file: GGUFFile): EncoderConfig {
  const arch = file.getString("general.architecture") as EncoderArch;
  const key = (name: string) => `${arch}.${name}`;
  const positive = positiveKeyReader(file, arch);
  const dim = positive("embedding_length");
  const nHeads = positive("attention.head_count");
  if (dim % nHeads !== 0) throw new ModelFormatError(file.path, `width ${dim} is not a whole number of ${nHeads} heads`);
  if (positive("attention.head_count_kv", nHeads) !== nHeads) throw new ModelFormatError(file.path, "an encoder with grouped key/value heads is not supported");
  const nLayers = positive("block_count");
  if (nLayers > file.tensors.length) {
    throw new ModelFormatError(file.path, `metadata key "${key("block_count")}" is ${nLayers}, more layers than the file has tensors (${file.tensors.length})`);
  }
  if (file.getBool(key("attention.causal"), false)) throw new ModelFormatError(file.path, `a causal ${arch} is not supported (encoders attend in both directions)`);
  const embedding = file.tensor(EncoderTensor.tokenEmbedding);
  if (embedding === undefined) throw new ModelFormatError(file.path, `missing tensor ${EncoderTensor.tokenEmbedding}`);
  const headDim = dim / nHeads;
  const nomic = arch === "nomic-bert";
  const ropeDim = nomic ? positive("rope.dimension_count", headDim) : 0;
  if (nomic && (ropeDim > headDim || ropeDim % 2 !== 0)) {
    throw new ModelFormatError(file.path, `rope.dimension_count ${ropeDim} must be even and at most the head size ${headDim}`);
  }
  const pooling = filePooling(file, arch) ?? "mean";
  const hasClassifier = file.tensor(EncoderTensor.cls) !== undefined || file.tensor(EncoderTensor.clsOutput) !== undefined;
  if (pooling === "rank" && !hasClassifier) throw new ModelFormatError(file.path, `pooling rank needs the classifier head: missing tensor ${EncoderTensor.cls}`);
  return {
    arch,
    dim,
    nLayers,
    nHeads,
    headDim,
    hiddenDim: positive("feed_forward_length"),
    vocabSize: embedding.dims[1] ?? 0,
    contextLength: positive("context_length"),
    normEps: file.getF32(key("attention.layer_norm_epsilon"), 1e-12),
    positions: nomic ? { kind: "rope", ropeDim, theta: file.getF32(key("rope.freq_base"), 10000) } : { kind: "learned" },
    ffn: nomic ? "swiglu" : "gelu",
    biases: !nomic,
    fusedQkv: nomic,
    tokenTypes: rowsOf(file, EncoderTensor.tokenTypes),
    pooling,
    classifier: hasClassifier ? { labels: classifierLabels(file, arch) } : null,
  };
}

/** Rows of a 2-D tensor as the file stores it (1 for a vector, 0 when absent). */
function rowsOf(file: GGUFFile, name: string): number {
  const t = file.tensor(name);
  return t === undefined ? 0 : (t.dims[1] ?? 1);
}

/** `{arch}.classifier.output_labels`, or one unnamed label (a reranker's score). */
export function classifierLabels(file: GGUFFile, arch: string): string[] {
  const key = `${arch}.classifier.output_labels`;
  if (!file.has(key)) return ["score"];
  const labels = file.getStringArray(key);
  return Array.from({ length: labels.length }, (_, i) => labels.get(i));
}

/** Every tensor the forward pass reads: name, [rows, cols] (or [n]), and whether it must be F32 (read as plain rows). */
function expectedEncoderTensors(c: EncoderConfig): [string, number[], boolean][] {
  const T = EncoderTensor;
  const { dim, hiddenDim } = c;
  const list: [string, number[], boolean][] = [[T.tokenEmbedding, [c.vocabSize, dim], false], [T.embedNorm, [dim], true], [T.embedNormBias, [dim], true]];
  // Only row 0 of the token types is read; one row is stored as a vector.
  if (c.tokenTypes > 0) list.push([T.tokenTypes, c.tokenTypes === 1 ? [dim] : [c.tokenTypes, dim], true]);
  if (c.positions.kind === "learned") list.push([T.positions, [c.contextLength, dim], true]);
  for (let l = 0; l < c.nLayers; l++) {
    if (c.fusedQkv) list.push([T.qkv(l), [3 * dim, dim], false]);
    else list.push([T.q(l), [dim, dim], false], [T.k(l), [dim, dim], false], [T.v(l), [dim, dim], false]);
    list.push([T.output(l), [dim, dim], false], [T.attnNorm(l), [dim], true], [T.attnNormBias(l), [dim], true]);
    list.push([T.up(l), [hiddenDim, dim], false], [T.down(l), [dim, hiddenDim], false]);
    if (c.ffn === "swiglu") list.push([T.gate(l), [hiddenDim, dim], false]);
    if (c.biases) {
      list.push([T.qBias(l), [dim], true], [T.kBias(l), [dim], true], [T.vBias(l), [dim], true], [T.outputBias(l), [dim], true]);
      list.push([T.upBias(l), [hiddenDim], true], [T.downBias(l), [dim], true]);
    }
    list.push([T.layerNorm(l), [dim], true], [T.layerNormBias(l), [dim], true]);
  }
  if (c.classifier !== null) {
    const labels = c.classifier.labels.length;
    list.push([T.cls, [dim, dim], false], [T.clsBias, [dim], true]);
    // One label is stored as a vector (ggml drops the trailing 1), several as a matrix.
    list.push([T.clsOutput, labels === 1 ? [dim] : [labels, dim], true], [T.clsOutputBias, [labels], true]);
  }
  return list;
}
