/**
 * What distinguishes one GGUF architecture of the llama family from another. Every architecture
 * here is the same pre-norm transformer (RMSNorm, RoPE attention with grouped-query heads, a gated
 * feed-forward): an architecture reads its hyper-parameters from the file's `{name}.*` metadata
 * and says which optional parts its layers have (ModelConfig's optional fields). The forward pass (../llama.ts) runs them all.
 */
import type { GGUFFile } from "../gguf.ts";
import type { ModelConfig } from "../config.ts";

export interface Architecture {
  /** `general.architecture` in the file. */
  readonly name: string;
  /**
   * The model's shape from the metadata. `vocabSize` and `sharedClassifier` come from the
   * tensors (the embedding's rows, whether `output.weight` exists); `ropeFreqFactors` come from the
   * `rope_freqs.weight` tensor, read by the caller once this shape is known (and checks it).
   */
  config(file: GGUFFile, fromTensors: TensorDerived): ModelConfig;
  /**
   * Reads Phi-3's LongRoPE factors (`rope_factors_long.weight` and `rope_factors_short.weight`)
   * when the file has them: the caller reads the tensors into ModelConfig.longRope.
   */
  readonly readsLongRope?: boolean;
  /**
   * Where the architecture stores a tensor under another name than the one the forward pass reads
   * it by (gpt-oss: the feed-forward's input norm is `post_attention_norm`); absent = the same name.
   */
  fileTensorName?(name: string): string;
}

/** Hyper-parameters that the tensors, not the metadata, determine. */
export interface TensorDerived {
  vocabSize: number;
  sharedClassifier: boolean;
}
