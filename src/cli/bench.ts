/**
 * `pagellm bench <kernels|decode|prefill|batch|prefix>`: performance measured against baselines
 * taken in the same run (a scalar loop, the streaming-read bandwidth, one thread, the cache off),
 * so the ratios mean something on a shared, noisy machine. Tables on stdout, or one JSON
 * document with --json; progress on stderr. The measuring itself lives in src/bench/.
 */
import { defineCommand, renderUsage, type ArgsDef, type CommandDef } from "citty";
import { availableParallelism } from "node:os";
import { InputError } from "../errors.ts";
import { EVICTION_POLICIES, type EvictionPolicyName } from "../kv/eviction.ts";
import { batchTables, BATCH_SIZES, runBatchBench } from "../bench/batch.ts";
import { decodeTables, runDecodeBench } from "../bench/decode.ts";
import { KERNEL_SHAPES, kernelsTables, runKernelsBench } from "../bench/kernels.ts";
import type { RepeatOptions } from "../bench/measure.ts";
import {
  benchModel, DEFAULT_MODELS_DIR, DEFAULT_TOKENIZER, parseShape, SHAPE_HELP, WEIGHT_FORMATS, type BenchModel, type WeightFormat,
} from "../bench/models.ts";
import { prefillTables, runPrefillBench } from "../bench/prefill.ts";
import { prefixNotes, prefixTables, runPrefixBench } from "../bench/prefix.ts";
import { machineInfo, printReport, progress, type BenchReport, type Table } from "../bench/report.ts";
import { STREAM_BYTES } from "../bench/roofline.ts";
import { WORKLOAD_NAMES, type WorkloadName } from "../bench/workloads.ts";
import { checkKnownOptions, numberOption, repeated, type ParsedValues } from "./options.ts";

// ----------------------------------------------------------------------------
// Options

const commonArgs = {
  json: { type: "boolean", description: "Print one JSON document with every figure instead of tables" },
  reps: { type: "string", description: "Timed repetitions of each measurement (default: per bench, see its description)", valueHint: "n" },
  warmup: { type: "string", description: "Untimed repetitions before them (default 1)", valueHint: "n" },
  seed: { type: "string", description: "Seed of the random prompts (default 1)", valueHint: "n" },
} as const satisfies ArgsDef;

/** Model options; `shapeDefault` names the default shape in the help. */
function modelArgs(shapeDefault: string) {
  return {
    model: { type: "string", description: "Bench this llama2.c model file instead of a random-weight one of --shape", valueHint: "path" },
    shape: { type: "string", description: `Shape of the random-weight model: ${SHAPE_HELP} (default ${shapeDefault})`, valueHint: "shape" },
    quant: { type: "string", description: `Weights of the random model: ${WEIGHT_FORMATS.join(" | ")} (default f32)`, valueHint: "format" },
    tokenizer: { type: "string", description: `Tokenizer; its vocabulary must match the model's (default ${DEFAULT_TOKENIZER})`, valueHint: "path" },
    "models-dir": { type: "string", description: `Cache folder of random-weight models, random-<shape>.bin (default ${DEFAULT_MODELS_DIR})`, valueHint: "dir" },
  } as const satisfies ArgsDef;
}

const threadsListArg = {
  threads: { type: "string", description: "Thread counts to compare, comma-separated (default 1,2)", valueHint: "n,n" },
} as const satisfies ArgsDef;

const streamArg = {
  "stream-mb": { type: "string", description: `MiB read by the bandwidth measurement (default ${STREAM_BYTES / 2 ** 20}; keep it far above the last-level cache)`, valueHint: "mb" },
} as const satisfies ArgsDef;

function str(values: ParsedValues, name: string): string | undefined {
  const v = values[name];
  return typeof v === "string" && v !== "" ? v : undefined;
}

function posint(values: ParsedValues, name: string, fallback: number): number {
  return numberOption(values, name, "posint") ?? fallback;
}

function nonNegInt(values: ParsedValues, name: string, fallback: number): number {
  const v = numberOption(values, name, "int") ?? fallback;
  if (v < 0) throw new InputError(`--${name} expects a non-negative integer, got ${v}`);
  return v;
}

/** A comma-separated list of positive integers. */
function intList(values: ParsedValues, name: string, fallback: readonly number[]): number[] {
  const raw = str(values, name);
  if (raw === undefined) return [...fallback];
  const list = raw.split(",").map((s) => Number(s.trim()));
  if (list.length === 0 || list.some((v) => !Number.isInteger(v) || v < 1)) {
    throw new InputError(`--${name} expects positive integers separated by commas, got "${raw}"`);
  }
  return list;
}

/** A comma-separated list of names out of `options`. */
function nameList<T extends string>(values: ParsedValues, name: string, options: readonly T[], fallback: readonly T[]): T[] {
  const raw = str(values, name);
  if (raw === undefined) return [...fallback];
  const list = raw.split(",").map((s) => s.trim());
  const bad = list.find((s) => !(options as readonly string[]).includes(s));
  if (bad !== undefined) throw new InputError(`--${name}: "${bad}" is not one of ${options.join(", ")}`);
  return list as T[];
}

function repeatOptions(values: ParsedValues, reps: number): RepeatOptions {
  return { reps: posint(values, "reps", reps), warmup: nonNegInt(values, "warmup", 1) };
}

function weightFormat(values: ParsedValues): WeightFormat {
  const raw = str(values, "quant") ?? "f32";
  if (!(WEIGHT_FORMATS as readonly string[]).includes(raw)) throw new InputError(`--quant must be one of ${WEIGHT_FORMATS.join(", ")}, got "${raw}"`);
  return raw as WeightFormat;
}

/** The models to bench: --model, or the random model of each shape given (every --shape, or the defaults). */
function models(values: ParsedValues, shapeSpecs: readonly string[]): BenchModel[] {
  const model = str(values, "model");
  const base = { format: weightFormat(values), tokenizer: str(values, "tokenizer"), modelsDir: str(values, "models-dir") ?? DEFAULT_MODELS_DIR };
  if (model !== undefined) return [benchModel({ ...base, model, shape: parseShape(shapeSpecs[0]!) }, progress)];
  return shapeSpecs.map((spec) => benchModel({ ...base, shape: parseShape(spec) }, progress));
}

function oneModel(values: ParsedValues, defaultShape: string): BenchModel {
  return models(values, [str(values, "shape") ?? defaultShape])[0]!;
}

function streamBytes(values: ParsedValues): number {
  return posint(values, "stream-mb", STREAM_BYTES / 2 ** 20) * 2 ** 20;
}

function modelNotes(list: BenchModel[]): string[] {
  return list.flatMap((m) => (m.note !== undefined ? [`${m.label}: ${m.note}`] : []));
}

function settings(values: ParsedValues, extra: BenchReport<unknown>["settings"]): BenchReport<unknown>["settings"] {
  const given: BenchReport<unknown>["settings"] = {};
  for (const [k, v] of Object.entries(values)) if (k !== "_" && v !== undefined && k !== "json") given[k] = v;
  return { ...given, ...extra };
}

function emit<R>(bench: string, values: ParsedValues, extra: BenchReport<unknown>["settings"], notes: string[], results: R, tables: Table[]): void {
  printReport({ bench, machine: machineInfo(), settings: settings(values, extra), notes, results }, tables, values.json === true);
}

// ----------------------------------------------------------------------------
// Subcommands

const kernelsArgs = {
  ...commonArgs,
  ...threadsListArg,
  ...streamArg,
  ...modelArgs("stories15M"),
  "decode-tokens": { type: "string", description: "Tokens generated per whole-model decode repetition (default 64)", valueHint: "n" },
} as const satisfies ArgsDef;

const kernelsCommand = defineCommand({
  meta: {
    name: "kernels",
    description:
      "f32 matrix-vector kernel GFLOP/s and GB/s vs a scalar loop (288x288, 768x768, 768x2048, 2048x768), matrix-matrix GFLOP/s (T=16, 64), " +
      "streaming-read bandwidth, and whole-model decode tokens/s, at each thread count (default 5 repetitions)",
  },
  args: kernelsArgs,
  async run({ args, rawArgs }) {
    checkKnownOptions(rawArgs, kernelsArgs);
    const model = oneModel(args, "stories15M");
    const o = {
      ...repeatOptions(args, 5), threads: intList(args, "threads", [1, 2]), shapes: KERNEL_SHAPES, streamBytes: streamBytes(args),
      model, decodeTokens: posint(args, "decode-tokens", 64), seed: nonNegInt(args, "seed", 1),
    };
    const r = await runKernelsBench(o);
    emit("kernels", args, { reps: o.reps, warmup: o.warmup, threads: o.threads, streamBytes: o.streamBytes, model: model.label }, modelNotes([model]), r, kernelsTables(r));
  },
});

const decodeArgs = {
  ...commonArgs,
  ...threadsListArg,
  ...streamArg,
  ...modelArgs("stories110M"),
  "prompt-tokens": { type: "string", description: "Prompt length before decoding (default 8)", valueHint: "n" },
  tokens: { type: "string", description: "Tokens generated per repetition (default 128)", valueHint: "n" },
} as const satisfies ArgsDef;

const decodeCommand = defineCommand({
  meta: {
    name: "decode",
    description: "Single-sequence decode tokens/s at each thread count next to the memory-bandwidth limit (weights per token / streaming-read GB/s) measured in the same run (default 3 repetitions)",
  },
  args: decodeArgs,
  async run({ args, rawArgs }) {
    checkKnownOptions(rawArgs, decodeArgs);
    const model = oneModel(args, "stories110M");
    const o = {
      ...repeatOptions(args, 3), threads: intList(args, "threads", [1, 2]), model, streamBytes: streamBytes(args),
      promptTokens: posint(args, "prompt-tokens", 8), genTokens: posint(args, "tokens", 128), seed: nonNegInt(args, "seed", 1),
    };
    const r = await runDecodeBench(o);
    emit("decode", args, { reps: o.reps, warmup: o.warmup, threads: o.threads, model: model.label, promptTokens: o.promptTokens, tokens: o.genTokens }, modelNotes([model]), r, decodeTables(r));
  },
});

const prefillArgs = {
  ...commonArgs,
  ...threadsListArg,
  ...modelArgs("stories110M"),
  "prompt-tokens": { type: "string", description: "Prompt length (default 512)", valueHint: "n" },
  "decode-tokens": { type: "string", description: "Tokens generated to measure decode per token in the same run (default 32)", valueHint: "n" },
} as const satisfies ArgsDef;

const prefillCommand = defineCommand({
  meta: {
    name: "prefill",
    description: "Prefill tokens/s of one 512-token prompt (TTFT, prefix cache off) at each thread count, the 2-thread/1-thread ratio, and prefill vs decode per token (target >= 3.5x) (default 3 repetitions)",
  },
  args: prefillArgs,
  async run({ args, rawArgs }) {
    checkKnownOptions(rawArgs, prefillArgs);
    const model = oneModel(args, "stories110M");
    const o = {
      ...repeatOptions(args, 3), threads: intList(args, "threads", [1, 2]), model,
      promptTokens: posint(args, "prompt-tokens", 512), decodeTokens: posint(args, "decode-tokens", 32), seed: nonNegInt(args, "seed", 1),
    };
    const r = await runPrefillBench(o);
    emit("prefill", args, { reps: o.reps, warmup: o.warmup, threads: o.threads, model: model.label, promptTokens: o.promptTokens }, modelNotes([model]), r, prefillTables(r));
  },
});

const batchArgs = {
  ...commonArgs,
  ...threadsListArg,
  ...streamArg,
  ...modelArgs("stories15M and stories110M; repeat --shape for several"),
  seqs: { type: "string", description: `Concurrent sequences to measure, comma-separated (default ${BATCH_SIZES.join(",")})`, valueHint: "n,n" },
  "prompt-tokens": { type: "string", description: "Prompt length of each sequence (default 16)", valueHint: "n" },
  steps: { type: "string", description: "Decode steps timed per repetition (default 16)", valueHint: "n" },
  "warmup-steps": { type: "string", description: "Untimed decode steps before them (default 2)", valueHint: "n" },
} as const satisfies ArgsDef;

const batchCommand = defineCommand({
  meta: {
    name: "batch",
    description:
      "Aggregate decode tokens/s at 1, 4, 16 and 64 concurrent sequences (steady state) and prefill tokens/s, next to the roofline measured in the same run " +
      "(streaming bandwidth, matmul GFLOP/s at T=16) (default 3 repetitions)",
  },
  args: batchArgs,
  async run({ args, rawArgs }) {
    checkKnownOptions(rawArgs, batchArgs);
    const shapes = repeated(rawArgs, "shape");
    const list = models(args, shapes.length > 0 ? shapes : ["stories15M", "stories110M"]);
    const o = {
      ...repeatOptions(args, 3), threads: intList(args, "threads", [1, 2]), models: list, batchSizes: intList(args, "seqs", BATCH_SIZES),
      promptTokens: posint(args, "prompt-tokens", 16), steps: posint(args, "steps", 16), warmupSteps: nonNegInt(args, "warmup-steps", 2),
      streamBytes: streamBytes(args), seed: nonNegInt(args, "seed", 1),
    };
    const r = await runBatchBench(o);
    emit("batch", args, {
      reps: o.reps, warmup: o.warmup, threads: o.threads, models: list.map((m) => m.label), seqs: o.batchSizes, promptTokens: o.promptTokens, steps: o.steps,
    }, [...modelNotes(list), "prefix caching on (the engine default); every sequence has a distinct prompt, so nothing hits"], r, batchTables(r));
  },
});

const prefixArgs = {
  ...commonArgs,
  ...modelArgs("smollm2-135m"),
  threads: { type: "string", description: `Threads (default: the cores this process may use, ${availableParallelism()})`, valueHint: "n" },
  "prefix-tokens": { type: "string", description: "Shared prefix of the TTFT measurement (default 1536)", valueHint: "n" },
  "suffix-tokens": { type: "string", description: "Unique suffix after it (default 32)", valueHint: "n" },
  "distinct-requests": { type: "string", description: "Requests per repetition of the 0% hit-rate comparison (default 4)", valueHint: "n" },
  "distinct-prompt-tokens": { type: "string", description: "Prompt length of each of them (default 256)", valueHint: "n" },
  "distinct-output-tokens": { type: "string", description: "Output tokens of each of them (default 16)", valueHint: "n" },
  workloads: {
    type: "string",
    description: `Serving workloads to run, comma-separated: ${WORKLOAD_NAMES.join(", ")}, or none (default both)`,
    valueHint: "names",
  },
  requests: { type: "string", description: "Requests per serving workload (default 20; the issue's vLLM workload has 100)", valueHint: "n" },
  "output-tokens": { type: "string", description: "Output tokens per serving request (default 128)", valueHint: "n" },
  "num-blocks": { type: "string", description: "KV pool of the serving workloads in 16-token blocks (default: every shared prefix plus four requests' unique tokens, so eviction matters)", valueHint: "n" },
  "eviction-policies": { type: "string", description: `Eviction policies to compare, comma-separated (default ${EVICTION_POLICIES.join(",")})`, valueHint: "names" },
} as const satisfies ArgsDef;

const prefixCommand = defineCommand({
  meta: {
    name: "prefix",
    description:
      "Prefix caching: TTFT with a cached 1536-token prefix vs the cache off, hit rate, sha256/xxh64 hashing ns/token, 0%-hit throughput on vs off (target within 2%), " +
      "and vLLM prefix_repetition / SGLang generated-shared-prefix serving workloads under FCFS and LPM, each eviction policy, cache on and off (default 3 repetitions)",
  },
  args: prefixArgs,
  async run({ args, rawArgs }) {
    checkKnownOptions(rawArgs, prefixArgs);
    const model = oneModel(args, "smollm2-135m");
    const workloads = str(args, "workloads") === "none" ? [] : nameList<WorkloadName>(args, "workloads", WORKLOAD_NAMES, WORKLOAD_NAMES);
    const o = {
      ...repeatOptions(args, 3), threads: posint(args, "threads", availableParallelism()), model,
      prefixTokens: posint(args, "prefix-tokens", 1536), suffixTokens: posint(args, "suffix-tokens", 32),
      distinctRequests: posint(args, "distinct-requests", 4), distinctPromptTokens: posint(args, "distinct-prompt-tokens", 256),
      distinctOutputTokens: posint(args, "distinct-output-tokens", 16),
      workloads, requests: posint(args, "requests", 20), outputTokens: posint(args, "output-tokens", 128),
      numBlocks: numberOption(args, "num-blocks", "posint") ?? null,
      policies: nameList<EvictionPolicyName>(args, "eviction-policies", EVICTION_POLICIES, EVICTION_POLICIES),
      seed: nonNegInt(args, "seed", 1),
    };
    const r = await runPrefixBench(o);
    emit("prefix", args, {
      reps: o.reps, warmup: o.warmup, threads: o.threads, model: model.label, prefixTokens: o.prefixTokens, suffixTokens: o.suffixTokens,
      workloads: o.workloads as string[], requests: o.requests, outputTokens: o.outputTokens, policies: o.policies as string[],
    }, [...modelNotes([model]), ...prefixNotes(r)], r, prefixTables(r));
  },
});

// ----------------------------------------------------------------------------
// The command

const benchSubCommands = {
  kernels: kernelsCommand,
  decode: decodeCommand,
  prefill: prefillCommand,
  batch: batchCommand,
  prefix: prefixCommand,
};

export const benchCommand = defineCommand({
  meta: {
    name: "bench",
    description: "Benchmarks, each figure a ratio against a baseline measured in the same run (random-weight models of real shapes, cached in models/)",
  },
  subCommands: benchSubCommands,
  async run({ rawArgs }) {
    // citty runs a parent's run after its subcommand too: only list the benches when none was named.
    if (rawArgs.some((a) => Object.hasOwn(benchSubCommands, a))) return;
    process.stdout.write(`${await renderUsage(benchCommand as CommandDef, { meta: { name: "pagellm" } })}\n`);
  },
});
