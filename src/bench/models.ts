/**
 * The models the benchmarks run: random weights in the shapes of real checkpoints, written once
 * with the project's llama2.c writer into a cache folder and reused, or a model file the user
 * names. Random weights cost the same to run as trained ones of the same shape, and need no
 * download.
 */
import { existsSync, mkdirSync, renameSync, rmSync, statSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { InputError } from "../errors.ts";
import { weightTraffic } from "../model/weights.ts";
import { makeConfig, type ModelConfig } from "../model/config.ts";
import { llama2cFileSize, writeLlama2c, type Llama2cFormat } from "../model/llama2c-writer.ts";
import { isGGUF, openCheckpoint } from "../model/load.ts";
import { writeModelGGUF, type Arch, type ModelMix } from "../model/gguf-model-writer.ts";
import { tokenizerMetadata } from "../model/gguf-tokenizer-metadata.ts";
import { gguf } from "../model/gguf-writer.ts";
import type { GGUFValue } from "../model/gguf.ts";
import { randomWeights } from "../model/random-weights.ts";

/** The repository root (this file is src/bench/models.ts). */
export const REPO_ROOT = resolve(import.meta.dir, "..", "..");
/** Where random models are cached unless --models-dir says otherwise (gitignored). */
export const DEFAULT_MODELS_DIR = join(REPO_ROOT, "models");
/** The shared data folder beside the repository. */
export const SHARED_DIR = resolve(REPO_ROOT, "..", "shared");
/** Llama 2's SentencePiece vocabulary (32000 tokens), in llama2.c's tokenizer.bin format. */
export const DEFAULT_TOKENIZER = join(SHARED_DIR, "models", "llama2c", "llama2_tokenizer.bin");

/** Seed of every random model, so a cached file is the same whoever wrote it. */
const WEIGHTS_SEED = 1234;

export interface Shape {
  name: string;
  config: ModelConfig;
  /** Architecture of its GGUF form (default llama). */
  arch?: Arch;
  /** Vocabulary of its GGUF form, when it differs from the llama2.c form's 32000 (the real model's). */
  ggufVocabSize?: number;
  /** Said next to results measured on it (e.g. a vocabulary that differs from the real model's). */
  note?: string;
}

/** Real model shapes (llama2.c's TinyStories models and SmolLM2-135M), with shared classifiers as the originals. */
export const SHAPES: Readonly<Record<string, Shape>> = {
  stories15M: {
    name: "stories15M",
    config: makeConfig({ dim: 288, hiddenDim: 768, nLayers: 6, nHeads: 6, nKvHeads: 6, vocabSize: 32000, seqLen: 256, sharedClassifier: true }),
  },
  stories110M: {
    name: "stories110M",
    config: makeConfig({ dim: 768, hiddenDim: 2048, nLayers: 12, nHeads: 12, nKvHeads: 12, vocabSize: 32000, seqLen: 1024, sharedClassifier: true }),
  },
  "smollm2-135m": {
    name: "smollm2-135m",
    config: makeConfig({ dim: 576, hiddenDim: 1536, nLayers: 30, nHeads: 9, nKvHeads: 3, vocabSize: 32000, seqLen: 2048, sharedClassifier: true }),
    ggufVocabSize: 49152,
    note: "smollm2-135m shape; its llama2.c form has a 32000-token vocabulary (the real model has 49152, as its GGUF form) so the llama2 tokenizer fits",
  },
  "qwen2.5-0.5b": {
    name: "qwen2.5-0.5b",
    arch: "qwen2",
    config: makeConfig({
      dim: 896, hiddenDim: 4864, nLayers: 24, nHeads: 14, nKvHeads: 2, vocabSize: 151936, seqLen: 32768, sharedClassifier: true,
      ropeTheta: 1e6, ropeStyle: "neox", normEps: 1e-6, qkvBias: true,
    }),
    note: "qwen2.5-0.5b shape (GGUF only); its vocabulary is Llama 2's 32000 tokens padded with unused ones to 151936",
  },
};

export const SHAPE_NAMES = Object.keys(SHAPES);

/** Keys of a custom shape spec, e.g. "dim=64,hidden=172,layers=2,heads=4,kv=4,vocab=512,seq=256". */
const CUSTOM_KEYS = { dim: "dim", hidden: "hiddenDim", layers: "nLayers", heads: "nHeads", kv: "nKvHeads", vocab: "vocabSize", seq: "seqLen" } as const;
type CustomKey = keyof typeof CUSTOM_KEYS;

export const SHAPE_HELP =
  `${SHAPE_NAMES.join(" | ")} | a custom shape "dim=D,hidden=H,layers=L,heads=N,kv=K,vocab=V,seq=S"`;

/** A named shape, or a custom one spelled as key=value pairs (every key required). */
export function parseShape(spec: string): Shape {
  const named = SHAPES[spec];
  if (named) return named;
  if (!spec.includes("=")) throw new InputError(`unknown shape "${spec}": use ${SHAPE_HELP}`);
  const values: Partial<Record<CustomKey, number>> = {};
  for (const part of spec.split(",")) {
    const [key, raw] = part.split("=").map((s) => s.trim()) as [string, string | undefined];
    const v = Number(raw);
    if (!(key in CUSTOM_KEYS) || raw === undefined || !Number.isInteger(v) || v <= 0) {
      throw new InputError(`bad shape part "${part}" in "${spec}": use ${SHAPE_HELP}`);
    }
    values[key as CustomKey] = v;
  }
  const missing = (Object.keys(CUSTOM_KEYS) as CustomKey[]).filter((k) => values[k] === undefined);
  if (missing.length > 0) throw new InputError(`shape "${spec}" lacks ${missing.join(", ")}`);
  const v = values as Record<CustomKey, number>;
  if (v.dim % v.heads !== 0 || v.heads % v.kv !== 0 || (v.dim / v.heads) % 2 !== 0) {
    throw new InputError(`shape "${spec}": dim must be a multiple of heads with an even head size, heads a multiple of kv`);
  }
  const config = makeConfig({
    dim: v.dim, hiddenDim: v.hidden, nLayers: v.layers, nHeads: v.heads, nKvHeads: v.kv, vocabSize: v.vocab, seqLen: v.seq,
    sharedClassifier: true,
  });
  const name = `d${v.dim}-h${v.hidden}-l${v.layers}-q${v.heads}-kv${v.kv}-v${v.vocab}-s${v.seq}`;
  return { name, config };
}

/** Weight encoding of a random llama2.c model: f32 (legacy, as the real stories*.bin) or int8 (v2, Q8_0). */
export type WeightFormat = "f32" | "q8";
export const WEIGHT_FORMATS: readonly WeightFormat[] = ["f32", "q8"];

/** Llama 2's SentencePiece vocabulary as a GGUF file (32000 tokens): the random GGUF models' tokenizer. */
export const GGUF_VOCAB = join(SHARED_DIR, "vocab", "ggml-vocab-llama-spm.gguf");

/**
 * Path of the cached random GGUF model of `shape` in `mix`, written first when missing (to a
 * temporary name, then renamed). Its vocabulary is Llama 2's, padded with unused tokens when the
 * shape's is larger.
 */
export function ensureRandomGGUF(shape: Shape, mix: ModelMix, modelsDir: string, log: (line: string) => void): string {
  const file = join(modelsDir, `random-${shape.name}-${mix}.gguf`);
  if (existsSync(file)) return file;
  if (!existsSync(GGUF_VOCAB)) throw new InputError(`${GGUF_VOCAB} not found (the shared data folder ../shared is absent?): pass --model`);
  mkdirSync(modelsDir, { recursive: true });
  const config = { ...shape.config, vocabSize: shape.ggufVocabSize ?? shape.config.vocabSize };
  log(`writing ${file} (random ${mix} weights of the ${shape.name} shape, once)`);
  const tmp = `${file}.${process.pid}.tmp`;
  try {
    writeModelGGUF(tmp, {
      arch: shape.arch ?? "llama", name: `random-${shape.name}`, config, mix, seed: WEIGHTS_SEED,
      tokenizer: paddedVocabulary(tokenizerMetadata(GGUF_VOCAB), config.vocabSize),
    });
    renameSync(tmp, file);
  } finally {
    rmSync(tmp, { force: true });
  }
  return file;
}

const FILE_FORMAT: Record<WeightFormat, Llama2cFormat> = { f32: "legacy", q8: "v2" };

/**
 * Path of the cached random model of `shape`, writing it first when it is missing or has the
 * wrong size (an interrupted write, an older layout). Written to a temporary name and renamed, so
 * a concurrent reader never sees half a file.
 */
export function ensureRandomModel(shape: Shape, format: WeightFormat, modelsDir: string, log: (line: string) => void): string {
  const file = join(modelsDir, `random-${shape.name}${format === "q8" ? "-q80" : ""}.bin`);
  const fileFormat = FILE_FORMAT[format];
  const size = llama2cFileSize(shape.config, fileFormat, true);
  if (existsSync(file) && statSync(file).size === size) return file;
  mkdirSync(modelsDir, { recursive: true });
  log(`writing ${file} (${(size / 2 ** 20).toFixed(0)} MiB of random ${format} weights, once)`);
  const tmp = `${file}.${process.pid}.tmp`;
  try {
    writeLlama2c(tmp, shape.config, randomWeights(shape.config, WEIGHTS_SEED, { sharedClassifier: true }), fileFormat);
    renameSync(tmp, file);
  } finally {
    rmSync(tmp, { force: true });
  }
  return file;
}

/**
 * The tokenizer to load with a benchmark model: the one given, else llama2.c's tokenizer.bin
 * beside a model file, else llama2's from the shared folder.
 */
export function resolveTokenizer(given: string | undefined, model?: string): string {
  const beside = model === undefined ? undefined : join(dirname(model), "tokenizer.bin");
  const path = given ?? (beside !== undefined && existsSync(beside) ? beside : DEFAULT_TOKENIZER);
  if (!existsSync(path)) {
    throw new InputError(
      given === undefined
        ? `default tokenizer ${DEFAULT_TOKENIZER} not found (the shared data folder ../shared is absent?): pass --tokenizer`
        : `${given}: tokenizer file not found`,
    );
  }
  return path;
}

/** What a benchmark runs: a model file, its tokenizer, and how to name it in the output. */
export interface BenchModel {
  /** The shape name, or the file name of a --model. */
  label: string;
  path: string;
  tokenizer: string;
  config: ModelConfig;
  /** Weight parameters a decode token multiplies: every layer matrix and the classifier. */
  matmulParams: number;
  /** Bytes of those weights, read once per decode step (the embedding row aside). */
  bytesPerToken: number;
  note?: string;
}

export interface ModelChoice {
  /** A model file to bench instead of a random one. */
  model?: string;
  shape: Shape;
  format: WeightFormat;
  /** A GGUF mix: bench a random GGUF model instead of a llama2.c one. */
  mix?: ModelMix;
  tokenizer?: string;
  modelsDir: string;
}

/** The model a bench runs: `--model` when given, else the cached random model of the shape. */
export function benchModel(choice: ModelChoice, log: (line: string) => void): BenchModel {
  if (choice.model !== undefined) {
    if (!existsSync(choice.model)) throw new InputError(`${choice.model}: model file not found`);
    const tokenizer = isGGUF(choice.model) ? choice.tokenizer ?? choice.model : resolveTokenizer(choice.tokenizer, choice.model);
    const ckpt = openCheckpoint(choice.model);
    return { label: choice.model.split("/").pop()!, path: choice.model, tokenizer, config: ckpt.config, ...weightTraffic(ckpt) };
  }
  if (choice.mix !== undefined) {
    const path = ensureRandomGGUF(choice.shape, choice.mix, choice.modelsDir, log);
    const ckpt = openCheckpoint(path);
    return { label: `${choice.shape.name} ${choice.mix}`, path, tokenizer: path, config: ckpt.config, ...weightTraffic(ckpt), note: choice.shape.note };
  }
  if (choice.shape.arch !== undefined && choice.shape.arch !== "llama") {
    throw new InputError(`the ${choice.shape.name} shape exists as GGUF only: give --type (F32, Q8_0, Q4_K_M, ...)`);
  }
  const tokenizer = resolveTokenizer(choice.tokenizer, choice.model);
  const path = ensureRandomModel(choice.shape, choice.format, choice.modelsDir, log);
  const ckpt = openCheckpoint(path);
  const label = choice.format === "f32" ? choice.shape.name : `${choice.shape.name} q8`;
  return { label, path, tokenizer, config: ckpt.config, ...weightTraffic(ckpt), note: choice.shape.note };
}

/** A vocabulary's metadata with unused user-defined tokens appended up to `size` tokens. */
function paddedVocabulary(meta: Map<string, GGUFValue>, size: number): Map<string, GGUFValue> {
  const tokens = meta.get("tokenizer.ggml.tokens");
  if (tokens?.type !== "array" || tokens.value.itemType !== "string" || tokens.value.items.length >= size) return meta;
  const have = tokens.value.items;
  const pieces = Array.from({ length: size }, (_, i) => (i < have.length ? have.get(i) : `<unused_${i}>`));
  const out = new Map(meta);
  out.set("tokenizer.ggml.tokens", gguf.strings(pieces));
  const scores = meta.get("tokenizer.ggml.scores");
  if (scores?.type === "array" && scores.value.itemType === "f32") {
    const given = scores.value.items;
    out.set("tokenizer.ggml.scores", gguf.f32s(Array.from({ length: size }, (_, i) => (i < have.length ? given[i]! : -1e9))));
  }
  const types = meta.get("tokenizer.ggml.token_type");
  if (types?.type === "array" && types.value.itemType === "i32") {
    const given = types.value.items;
    // 4: user-defined, never produced by encoding ordinary text.
    out.set("tokenizer.ggml.token_type", gguf.i32s(Array.from({ length: size }, (_, i) => (i < have.length ? given[i]! : 4))));
  }
  return out;
}
