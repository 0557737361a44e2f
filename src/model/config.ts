/**
 * The shape of a llama-family transformer, whatever file it came from.
 */
export type RopeStyle =
  /** Rotate adjacent pairs (x[2i], x[2i+1]): llama2.c and llama.cpp's `llama` architecture. */
  | "interleaved"
  /** Rotate halves (x[i], x[i + headDim/2]): GPT-NeoX and Hugging Face Llama checkpoints. */
  | "neox";

/**
 * The float arithmetic of the forward pass.
 *   default  this engine's kernels (assembly/*.ts, SIMD, batch-invariant)
 *   runq     bit-exact emulation of llama2.c's runq.c as gcc -Ofast -march=native builds it on
 *            AMD Zen 4/5 with glibc (assembly/runq.ts): int8 checkpoints then generate exactly
 *            runq's text, since its int8 activation rounding amplifies any one-ulp difference
 */
export type Numerics = "default" | "runq";

export interface ModelConfig {
  /** Transformer width (embedding size). */
  dim: number;
  /** Width of the SwiGLU feed-forward layer. */
  hiddenDim: number;
  nLayers: number;
  /** Query heads. */
  nHeads: number;
  /** Key/value heads; fewer than nHeads means grouped-query attention. */
  nKvHeads: number;
  vocabSize: number;
  /** Longest sequence the model was trained for (context length). */
  seqLen: number;
  /** Per-head width: dim / nHeads. */
  headDim: number;
  /** RMSNorm epsilon. */
  normEps: number;
  /** RoPE base frequency. */
  ropeTheta: number;
  ropeStyle: RopeStyle;
  /** True when the output classifier is the token embedding table. */
  sharedClassifier: boolean;
  /** Float arithmetic of the forward pass; absent means "default". */
  numerics?: Numerics;
  /** Leading dimensions of each head that RoPE rotates; absent = all of headDim. */
  ropeDim?: number;
  /** Linear RoPE scaling: positions are multiplied by this before rotating; absent = 1. */
  ropeFreqScale?: number;
  /** Divisors of each RoPE frequency (ropeDim/2 of them): Llama 3.1+'s `rope_freqs.weight`. */
  ropeFreqFactors?: readonly number[];
  /** The q, k and v projections add a bias (qwen2). */
  qkvBias?: boolean;
  /** Each head of q and k is RMS-normalised with its own weights before RoPE (qwen3). */
  qkNorm?: boolean;
  /** A mixture of experts in place of every layer's feed-forward (qwen3moe, gpt-oss); absent = dense. */
  experts?: ExpertsConfig;
}

/**
 * A mixture-of-experts feed-forward as llama.cpp's build_moe_ffn computes it: the router's logits
 * (plus its bias, when the file has one) choose `used` of `count` experts per token, each a
 * gated feed-forward of width `hiddenDim`, and the token's output is their weighted sum.
 */
export interface ExpertsConfig {
  /** Experts per layer (`expert_count`). */
  count: number;
  /** Experts each token runs (`expert_used_count`). */
  used: number;
  /** Width of one expert's feed-forward (`expert_feed_forward_length`). */
  hiddenDim: number;
  /**
   * What the chosen experts' weights are made from: "softmax", the softmax over all the router's
   * logits (qwen3moe); "softmax-of-chosen", the softmax over the chosen logits only (gpt-oss).
   * Either way the experts are the `used` largest logits.
   */
  gating: "softmax" | "softmax-of-chosen";
  /** The chosen weights are divided by their sum (qwen3moe). */
  normalizeWeights: boolean;
  /** The router and every expert matrix add a bias (gpt-oss). */
  biases: boolean;
  /**
   * The expert's gate: "swiglu", silu(gate) * up; "swiglu-oai", gpt-oss's clamped one,
   * g * sigmoid(1.702 g) * (u + 1) with g = min(gate, 7) and u = clamp(up, -7, 7).
   */
  activation: "swiglu" | "swiglu-oai";
}

/** Width of a layer's feed-forward: the dense one's, or one expert's. */
export function feedForwardDim(c: ModelConfig): number {
  return c.experts?.hiddenDim ?? c.hiddenDim;
}

/** Width of the query projection's output (all heads side by side); dim unless the head size says otherwise. */
export function queryDim(c: ModelConfig): number {
  return c.nHeads * c.headDim;
}

/** Fill in derived fields with llama2.c's defaults. */
export function makeConfig(
  c: Omit<ModelConfig, "headDim" | "normEps" | "ropeTheta" | "ropeStyle"> & Partial<ModelConfig>,
): ModelConfig {
  return {
    headDim: c.dim / c.nHeads,
    normEps: 1e-5,
    ropeTheta: 10000,
    ropeStyle: "interleaved",
    ...c,
  };
}
