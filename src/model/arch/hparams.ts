/**
 * The hyper-parameters every llama-family architecture stores under `{arch}.*`, read and checked
 * as llama.cpp reads them (llama-model.cpp, llm_load_hparams).
 */
import { ModelFormatError } from "../../errors.ts";
import type { GGUFFile } from "../gguf.ts";
import { quoteFileText } from "../../util/file-text.ts";
import type { ExpertsConfig, ModelConfig, RopeStyle } from "../config.ts";
import { yarn, yarnMagnitude } from "../yarn.ts";
import type { TensorDerived } from "./architecture.ts";

/** Optional parts of a layer. */
export interface LayerOptions {
  ropeStyle: RopeStyle;
  qkvBias: boolean;
  qkNorm: boolean;
  /**
   * RoPE scalings the architecture reads besides none and linear ("longrope": phi3, whose factors
   * are tensors the caller reads); any other is refused rather than computed wrongly.
   */
  ropeScalings?: readonly string[];
}

/** A reader of positive `{arch}.NAME` integers (with an optional fallback): ModelFormatError naming the key when one is below 1. */
export function positiveKeyReader(file: GGUFFile, arch: string): (name: string, fallback?: number) => number {
  return (name, fallback) => {
    const key = `${arch}.${name}`;
    const v = file.getU32(key, fallback);
    if (v < 1) throw new ModelFormatError(file.path, `metadata key "${key}" is ${v}, must be positive`);
    return v;
  };
}

/** Read `{arch}.*` keys into a ModelConfig. Throws ModelFormatError naming the key when one is missing or absurd. */
export function readTransformerConfig(file: GGUFFile, arch: string, derived: TensorDerived, options: LayerOptions): ModelConfig {
  const key = (name: string) => `${arch}.${name}`;
  const positive = positiveKeyReader(file, arch);
  const dim = positive("embedding_length");
  const nHeads = positive("attention.head_count");
  const nKvHeads = positive("attention.head_count_kv", nHeads);
  if (nHeads % nKvHeads !== 0) {
    throw new ModelFormatError(file.path, `${nHeads} attention heads cannot be grouped over ${nKvHeads} key/value heads`);
  }
  const headDim = positive("attention.key_length", Math.floor(dim / nHeads));
  const valueDim = positive("attention.value_length", headDim);
  if (valueDim !== headDim) {
    throw new ModelFormatError(file.path, `value head size ${valueDim} differs from key head size ${headDim}, which is not supported`);
  }
  if (headDim % 2 !== 0) throw new ModelFormatError(file.path, `head size ${headDim} is odd; RoPE rotates pairs`);
  const ropeDim = positive("rope.dimension_count", headDim);
  if (ropeDim > headDim || ropeDim % 2 !== 0) {
    throw new ModelFormatError(file.path, `rope.dimension_count ${ropeDim} must be even and at most the head size ${headDim}`);
  }
  // Every layer has its own tensors: more layers than the file has tensors is a broken or crafted
  // header, refused before a per-layer list of billions of names is built.
  const nLayers = positive("block_count");
  if (nLayers > file.tensors.length) {
    throw new ModelFormatError(file.path, `metadata key "${key("block_count")}" is ${nLayers}, more layers than the file has tensors (${file.tensors.length})`);
  }
  const config: ModelConfig = {
    dim,
    hiddenDim: positive("feed_forward_length"),
    nLayers,
    nHeads,
    nKvHeads,
    vocabSize: derived.vocabSize,
    seqLen: positive("context_length"),
    headDim,
    normEps: file.getF32(key("attention.layer_norm_rms_epsilon"), 1e-5),
    ropeTheta: file.getF32(key("rope.freq_base"), 10000),
    ropeStyle: options.ropeStyle,
    sharedClassifier: derived.sharedClassifier,
    ropeFreqScale: ropeFreqScale(file, arch, options.ropeScalings ?? []),
  };
  if (ropeDim !== headDim) config.ropeDim = ropeDim;
  if (options.qkvBias) config.qkvBias = true;
  if (options.qkNorm) config.qkNorm = true;
  if (!(config.normEps > 0) || !(config.ropeTheta > 0)) {
    throw new ModelFormatError(file.path, `RMS epsilon ${config.normEps} and RoPE base ${config.ropeTheta} must be positive`);
  }
  return config;
}

/**
 * YaRN RoPE scaling when `rope.scaling.type` is "yarn" (gpt-oss): the blend of interpolated and
 * extrapolated angles over `rope.scaling.original_context_length` (default the context length)
 * with ggml's betas (32, 1), and the magnitude of cos and sin (`rope.scaling.attn_factor`, default
 * 1, times 1 + 0.1 ln factor); positions are then not linearly scaled. Nothing for another type.
 */
export function readYarn(file: GGUFFile, arch: string, c: ModelConfig): Pick<ModelConfig, "ropeFreqScale" | "ropeYarn" | "ropeAttnFactor"> {
  if (file.getString(`${arch}.rope.scaling.type`, "none") !== "yarn") return {};
  const factor = file.getF32(`${arch}.rope.scaling.factor`, 1);
  const original = file.getU32(`${arch}.rope.scaling.original_context_length`, c.seqLen);
  if (!(factor > 0) || original < 1) throw new ModelFormatError(file.path, `YaRN factor ${factor} over ${original} positions must be positive`);
  return {
    ropeFreqScale: 1,
    ropeYarn: yarn(factor, c.ropeDim ?? c.headDim, original, c.ropeTheta),
    ropeAttnFactor: yarnMagnitude(factor, file.getF32(`${arch}.rope.scaling.attn_factor`, 1)),
  };
}

/**
 * Which layers attend to a sliding window, as llama.cpp's load_swa_pattern: a per-layer array of
 * flags (`attention.sliding_window_pattern` as booleans or integers), else layer l is local when
 * l % P < P - 1 with P that key's number, or `defaultPattern` (gemma3: 6; gpt-oss: 2, the even layers).
 */
export function slidingWindowLayers(file: GGUFFile, arch: string, nLayers: number, defaultPattern: number): boolean[] {
  const key = `${arch}.attention.sliding_window_pattern`;
  const value = file.metadata.get(key);
  if (value !== undefined && value.type === "array") {
    // One flag per layer (booleans, or integers 0/1), as newer converters write it.
    const flags = value.value.itemType === "bool" ? value.value.items : file.getI32Array(key);
    if (flags.length !== nLayers) throw new ModelFormatError(file.path, `${key} has ${flags.length} entries for ${nLayers} layers`);
    return Array.from(flags, (f) => f !== 0);
  }
  const pattern = file.getU32(key, defaultPattern);
  return Array.from({ length: nLayers }, (_, l) => pattern === 0 || l % pattern < pattern - 1);
}

/** How an architecture's experts are routed and gated (ExpertsConfig less the file's counts). */
export type ExpertsKind = Omit<ExpertsConfig, "count" | "used" | "hiddenDim">;

/**
 * The mixture-of-experts keys (`expert_count`, `expert_used_count`, `expert_feed_forward_length`),
 * checked as llama.cpp checks them: at least one expert used, no more than there are.
 */
export function readExpertsConfig(file: GGUFFile, arch: string, kind: ExpertsKind): ExpertsConfig {
  const key = (name: string) => `${arch}.${name}`;
  const count = file.getU32(key("expert_count"));
  const used = file.getU32(key("expert_used_count"));
  const hiddenDim = file.getU32(key("expert_feed_forward_length"));
  if (count < 1 || used < 1 || used > count) {
    throw new ModelFormatError(file.path, `${used} experts used of ${count}: a mixture of experts uses at least one and at most all of them`);
  }
  if (hiddenDim < 1) throw new ModelFormatError(file.path, `metadata key "${key("expert_feed_forward_length")}" is ${hiddenDim}, must be positive`);
  return { count, used, hiddenDim, ...kind };
}

/**
 * Linear RoPE scaling (`rope.scaling.type` "linear", or the older `rope.scale_linear`): positions
 * are multiplied by 1/factor. Scalings the architecture does not read (`extra`, beyond none and
 * linear) change the attention itself and are refused rather than computed wrongly.
 */
function ropeFreqScale(file: GGUFFile, arch: string, extra: readonly string[]): number {
  const type = file.getString(`${arch}.rope.scaling.type`, "none");
  if (type === "none") {
    const legacy = file.getF32(`${arch}.rope.scale_linear`, 1);
    return legacy > 0 ? 1 / legacy : 1;
  }
  if (type !== "linear" && !extra.includes(type)) {
    throw new ModelFormatError(file.path, `RoPE scaling ${quoteFileText(type)} is not supported (only ${["none", "linear", ...extra].join(", ")})`);
  }
  const factor = file.getF32(`${arch}.rope.scaling.factor`, 1);
  if (!(factor > 0)) throw new ModelFormatError(file.path, `rope.scaling.factor ${factor} must be positive`);
  return 1 / factor;
}
