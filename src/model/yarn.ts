/**
 * YaRN RoPE scaling (gpt-oss: factor 32 over an original context of 4096), as ggml computes it
 * (ggml.c ggml_rope_yarn_corr_dims, ggml-cpu ops.cpp rope_yarn) with llama.cpp's context settings
 * (llama-context.cpp: ext_factor 1 for a YaRN model, the attention factor that cancels ggml's own
 * magnitude correction unless `rope.scaling.yarn_log_multiplier` is set):
 *
 *   extrapolated = pos * theta^(-2k/ropeDim)            (the unscaled angle of pair k)
 *   interpolated = extrapolated / factor
 *   ramp(k)      = 1 - clamp((k - low) / max(0.001, high - low), 0, 1)
 *   angle        = interpolated * (1 - ramp) + extrapolated * ramp
 *   cos, sin     of the angle, times the magnitude (magnitude below)
 *
 * Pairs below `low` (high frequencies, many turns within the original context) keep their angle,
 * pairs above `high` are interpolated, the ones between blend.
 */

const fr = Math.fround;

/** What a YaRN-scaled RoPE needs beyond its base: the scaling and the blend's pair range. */
export interface Yarn {
  /** rope.scaling.factor: positions are interpolated by 1/factor. */
  factor: number;
  /** The pairs [low, high] between which interpolated and extrapolated angles blend (ggml_rope_yarn_corr_dims). */
  low: number;
  high: number;
}

/** ggml_rope_yarn_corr_dim: the pair whose wavelength fits `rotations` turns in the original context. */
function correctionDim(ropeDim: number, originalContext: number, rotations: number, base: number): number {
  return fr(fr(ropeDim * fr(Math.log(fr(originalContext / fr(rotations * fr(2 * Math.PI)))))) / fr(2 * fr(Math.log(base))));
}

/** The blend's pair range for beta_fast and beta_slow (llama.cpp's defaults: 32 and 1). */
export function yarn(factor: number, ropeDim: number, originalContext: number, base: number, betaFast = 32, betaSlow = 1): Yarn {
  const start = Math.floor(correctionDim(ropeDim, originalContext, betaFast, base));
  const end = Math.ceil(correctionDim(ropeDim, originalContext, betaSlow, base));
  return { factor, low: Math.max(0, start), high: Math.min(ropeDim - 1, end) };
}

/** The angle of pair k whose unscaled angle is `extrapolated` (an f32), in ggml's f32 steps. */
export function yarnAngle(y: Yarn, extrapolated: number, k: number): number {
  const interpolated = fr(fr(1 / y.factor) * extrapolated);
  const ramp = fr(1 - Math.min(1, Math.max(0, fr(fr(k - y.low) / Math.max(0.001, fr(y.high - y.low))))));
  return fr(fr(interpolated * fr(1 - ramp)) + fr(extrapolated * ramp));
}

/**
 * What cos and sin are multiplied by: llama.cpp's attention factor (`rope.scaling.attn_factor`,
 * default 1, and with `yarn_log_multiplier` m its mscale ratio) times ggml's 1 + 0.1 ln(factor):
 * for gpt-oss 1 + 0.1 ln 32 = 1.3466.
 */
export function yarnMagnitude(factor: number, attnFactor = 1, logMultiplier = 0): number {
  const mscale = (m: number) => (factor <= 1 ? 1 : fr(fr(fr(0.1 * m) * fr(Math.log(factor))) + 1));
  const correction = fr(1 + fr(0.1 * fr(Math.log(factor))));
  // llama-context.cpp: the context's factor cancels ggml's correction unless a log multiplier is set.
  const context = logMultiplier !== 0 ? fr(mscale(1) / mscale(logMultiplier)) : mscale(1);
  return fr(fr(fr(context * fr(1 / correction)) * attnFactor) * correction);
}
