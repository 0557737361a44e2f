/**
 * `bench embed`'s instruction case: a decoder embedder (Qwen3-Embedding-0.6B-shaped random qwen3
 * file, last-token pooling, EOS after every input) given one 64-token instruction before every one
 * of N short queries, as Qwen3-Embedding's `Instruct: ...\nQuery: ` layout is used. The same
 * queries run with the prefix cache off and on in the same run; the figure is queries/s on over
 * off. With the cache on, the instruction is computed once and every later query hits it, so a
 * query costs its own few tokens; off, every query recomputes the instruction. Each repetition
 * gets queries of its own (the instruction stays): a repeated query would hit the cache whole.
 */
import { existsSync } from "node:fs";
import { join } from "node:path";
import { InputError } from "../errors.ts";
import { LLM } from "../llm/llm.ts";
import { makeConfig, type ModelConfig } from "../model/config.ts";
import { readGGUF } from "../model/gguf.ts";
import { writeModelGGUF } from "../synth/gguf-model-writer.ts";
import type { EncoderMix } from "../synth/gguf-encoder-writer.ts";
import { tokenizerMetadata, vocabularySize } from "../synth/gguf-tokenizer-metadata.ts";
import { gguf } from "../synth/gguf-writer.ts";
import { Xoshiro128 } from "../util/random.ts";
import { isCurrent, RANDOM_GGUF_VERSION, WEIGHTS_SEED, writeAtomically } from "./gguf-models.ts";
import { ratio, repeat, summarize, type RepeatOptions, type Summary } from "./measure.ts";
import { fmtRatio, fmtSpread, progress, threadsLabel, type Figure, type Table, figure } from "./bench-report.ts";

/** The vocabulary of the instruction case: Qwen2's byte-level BPE, which Qwen3 shares (151936 tokens as stored). */
export const INSTRUCTION_VOCAB_FILE = "ggml-vocab-qwen2.gguf";
/** Tokens of the instruction before every query. */
export const INSTRUCTION_TOKENS = 64;
/** A query's own tokens (its EOS aside): uniform in this range. */
export const QUERY_TOKENS = { min: 4, max: 12 } as const;
/** The bar: queries/s with the prefix cache on at least this many times those with it off (aim 3x). */
export const INSTRUCTION_TARGET = { floor: 2, aim: 3 } as const;
/** llama.cpp's LLAMA_POOLING_TYPE_LAST. */
const POOLING_LAST = 3;
/** Token ids below this are ordinary byte-level BPE pieces in Qwen2's vocabulary (its special tokens follow). */
const ORDINARY_IDS = 151643;
/** The context the engine runs at: an instruction and a query fit many times over. */
const CONTEXT = 1024;

/** A decoder embedder's shape: width, layers, query heads, KV heads, head width, feed-forward width. */
export interface InstructionShape {
  dim: number;
  layers: number;
  heads: number;
  kvHeads: number;
  headDim: number;
  hidden: number;
}

/**
 * Qwen/Qwen3-Embedding-0.6B config.json: hidden 1024, 28 layers, 16 heads / 8 KV heads of 128,
 * intermediate 3072, rope_theta 1e6, rms_norm_eps 1e-6, tied embeddings; last-token pooling.
 */
export const QWEN3_EMBEDDING_SHAPE: InstructionShape = { dim: 1024, layers: 28, heads: 16, kvHeads: 8, headDim: 128, hidden: 3072 };
export const QWEN3_EMBEDDING_NAME = "qwen3-embedding-0.6b";

const SHAPE_KEYS = ["dim", "layers", "heads", "kv", "head", "hidden"] as const;
export const INSTRUCTION_SHAPE_HELP = `${QWEN3_EMBEDDING_NAME} | a custom "dim=D,layers=L,heads=N,kv=K,head=H,hidden=F"`;

/** The named shape or a custom one, with `layers` (when given) replacing its layer count; its name for the file. */
export function parseInstructionShape(spec: string, layers?: number): { name: string; shape: InstructionShape } {
  let name = spec;
  let shape: InstructionShape;
  if (spec === QWEN3_EMBEDDING_NAME) {
    shape = QWEN3_EMBEDDING_SHAPE;
  } else {
    const v: Partial<Record<(typeof SHAPE_KEYS)[number], number>> = {};
    for (const part of spec.split(",")) {
      const [key, value] = part.split("=");
      const n = Number(value);
      if (!(SHAPE_KEYS as readonly string[]).includes(key ?? "") || !Number.isInteger(n) || n < 1) {
        throw new InputError(`--instruction-shape ${spec}: expected ${INSTRUCTION_SHAPE_HELP}`);
      }
      v[key as (typeof SHAPE_KEYS)[number]] = n;
    }
    const missing = SHAPE_KEYS.find((k) => v[k] === undefined);
    if (missing !== undefined) throw new InputError(`--instruction-shape ${spec}: ${missing}= is missing`);
    if (v.heads! % v.kv! !== 0) throw new InputError(`--instruction-shape ${spec}: heads must be a multiple of kv`);
    if (v.head! % 2 !== 0) throw new InputError(`--instruction-shape ${spec}: head must be even (RoPE)`);
    shape = { dim: v.dim!, layers: v.layers!, heads: v.heads!, kvHeads: v.kv!, headDim: v.head!, hidden: v.hidden! };
    name = `qwen3-d${shape.dim}-l${shape.layers}-q${shape.heads}-kv${shape.kvHeads}-h${shape.headDim}-f${shape.hidden}`;
  }
  if (layers !== undefined && layers !== shape.layers) {
    shape = { ...shape, layers };
    name = `${name}-l${layers}`;
  }
  return { name, shape };
}

function instructionConfig(shape: InstructionShape, vocabSize: number): ModelConfig {
  return makeConfig({
    dim: shape.dim, hiddenDim: shape.hidden, nLayers: shape.layers, nHeads: shape.heads, nKvHeads: shape.kvHeads, headDim: shape.headDim,
    vocabSize, seqLen: 32768, normEps: 1e-6, ropeTheta: 1e6, ropeStyle: "neox", qkNorm: true, sharedClassifier: true,
  });
}

/**
 * The random decoder embedder of `named` in `mix` in modelsDir (written once: qwen3, pooling last,
 * an EOS after every input as Qwen3-Embedding's file asks), the vocabulary read from vocabDir.
 */
export function ensureInstructionEmbedder(
  named: { name: string; shape: InstructionShape }, mix: EncoderMix, modelsDir: string, vocabDir: string, log: (line: string) => void,
): string {
  const file = join(modelsDir, `random-${named.name}-${mix}.gguf`);
  const name = `random-${named.name}-${mix} v${RANDOM_GGUF_VERSION}`;
  if (existsSync(file) && isCurrent(file, name)) return file;
  const vocab = join(vocabDir, INSTRUCTION_VOCAB_FILE);
  if (!existsSync(vocab)) throw new InputError(`${vocab} not found (the shared data folder is absent?)`);
  const tokenizer = tokenizerMetadata(vocab);
  tokenizer.set("tokenizer.ggml.add_eos_token", gguf.bool(true));
  const config = instructionConfig(named.shape, vocabularySize(tokenizer));
  log(`writing ${file} (random ${mix} weights of the ${named.name} shape, a decoder embedder, once)`);
  writeAtomically(file, (tmp) => writeModelGGUF(tmp, {
    arch: "qwen3", name, config, mix, seed: WEIGHTS_SEED, tokenizer, extraMetadata: new Map([["qwen3.pooling_type", gguf.u32(POOLING_LAST)]]),
  }));
  return file;
}

/** The instruction's ids and repetition `rep`'s queries, each instruction + query + EOS. */
export function instructionInputs(eos: number, queries: number, seed: number, rep: number): { instruction: number[]; inputs: number[][] } {
  const pick = (rng: Xoshiro128) => 256 + Math.floor(rng.nextFloat() * (ORDINARY_IDS - 256));
  const fixed = new Xoshiro128(seed);
  const instruction = Array.from({ length: INSTRUCTION_TOKENS }, () => pick(fixed));
  // Warm-up repetitions are negative: every repetition's stream differs from every other's.
  const rng = new Xoshiro128(seed * 7919 + 1000 + rep);
  const inputs = Array.from({ length: queries }, () => {
    const n = QUERY_TOKENS.min + Math.floor(rng.nextFloat() * (QUERY_TOKENS.max - QUERY_TOKENS.min + 1));
    return [...instruction, ...Array.from({ length: n }, () => pick(rng)), eos];
  });
  return { instruction, inputs };
}

export interface InstructionOptions extends RepeatOptions {
  /** "qwen3-embedding-0.6b Q8_0" */
  label: string;
  path: string;
  threads: number;
  queries: number;
  seed: number;
}

export interface InstructionResult {
  model: string;
  file: string;
  layers: number;
  threads: number;
  queries: number;
  /** Tokens of one repetition's inputs, instruction, queries and EOS together. */
  tokens: number;
  cacheOff: Summary;
  cacheOn: Summary;
  /** Queries/s with the cache on over off (medians). */
  ratio: number;
  /** Prompt tokens the cache served per query in the timed repetitions (cache on). */
  cachedPerQuery: number;
  target: typeof INSTRUCTION_TARGET;
}

/** Queries/s of each repetition on an engine with the prefix cache on or off, and the tokens it served from the cache. */
async function measure(o: InstructionOptions, eos: number, prefixCache: boolean): Promise<{ qps: number[]; cached: number }> {
  const llm = await LLM.open({ model: o.path, engine: { threads: o.threads, enablePrefixCaching: prefixCache, ctxSize: CONTEXT } });
  try {
    if (llm.capabilities.pooling !== "last") throw new InputError(`${o.label}: not a last-token decoder embedder (pooling ${llm.capabilities.pooling})`);
    let cached = 0;
    const qps = await repeat(o, async (rep) => {
      const { inputs } = instructionInputs(eos, o.queries, o.seed, rep);
      const hits = llm.stats().prefixHits;
      const t0 = performance.now();
      await llm.embed(inputs, { normalize: -1 });
      const seconds = (performance.now() - t0) / 1000;
      if (rep >= 0) cached += llm.stats().prefixHits - hits;
      return o.queries / seconds;
    });
    return { qps, cached };
  } finally {
    llm.close();
  }
}

/** The instruction case on one file: cache off, then on, same queries, same threads. */
export async function runInstructionBench(o: InstructionOptions): Promise<InstructionResult> {
  const file = readGGUF(o.path);
  const eos = file.getU32("tokenizer.ggml.eos_token_id");
  const layers = file.getU32("qwen3.block_count");
  const tokens = instructionInputs(eos, o.queries, o.seed, 0).inputs.reduce((sum, ids) => sum + ids.length, 0);
  progress(`${o.label}: ${o.queries} queries after a ${INSTRUCTION_TOKENS}-token instruction, prefix cache off, ${threadsLabel(o.threads)}`);
  const off = await measure(o, eos, false);
  progress(`${o.label}: the same, prefix cache on`);
  const on = await measure(o, eos, true);
  const cacheOff = summarize(off.qps);
  const cacheOn = summarize(on.qps);
  return {
    model: o.label, file: o.path, layers, threads: o.threads, queries: o.queries, tokens, cacheOff, cacheOn, ratio: ratio(cacheOn, cacheOff),
    cachedPerQuery: on.cached / (o.queries * o.reps), target: INSTRUCTION_TARGET,
  };
}

export function instructionFigures(r: InstructionResult): Figure[] {
  const at = `${r.model} instruction case, ${threadsLabel(r.threads)}`;
  return [
    ...figure(`${at}: queries/s, prefix cache off`, r.cacheOff, "queries/s"),
    ...figure(`${at}: queries/s, prefix cache on`, r.cacheOn, "queries/s"),
    ...figure(`${at}: prefix cache on vs off`, r.ratio, "x"),
  ];
}

export function instructionTable(r: InstructionResult): Table {
  return {
    title:
      `${r.model} (qwen3, ${r.layers} layers, pooling last): ${r.queries} queries of ${QUERY_TOKENS.min}-${QUERY_TOKENS.max} tokens + EOS after one ` +
      `${INSTRUCTION_TOKENS}-token instruction (${r.tokens} tokens a repetition), new queries each repetition; ` +
      `target on/off >= ${r.target.floor}x (aim ${r.target.aim}x); median (min-max)`,
    columns: ["threads", "cache off queries/s", "cache on queries/s", "on / off", "cached tokens per query"],
    rows: [[String(r.threads), fmtSpread(r.cacheOff), fmtSpread(r.cacheOn), fmtRatio(r.ratio), r.cachedPerQuery.toFixed(1)]],
  };
}
