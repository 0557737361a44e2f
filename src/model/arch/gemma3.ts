/**
 * `gemma3`: Gemma 3 (270M to 27B), as llama.cpp reads it (models/gemma3.cpp). The embedding is
 * multiplied by sqrt(dim); q and k heads are RMS-normalised before NeoX RoPE; the attention's and
 * the feed-forward's outputs are RMS-normalised again before the residual add; the feed-forward is
 * GeGLU with the tanh GELU. Most layers are local: layer l attends to a sliding window of
 * `attention.sliding_window` positions when l % P < P - 1 (P = `attention.sliding_window_pattern`,
 * default 6: five local layers, then a global one), or as a per-layer array of booleans says, and
 * rotates with its own base (`rope.freq_base_swa`, default 10000) and no scaling; the global layers
 * use `rope.freq_base` and the file's scaling (linear 8 on 4B-27B). Queries are scaled by
 * 1/sqrt(headDim), except on the 62-layer 27B: 1/sqrt(dim / heads).
 */
import { ModelFormatError } from "../../errors.ts";
import type { GGUFFile } from "../gguf.ts";
import { attentionScale } from "../attention.ts";
import type { ModelConfig, SlidingWindow } from "../config.ts";
import type { Architecture } from "./architecture.ts";
import { readTransformerConfig, slidingWindowLayers } from "./hparams.ts";

/** Layers of Gemma 3 27B, whose queries llama.cpp scales by 1/sqrt(dim / heads). */
const GEMMA3_27B_LAYERS = 62;
/** llama.cpp's sliding-window pattern when the file has none. */
const DEFAULT_PATTERN = 6;
/** llama.cpp's base of the local layers' RoPE when the file has none. */
const DEFAULT_LOCAL_ROPE_BASE = 10000;

export const gemma3: Architecture = {
  name: "gemma3",
  config(file, derived) {
    const c = readTransformerConfig(file, "gemma3", derived, { ropeStyle: "neox", qkvBias: false, qkNorm: true });
    const softcap = file.getF32("gemma3.final_logit_softcapping", 0);
    if (softcap !== 0) throw new ModelFormatError(file.path, `final logit soft-capping (${softcap}) is not supported`);
    const config: ModelConfig = {
      ...c,
      embedScale: Math.fround(Math.sqrt(c.dim)),
      attnScale: attentionScale(c.nLayers === GEMMA3_27B_LAYERS ? c.dim / c.nHeads : c.headDim),
      ffnActivation: "gelu",
      postNorms: true,
    };
    const window = slidingWindow(file, c.nLayers);
    if (window !== null) config.slidingWindow = window;
    return config;
  },
};

/** The local layers, their window and RoPE; null when the file has no window (every layer global, as llama.cpp runs it). */
function slidingWindow(file: GGUFFile, nLayers: number): SlidingWindow | null {
  const size = file.getU32("gemma3.attention.sliding_window", 0);
  if (size === 0) return null;
  const local = slidingWindowLayers(file, "gemma3", nLayers, DEFAULT_PATTERN);
  const theta = file.getF32("gemma3.rope.freq_base_swa", DEFAULT_LOCAL_ROPE_BASE);
  if (!(theta > 0)) throw new ModelFormatError(file.path, `rope.freq_base_swa ${theta} must be positive`);
  return { size, local, rope: { theta, freqScale: 1 } };
}
