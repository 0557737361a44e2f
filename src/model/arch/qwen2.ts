/** `qwen2`: Qwen2 and Qwen2.5. Biases on the q, k and v projections; RoPE rotates the two halves of a head (NeoX). */
import type { Architecture } from "./architecture.ts";
import { readTransformerConfig } from "./hparams.ts";

export const qwen2: Architecture = {
  name: "qwen2",
  config: (file, derived) => readTransformerConfig(file, "qwen2", derived, { ropeStyle: "neox", qkvBias: true, qkNorm: false }),
};
