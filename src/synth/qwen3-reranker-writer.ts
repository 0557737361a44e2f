/**
 * Writes a Qwen3-Reranker-shaped GGUF file as llama.cpp's convert_hf_to_gguf.py writes the real
 * one (its Qwen3Model with is_rerank): a qwen3 decoder with tied output, `qwen3.pooling_type` 4
 * (rank), `qwen3.classifier.output_labels` ["yes", "no"], `cls.output.weight` holding the "yes"
 * and "no" rows of the (tied) token embedding in that order, and the converter's rerank prompt as
 * `tokenizer.chat_template.rerank` (named in `tokenizer.chat_templates`). Random weights from the
 * seed, F32, bit for bit the same on every run.
 */
import { InputError } from "../errors.ts";
import { TensorName } from "../model/checkpoint.ts";
import type { ModelConfig } from "../model/config.ts";
import type { GGUFValue } from "../model/gguf.ts";
import { GGML_TYPE } from "./quant/index.ts";
import { f32ToBF16, f32ToHalf } from "../util/half.ts";
import { chunksOf, gguf, type TensorToWrite } from "./gguf-writer.ts";
import { modelTensors, writeModelGGUF, type ModelToWrite } from "./gguf-model-writer.ts";

/** convert_hf_to_gguf.py's rerank template for Qwen3-Reranker (its {query} and {document} replaced by llama.cpp's server). */
export const QWEN3_RERANK_TEMPLATE =
  "<|im_start|>system\nJudge whether the Document meets the requirements based on the Query and the Instruct provided. Note that the answer can only be \"yes\" or \"no\".<|im_end|>\n" +
  "<|im_start|>user\n<Instruct>: Given a web search query, retrieve relevant passages that answer the query\n<Query>: {query}\n<Document>: {document}<|im_end|>\n" +
  "<|im_start|>assistant\n<think>\n\n</think>\n\n";

/** The classifier's labels, in the order of cls.output's rows. */
export const QWEN3_RERANK_LABELS = ["yes", "no"] as const;

/** llama.cpp's LLAMA_POOLING_TYPE_RANK. */
const POOLING_RANK = 4;

export interface RerankerToWrite {
  name: string;
  /** A qwen3 shape with a tied output (sharedClassifier), as Qwen3-Reranker-0.6B. */
  config: ModelConfig;
  /** `tokenizer.*` keys of a real vocabulary that has the tokens "yes" and "no". */
  tokenizer: ReadonlyMap<string, GGUFValue>;
  seed: number;
  /** The type cls.output.weight is stored in (F32 when absent; a converted model keeps its float type: F16, BF16). */
  headType?: "F32" | "F16" | "BF16";
}

/** Write the reranker to `path` (F32 weights; the head as headType says). */
export function writeQwen3RerankerGGUF(path: string, reranker: RerankerToWrite): void {
  if (!reranker.config.sharedClassifier) throw new InputError(`cannot write reranker "${reranker.name}": its output must be tied to the token embedding`);
  const tokenizer = new Map(reranker.tokenizer);
  tokenizer.set("tokenizer.chat_template.rerank", gguf.str(QWEN3_RERANK_TEMPLATE));
  tokenizer.set("tokenizer.chat_templates", gguf.strings(["rerank"]));
  const model: ModelToWrite = {
    arch: "qwen3", name: reranker.name, config: reranker.config, mix: "F32", tokenizer, seed: reranker.seed,
    extraMetadata: new Map([["qwen3.pooling_type", gguf.u32(POOLING_RANK)], ["qwen3.classifier.output_labels", gguf.strings([...QWEN3_RERANK_LABELS])]]),
  };
  const tensors = modelTensors(model);
  const rows = QWEN3_RERANK_LABELS.map((label) => tokenId(reranker, label));
  tensors.push(classifierRows(tensors, rows, reranker.config.dim, reranker.headType ?? "F32"));
  writeModelGGUF(path, model, tensors);
}

/** The id of the vocabulary's token spelled `piece` exactly. */
function tokenId(reranker: RerankerToWrite, piece: string): number {
  const tokens = reranker.tokenizer.get("tokenizer.ggml.tokens");
  if (tokens?.type === "array" && tokens.value.itemType === "string") {
    const items = tokens.value.items;
    for (let i = 0; i < items.length; i++) if (items.get(i) === piece) return i;
  }
  throw new InputError(`cannot write reranker "${reranker.name}": its vocabulary has no token "${piece}"`);
}

/** cls.output.weight: the embedding's rows `ids`, in order (as the converter stacks lm_head's "yes" and "no" rows). */
function classifierRows(tensors: readonly TensorToWrite[], ids: readonly number[], dim: number, type: "F32" | "F16" | "BF16"): TensorToWrite {
  const embedding = tensors.find((t) => t.name === TensorName.tokenEmbedding)!;
  const out = new Float32Array(ids.length * dim);
  let firstRow = 0;
  for (const chunk of chunksOf(embedding.data)) {
    const values = new Float32Array(chunk.buffer.slice(chunk.byteOffset, chunk.byteOffset + chunk.byteLength));
    const chunkRows = values.length / dim;
    ids.forEach((id, r) => {
      if (id >= firstRow && id < firstRow + chunkRows) out.set(values.subarray((id - firstRow) * dim, (id - firstRow + 1) * dim), r * dim);
    });
    firstRow += chunkRows;
  }
  if (type === "F32") return { name: "cls.output.weight", dims: [dim, ids.length], type: GGML_TYPE.F32, data: new Uint8Array(out.buffer) };
  const narrow = type === "F16" ? f32ToHalf : f32ToBF16;
  const halves = Uint16Array.from(out, (x) => narrow(x));
  return { name: "cls.output.weight", dims: [dim, ids.length], type: GGML_TYPE[type], data: new Uint8Array(halves.buffer) };
}
