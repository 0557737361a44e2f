/**
 * `smollm3`: SmolLM3, a llama whose every fourth layer (3, 7, 11, ...) applies no RoPE (NoPE), as
 * llama.cpp reads it (models/smollm3.cpp: a fixed step of 4, no metadata key). Interleaved RoPE,
 * the converter having permuted q and k as for llama.
 */
import type { Architecture } from "./architecture.ts";
import { readTransformerConfig } from "./hparams.ts";

/** llama.cpp's n_no_rope_layer_step for smollm3: layer l has no RoPE when (l + 1) % 4 == 0. */
const NO_ROPE_LAYER_STEP = 4;

export const smollm3: Architecture = {
  name: "smollm3",
  config(file, derived) {
    const c = readTransformerConfig(file, "smollm3", derived, { ropeStyle: "interleaved", qkvBias: false, qkNorm: false });
    return { ...c, noRopeLayers: Array.from({ length: c.nLayers }, (_, l) => (l + 1) % NO_ROPE_LAYER_STEP === 0) };
  },
};
