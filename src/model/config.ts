/**
 * The shape of a llama-family transformer, whatever file it came from.
 */
import type { Yarn } from "./yarn.ts";

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
  /** Each head of q and k is RMS-normalised with its own weights before RoPE (qwen3, gemma3). */
  qkNorm?: boolean;
  /** Phi-3's LongRoPE: per-frequency divisors, long ones for contexts past `originalContext`, short ones otherwise. */
  longRope?: LongRope;
  /** Multiplies RoPE's cos and sin, so q · k by its square (phi3's rope.scaling.attn_factor, YaRN's magnitude); absent = 1. */
  ropeAttnFactor?: number;
  /** YaRN RoPE scaling (gpt-oss): each pair's angle blends interpolated and extrapolated (yarn.ts); absent = none. */
  ropeYarn?: Yarn;
  /** Layers that apply no RoPE at all (smollm3's every fourth: NoPE); absent = none. */
  noRopeLayers?: readonly boolean[];
  /** Some layers attend to a sliding window of positions (gemma3's local layers); absent = none. */
  slidingWindow?: SlidingWindow;
  /** Scale of q · k; absent = 1/sqrt(headDim) (gemma3 27B: 1/sqrt(dim / heads)). */
  attnScale?: number;
  /** Each query head's softmax has a learned extra logit, its sink, that takes weight and gives no value (gpt-oss). */
  attnSinks?: boolean;
  /** The attention's output projection adds a bias (gpt-oss). */
  attnOutputBias?: boolean;
  /** The token embedding is multiplied by this before the first layer (gemma3: sqrt(dim)); absent = 1. */
  embedScale?: number;
  /** The feed-forward's gate activation: SwiGLU ("silu", absent) or GeGLU with the tanh GELU ("gelu": gemma3). */
  ffnActivation?: "silu" | "gelu";
  /** The attention's and the feed-forward's outputs are RMS-normalised before joining the residual stream (gemma3). */
  postNorms?: boolean;
  /** q, k and v are one matrix `attn_qkv` of q rows, then k, then v (phi3); the forward reads row ranges of it. */
  fusedQkv?: boolean;
  /** Gate and up are one matrix `ffn_up` of hiddenDim gate rows, then hiddenDim up rows (phi3). */
  fusedGateUp?: boolean;
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

/** Phi-3's LongRoPE frequency divisors (`rope_factors_long.weight`, `rope_factors_short.weight`), ropeDim/2 each. */
export interface LongRope {
  /** The context the model was trained at before its extension: longer contexts use the long factors. */
  originalContext: number;
  long: readonly number[];
  short: readonly number[];
}

/**
 * Sliding-window attention: a local layer's query at position p attends to positions p - size + 1..p
 * (llama.cpp's LLAMA_SWA_TYPE_STANDARD), a global layer's to all of 0..p.
 */
export interface SlidingWindow {
  size: number;
  /** local[l]: layer l is a sliding-window layer. */
  local: readonly boolean[];
  /** The RoPE of the local layers where it differs from the global layers' (gemma3: its own base, no scaling). */
  rope?: { theta: number; freqScale: number };
}

/** The sliding window of layer l's attention, 0 when it sees the whole context. */
export function layerWindow(c: ModelConfig, l: number): number {
  return c.slidingWindow !== undefined && c.slidingWindow.local[l] === true ? c.slidingWindow.size : 0;
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
