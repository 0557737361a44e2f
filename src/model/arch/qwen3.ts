/**
 * `qwen3`: Qwen3 dense models. No projection biases; every q and k head is RMS-normalised with
 * its own weights (`attn_q_norm`, `attn_k_norm`) before NeoX RoPE; the head size comes from
 * `attention.key_length` and may differ from dim / heads (Qwen3-0.6B: 1024 wide, 16 heads of 128).
 */
import type { Architecture } from "./architecture.ts";
import { readTransformerConfig } from "./hparams.ts";

export const qwen3: Architecture = {
  name: "qwen3",
  config: (file, derived) => readTransformerConfig(file, "qwen3", derived, { ropeStyle: "neox", qkvBias: false, qkNorm: true }),
};
