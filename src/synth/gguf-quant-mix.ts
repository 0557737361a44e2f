/**
 * Quantization mixes by llama.cpp's names (the `Q4_K_M` in a downloaded file's name) and the type
 * each tensor gets in them, as llama-quantize chooses it (llama_tensor_get_type in
 * llama-quant.cpp, without an importance matrix, at the llama.cpp commit node-llama-cpp 3.22.1
 * bundles). The rules that matter for dense llama/qwen2/qwen3 models:
 *
 * - Only 2-D `*.weight` tensors other than norms are quantized; vectors stay F32.
 * - The classifier (output.weight, or token_embd.weight when the output is tied to it) gets Q6_K,
 *   except in Q8_0, and Q8_0 straight away when its rows are not whole blocks of the mix's type.
 * - attn_v and ffn_down get more bits in some layers: Q4_K_M and Q5_K_M use Q6_K in the layers
 *   use_more_bits picks (the first and last eighth, and every third layer between); Q2_K, Q3_K_M,
 *   Q3_K_L and Q4_K_S have their own steps; Q2_K, Q3_K_M and Q3_K_L raise attn_output too.
 * - A row length the chosen type's blocks do not divide falls back: Q2_K and Q3_K to Q4_0, Q4_K to
 *   Q5_0, Q5_K to Q5_1, Q6_K to Q8_0, and to F16 when that does not fit either (SmolLM2-135M's
 *   576-wide rows make most of its Q4_K_M tensors Q5_0 and its classifier Q8_0).
 *
 * - Mixtures of experts: the router (`ffn_gate_inp`) stays F32; a stacked expert tensor
 *   (`ffn_*_exps`, 3-D) gets its role's type (ffn_down's steps for `ffn_down_exps`, by its
 *   layer); in a model of exactly 8 experts attn_k and attn_v get Q8_0 and, in the K mixes from
 *   Q2_K to Q4_K_M, attn_output Q5_K. MXFP4_MOE: every expert stack MXFP4, every other weight Q8_0.
 *
 * Not modelled: Falcon and 70B special cases, the IQ mixes.
 */
import { InputError } from "../errors.ts";
import { blockLayout, type QuantTypeName } from "./quant/index.ts";

/** The mixes, and llama.cpp's general.file_type (llama_ftype) for each. */
export const MODEL_MIXES = {
  F32: 0, F16: 1, BF16: 32, Q4_0: 2, Q4_1: 3, Q8_0: 7, Q5_0: 8, Q5_1: 9, Q2_K: 10, Q2_K_S: 21, Q3_K_S: 11, Q3_K_M: 12,
  Q3_K_L: 13, Q4_K_S: 14, Q4_K_M: 15, Q5_K_S: 16, Q5_K_M: 17, Q6_K: 18, MXFP4_MOE: 38,
} as const;
export type ModelMix = keyof typeof MODEL_MIXES;
export const MODEL_MIX_NAMES = Object.keys(MODEL_MIXES) as ModelMix[];

export function isModelMix(name: string): name is ModelMix {
  return Object.hasOwn(MODEL_MIXES, name);
}

/** The mix a file's general.file_type names (undefined for mixes not listed here, such as the IQ ones). */
export function mixOfFileType(fileType: number): ModelMix | undefined {
  return MODEL_MIX_NAMES.find((m) => MODEL_MIXES[m] === fileType);
}

/** The type most tensors of a mix get (llama_ftype_get_default_type). */
export function mixBaseType(mix: ModelMix): QuantTypeName {
  const base: Record<ModelMix, QuantTypeName> = {
    F32: "F32", F16: "F16", BF16: "BF16", Q4_0: "Q4_0", Q4_1: "Q4_1", Q8_0: "Q8_0", Q5_0: "Q5_0", Q5_1: "Q5_1",
    Q2_K: "Q2_K", Q2_K_S: "Q2_K", Q3_K_S: "Q3_K", Q3_K_M: "Q3_K", Q3_K_L: "Q3_K", Q4_K_S: "Q4_K", Q4_K_M: "Q4_K",
    Q5_K_S: "Q5_K", Q5_K_M: "Q5_K", Q6_K: "Q6_K", MXFP4_MOE: "MXFP4",
  };
  return base[mix];
}

/** What a tensor is to the mix rules. */
export type TensorRole = "token_embd" | "output" | "attn_k" | "attn_v" | "attn_output" | "ffn_down" | "other";

/** The role of a tensor by its GGUF name (`blk.N.attn_v.weight`, ...); null for tensors never quantized. */
export function tensorRole(name: string, nDims: number): TensorRole | null {
  if (nDims < 2 || !name.endsWith("weight") || name.includes("_norm.weight") || name.includes("ffn_gate_inp.weight")) return null;
  if (name === "output.weight") return "output";
  if (name === "token_embd.weight") return "token_embd";
  if (name.includes("attn_k.weight")) return "attn_k";
  // phi3's fused q/k/v takes attn_v's rules (llama-quant.cpp: category_is_attn_v).
  if (name.includes("attn_v.weight") || name.includes("attn_qkv.weight")) return "attn_v";
  if (name.includes("attn_output.weight")) return "attn_output";
  if (name.includes("ffn_down")) return "ffn_down";
  return "other";
}

/** The model facts the rules read. */
export interface MixContext {
  nLayers: number;
  /** No output.weight: token_embd is also the classifier. */
  tied: boolean;
  /** Query heads per KV head (n_gqa). */
  gqa: number;
  /** Experts per layer (0 for a dense model): a model of exactly 8 gets more bits in attention. */
  experts: number;
}

/** llama.cpp's use_more_bits: the first and last eighth of the layers, and every third layer between. */
export function useMoreBits(layer: number, nLayers: number): boolean {
  const eighth = Math.floor(nLayers / 8);
  return layer < eighth || layer >= Math.floor((7 * nLayers) / 8) || (layer - eighth) % 3 === 2;
}

const isQuantized = (type: QuantTypeName): boolean => type !== "F32" && type !== "F16" && type !== "BF16";
const blockValues = (type: QuantTypeName): number => blockLayout(type).values;

/** Where a type goes when a row is not whole blocks of it (tensor_type_fallback). */
const FALLBACK: Partial<Record<QuantTypeName, QuantTypeName>> = { Q2_K: "Q4_0", Q3_K: "Q4_0", Q4_K: "Q5_0", Q5_K: "Q5_1", Q6_K: "Q8_0" };

/** The type for rows of `cols` values: `type` when its blocks divide them, else its fallback, else F16. */
export function fallbackType(type: QuantTypeName, cols: number): QuantTypeName {
  if (cols % blockValues(type) === 0) return type;
  const next = FALLBACK[type] ?? type;
  return cols % blockValues(next) === 0 ? next : "F16";
}

/** The mix's own choice for a role, before any fallback (llama_tensor_get_type_impl). */
function mixChoice(mix: ModelMix, role: TensorRole, layer: number, cols: number, ctx: MixContext, stacked: boolean): QuantTypeName {
  const base = mixBaseType(mix);
  const n = ctx.nLayers;
  const eighth = Math.floor(n / 8);
  if (mix === "MXFP4_MOE") return stacked && role !== "output" && role !== "token_embd" ? "MXFP4" : "Q8_0";
  if (role === "output" || (ctx.tied && role === "token_embd")) {
    if (cols % blockValues(base) !== 0) return "Q8_0";
    return base === "Q8_0" ? base : "Q6_K";
  }
  if ((role === "attn_k" || role === "attn_v") && ctx.experts === 8) return "Q8_0";
  if (role === "attn_v") {
    if (mix === "Q2_K") return ctx.gqa >= 4 ? "Q4_K" : "Q3_K";
    if (mix === "Q2_K_S" && ctx.gqa >= 4) return "Q4_K";
    if (mix === "Q3_K_M") return layer < 2 ? "Q5_K" : "Q4_K";
    if (mix === "Q3_K_L") return "Q5_K";
    if ((mix === "Q4_K_M" || mix === "Q5_K_M") && useMoreBits(layer, n)) return "Q6_K";
    if (mix === "Q4_K_S" && layer < 4) return "Q5_K";
    return base;
  }
  if (role === "ffn_down") {
    if (mix === "Q2_K") return "Q3_K";
    if (mix === "Q2_K_S") return layer < eighth ? "Q4_K" : base;
    if (mix === "Q3_K_M") return layer < Math.floor(n / 16) ? "Q5_K" : "Q4_K";
    if (mix === "Q3_K_L") return "Q5_K";
    if ((mix === "Q4_K_M" || mix === "Q5_K_M") && useMoreBits(layer, n)) return "Q6_K";
    if (mix === "Q4_K_S" && layer < eighth) return "Q5_K";
    return base;
  }
  if (role === "attn_output" && ctx.experts === 8) {
    return (["Q2_K", "Q3_K_S", "Q3_K_M", "Q4_K_S", "Q4_K_M"] as ModelMix[]).includes(mix) ? "Q5_K" : base;
  }
  if (role === "attn_output") {
    if (mix === "Q2_K") return "Q3_K";
    if (mix === "Q3_K_M") return "Q4_K";
    if (mix === "Q3_K_L") return "Q5_K";
  }
  return base;
}

/**
 * The ggml type of a 2-D weight in `mix`: `role` and `layer` (the tensor's index among the tensors
 * of its role, which is its layer in llama-ordered files; 0 for whole-model tensors), rows of
 * `cols` values (ggml's ne[0]); `stacked` for an expert stack (a 3-D `*_exps` tensor). With `pure`,
 * every weight gets the mix's base type (llama-quantize --pure), still with the fallback for rows
 * its blocks do not divide.
 */
export function tensorType(mix: ModelMix, role: TensorRole, layer: number, cols: number, ctx: MixContext, pure = false, stacked = false): QuantTypeName {
  const base = mixBaseType(mix);
  if (!Number.isInteger(cols) || cols < 1) throw new InputError(`bad row length ${cols}`);
  if (!isQuantized(base)) return base;
  const chosen = pure ? base : mixChoice(mix, role, layer, cols, ctx, stacked);
  return fallbackType(chosen, cols);
}
