/**
 * Writes encoder models (GGUF `bert` and `nomic-bert`, as src/model/encoder.ts reads them and
 * llama.cpp's convert_hf_to_gguf.py writes them) with random weights: for benchmarks of real
 * embedding-model shapes (BGE-small, nomic-embed-text) and tests.
 *
 * Weights as gguf-model-writer.ts draws them (one random stream per tensor, matrices std
 * 1/sqrt(input width), norm gains 1 + N(0, 0.05), biases N(0, 0.1)). Every 2-D weight is in the
 * mix's type (llama-quantize quantizes the embedding of an untied encoder too); the vectors, the
 * position table and the token types stay F32, as the converter leaves them and the reader
 * requires (they are read as rows of floats).
 */
import { InputError } from "../errors.ts";
import { EncoderTensor, type EncoderArch } from "../model/encoder.ts";
import type { GGUFValue } from "../model/gguf.ts";
import type { PoolingType } from "../model/pooling-type.ts";
import { GGML_TYPE, type QuantTypeName } from "./quant/index.ts";
import { generalMetadata, randomTensorData } from "./gguf-model-writer.ts";
import { gguf, writeGGUF, type TensorToWrite } from "./gguf-writer.ts";

/** The mixes an encoder is written in: one type for every matrix. */
export const ENCODER_MIXES = ["F32", "F16", "Q8_0"] as const;
export type EncoderMix = (typeof ENCODER_MIXES)[number];

export interface EncoderShape {
  arch: EncoderArch;
  dim: number;
  nLayers: number;
  nHeads: number;
  /** The feed-forward's inner width (GELU's up for bert, SwiGLU's gate and up for nomic-bert). */
  hiddenDim: number;
  vocabSize: number;
  contextLength: number;
  pooling: Exclude<PoolingType, "rank" | "none">;
  /** nomic-bert's RoPE base (rotating the whole head). */
  ropeTheta?: number;
}

export interface EncoderToWrite {
  /** general.name */
  name: string;
  shape: EncoderShape;
  mix: EncoderMix;
  /** A real vocabulary's `tokenizer.*` keys, exactly shape.vocabSize tokens. */
  tokenizer: ReadonlyMap<string, GGUFValue>;
  seed: number;
}

const NORM_NOISE = 0.05;
const BIAS_STD = 0.1;
const NORM_EPS = 1e-12;
/** BERT's token types: sentence A and B (only row 0 is read). */
const TOKEN_TYPES = 2;
/** llama.cpp's LLAMA_POOLING_TYPE_* codes. */
const POOLING_CODE: Record<EncoderShape["pooling"], number> = { mean: 1, cls: 2, last: 3 };

/** The `{arch}.*` and `general.*` keys llama.cpp reads for an encoder. */
function encoderMetadata(model: EncoderToWrite): Map<string, GGUFValue> {
  const { arch, ...s } = model.shape;
  const metadata = new Map<string, GGUFValue>([
    ...generalMetadata(arch, model.name, model.mix),
    [`${arch}.context_length`, gguf.u32(s.contextLength)],
    [`${arch}.embedding_length`, gguf.u32(s.dim)],
    [`${arch}.block_count`, gguf.u32(s.nLayers)],
    [`${arch}.feed_forward_length`, gguf.u32(s.hiddenDim)],
    [`${arch}.attention.head_count`, gguf.u32(s.nHeads)],
    [`${arch}.attention.head_count_kv`, gguf.u32(s.nHeads)],
    [`${arch}.attention.layer_norm_epsilon`, gguf.f32(NORM_EPS)],
    [`${arch}.attention.causal`, gguf.bool(false)],
    [`${arch}.pooling_type`, gguf.u32(POOLING_CODE[s.pooling])],
  ]);
  if (arch === "nomic-bert") {
    metadata.set(`${arch}.rope.dimension_count`, gguf.u32(s.dim / s.nHeads));
    metadata.set(`${arch}.rope.freq_base`, gguf.f32(s.ropeTheta ?? 10000));
  }
  return metadata;
}

function checkEncoder(model: EncoderToWrite): void {
  const s = model.shape;
  const fail = (problem: string): never => {
    throw new InputError(`cannot write ${s.arch} model "${model.name}": ${problem}`);
  };
  for (const [key, v] of Object.entries({ dim: s.dim, nLayers: s.nLayers, nHeads: s.nHeads, hiddenDim: s.hiddenDim, vocabSize: s.vocabSize, contextLength: s.contextLength })) {
    if (!Number.isInteger(v) || v < 1) fail(`${key} is ${v}`);
  }
  if (s.dim % s.nHeads !== 0 || (s.dim / s.nHeads) % 2 !== 0) fail(`width ${s.dim} is not a whole number of ${s.nHeads} heads of even size`);
  const tokens = model.tokenizer.get("tokenizer.ggml.tokens");
  const count = tokens?.type === "array" && tokens.value.itemType === "string" ? tokens.value.items.length : 0;
  if (count !== s.vocabSize) fail(`the tokenizer has ${count} tokens, the model's vocabulary ${s.vocabSize}`);
}

/** The tensors of `model` in llama.cpp's order, each made when written. */
export function encoderTensors(model: EncoderToWrite): TensorToWrite[] {
  const { shape: s, mix, seed } = model;
  const T = EncoderTensor;
  const tensors: TensorToWrite[] = [];
  const add = (name: string, rows: number, cols: number, type: QuantTypeName, mean: number, std: number): void => {
    const dims = rows === 1 ? [cols] : [cols, rows];
    tensors.push({ name, dims, type: GGML_TYPE[type], data: randomTensorData(seed, tensors.length, rows, cols, type, mean, std) });
  };
  const matrix = (name: string, rows: number, cols: number): void => add(name, rows, cols, mix, 0, 1 / Math.sqrt(cols));
  const table = (name: string, rows: number): void => add(name, rows, s.dim, "F32", 0, 1 / Math.sqrt(s.dim));
  const norm = (name: string, n: number): void => add(name, 1, n, "F32", 1, NORM_NOISE);
  const bias = (name: string, n: number): void => add(name, 1, n, "F32", 0, BIAS_STD);
  const bert = s.arch === "bert";

  matrix(T.tokenEmbedding, s.vocabSize, s.dim);
  table(T.tokenTypes, TOKEN_TYPES);
  if (bert) table(T.positions, s.contextLength);
  norm(T.embedNorm, s.dim);
  bias(T.embedNormBias, s.dim);
  for (let l = 0; l < s.nLayers; l++) {
    if (bert) {
      for (const [w, b] of [[T.q(l), T.qBias(l)], [T.k(l), T.kBias(l)], [T.v(l), T.vBias(l)]] as const) {
        matrix(w, s.dim, s.dim);
        bias(b, s.dim);
      }
    } else matrix(T.qkv(l), 3 * s.dim, s.dim);
    matrix(T.output(l), s.dim, s.dim);
    if (bert) bias(T.outputBias(l), s.dim);
    norm(T.attnNorm(l), s.dim);
    bias(T.attnNormBias(l), s.dim);
    matrix(T.up(l), s.hiddenDim, s.dim);
    if (bert) bias(T.upBias(l), s.hiddenDim);
    else matrix(T.gate(l), s.hiddenDim, s.dim);
    matrix(T.down(l), s.dim, s.hiddenDim);
    if (bert) bias(T.downBias(l), s.dim);
    norm(T.layerNorm(l), s.dim);
    bias(T.layerNormBias(l), s.dim);
  }
  return tensors;
}

/** Write `model` to `path` as GGUF v3. */
export function writeEncoderGGUF(path: string, model: EncoderToWrite): void {
  checkEncoder(model);
  const metadata = encoderMetadata(model);
  for (const [key, value] of model.tokenizer) metadata.set(key, value);
  writeGGUF(path, metadata, encoderTensors(model));
}
