/**
 * `phi3`: Phi-3, Phi-3.5 and Phi-4-mini, as llama.cpp reads them (models/phi3.cpp). q, k and v are
 * one matrix (`attn_qkv`: q rows, then k, then v) and gate and up are one (`ffn_up`: gate rows,
 * then up; SwiGLU of the halves), read as row ranges of them (weights.ts). NeoX RoPE, partial where
 * `rope.dimension_count` says (Phi-4-mini). LongRoPE (Phi-3-mini-128k, Phi-3.5, Phi-4-mini): each
 * frequency is divided by `rope_factors_long.weight` when the run's context exceeds
 * `rope.scaling.original_context_length`, else by `rope_factors_short.weight` (read by
 * gguf-checkpoint.ts), and `rope.scaling.attn_factor` multiplies cos and sin. The file's
 * `attention.sliding_window` is read and ignored, as llama.cpp does (it runs phi3 without a window).
 */
import { ModelFormatError } from "../../errors.ts";
import { TensorName } from "../checkpoint.ts";
import type { ModelConfig } from "../config.ts";
import type { Architecture } from "./architecture.ts";
import { readTransformerConfig } from "./hparams.ts";

export const phi3: Architecture = {
  name: "phi3",
  readsLongRope: true,
  config(file, derived) {
    const c = readTransformerConfig(file, "phi3", derived, { ropeStyle: "neox", qkvBias: false, qkNorm: false, ropeScalings: ["longrope"] });
    const config: ModelConfig = { ...c, fusedGateUp: true };
    // Fused q/k/v as the converter writes them; separate ones are read as every llama-family file's.
    if (file.tensor(TensorName.attnQkv(0)) !== undefined) config.fusedQkv = true;
    const attnFactor = file.getF32("phi3.rope.scaling.attn_factor", 1);
    if (!(attnFactor > 0)) throw new ModelFormatError(file.path, `rope.scaling.attn_factor ${attnFactor} must be positive`);
    if (attnFactor !== 1) config.ropeAttnFactor = attnFactor;
    return config;
  },
};
