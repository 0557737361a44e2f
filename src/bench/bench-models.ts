/**
 * The models the benchmarks run: random weights in the shapes of real checkpoints, written once
 * into a cache folder and reused (llama2.c files with the project's llama2.c writer; GGUF files in
 * any tensor type with its GGUF writer, gguf-models.ts), or a model file the user names. Random weights cost the same to run as trained ones of the same shape, and need no
 * download.
 */
import { existsSync, mkdirSync, renameSync, rmSync, statSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { InputError } from "../errors.ts";
import { weightTraffic } from "../backend/wasm/weights.ts";
import { makeConfig, type ModelConfig } from "../model/config.ts";
import { llama2cFileSize, writeLlama2c, type Llama2cFormat } from "../synth/llama2c-writer.ts";
import { isGGUF, openCheckpoint } from "../model/load.ts";
import type { ModelMix } from "../synth/gguf-model-writer.ts";
import { randomWeights } from "../synth/random-weights.ts";
import { ensureRandomGGUF, GGUF_SHAPES } from "./gguf-models.ts";

/** The repository root (this file is src/bench/bench-models.ts). */
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
  /** Benched as GGUF only (--type): its architecture is not llama2.c's. */
  ggufOnly?: boolean;
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
    note: "smollm2-135m shape; its llama2.c form has a 32000-token vocabulary so the llama2 tokenizer fits (the real model, and its --type GGUF form, have 49152)",
  },
  "qwen2.5-0.5b": {
    name: "qwen2.5-0.5b",
    // The qwen2 shape and its vocabulary are in GGUF_SHAPES (src/bench/gguf-models.ts).
    config: GGUF_SHAPES["qwen2.5-0.5b"]!.config,
    ggufOnly: true,
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
  /** The shape and mix of a random GGUF model (--type). */
  gguf?: { shape: string; mix: ModelMix };
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
    const path = ensureRandomGGUF(choice.shape, choice.mix, choice.modelsDir, join(SHARED_DIR, "vocab"), log);
    const ckpt = openCheckpoint(path);
    const note = GGUF_SHAPES[choice.shape.name]?.note;
    return { label: `${choice.shape.name} ${choice.mix}`, path, tokenizer: path, config: ckpt.config, ...weightTraffic(ckpt), note, gguf: { shape: choice.shape.name, mix: choice.mix } };
  }
  if (choice.shape.ggufOnly === true) {
    throw new InputError(`the ${choice.shape.name} shape exists as GGUF only: give --type (F32, Q8_0, Q4_K_M, ...)`);
  }
  const tokenizer = resolveTokenizer(choice.tokenizer, choice.model);
  const path = ensureRandomModel(choice.shape, choice.format, choice.modelsDir, log);
  const ckpt = openCheckpoint(path);
  const label = choice.format === "f32" ? choice.shape.name : `${choice.shape.name} q8`;
  return { label, path, tokenizer, config: ckpt.config, ...weightTraffic(ckpt), note: choice.shape.note };
}
