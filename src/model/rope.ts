/**
 * Which RoPE each layer applies, and its cos/sin tables. Most models rotate every layer alike;
 * gemma3's local (sliding-window) layers have a base of their own and no scaling, smollm3 leaves
 * RoPE out of every fourth layer (NoPE), Phi-3's LongRoPE divides each frequency by a factor that
 * depends on the context, gpt-oss's YaRN blends interpolated and extrapolated angles (yarn.ts).
 * Both backends build their tables here, so they rotate by the same numbers.
 */
import type { ModelConfig } from "./config.ts";
import { yarnAngle, type Yarn } from "./yarn.ts";

/** One RoPE: angle(pos, k) = pos * freqScale * theta^(-2k/ropeDim) / factors[k]; cos and sin times attnFactor. */
export interface RopeParams {
  theta: number;
  /** Linear scaling: positions are multiplied by this (1 = none). */
  freqScale: number;
  /** Divisors of each frequency (Llama 3.1's rope_freqs, Phi-3's LongRoPE factors), or null. */
  factors: readonly number[] | null;
  /** Multiplies cos and sin (Phi-3 LongRoPE's attn_factor, YaRN's magnitude; 1 = none). */
  attnFactor: number;
  /** YaRN's blend of each pair's angle (gpt-oss), or null. */
  yarn: Yarn | null;
}

/** The model's distinct RoPEs, and for each layer the index of its own (null: the layer has none). */
export interface LayerRopes {
  sets: RopeParams[];
  ofLayer: (number | null)[];
}

/** The RoPE of the global (non-windowed) layers, as the model's context `c.seqLen` selects its factors. */
function globalRope(c: ModelConfig): RopeParams {
  // llama.cpp (get_rope_factors): rope_freqs wins; else LongRoPE's long factors past the original context.
  const long = c.longRope;
  const factors = c.ropeFreqFactors ?? (long === undefined ? null : c.seqLen > long.originalContext ? long.long : long.short);
  return { theta: c.ropeTheta, freqScale: c.ropeFreqScale ?? 1, factors, attnFactor: c.ropeAttnFactor ?? 1, yarn: c.ropeYarn ?? null };
}

/** Every layer's RoPE: the global one, the sliding-window layers' own where they have one, none for NoPE layers. */
export function layerRopes(c: ModelConfig): LayerRopes {
  const sets: RopeParams[] = [globalRope(c)];
  const local = c.slidingWindow?.rope;
  if (local !== undefined) sets.push({ ...sets[0]!, theta: local.theta, freqScale: local.freqScale });
  const ofLayer = Array.from({ length: c.nLayers }, (_, l): number | null => {
    if (c.noRopeLayers?.[l] === true) return null;
    return local !== undefined && c.slidingWindow!.local[l] === true ? 1 : 0;
  });
  return { sets, ofLayer };
}

/**
 * cos and sin of every position below seqLen and pair k < ropeDim/2, [seqLen][ropeDim/2] each, in
 * f32 steps like run.c (f32 frequency, f32 angle) so that the rounding matches it where run.c
 * applies (scale 1, no factors); then times attnFactor in f32.
 */
export function ropeTable(p: RopeParams, seqLen: number, ropeDim: number): { cos: Float32Array; sin: Float32Array } {
  const half = ropeDim / 2;
  const cos = new Float32Array(seqLen * half);
  const sin = new Float32Array(seqLen * half);
  const fr = Math.fround;
  const attn = fr(p.attnFactor);
  for (let k = 0; k < half; k++) {
    let freq = fr(1 / fr(Math.pow(p.theta, fr((2 * k) / ropeDim))));
    if (p.factors !== null) freq = fr(freq / p.factors[k]!);
    for (let pos = 0; pos < seqLen; pos++) {
      const linear = fr((p.freqScale === 1 ? pos : fr(pos * p.freqScale)) * freq);
      const angle = p.yarn === null ? linear : yarnAngle(p.yarn, linear, k);
      cos[pos * half + k] = Math.cos(angle);
      sin[pos * half + k] = Math.sin(angle);
      if (attn !== 1) {
        cos[pos * half + k] = fr(cos[pos * half + k]! * attn);
        sin[pos * half + k] = fr(sin[pos * half + k]! * attn);
      }
    }
  }
  return { cos, sin };
}
