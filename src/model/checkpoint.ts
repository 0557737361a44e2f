/**
 * A checkpoint, whatever its file format, described as a config plus a list of tensors at file
 * offsets. Format readers (llama2c.ts, later gguf) only describe; weights.ts places the bytes in
 * linear memory. Tensor names follow GGUF's llama convention.
 */
import type { ModelConfig } from "./config.ts";

export type TensorEncoding =
  /** Plain little-endian f32. */
  | { kind: "f32" }
  /**
   * llama2.c version-2 int8: `rows*cols` int8 values, then one f32 scale per `groupSize` values of
   * the flattened tensor (groups may straddle rows when groupSize does not divide cols).
   */
  | { kind: "q8-llama2c"; groupSize: number }
  /**
   * A ggml block type as GGUF stores it (F16, BF16, Q8_0, Q4_K, ...): rows of `cols / blockSize` blocks of
   * `typeSize` bytes each, kept in memory exactly as in the file. `type` is the ggml type code (GGML_TYPES).
   */
  | { kind: "ggml"; type: number };

export interface TensorInfo {
  name: string;
  /** [rows, cols] for matrices (out = W·x has one output per row), [n] for vectors. */
  shape: number[];
  encoding: TensorEncoding;
  /** Byte offset of the tensor's data in the file. */
  offset: number;
  byteLength: number;
}

export interface Checkpoint {
  file: string;
  format: string;
  config: ModelConfig;
  tensors: Map<string, TensorInfo>;
  /**
   * Token ids that end a generation besides the tokenizer's EOS. llama2.c's TinyStories models
   * separate stories with BOS and run.c stops when it samples BOS, so those checkpoints list 1.
   */
  extraStopTokenIds: number[];
}

/** Tensor names, GGUF style. */
export const TensorName = {
  tokenEmbedding: "token_embd.weight",
  outputNorm: "output_norm.weight",
  output: "output.weight",
  attnNorm: (l: number) => `blk.${l}.attn_norm.weight`,
  ropeFreqs: "rope_freqs.weight",
  ropeFactorsLong: "rope_factors_long.weight",
  ropeFactorsShort: "rope_factors_short.weight",
  attnQ: (l: number) => `blk.${l}.attn_q.weight`,
  attnQkv: (l: number) => `blk.${l}.attn_qkv.weight`,
  attnQBias: (l: number) => `blk.${l}.attn_q.bias`,
  attnKBias: (l: number) => `blk.${l}.attn_k.bias`,
  attnVBias: (l: number) => `blk.${l}.attn_v.bias`,
  attnQNorm: (l: number) => `blk.${l}.attn_q_norm.weight`,
  attnKNorm: (l: number) => `blk.${l}.attn_k_norm.weight`,
  attnK: (l: number) => `blk.${l}.attn_k.weight`,
  attnV: (l: number) => `blk.${l}.attn_v.weight`,
  attnOutput: (l: number) => `blk.${l}.attn_output.weight`,
  attnOutputBias: (l: number) => `blk.${l}.attn_output.bias`,
  /** gpt-oss's attention sinks: one logit per query head [nHeads]. */
  attnSinks: (l: number) => `blk.${l}.attn_sinks.weight`,
  postAttnNorm: (l: number) => `blk.${l}.post_attention_norm.weight`,
  postFfnNorm: (l: number) => `blk.${l}.post_ffw_norm.weight`,
  ffnNorm: (l: number) => `blk.${l}.ffn_norm.weight`,
  ffnGate: (l: number) => `blk.${l}.ffn_gate.weight`,
  ffnDown: (l: number) => `blk.${l}.ffn_down.weight`,
  ffnUp: (l: number) => `blk.${l}.ffn_up.weight`,
  /** The router [experts][dim] and its bias [experts] (gpt-oss). */
  ffnRouter: (l: number) => `blk.${l}.ffn_gate_inp.weight`,
  ffnRouterBias: (l: number) => `blk.${l}.ffn_gate_inp.bias`,
  /** The experts' matrices, [experts][rows][cols] each, and their biases [experts][rows] (gpt-oss). */
  ffnGateExperts: (l: number) => `blk.${l}.ffn_gate_exps.weight`,
  ffnUpExperts: (l: number) => `blk.${l}.ffn_up_exps.weight`,
  ffnDownExperts: (l: number) => `blk.${l}.ffn_down_exps.weight`,
  ffnGateExpertsBias: (l: number) => `blk.${l}.ffn_gate_exps.bias`,
  ffnUpExpertsBias: (l: number) => `blk.${l}.ffn_up_exps.bias`,
  ffnDownExpertsBias: (l: number) => `blk.${l}.ffn_down_exps.bias`,
} as const;
