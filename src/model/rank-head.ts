/**
 * A decoder reranker's head as a GGUF file holds it (Qwen3-Reranker's layout, as llama.cpp's
 * convert_hf_to_gguf.py writes it): `cls.output.weight`, one row per label of
 * `{arch}.classifier.output_labels` (["yes", "no"]: lm_head's rows of those tokens), an optional
 * `cls.output.bias`, and the rerank prompt `tokenizer.chat_template.rerank` with its {query} and
 * {document} placeholders.
 */
import { closeSync, openSync, readSync } from "node:fs";
import { ModelFormatError } from "../errors.ts";
import { classifierLabels } from "./encoder.ts";
import { tensorInfo } from "./gguf-checkpoint.ts";
import { GGML_TYPES, type GGUFFile } from "./gguf.ts";
import { bf16ToF32, halfToF32 } from "../util/half.ts";

/** Decoder architectures llama.cpp ranks by their last token, with a softmax over the labels. */
const LAST_TOKEN_RANKERS: ReadonlySet<string> = new Set(["qwen3", "qwen3vl"]);

export const RankTensor = { output: "cls.output.weight", outputBias: "cls.output.bias" } as const;

export interface DecoderRankHead {
  /** The labels, one per row of `weights` (Qwen3-Reranker: "yes", "no"). */
  readonly labels: readonly string[];
  /** cls.output.weight, labels x width, row after row. */
  readonly weights: Float32Array;
  /** cls.output.bias, or null. */
  readonly bias: Float32Array | null;
  /** The file's rerank prompt (`tokenizer.chat_template.rerank`), or null: llama.cpp's pair layout then. */
  readonly template: string | null;
}

/**
 * The rank head of a decoder file of `arch` and hidden size `width`, or null when it has no
 * cls.output. ModelFormatError for a head of the wrong shape or type, or on an architecture that
 * llama.cpp does not rank by the last token.
 */
export function readDecoderRankHead(file: GGUFFile, arch: string, width: number): DecoderRankHead | null {
  const output = file.tensor(RankTensor.output);
  if (output === undefined) return null;
  if (!LAST_TOKEN_RANKERS.has(arch)) throw new ModelFormatError(file.path, `a ${arch} reranker is not supported (only qwen3's layout, ranked by its last token)`);
  const labels = classifierLabels(file, arch);
  const weights = f32Tensor(file, RankTensor.output, [labels.length, width]);
  const bias = file.tensor(RankTensor.outputBias) === undefined ? null : f32Tensor(file, RankTensor.outputBias, [labels.length]);
  const key = "tokenizer.chat_template.rerank";
  return { labels, weights, bias, template: file.has(key) ? file.getString(key) : null };
}

/**
 * A tensor of `shape` ([rows, cols] or [n]) read from the file as f32 values (its shape and type
 * checked as every tensor's): F32 as stored, F16 and BF16 widened exactly (a converted
 * Qwen3-Reranker keeps its model's float type); quantized heads are refused.
 */
function f32Tensor(file: GGUFFile, name: string, shape: number[]): Float32Array {
  const info = tensorInfo(file, name, shape);
  const type = info.encoding.kind === "ggml" ? GGML_TYPES.get(info.encoding.type)?.name : "F32";
  if (type !== "F32" && type !== "F16" && type !== "BF16") throw new ModelFormatError(file.path, `tensor ${name} is ${type ?? "of an unknown type"}; the rank head must be F32, F16 or BF16`);
  const bytes = new Uint8Array(info.byteLength);
  const fd = openSync(file.path, "r");
  try {
    if (readSync(fd, bytes, 0, bytes.length, info.offset) !== bytes.length) throw new ModelFormatError(file.path, `tensor ${name} is cut short`);
  } finally {
    closeSync(fd);
  }
  if (type === "F32") return new Float32Array(bytes.buffer);
  const halves = new Uint16Array(bytes.buffer);
  const widen = type === "F16" ? halfToF32 : bf16ToF32;
  return Float32Array.from(halves, (h) => widen(h));
}
