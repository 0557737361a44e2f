/**
 * `qwen3moe`: Qwen3's mixture-of-experts models (Qwen3-30B-A3B, 235B-A22B). Attention as qwen3 (per-head
 * q/k norms, NeoX RoPE); the feed-forward is `expert_used_count` of `expert_count` SwiGLU experts
 * chosen per token by the router `ffn_gate_inp`. As llama.cpp's qwen3moe graph (it reads no key
 * for this): the softmax over every expert's logit, the largest ones kept, their weights divided by
 * their sum. `feed_forward_length` is read but unused (the experts' width is
 * `expert_feed_forward_length`).
 */
import type { Architecture } from "./architecture.ts";
import { readExpertsConfig, readTransformerConfig } from "./hparams.ts";

export const qwen3moe: Architecture = {
  name: "qwen3moe",
  config: (file, derived) => ({
    ...readTransformerConfig(file, "qwen3moe", derived, { ropeStyle: "neox", qkvBias: false, qkNorm: true }),
    experts: readExpertsConfig(file, "qwen3moe", { gating: "softmax", normalizeWeights: true, biases: false, activation: "swiglu" }),
  }),
};
