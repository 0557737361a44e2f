/**
 * Attention facts both backends share: how a layer scores its keys, and the usual scale.
 */

/**
 * How a layer's attention scores its keys: q · k times `scale`, over the last `window` positions
 * (the query's own included) of a sliding-window layer, over all of them when `window` is 0.
 * Both backends' attention kernels take it.
 */
export interface AttentionScores {
  scale: number;
  window: number;
  /** Address of nHeads f32 sink logits (gpt-oss), each head's softmax's extra logit; 0 or absent: none (WebAssembly only). */
  sinks?: number;
}

/**
 * The usual attention scale, 1/sqrt(headDim) in f32 steps (as the kernels computed it before it
 * became an argument): what pagedAttention's `scale` is unless the model says otherwise.
 */
export function attentionScale(headDim: number): number {
  return Math.fround(1 / Math.fround(Math.sqrt(headDim)));
}
