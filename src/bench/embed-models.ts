/**
 * Random-weight encoder files of real embedding-model shapes for `bench embed`, written once into
 * the models folder (src/synth/gguf-encoder-writer.ts): BGE-small (bert) and nomic-embed-text
 * (nomic-bert), each with BERT's 30522-token WordPiece vocabulary read in place from the shared
 * folder's ggml-vocab-bert-bge.gguf. A custom shape ("bert:dim=32,layers=1,heads=2,hidden=64")
 * serves the tests.
 */
import { existsSync } from "node:fs";
import { join } from "node:path";
import { InputError } from "../errors.ts";
import { ENCODER_ARCHS, type EncoderArch } from "../model/encoder.ts";
import { writeEncoderGGUF, type EncoderMix, type EncoderShape } from "../synth/gguf-encoder-writer.ts";
import { tokenizerMetadata, vocabularySize } from "../synth/gguf-tokenizer-metadata.ts";
import { isCurrent, RANDOM_GGUF_VERSION, WEIGHTS_SEED, writeAtomically } from "./gguf-models.ts";

/** The vocabulary of every shape here: BERT's uncased WordPiece (BGE's, nomic-embed-text's). */
export const ENCODER_VOCAB_FILE = "ggml-vocab-bert-bge.gguf";
const BERT_VOCAB_SIZE = 30522;

export const EMBED_SHAPES: Readonly<Record<string, EncoderShape>> = {
  // BAAI/bge-small-en-v1.5 config.json: hidden 384, 12 layers, 12 heads, intermediate 1536, vocab 30522,
  // max_position_embeddings 512; CLS pooling.
  "bge-small": { arch: "bert", dim: 384, nLayers: 12, nHeads: 12, hiddenDim: 1536, vocabSize: BERT_VOCAB_SIZE, contextLength: 512, pooling: "cls" },
  // nomic-ai/nomic-embed-text-v1.5 config.json: n_embd 768, 12 layers, 12 heads, n_inner 3072 (SwiGLU), rotary base 1000,
  // trained context 2048; mean pooling.
  "nomic-embed-text": {
    arch: "nomic-bert", dim: 768, nLayers: 12, nHeads: 12, hiddenDim: 3072, vocabSize: BERT_VOCAB_SIZE, contextLength: 2048, pooling: "mean", ropeTheta: 1000,
  },
};
export const EMBED_SHAPE_NAMES = Object.keys(EMBED_SHAPES);
export const EMBED_SHAPE_HELP = `${EMBED_SHAPE_NAMES.join(" | ")} | a custom "ARCH:dim=D,layers=L,heads=N,hidden=H" (ARCH bert or nomic-bert)`;

const CUSTOM_KEYS = ["dim", "layers", "heads", "hidden"] as const;

/** A named shape, or a custom one (its name the spec with unsafe characters replaced). */
export function parseEmbedShape(spec: string): { name: string; shape: EncoderShape } {
  const named = EMBED_SHAPES[spec];
  if (named !== undefined) return { name: spec, shape: named };
  const [arch, fields] = spec.split(":");
  if (arch === undefined || fields === undefined || !ENCODER_ARCHS.has(arch)) {
    throw new InputError(`--shape ${spec}: expected ${EMBED_SHAPE_HELP}`);
  }
  const v: Partial<Record<(typeof CUSTOM_KEYS)[number], number>> = {};
  for (const part of fields.split(",")) {
    const [key, value] = part.split("=");
    const n = Number(value);
    if (!(CUSTOM_KEYS as readonly string[]).includes(key ?? "") || !Number.isInteger(n) || n < 1) {
      throw new InputError(`--shape ${spec}: "${part}" is not one of ${CUSTOM_KEYS.join(", ")} = a positive integer`);
    }
    v[key as (typeof CUSTOM_KEYS)[number]] = n;
  }
  const missing = CUSTOM_KEYS.find((k) => v[k] === undefined);
  if (missing !== undefined) throw new InputError(`--shape ${spec}: ${missing}= is missing`);
  const nomic = arch === "nomic-bert";
  return {
    name: `${arch}-d${v.dim}-l${v.layers}-q${v.heads}-h${v.hidden}`,
    shape: {
      arch: arch as EncoderArch, dim: v.dim!, nLayers: v.layers!, nHeads: v.heads!, hiddenDim: v.hidden!, vocabSize: BERT_VOCAB_SIZE,
      contextLength: nomic ? 2048 : 512, pooling: nomic ? "mean" : "cls", ...(nomic ? { ropeTheta: 1000 } : {}),
    },
  };
}

/**
 * Path of the cached random encoder of `shape` in `mix`, written first when missing or of another
 * version. `vocabDir` holds ggml-vocab-bert-bge.gguf (../shared/vocab).
 */
export function ensureRandomEncoder(
  named: { name: string; shape: EncoderShape }, mix: EncoderMix, modelsDir: string, vocabDir: string, log: (line: string) => void,
): string {
  const file = join(modelsDir, `random-${named.name}-${mix}.gguf`);
  const name = `random-${named.name}-${mix} v${RANDOM_GGUF_VERSION}`;
  if (existsSync(file) && isCurrent(file, name)) return file;
  const vocab = join(vocabDir, ENCODER_VOCAB_FILE);
  if (!existsSync(vocab)) throw new InputError(`${vocab} not found (the shared data folder is absent?): pass --model`);
  const tokenizer = tokenizerMetadata(vocab);
  if (vocabularySize(tokenizer) !== named.shape.vocabSize) throw new InputError(`${vocab} has ${vocabularySize(tokenizer)} tokens, expected ${named.shape.vocabSize}`);
  log(`writing ${file} (random ${mix} weights of the ${named.name} shape, once)`);
  writeAtomically(file, (tmp) => writeEncoderGGUF(tmp, { name, shape: named.shape, mix, tokenizer, seed: WEIGHTS_SEED }));
  return file;
}
