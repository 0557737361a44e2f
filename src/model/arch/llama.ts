/**
 * `llama`: Llama 2 and 3.x (with Llama 3.1's frequency factors in `rope_freqs.weight`), TinyLlama,
 * SmolLM, Mistral without a sliding window. The converter permutes the q and k weights so that
 * RoPE rotates adjacent pairs, as in llama2.c.
 */
import type { Architecture } from "./architecture.ts";
import { readTransformerConfig } from "./hparams.ts";

export const llama: Architecture = {
  name: "llama",
  config: (file, derived) => readTransformerConfig(file, "llama", derived, { ropeStyle: "interleaved", qkvBias: false, qkNorm: false }),
};
