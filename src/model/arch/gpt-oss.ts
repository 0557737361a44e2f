/**
 * `gpt-oss`: OpenAI's gpt-oss-20b and -120b, as llama.cpp reads them (models/openai-moe.cpp). q, k,
 * v and the output projection have biases; every query head's softmax has a learned sink logit
 * (`attn_sinks`); the even layers attend to a sliding window of `attention.sliding_window`
 * positions (llama.cpp's pattern 2, unless the file gives one), the odd ones to everything, all with
 * one NeoX RoPE scaled by YaRN; the feed-forward's input norm is stored as `post_attention_norm`;
 * the feed-forward is a mixture of experts whose router has a bias and chooses by raw logit,
 * weights the chosen by a softmax over them alone, and whose experts (MXFP4 in the released files)
 * have biases and the clamped SwiGLU. The harmony chat format's tokens are the tokenizer's (eog.ts).
 */
import { ModelFormatError } from "../../errors.ts";
import type { ModelConfig } from "../config.ts";
import type { Architecture } from "./architecture.ts";
import { readExpertsConfig, readTransformerConfig, readYarn, slidingWindowLayers } from "./hparams.ts";

/** llama.cpp's sliding-window pattern for gpt-oss when the file has none: the even layers are local. */
const DEFAULT_PATTERN = 2;

export const gptOss: Architecture = {
  name: "gpt-oss",
  config(file, derived) {
    const c = readTransformerConfig(file, "gpt-oss", derived, { ropeStyle: "neox", qkvBias: true, qkNorm: false, ropeScalings: ["yarn"] });
    const size = file.getU32("gpt-oss.attention.sliding_window");
    if (size < 1) throw new ModelFormatError(file.path, `metadata key "gpt-oss.attention.sliding_window" is ${size}, must be positive`);
    const config: ModelConfig = {
      ...c,
      ...readYarn(file, "gpt-oss", c),
      attnSinks: true,
      attnOutputBias: true,
      slidingWindow: { size, local: slidingWindowLayers(file, "gpt-oss", c.nLayers, DEFAULT_PATTERN) },
      experts: readExpertsConfig(file, "gpt-oss", { gating: "softmax-of-chosen", normalizeWeights: false, biases: true, activation: "swiglu-oai" }),
    };
    return config;
  },
  fileTensorName: (name) => name.replace(/^(blk\.\d+\.)ffn_norm\.weight$/, "$1post_attention_norm.weight"),
};
