/**
 * The benches' command-line options and their conversion into typed values: shared option
 * definitions (so every bench spells them the same way) and checked parsing, every bad value a
 * one-line InputError.
 */
import { KV_TYPES } from "../kv/kv-layout.ts";
import type { ArgsDef } from "citty";
import { InputError } from "../errors.ts";
import { numberOption, repeated, type ParsedValues } from "./options.ts";
import type { RepeatOptions } from "../bench/measure.ts";
import { benchModel, DEFAULT_MODELS_DIR, parseShape, SHAPE_HELP, WEIGHT_FORMATS, type BenchModel, type WeightFormat } from "../bench/bench-models.ts";
import { progress } from "../bench/bench-report.ts";
import { ensureF32Twin } from "../bench/gguf-models.ts";
import { isGGUF } from "../model/load.ts";
import { isModelMix, MODEL_MIXES, type ModelMix } from "../synth/gguf-model-writer.ts";
import { STREAM_BYTES } from "../bench/roofline.ts";
import { nlcPeer } from "../bench/peer-nlc.ts";
import { llamaBenchPeer } from "../bench/peer-llama-bench.ts";
import type { LlamaCppPeer } from "../bench/peer.ts";

export const commonArgs = {
  reps: { type: "string", description: "Timed repetitions of each measurement (default: per bench, see its description)", valueHint: "n" },
  warmup: { type: "string", description: "Untimed repetitions before them (default 1; batch: 0, it warms up once per engine)", valueHint: "n" },
  seed: { type: "string", description: "Seed of the random prompts (default 1)", valueHint: "n" },
} as const satisfies ArgsDef;

/** Model options; `shapeDefault` names the default shape in the help. */
export function modelArgs(shapeDefault: string) {
  return {
    model: { type: "string", description: "Bench this model file (GGUF or llama2.c) instead of a random-weight one of --shape", valueHint: "path" },
    shape: { type: "string", description: `Shape of the random-weight model: ${SHAPE_HELP} (default ${shapeDefault})`, valueHint: "shape" },
    quant: { type: "string", description: `Weights of a random llama2.c model: ${WEIGHT_FORMATS.join(" | ")} (default f32)`, valueHint: "format" },
    type: {
      type: "string",
      description:
        `Bench random GGUF models of the shape in these types or mixes, comma-separated: ${Object.keys(MODEL_MIXES).join(" | ")}; ` +
        "F32 of the same shape is added first as the baseline of a quantized type",
      valueHint: "mix,mix",
    },
    tokenizer: {
      type: "string",
      description: "Tokenizer; its vocabulary must match the model's (default: tokenizer.bin beside --model, else shared/models/llama2c/llama2_tokenizer.bin in the folder beside pagellm's)",
      valueHint: "path",
    },
    "f32-baseline": {
      type: "boolean",
      description: "With a GGUF --model: also bench random F32 weights of its exact shape (written once into --models-dir), the baseline of its type",
    },
    "models-dir": { type: "string", description: "Cache folder of random-weight models, random-<shape>.bin and random-<shape>-<type>.gguf (default: models/ in pagellm's folder)", valueHint: "dir" },
  } as const satisfies ArgsDef;
}

/** --kv-type for the benches that run one engine configuration (decode takes a list: see cli/bench.ts). */
export const kvTypeArg = {
  "kv-type": {
    type: "string",
    description: `KV cache element type: ${KV_TYPES.join(" | ")} (default: the model's, f16 for GGUF and f32 for llama2.c)`,
    valueHint: "type",
  },
} as const satisfies ArgsDef;

export const threadsListArg = {
  threads: { type: "string", description: "Thread counts to compare, comma-separated (default 1,2)", valueHint: "n,n" },
} as const satisfies ArgsDef;

export const streamArg = {
  "stream-mb": {
    type: "string",
    description: `MiB read by the bandwidth measurement (default ${STREAM_BYTES / 2 ** 20}; keep it far above the last-level cache)`,
    valueHint: "mb",
  },
} as const satisfies ArgsDef;

export function str(values: ParsedValues, name: string): string | undefined {
  const v = values[name];
  return typeof v === "string" && v !== "" ? v : undefined;
}

export function posint(values: ParsedValues, name: string, fallback: number): number {
  return numberOption(values, name, "posint") ?? fallback;
}

export function nonNegInt(values: ParsedValues, name: string, fallback: number): number {
  const v = numberOption(values, name, "int") ?? fallback;
  if (v < 0) throw new InputError(`--${name} expects a non-negative integer, got ${v}`);
  return v;
}

/** A comma-separated list of positive integers. */
export function intList(values: ParsedValues, name: string, fallback: readonly number[]): number[] {
  const raw = str(values, name);
  if (raw === undefined) return [...fallback];
  const list = raw.split(",").map((s) => Number(s.trim()));
  if (list.some((v) => !Number.isInteger(v) || v < 1)) {
    throw new InputError(`--${name} expects positive integers separated by commas, got "${raw}"`);
  }
  return list;
}

/** A comma-separated list of names out of `options`. */
export function nameList<T extends string>(values: ParsedValues, name: string, options: readonly T[], fallback: readonly T[]): T[] {
  const raw = str(values, name);
  if (raw === undefined) return [...fallback];
  const list = raw.split(",").map((s) => s.trim());
  const bad = list.find((s) => !(options as readonly string[]).includes(s));
  if (bad !== undefined) throw new InputError(`--${name}: "${bad}" is not one of ${options.join(", ")}`);
  return list as T[];
}

export function repeatOptions(values: ParsedValues, reps: number, warmup = 1): RepeatOptions {
  return { reps: posint(values, "reps", reps), warmup: nonNegInt(values, "warmup", warmup) };
}

export function streamBytes(values: ParsedValues): number {
  return posint(values, "stream-mb", STREAM_BYTES / 2 ** 20) * 2 ** 20;
}

function weightFormat(values: ParsedValues): WeightFormat {
  const raw = str(values, "quant") ?? "f32";
  if (!(WEIGHT_FORMATS as readonly string[]).includes(raw)) throw new InputError(`--quant must be one of ${WEIGHT_FORMATS.join(", ")}, got "${raw}"`);
  return raw as WeightFormat;
}

/**
 * The models to bench: --model, or the random model (written on first use) of every --shape
 * given, else of each default shape.
 */
export function benchModels(values: ParsedValues, rawArgs: readonly string[], defaultShapes: readonly string[]): BenchModel[] {
  const model = str(values, "model");
  const shapes = repeated(rawArgs, "shape");
  const base = { format: weightFormat(values), tokenizer: str(values, "tokenizer"), modelsDir: str(values, "models-dir") ?? DEFAULT_MODELS_DIR };
  const mixes = mixList(values);
  if (model !== undefined) {
    if (shapes.length > 0 || str(values, "quant") !== undefined || mixes.length > 0) {
      throw new InputError("--model benches a file: --shape, --quant and --type are for random models");
    }
    const file = benchModel({ ...base, model, shape: parseShape(defaultShapes[0]!) }, progress);
    return values["f32-baseline"] === true ? withF32Twin(file, base.modelsDir) : [file];
  }
  if (values["f32-baseline"] === true) throw new InputError("--f32-baseline is for a GGUF --model (--type adds F32 itself)");
  if (mixes.length > 0 && str(values, "quant") !== undefined) throw new InputError("--quant is for llama2.c models, --type for GGUF: give one");
  const specs = shapes.length > 0 ? shapes : defaultShapes;
  if (mixes.length === 0) return specs.map((spec) => benchModel({ ...base, shape: parseShape(spec) }, progress));
  return specs.flatMap((spec) => withF32Baseline(mixes).map((mix) => benchModel({ ...base, shape: parseShape(spec), mix }, progress)));
}

/**
 * The mixes to bench: a quantized mix is always measured next to pagellm's own F32 decode of the
 * same shape in the same run (the decode floor, Q8_0 and Q4_K_M at least 1.5x F32, is a ratio to it),
 * so F32 goes first when absent.
 */
export function withF32Baseline(mixes: readonly ModelMix[]): ModelMix[] {
  const quantized = mixes.some((m) => m !== "F32" && m !== "F16" && m !== "BF16");
  return quantized && !mixes.includes("F32") ? ["F32", ...mixes] : [...mixes];
}

/** A GGUF --model and, first, its F32 twin (same architecture and shape, random weights), grouped as one shape. */
function withF32Twin(file: BenchModel, modelsDir: string): BenchModel[] {
  if (!isGGUF(file.path)) throw new InputError("--f32-baseline is for a GGUF --model");
  const twin = ensureF32Twin(file.path, modelsDir, progress);
  const shape = file.label;
  const twinModel = benchModel({ model: twin.path, shape: parseShape("stories15M"), format: "f32", modelsDir }, progress);
  return [
    { ...twinModel, label: `${shape} F32 twin`, gguf: { shape, mix: "F32" } },
    twin.mix === undefined ? file : { ...file, gguf: { shape, mix: twin.mix } },
  ];
}

/** --type: GGUF mixes, comma-separated ([] when absent). */
function mixList(values: ParsedValues): ModelMix[] {
  const raw = str(values, "type");
  if (raw === undefined) return [];
  return raw.split(",").map((s) => {
    const name = s.trim();
    if (!isModelMix(name)) throw new InputError(`--type: "${name}" is not one of ${Object.keys(MODEL_MIXES).join(", ")}`);
    return name;
  });
}

/** The one model of a bench that runs a single model. */
export function benchModelOf(values: ParsedValues, rawArgs: readonly string[], defaultShape: string): BenchModel {
  const list = benchModels(values, rawArgs, [defaultShape]);
  if (list.length > 1) throw new InputError("this bench runs one model: give --shape and --type once");
  return list[0]!;
}

/** Caveats of the models (e.g. a vocabulary unlike the real model's), for the report's notes. */
export function modelNotes(list: readonly BenchModel[]): string[] {
  return list.flatMap((m) => (m.note !== undefined ? [`${m.label}: ${m.note}`] : []));
}

export const peerArg = {
  "peer-nlc": {
    type: "string",
    description:
      "A folder with node-llama-cpp installed (outside the project: NODE_LLAMA_CPP_SKIP_DOWNLOAD=true npm install node-llama-cpp@3.22.1): " +
      "run llama.cpp on the same GGUF file after each measurement and report pagellm / llama.cpp",
    valueHint: "dir",
  },
  "peer-llama-bench": {
    type: "string",
    description:
      "llama.cpp's llama-bench binary (a build of your own, outside the project): run it on the same GGUF file at the same thread count " +
      "after each measurement and report pagellm / llama.cpp",
    valueHint: "path",
  },
} as const satisfies ArgsDef;

/** --peer-llama-bench or --peer-nlc (one of them), checked: the peer exists, and GGUF models only (llama.cpp reads nothing else). */
export function peerOption(values: ParsedValues, models: readonly BenchModel[]): LlamaCppPeer | null {
  const bin = str(values, "peer-llama-bench");
  const dir = str(values, "peer-nlc");
  if (bin === undefined && dir === undefined) return null;
  if (bin !== undefined && dir !== undefined) throw new InputError("--peer-llama-bench and --peer-nlc: give one llama.cpp peer per run");
  const option = bin !== undefined ? "--peer-llama-bench" : "--peer-nlc";
  const foreign = models.find((m) => !isGGUF(m.path));
  if (foreign !== undefined) throw new InputError(`${option} runs llama.cpp on GGUF files; ${foreign.label} is a llama2.c model (use --type or a GGUF --model)`);
  return bin !== undefined ? llamaBenchPeer(bin) : nlcPeer(dir!);
}
