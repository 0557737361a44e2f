/**
 * `pagellm bench embed`: embedding inputs/s and tokens/s of encoder models at several batch sizes
 * and thread counts, each a ratio to batch 1, to one thread and (--llama-embedding) to llama.cpp
 * on the same file, inputs and threads in the same run. The measuring lives in src/bench/embed-throughput.ts.
 */
import { defineCommand, type ArgsDef } from "citty";
import { existsSync } from "node:fs";
import { basename, join } from "node:path";
import { InputError } from "../errors.ts";
import { DEFAULT_MODELS_DIR, SHARED_DIR } from "../bench/bench-models.ts";
import { progress, reportText } from "../bench/bench-report.ts";
import { EMBED_BATCH_SIZES, embedNotes, embedTables, runEmbedBench, type EmbedModelFile } from "../bench/embed-throughput.ts";
import { EMBED_SHAPE_HELP, ensureRandomEncoder, parseEmbedShape } from "../bench/embed-models.ts";
import { llamaEmbeddingPeer } from "../bench/peer-llama-embedding.ts";
import { ensureInstructionEmbedder, INSTRUCTION_SHAPE_HELP, parseInstructionShape, QWEN3_EMBEDDING_NAME } from "../bench/embed-instruction.ts";
import { makeReport } from "../bench/schema.ts";
import { ENCODER_MIXES, type EncoderMix } from "../synth/gguf-encoder-writer.ts";
import { commonArgs, intList, nameList, nonNegInt, posint, repeatOptions, str, threadsListArg } from "./bench-options.ts";
import { benchOutputArgs, startRun, writeOutputs } from "./bench-output.ts";
import { checkKnownOptions, repeated, type ParsedValues } from "./options.ts";

const DEFAULT_SHAPES = ["bge-small", "nomic-embed-text"];
const DEFAULT_MIXES: readonly EncoderMix[] = ["F16", "Q8_0"];
const WORKLOADS = ["encoders", "instruction"] as const;
type Workload = (typeof WORKLOADS)[number];

export const benchEmbedArgs = {
  ...commonArgs,
  ...benchOutputArgs,
  ...threadsListArg,
  model: { type: "string", description: "Bench this encoder GGUF file (bert, nomic-bert) instead of random ones of --shape", valueHint: "path" },
  shape: { type: "string", description: `Shape of the random-weight encoder, repeat for several: ${EMBED_SHAPE_HELP} (default bge-small and nomic-embed-text)`, valueHint: "shape" },
  type: { type: "string", description: `Weight types of the random encoders, comma-separated: ${ENCODER_MIXES.join(" | ")} (default F16,Q8_0)`, valueHint: "type,type" },
  "models-dir": { type: "string", description: "Cache folder of the random encoders, random-<shape>-<type>.gguf (default: models/ in pagellm's folder)", valueHint: "dir" },
  batch: { type: "string", description: `Inputs per LLM.embed call, comma-separated (default ${EMBED_BATCH_SIZES.join(",")})`, valueHint: "n,n" },
  inputs: { type: "string", description: "Inputs embedded per repetition (default 256)", valueHint: "n" },
  "min-tokens": { type: "string", description: "Fewest tokens of an input, [CLS] and [SEP] included (default 16)", valueHint: "n" },
  "max-tokens": { type: "string", description: "Most tokens of an input (default 128)", valueHint: "n" },
  workload: {
    type: "string",
    description:
      "What to bench, comma-separated: encoders (the encoder files, against llama.cpp), instruction (a decoder embedder, one 64-token instruction " +
      "before every query, prefix cache on against off) (default encoders)",
    valueHint: "encoders,instruction",
  },
  "instruction-shape": { type: "string", description: `Shape of the instruction case's random qwen3 embedder: ${INSTRUCTION_SHAPE_HELP} (default ${QWEN3_EMBEDDING_NAME})`, valueHint: "shape" },
  layers: { type: "string", description: "Layers of the instruction case's embedder, instead of its shape's (a smaller run on a slow machine)", valueHint: "n" },
  queries: { type: "string", description: "Queries of the instruction case per repetition (default 256)", valueHint: "n" },
  "llama-embedding": {
    type: "string",
    description:
      "llama.cpp's llama-embedding binary (a build of your own, outside the project): run it on the same file, texts and thread count after each " +
      "measurement and report pagellm / llama.cpp",
    valueHint: "path",
  },
} as const satisfies ArgsDef;

/** --model, or the random encoder of every --shape in every --type (written on first use). */
function embedModels(values: ParsedValues, rawArgs: readonly string[]): EmbedModelFile[] {
  const model = str(values, "model");
  const shapes = repeated(rawArgs, "shape");
  if (model !== undefined) {
    if (shapes.length > 0 || str(values, "type") !== undefined) throw new InputError("--model benches a file: --shape and --type are for random encoders");
    if (!existsSync(model)) throw new InputError(`--model ${model}: file not found`);
    return [{ label: basename(model).replace(/\.gguf$/i, ""), path: model }];
  }
  const mixes = nameList<EncoderMix>(values, "type", ENCODER_MIXES, DEFAULT_MIXES);
  const modelsDir = str(values, "models-dir") ?? DEFAULT_MODELS_DIR;
  return (shapes.length > 0 ? shapes : DEFAULT_SHAPES).flatMap((spec) => {
    const named = parseEmbedShape(spec);
    return mixes.map((mix) => ({ label: `${named.name} ${mix}`, path: ensureRandomEncoder(named, mix, modelsDir, join(SHARED_DIR, "vocab"), progress) }));
  });
}

/** The instruction case's random decoder embedder in every --type (written on first use). */
function instructionModels(values: ParsedValues): EmbedModelFile[] {
  const layers = str(values, "layers") === undefined ? undefined : posint(values, "layers", 1);
  const named = parseInstructionShape(str(values, "instruction-shape") ?? QWEN3_EMBEDDING_NAME, layers);
  const modelsDir = str(values, "models-dir") ?? DEFAULT_MODELS_DIR;
  return nameList<EncoderMix>(values, "type", ENCODER_MIXES, ["Q8_0"]).map((mix) => ({
    label: `${named.name} ${mix}`, path: ensureInstructionEmbedder(named, mix, modelsDir, join(SHARED_DIR, "vocab"), progress),
  }));
}

export const benchEmbedCommand = defineCommand({
  meta: {
    name: "embed",
    description:
      "Embedding inputs/s and tokens/s of random-weight BGE-small- and nomic-embed-text-shaped encoders (F16, Q8_0) over 256 inputs of 16-128 tokens " +
      "at batch 1, 32 and 256 and each thread count, against batch 1, one thread and llama.cpp's llama-embedding (target >= 0.5x at batch 32, " +
      "one thread); with --workload instruction, a Qwen3-Embedding-0.6B-shaped decoder embedder's queries after a 64-token instruction, " +
      "prefix cache on against off (target >= 2x) (default 3 repetitions)",
  },
  args: benchEmbedArgs,
  async run({ args, rawArgs }) {
    checkKnownOptions(rawArgs, benchEmbedArgs);
    const run = startRun(args, rawArgs);
    const bin = str(args, "llama-embedding");
    const peer = bin === undefined ? null : llamaEmbeddingPeer(bin);
    const workloads = new Set(nameList<Workload>(args, "workload", WORKLOADS, ["encoders"]));
    const models = workloads.has("encoders") ? embedModels(args, rawArgs) : [];
    const instruction = workloads.has("instruction") ? instructionModels(args) : [];
    const o = {
      ...repeatOptions(args, 3), models, threads: intList(args, "threads", [1, 2]), batches: intList(args, "batch", EMBED_BATCH_SIZES),
      inputs: posint(args, "inputs", 256), minTokens: posint(args, "min-tokens", 16), maxTokens: posint(args, "max-tokens", 128),
      seed: nonNegInt(args, "seed", 1), peer, instruction, queries: posint(args, "queries", 256),
    };
    const r = await runEmbedBench(o);
    const settings = {
      reps: o.reps, warmup: o.warmup, threads: o.threads, batches: o.batches, models: models.map((m) => m.label), inputs: o.inputs,
      minTokens: o.minTokens, maxTokens: o.maxTokens, seed: o.seed, peer: bin === undefined ? "none" : "llama-embedding",
      instruction: instruction.map((m) => m.label), queries: o.queries,
    };
    const report = makeReport("embed", run.date, settings, embedNotes(r, peer !== null), r);
    writeOutputs({ doc: report, text: reportText(report, embedTables(r)) }, run.out);
  },
});
