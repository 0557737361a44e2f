/**
 * Writes models of the llama, qwen2 and qwen3 architectures as GGUF files in any tensor type or
 * quantization mix, with the metadata llama.cpp reads: for tests, and for benchmarks of real
 * shapes with random weights. A mix chooses each tensor's type as llama.cpp's llama-quantize
 * does (llama_tensor_get_type): Q4_K_M keeps the classifier and some attn_v / ffn_down layers in
 * Q6_K, Q2_K raises attn_v, attn_output and ffn_down to Q3_K, and a row length a type's blocks
 * do not divide falls back (Q4_K -> Q5_0, Q6_K -> Q8_0, ... and F16 when no block type fits).
 */
import { InputError } from "../errors.ts";
import { GGML_TYPE, quantize, rowBytes, type QuantTypeName } from "../quant/index.ts";
import { Xoshiro128 } from "../util/random.ts";
import { TensorName } from "./checkpoint.ts";
import { queryDim, type ModelConfig } from "./config.ts";
import type { GGUFValue } from "./gguf.ts";
import { gguf, writeGGUF, type TensorToWrite } from "./gguf-writer.ts";

export type Arch = "llama" | "qwen2" | "qwen3";

/** The mixes users download, by llama.cpp's names, and llama.cpp's general.file_type for each. */
export const MODEL_MIXES = {
  F32: 0, F16: 1, BF16: 32, Q4_0: 2, Q4_1: 3, Q8_0: 7, Q5_0: 8, Q5_1: 9, Q2_K: 10, Q3_K_M: 12, Q4_K_S: 14, Q4_K_M: 15,
  Q5_K_S: 16, Q5_K_M: 17, Q6_K: 18,
} as const;
export type ModelMix = keyof typeof MODEL_MIXES;

export function isModelMix(name: string): name is ModelMix {
  return name in MODEL_MIXES;
}

/** The type most tensors of a mix get. */
function baseType(mix: ModelMix): QuantTypeName {
  const base: Record<ModelMix, QuantTypeName> = {
    F32: "F32", F16: "F16", BF16: "BF16", Q4_0: "Q4_0", Q4_1: "Q4_1", Q8_0: "Q8_0", Q5_0: "Q5_0", Q5_1: "Q5_1",
    Q2_K: "Q2_K", Q3_K_M: "Q3_K", Q4_K_S: "Q4_K", Q4_K_M: "Q4_K", Q5_K_S: "Q5_K", Q5_K_M: "Q5_K", Q6_K: "Q6_K",
  };
  return base[mix];
}

/** llama.cpp's use_more_bits: the first and last eighth of the layers, and every third between. */
function useMoreBits(layer: number, nLayers: number): boolean {
  return layer < Math.floor(nLayers / 8) || layer >= Math.floor((7 * nLayers) / 8) || (layer - Math.floor(nLayers / 8)) % 3 === 2;
}

/** The type a type falls back to when a row is not whole blocks of it (llama-quant.cpp). */
const FALLBACK: Partial<Record<QuantTypeName, QuantTypeName>> = {
  Q2_K: "Q4_0", Q3_K: "Q4_0", Q4_K: "Q5_0", Q5_K: "Q5_1", Q6_K: "Q8_0", Q4_0: "F16", Q4_1: "F16", Q5_0: "F16", Q5_1: "F16", Q8_0: "F16",
};

function fits(type: QuantTypeName, cols: number): boolean {
  try {
    rowBytes(type, cols);
    return true;
  } catch {
    return false;
  }
}

/** Tensor `kind` of layer `layer` (null for whole-model tensors) in `mix`, for rows of `cols`. */
export function tensorType(
  mix: ModelMix, kind: "token_embd" | "output" | "attn_v" | "attn_output" | "ffn_down" | "other", layer: number | null,
  nLayers: number, cols: number, tied: boolean, gqa: number,
): QuantTypeName {
  let type = baseType(mix);
  const quantized = !["F32", "F16", "BF16"].includes(type);
  const classifier = kind === "output" || (tied && kind === "token_embd");
  if (quantized && classifier && type !== "Q8_0") type = "Q6_K";
  else if (mix === "Q2_K" && (kind === "attn_output" || kind === "ffn_down")) type = "Q3_K";
  else if (mix === "Q2_K" && kind === "attn_v") type = gqa >= 4 ? "Q4_K" : "Q3_K";
  else if ((mix === "Q4_K_M" || mix === "Q5_K_M") && (kind === "attn_v" || kind === "ffn_down") && useMoreBits(layer ?? 0, nLayers)) type = "Q6_K";
  else if (mix === "Q3_K_M" && kind === "attn_v") type = "Q5_K";
  else if (mix === "Q3_K_M" && (kind === "attn_output" || kind === "ffn_down")) type = "Q4_K";
  while (!fits(type, cols)) {
    const next = FALLBACK[type];
    if (next === undefined) throw new InputError(`no tensor type fits rows of ${cols} values`);
    type = next;
  }
  return type;
}

export interface ModelToWrite {
  arch: Arch;
  name: string;
  config: ModelConfig;
  mix: ModelMix;
  /** Metadata copied as it is: the `tokenizer.*` keys of a real vocabulary (GGUF vocab file, say). */
  tokenizer: ReadonlyMap<string, GGUFValue>;
  /** Seed of the random weights. */
  seed: number;
}

/**
 * Random weights, reproducible from the seed: matrices uniform with std 1/sqrt(fan-in), norms
 * around 1, biases small; each tensor has its own stream, so any tensor can be made alone.
 */
function randomTensor(seed: number, index: number, n: number, std: number, mean = 0): Float32Array {
  const rng = new Xoshiro128((seed * 1000003 + index * 7919) >>> 0);
  const a = new Float32Array(n);
  const amp = std * Math.sqrt(3);
  for (let i = 0; i < n; i++) a[i] = mean + (rng.nextFloat() * 2 - 1) * amp;
  return a;
}

/** Write `model` to `path` as GGUF v3. */
export function writeModelGGUF(path: string, model: ModelToWrite): void {
  const { arch, config: c, mix } = model;
  const kvDim = c.nKvHeads * c.headDim;
  const qDim = queryDim(c);
  const tied = c.sharedClassifier;
  const gqa = c.nHeads / c.nKvHeads;
  const metadata = new Map<string, GGUFValue>([
    ["general.architecture", gguf.str(arch)],
    ["general.name", gguf.str(model.name)],
    ["general.file_type", gguf.u32(MODEL_MIXES[mix])],
    ["general.quantization_version", gguf.u32(2)],
    ["general.alignment", gguf.u32(32)],
    [`${arch}.context_length`, gguf.u32(c.seqLen)],
    [`${arch}.embedding_length`, gguf.u32(c.dim)],
    [`${arch}.block_count`, gguf.u32(c.nLayers)],
    [`${arch}.feed_forward_length`, gguf.u32(c.hiddenDim)],
    [`${arch}.attention.head_count`, gguf.u32(c.nHeads)],
    [`${arch}.attention.head_count_kv`, gguf.u32(c.nKvHeads)],
    [`${arch}.attention.key_length`, gguf.u32(c.headDim)],
    [`${arch}.attention.value_length`, gguf.u32(c.headDim)],
    [`${arch}.rope.dimension_count`, gguf.u32(c.ropeDim ?? c.headDim)],
    [`${arch}.rope.freq_base`, gguf.f32(c.ropeTheta)],
    [`${arch}.attention.layer_norm_rms_epsilon`, gguf.f32(c.normEps)],
    [`${arch}.vocab_size`, gguf.u32(c.vocabSize)],
    ...model.tokenizer,
  ]);
  let index = 0;
  const tensors: TensorToWrite[] = [];
  const matrix = (name: string, rows: number, cols: number, kind: Parameters<typeof tensorType>[1], layer: number | null, std: number) => {
    const type = tensorType(mix, kind, layer, c.nLayers, cols, tied, gqa);
    const i = index++;
    tensors.push({ name, dims: [cols, rows], type: GGML_TYPE[type], data: () => quantize(type, randomTensor(model.seed, i, rows * cols, std)) });
  };
  const vector = (name: string, n: number, std: number, mean: number) => {
    const i = index++;
    tensors.push({ name, dims: [n], type: GGML_TYPE.F32, data: () => quantize("F32", randomTensor(model.seed, i, n, std, mean)) });
  };
  matrix(TensorName.tokenEmbedding, c.vocabSize, c.dim, "token_embd", null, 1);
  if (c.ropeFreqFactors !== undefined) {
    const factors = Float32Array.from(c.ropeFreqFactors);
    tensors.push({ name: TensorName.ropeFreqs, dims: [factors.length], type: GGML_TYPE.F32, data: () => new Uint8Array(factors.buffer) });
  }
  for (let l = 0; l < c.nLayers; l++) {
    vector(TensorName.attnNorm(l), c.dim, 0.05, 1);
    matrix(TensorName.attnQ(l), qDim, c.dim, "other", l, 1 / Math.sqrt(c.dim));
    matrix(TensorName.attnK(l), kvDim, c.dim, "other", l, 1 / Math.sqrt(c.dim));
    matrix(TensorName.attnV(l), kvDim, c.dim, "attn_v", l, 1 / Math.sqrt(c.dim));
    if (arch === "qwen2") {
      vector(TensorName.attnQBias(l), qDim, 0.1, 0);
      vector(TensorName.attnKBias(l), kvDim, 0.1, 0);
      vector(TensorName.attnVBias(l), kvDim, 0.1, 0);
    }
    if (arch === "qwen3") {
      vector(TensorName.attnQNorm(l), c.headDim, 0.05, 1);
      vector(TensorName.attnKNorm(l), c.headDim, 0.05, 1);
    }
    matrix(TensorName.attnOutput(l), c.dim, qDim, "attn_output", l, 1 / Math.sqrt(qDim));
    vector(TensorName.ffnNorm(l), c.dim, 0.05, 1);
    matrix(TensorName.ffnGate(l), c.hiddenDim, c.dim, "other", l, 1 / Math.sqrt(c.dim));
    matrix(TensorName.ffnUp(l), c.hiddenDim, c.dim, "other", l, 1 / Math.sqrt(c.dim));
    matrix(TensorName.ffnDown(l), c.dim, c.hiddenDim, "ffn_down", l, 1 / Math.sqrt(c.hiddenDim));
  }
  vector(TensorName.outputNorm, c.dim, 0.05, 1);
  if (!tied) matrix(TensorName.output, c.vocabSize, c.dim, "output", null, 1 / Math.sqrt(c.dim));
  writeGGUF(path, metadata, tensors);
}
