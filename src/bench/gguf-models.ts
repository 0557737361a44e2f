/**
 * Random-weight GGUF models of real shapes for the benchmarks, written once into the models
 * folder with the project's GGUF writer in any type or mix (F32, Q8_0, Q4_K_M, ...): stories110M
 * (llama, Llama 2's vocabulary), SmolLM2-135M (llama, its own 49152-token vocabulary, tied) and
 * Qwen2.5-0.5B (qwen2, biases, tied). Each shape's hyper-parameters are the real model's
 * config.json; the tokenizers are read in place from the shared folder.
 */
import { existsSync, mkdirSync, renameSync, rmSync } from "node:fs";
import { basename, dirname, join } from "node:path";
import { InputError, PagellmError } from "../errors.ts";
import { makeConfig, type ModelConfig } from "../model/config.ts";
import { readGGUF } from "../model/gguf.ts";
import { ARCHS, mixOfFileType, writeModelGGUF, type Arch, type ModelMix } from "../synth/gguf-model-writer.ts";
import { openCheckpoint } from "../model/load.ts";
import { padVocabulary, tokenizerMetadata } from "../synth/gguf-tokenizer-metadata.ts";

/** The GGUF form of a shape: its architecture, the real model's hyper-parameters and a real vocabulary. */
export interface GGUFShape {
  arch: Arch;
  config: ModelConfig;
  /** A GGUF file whose `tokenizer.*` keys the model gets, in the shared folder's vocab/ directory. */
  vocabFile: string;
  /** Said next to results measured on it. */
  note?: string;
}

/**
 * Bumped when the writer or a shape changes what a random file holds: files of another version
 * are written again (general.name carries it).
 */
export const RANDOM_GGUF_VERSION = 2;
export const WEIGHTS_SEED = 1234;

/** The GGUF forms of the named shapes (src/bench/bench-models.ts SHAPES). */
export const GGUF_SHAPES: Readonly<Record<string, GGUFShape>> = {
  // karpathy/llama2.c stories110M: dim 768, 12 layers, 12 heads, hidden 2048, vocab 32000, context 1024, shared classifier.
  stories110M: {
    arch: "llama",
    config: makeConfig({ dim: 768, hiddenDim: 2048, nLayers: 12, nHeads: 12, nKvHeads: 12, vocabSize: 32000, seqLen: 1024, sharedClassifier: true }),
    vocabFile: "ggml-vocab-llama-spm.gguf",
  },
  // HuggingFaceTB/SmolLM2-135M config.json: hidden 576, intermediate 1536, 30 layers, 9 heads / 3 KV heads, vocab 49152,
  // tied embeddings, rope_theta 100000, rms_norm_eps 1e-5, max_position_embeddings 8192.
  "smollm2-135m": {
    arch: "llama",
    config: makeConfig({
      dim: 576, hiddenDim: 1536, nLayers: 30, nHeads: 9, nKvHeads: 3, vocabSize: 49152, seqLen: 8192, sharedClassifier: true, ropeTheta: 100000,
    }),
    vocabFile: "ggml-vocab-smollm.gguf",
  },
  // Qwen/Qwen2.5-0.5B config.json: hidden 896, intermediate 4864, 24 layers, 14 heads / 2 KV heads, vocab 151936, tied,
  // rope_theta 1e6, rms_norm_eps 1e-6, max_position_embeddings 32768; q/k/v biases.
  "qwen2.5-0.5b": {
    arch: "qwen2",
    config: makeConfig({
      dim: 896, hiddenDim: 4864, nLayers: 24, nHeads: 14, nKvHeads: 2, vocabSize: 151936, seqLen: 32768, sharedClassifier: true,
      ropeTheta: 1e6, ropeStyle: "neox", normEps: 1e-6, qkvBias: true,
    }),
    vocabFile: "ggml-vocab-smollm.gguf",
    note: "qwen2.5-0.5b shape; its vocabulary is SmolLM2's byte-level BPE (49152 tokens, Qwen's is not in the shared folder) padded with unused [PAD] tokens to the real 151936",
  },
};

/** Llama 2's vocabulary, the tokenizer of custom shapes' GGUF form. */
const CUSTOM_SHAPE_VOCAB = "ggml-vocab-llama-spm.gguf";
const CUSTOM_SHAPE_MIN_VOCAB = 32000;

/**
 * The GGUF form of a shape: a named one's from GGUF_SHAPES; a custom shape's as a llama model with
 * Llama 2's vocabulary (padded when the shape's is larger; a smaller one cannot be had).
 */
export function ggufShapeOf(shape: { name: string; config: ModelConfig }): GGUFShape {
  const named = GGUF_SHAPES[shape.name];
  if (named !== undefined) return named;
  if (shape.config.vocabSize < CUSTOM_SHAPE_MIN_VOCAB) {
    throw new InputError(`shape ${shape.name}: a random GGUF model has Llama 2's vocabulary, so vocab must be at least ${CUSTOM_SHAPE_MIN_VOCAB}`);
  }
  return { arch: "llama", config: shape.config, vocabFile: CUSTOM_SHAPE_VOCAB };
}

/** The general.name a random model of `shape` in `mix` carries. */
function randomModelName(shapeName: string, mix: ModelMix): string {
  return `random-${shapeName}-${mix} v${RANDOM_GGUF_VERSION}`;
}

/** True when `file` is a complete random model of this version (a header that reads and names it). */
export function isCurrent(file: string, name: string): boolean {
  try {
    return readGGUF(file).getString("general.name", "") === name;
  } catch (e) {
    if (e instanceof PagellmError) return false;
    throw e;
  }
}

/**
 * Path of the cached random GGUF model of a shape in `mix`, written first when it is
 * missing, incomplete or of an older version (to a temporary name, then renamed, so a concurrent
 * reader never sees half a file). `vocabDir` holds the vocabulary files (../shared/vocab).
 */
export function ensureRandomGGUF(
  named: { name: string; config: ModelConfig }, mix: ModelMix, modelsDir: string, vocabDir: string, log: (line: string) => void,
): string {
  const shapeName = named.name;
  const shape = ggufShapeOf(named);
  const file = join(modelsDir, `random-${shapeName}-${mix}.gguf`);
  const name = randomModelName(shapeName, mix);
  if (existsSync(file) && isCurrent(file, name)) return file;
  const vocab = join(vocabDir, shape.vocabFile);
  if (!existsSync(vocab)) throw new InputError(`${vocab} not found (the shared data folder is absent?): pass --model`);
  log(`writing ${file} (random ${mix} weights of the ${shapeName} shape, once)`);
  writeAtomically(file, (tmp) => writeModelGGUF(tmp, {
    arch: shape.arch, name, config: shape.config, mix, seed: WEIGHTS_SEED,
    tokenizer: padVocabulary(tokenizerMetadata(vocab), shape.config.vocabSize),
  }));
  return file;
}

/**
 * Make `file` with `write(tmp)`: written to a temporary name, then renamed, so a concurrent reader
 * never sees half a file (its folder made first).
 */
export function writeAtomically(file: string, write: (tmp: string) => void): void {
  mkdirSync(dirname(file), { recursive: true });
  const tmp = `${file}.${process.pid}.tmp`;
  try {
    write(tmp);
    renameSync(tmp, file);
  } finally {
    rmSync(tmp, { force: true });
  }
}

/**
 * The F32 twin of a GGUF model file (--f32-baseline): random F32 weights of exactly its
 * architecture and hyper-parameters, with its tokenizer, written once into `modelsDir`, so a
 * downloaded quantized model is measured next to pagellm's F32 decode of the same shape.
 * Returns the twin's path and the file's mix (undefined when general.file_type names none here).
 */
export function ensureF32Twin(model: string, modelsDir: string, log: (line: string) => void): { path: string; mix: ModelMix | undefined } {
  const file = readGGUF(model);
  const arch = file.getString("general.architecture");
  if (!(ARCHS as readonly string[]).includes(arch)) throw new InputError(`--f32-baseline: ${model} has architecture ${arch}; the writer makes ${ARCHS.join(", ")}`);
  const mix = mixOfFileType(file.getU32("general.file_type", 0));
  const stem = basename(model).replace(/\.gguf$/i, "");
  const path = join(modelsDir, `random-twin-${stem}-F32.gguf`);
  const name = `random F32 twin of ${stem} v${RANDOM_GGUF_VERSION}`;
  if (existsSync(path) && isCurrent(path, name)) return { path, mix };
  const { config } = openCheckpoint(model);
  const tokenizer = new Map([...file.metadata].filter(([key]) => key.startsWith("tokenizer.")));
  log(`writing ${path} (random F32 weights of ${basename(model)}'s shape, once)`);
  writeAtomically(path, (tmp) => writeModelGGUF(tmp, { arch: arch as Arch, name, config, mix: "F32", seed: WEIGHTS_SEED, tokenizer: padVocabulary(tokenizer, config.vocabSize) }));
  return { path, mix };
}
