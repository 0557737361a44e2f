/**
 * The random-weight Qwen3-Reranker-shaped file of the rerank reference
 * (test/fixtures/qwen3-rerank/): qwen3 as the other random qwen files (dim 256, 3 layers, 4 heads
 * / 2 KV heads of 64, q/k norms, SwiGLU of 768) with SmolLM2's vocabulary, tied output, rank
 * pooling and the yes/no classifier rows, written by the project's writer from a fixed seed.
 */
import { join } from "node:path";
import { makeConfig } from "../../src/model/config.ts";
import { tokenizerMetadata } from "../../src/synth/gguf-tokenizer-metadata.ts";
import { writeQwen3RerankerGGUF } from "../../src/synth/qwen3-reranker-writer.ts";

export const RERANKER_VOCAB = "vocab/ggml-vocab-smollm.gguf";
export const RERANKER_SEED = 105;

export const RERANKER_CONFIG = makeConfig({
  dim: 256, hiddenDim: 768, nLayers: 3, nHeads: 4, nKvHeads: 2, headDim: 64, vocabSize: 49152, seqLen: 4096, normEps: 1e-6,
  sharedClassifier: true, ropeTheta: 1e6, ropeStyle: "neox", qkNorm: true,
});

/** Write the reranker into `dir` from the vocabulary file at `vocabPath`; its path. */
export function writeReranker(dir: string, vocabPath: string, headType: "F32" | "F16" | "BF16" = "F32"): string {
  const path = join(dir, headType === "F32" ? "rnd-qwen3-rerank-F32.gguf" : `rnd-qwen3-rerank-head-${headType}.gguf`);
  writeQwen3RerankerGGUF(path, { name: "rnd-qwen3-rerank", config: RERANKER_CONFIG, tokenizer: tokenizerMetadata(vocabPath), seed: RERANKER_SEED, headType });
  return path;
}
