/**
 * `pagellm bench <kernels|decode|prefill|batch|prefix|serve|embed|threads|all>`: performance measured against baselines
 * taken in the same run (a scalar loop, the streaming-read bandwidth, one thread, the cache off),
 * so the ratios mean something on a shared, noisy machine. Tables on stdout; --json FILE, --chart
 * FILE.svg and --compare OLD.json as bench-output.ts says; progress on stderr. The measuring
 * lives in src/bench/.
 */
import { defineCommand, renderUsage, type ArgsDef, type CommandDef } from "citty";
import { availableParallelism } from "node:os";
import { EVICTION_POLICIES, type EvictionPolicyName } from "../kv/eviction.ts";
import { batchTables, BATCH_SIZES, runBatchBench } from "../bench/batch-decode.ts";
import { runDecodeBench } from "../bench/decode.ts";
import { KERNEL_SHAPES, kernelsNotes, kernelsTables, runKernelsBench } from "../bench/kernel-speed.ts";
import {
  benchModelOf, benchModels, commonArgs, peerArg, peerOption, kvTypeArg, intList, modelArgs, modelNotes, nameList, nonNegInt, posint, repeatOptions, str, streamArg,
  streamBytes, threadsListArg,
} from "./bench-options.ts";
import { runPrefillBench } from "../bench/prefill.ts";
import { prefixNotes, prefixTables, runPrefixBench } from "../bench/prefix.ts";
import { restartNotes, restartTable, runRestartBench } from "../bench/prefix-restart.ts";
import { progress, reportText, setProgressSink, type BenchReport, type Table } from "../bench/bench-report.ts";
import { makeReport, type BenchName, type BenchResults } from "../bench/schema.ts";
import { benchOutputArgs, checkWritable, jsonTarget, startRun, writeOutputs, type StartedRun } from "./bench-output.ts";
import { info } from "./output.ts";
import { pagellmEngine, readMaskBenchFiles, runMaskBench, writeGrammarOutputs, type MaskBenchEngine, type MaskBenchResult } from "../bench/grammar.ts";
import { xgrammarEngine } from "../bench/grammar-xgrammar.ts";
import { TokenVocabulary } from "../grammar/vocabulary.ts";
import { loadTokenizer } from "../tokenizer/load.ts";
import { allCommand } from "./bench-all.ts";
import { chartCommand, compareCommand } from "./bench-files.ts";
import { benchServeCommand } from "./bench-serve.ts";
import { benchEmbedCommand } from "./bench-embed.ts";
import { benchThreadsCommand } from "./bench-threads.ts";
import { decodeSet, prefillSet } from "../bench/type-comparison.ts";
import { DEFAULT_MODELS_DIR } from "../bench/bench-models.ts";
import { InputError } from "../errors.ts";
import { WORKLOAD_NAMES, type WorkloadName } from "../bench/prefix-workloads.ts";
import { KV_TYPES } from "../kv/kv-layout.ts";
import { checkKnownOptions, deviceArg, deviceOption, gpuBackendOptions, kvTypeOption, numberOption, speculativeArgs, speculativeOption, type ParsedValues } from "./options.ts";
import { DEFAULT_STORIES_MODEL } from "../bench/speculative-decode.ts";
import type { SpeculativeOptions } from "../engine/speculative.ts";
import { existsSync, readFileSync } from "node:fs";
import { basename } from "node:path";
import { benchGpu } from "../bench/webgpu.ts";

type Settings = BenchReport<unknown>["settings"];

/** --device for the benches that run a model: WebGPU rows next to WebAssembly's when it resolves to webgpu. */
const benchDeviceArg = {
  device: {
    type: "string",
    description:
      "auto (default): add WebGPU figures on a hardware GPU adapter | wasm: WebAssembly only | webgpu: add WebGPU figures on any adapter " +
      "(a software one is labelled so); WebAssembly's are always measured, in the same run",
    valueHint: "device",
  },
  "gpu-f16": deviceArg["gpu-f16"],
} as const satisfies ArgsDef;

/** Notes for models that got no WebGPU figures, and why. */
function refusalNotes(results: readonly { model: string; webgpu: { refused: string } | object | null }[]): string[] {
  return results.flatMap((r) => (r.webgpu !== null && "refused" in r.webgpu ? [`${r.model}: no WebGPU figures: ${r.webgpu.refused}`] : []));
}

/** --speculate as the report's settings show it: "off", or "ngram, 4 tokens, n-grams 1:4". */
function speculativeSetting(options: SpeculativeOptions | undefined): string {
  return options === undefined ? "off" : `${options.method}, ${options.tokens} tokens, n-grams ${options.ngram.min}:${options.ngram.max}`;
}

function emit<K extends BenchName>(bench: K, run: StartedRun, settings: Settings, notes: string[], results: BenchResults[K], tables: Table[]): void {
  const report = makeReport(bench, run.date, settings, notes, results);
  writeOutputs({ doc: report, text: reportText(report, tables) }, run.out);
}

const kernelsArgs = {
  ...commonArgs,
  ...benchOutputArgs,
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
    const run = startRun(args, rawArgs);
    const model = benchModelOf(args, rawArgs, "stories15M");
    const o = {
      ...repeatOptions(args, 5), threads: intList(args, "threads", [1, 2]), shapes: KERNEL_SHAPES, streamBytes: streamBytes(args),
      model, decodeTokens: posint(args, "decode-tokens", 64), seed: nonNegInt(args, "seed", 1),
    };
    const r = await runKernelsBench(o);
    const settings = { reps: o.reps, warmup: o.warmup, threads: o.threads, streamBytes: o.streamBytes, model: model.label, decodeTokens: o.decodeTokens, seed: o.seed };
    emit("kernels", run, settings, [...modelNotes([model]), ...kernelsNotes(r)], r, kernelsTables(r));
  },
});

const decodeArgs = {
  ...commonArgs,
  ...benchOutputArgs,
  ...threadsListArg,
  ...streamArg,
  ...modelArgs("stories110M"),
  ...peerArg,
  ...benchDeviceArg,
  "prompt-tokens": { type: "string", description: "Prompt length before decoding (default 8)", valueHint: "n" },
  tokens: { type: "string", description: "Tokens generated per repetition (default 128)", valueHint: "n" },
  context: {
    type: "string",
    description: "Also time decode steps at these context lengths, comma-separated, for each --kv-type (the context is written, not prefilled; see docs/kv-cache-types.md)",
    valueHint: "n,n",
  },
  "kv-type": {
    type: "string",
    description: `KV cache types, comma-separated: ${KV_TYPES.join(" | ")}; the first is the plain decode's and the baseline of --context's ratios (default f32,f16,q8_0 with --context, else the model's default)`,
    valueHint: "type,type",
  },
  runc: {
    type: "string",
    description: "A llama2.c `run` binary to time on the same model file, alternating with pagellm (OMP_NUM_THREADS = each thread count)",
    valueHint: "path",
  },
  speculate: {
    type: "boolean",
    description:
      "Also decode with and without speculative decoding (--spec-tokens, --spec-ngram) in the same run, at the first thread count, on three workloads: " +
      "stories260K continuing TinyStories openings, the model's greedy loops, and sampling with no repetition",
  },
  "spec-tokens": speculativeArgs["spec-tokens"],
  "spec-ngram": speculativeArgs["spec-ngram"],
  "spec-stories": { type: "string", description: "The stories workload's llama2.c checkpoint, tokenizer beside it (default ../shared/models/llama2c/stories260K.bin)", valueHint: "path" },
  "json-schema": {
    type: "string",
    description: "Also decode with this JSON Schema constraint and without in the same run, at the first thread count, requests alternating (see docs/structured-output.md)",
    valueHint: "file",
  },
  tools: {
    type: "boolean",
    description:
      "Also decode conversations offering two tools with tool_choice auto and required against the same prompts as plain token ids in the same run, at the first thread count: " +
      "what tool-call parsing and the constraint add to decode time (docs/tools.md)",
  },
} as const satisfies ArgsDef;

/** bench decode's --json-schema: the schema's text and name, or null. */
function benchJsonSchema(values: ParsedValues): { text: string; name: string } | null {
  const path = str(values, "json-schema");
  if (path === undefined) return null;
  if (!existsSync(path)) throw new InputError(`--json-schema ${path}: file not found`);
  const text = readFileSync(path, "utf8");
  try {
    JSON.parse(text);
  } catch (e) {
    throw new InputError(`--json-schema ${path}: not JSON: ${(e as Error).message}`);
  }
  return { text, name: basename(path) };
}

/** bench decode's --speculate and its options, checked; null without --speculate. */
function benchSpeculate(values: ParsedValues): { options: SpeculativeOptions; storiesModel: string | null } | null {
  if (values.speculate !== true) {
    const stray = ["spec-tokens", "spec-ngram", "spec-stories"].find((name) => values[name] !== undefined);
    if (stray !== undefined) throw new InputError(`--${stray} needs --speculate`);
    return null;
  }
  const options = speculativeOption({ ...values, speculate: "ngram" })!;
  const stories = str(values, "spec-stories");
  if (stories !== undefined && !existsSync(stories)) throw new InputError(`--spec-stories ${stories}: file not found`);
  return { options, storiesModel: stories ?? DEFAULT_STORIES_MODEL };
}

const decodeCommand = defineCommand({
  meta: {
    name: "decode",
    description:
      "Single-sequence decode tokens/s at each thread count next to the memory-bandwidth limit (weights per token / streaming-read GB/s) " +
      "measured in the same run (default 3 repetitions)",
  },
  args: decodeArgs,
  async run({ args, rawArgs }) {
    checkKnownOptions(rawArgs, decodeArgs);
    const run = startRun(args, rawArgs);
    const models = benchModels(args, rawArgs, ["stories110M"]);
    const contexts = str(args, "context") === undefined ? [] : intList(args, "context", []);
    const kvTypes = nameList(args, "kv-type", KV_TYPES, contexts.length > 0 ? KV_TYPES : []);
    const o = {
      ...repeatOptions(args, 3), threads: intList(args, "threads", [1, 2]), streamBytes: streamBytes(args),
      promptTokens: posint(args, "prompt-tokens", 8), genTokens: posint(args, "tokens", 128), seed: nonNegInt(args, "seed", 1),
      runc: typeof args.runc === "string" ? args.runc : null, peer: peerOption(args, models), speculate: benchSpeculate(args),
      jsonSchema: benchJsonSchema(args), kvType: kvTypes[0] ?? null, kvContext: contexts.length === 0 ? null : { contexts, kvTypes }, tools: args.tools === true,
    };
    const { gpu, note: deviceNote } = await benchGpu(deviceOption(args), gpuBackendOptions(args));
    const results = [];
    try {
      for (const model of models) results.push(await runDecodeBench({ ...o, model, gpu }));
    } finally {
      gpu?.backend.close();
    }
    const settings = {
      reps: o.reps, warmup: o.warmup, threads: o.threads, streamBytes: o.streamBytes, models: models.map((m) => m.label), promptTokens: o.promptTokens, tokens: o.genTokens, seed: o.seed,
      device: deviceOption(args), speculative: speculativeSetting(o.speculate?.options), ...(o.jsonSchema === null ? {} : { jsonSchema: o.jsonSchema.name }), ...(o.tools ? { tools: true } : {}),
      ...(kvTypes.length > 0 ? { kvTypes } : {}), ...(contexts.length > 0 ? { contexts } : {}),
    };
    const set = decodeSet(results);
    emit("decode", run, settings, [...modelNotes(models), deviceNote, ...refusalNotes(results)], set.results, set.tables);
  },
});

const prefillArgs = {
  ...commonArgs,
  ...kvTypeArg,
  ...benchOutputArgs,
  ...threadsListArg,
  ...modelArgs("stories110M"),
  ...peerArg,
  ...benchDeviceArg,
  "prompt-tokens": { type: "string", description: "Prompt length (default 512)", valueHint: "n" },
  "decode-tokens": { type: "string", description: "Tokens generated to measure decode per token in the same run (default 32)", valueHint: "n" },
} as const satisfies ArgsDef;

const prefillCommand = defineCommand({
  meta: {
    name: "prefill",
    description:
      "Prefill tokens/s of one 512-token prompt (TTFT, prefix cache off) at each thread count, the 2-thread/1-thread ratio, " +
      "and prefill vs decode per token (target >= 3.5x) (default 3 repetitions)",
  },
  args: prefillArgs,
  async run({ args, rawArgs }) {
    checkKnownOptions(rawArgs, prefillArgs);
    const run = startRun(args, rawArgs);
    const models = benchModels(args, rawArgs, ["stories110M"]);
    const o = {
      ...repeatOptions(args, 3), threads: intList(args, "threads", [1, 2]),
      promptTokens: posint(args, "prompt-tokens", 512), decodeTokens: posint(args, "decode-tokens", 32), seed: nonNegInt(args, "seed", 1),
      peer: peerOption(args, models), kvType: kvTypeOption(args),
    };
    const { gpu, note: deviceNote } = await benchGpu(deviceOption(args), gpuBackendOptions(args));
    const results = [];
    try {
      for (const model of models) results.push(await runPrefillBench({ ...o, model, gpu }));
    } finally {
      gpu?.backend.close();
    }
    const settings = {
      reps: o.reps, warmup: o.warmup, threads: o.threads, models: models.map((m) => m.label), promptTokens: o.promptTokens, decodeTokens: o.decodeTokens, seed: o.seed,
      device: deviceOption(args),
    };
    const set = prefillSet(results);
    emit("prefill", run, settings, [...modelNotes(models), deviceNote, ...refusalNotes(results)], set.results, set.tables);
  },
});

const batchArgs = {
  ...commonArgs,
  ...kvTypeArg,
  ...benchOutputArgs,
  ...threadsListArg,
  ...streamArg,
  ...modelArgs("stories15M and stories110M; repeat --shape for several"),
  ...benchDeviceArg,
  seqs: { type: "string", description: `Concurrent sequences to measure, comma-separated (default ${BATCH_SIZES.join(",")})`, valueHint: "n,n" },
  "prompt-tokens": { type: "string", description: "Prompt length of each sequence (default 16)", valueHint: "n" },
  steps: { type: "string", description: "Decode steps timed per repetition (default 16)", valueHint: "n" },
  "warmup-steps": { type: "string", description: "Untimed decode steps before them (default 2)", valueHint: "n" },
} as const satisfies ArgsDef;

const batchCommand = defineCommand({
  meta: {
    name: "batch",
    description:
      "Aggregate decode tokens/s at 1, 4, 16 and 64 concurrent sequences (steady state) and prefill tokens/s, next to the roofline measured " +
      "in the same run (streaming bandwidth, matmul GFLOP/s at T=16) (default 3 repetitions)",
  },
  args: batchArgs,
  async run({ args, rawArgs }) {
    checkKnownOptions(rawArgs, batchArgs);
    const run = startRun(args, rawArgs);
    const models = benchModels(args, rawArgs, ["stories15M", "stories110M"]);
    const o = {
      ...repeatOptions(args, 3, 0), threads: intList(args, "threads", [1, 2]), models, batchSizes: intList(args, "seqs", BATCH_SIZES),
      promptTokens: posint(args, "prompt-tokens", 16), steps: posint(args, "steps", 16), warmupSteps: nonNegInt(args, "warmup-steps", 2),
      streamBytes: streamBytes(args), seed: nonNegInt(args, "seed", 1), kvType: kvTypeOption(args),
    };
    const { gpu, note: deviceNote } = await benchGpu(deviceOption(args), gpuBackendOptions(args));
    let r;
    try {
      r = await runBatchBench({ ...o, gpu });
    } finally {
      gpu?.backend.close();
    }
    const settings = {
      reps: o.reps, warmup: o.warmup, threads: o.threads, models: models.map((m) => m.label), seqs: o.batchSizes, promptTokens: o.promptTokens,
      steps: o.steps, warmupSteps: o.warmupSteps, streamBytes: o.streamBytes, seed: o.seed, device: deviceOption(args),
    };
    const notes = [
      ...modelNotes(models), "prefix caching on (the engine default); every sequence has a distinct prompt, so nothing hits", deviceNote,
      ...refusalNotes(r.webgpu.map((webgpu) => ({ model: webgpu.model, webgpu }))),
    ];
    emit("batch", run, settings, notes, r, batchTables(r));
  },
});

const prefixArgs = {
  ...commonArgs,
  ...kvTypeArg,
  ...benchOutputArgs,
  ...modelArgs("smollm2-135m"),
  threads: { type: "string", description: "Threads (default: the cores this process may use)", valueHint: "n" },
  "prefix-tokens": { type: "string", description: "Shared prefix of the TTFT measurement (default 1536)", valueHint: "n" },
  "suffix-tokens": { type: "string", description: "Unique suffix after it (default 32)", valueHint: "n" },
  "distinct-requests": { type: "string", description: "Requests per repetition of the 0% hit-rate comparison (default 4)", valueHint: "n" },
  "distinct-prompt-tokens": { type: "string", description: "Prompt length of each of them (default 256)", valueHint: "n" },
  "distinct-output-tokens": { type: "string", description: "Output tokens of each of them (default 16)", valueHint: "n" },
  workloads: { type: "string", description: `Serving workloads to run, comma-separated: ${WORKLOAD_NAMES.join(", ")}, or none (default both)`, valueHint: "names" },
  requests: { type: "string", description: "Requests per serving workload (default 20; the full-size vLLM workload has 100)", valueHint: "n" },
  "output-tokens": { type: "string", description: "Output tokens per serving request (default 128)", valueHint: "n" },
  "max-num-seqs": { type: "string", description: "Requests running at once in the serving workloads (default 4)", valueHint: "n" },
  "num-blocks": {
    type: "string",
    description:
      "KV pool of the serving workloads in 16-token blocks (default: --max-num-seqs whole requests, so with the cache on cached prefixes compete for blocks and are evicted)",
    valueHint: "n",
  },
  "eviction-policies": { type: "string", description: `Eviction policies to compare, comma-separated (default ${EVICTION_POLICIES.join(",")})`, valueHint: "names" },
  restart: {
    type: "boolean",
    description: "Instead: the prompt (--prefix-tokens + --suffix-tokens) in fresh processes, cold vs the disk KV cache warm (--kv-cache-dir), and the disk tier's read speed vs a streaming read of the same files",
  },
} as const satisfies ArgsDef;

const prefixCommand = defineCommand({
  meta: {
    name: "prefix",
    description:
      "Prefix caching: TTFT with a cached 1536-token prefix vs the cache off, TTFT with 0, 25, 50, 75 and 100% of that prefix cached, hit rate, " +
      "sha256/xxh64 hashing ns/token, 0%-hit throughput on vs off " +
      "(target within 2%), and vLLM prefix_repetition / SGLang generated-shared-prefix serving workloads under FCFS and LPM, each eviction policy, " +
      "cache on and off (default 3 repetitions)",
  },
  args: prefixArgs,
  async run({ args, rawArgs }) {
    checkKnownOptions(rawArgs, prefixArgs);
    const run = startRun(args, rawArgs);
    const model = benchModelOf(args, rawArgs, "smollm2-135m");
    const workloads = str(args, "workloads") === "none" ? [] : nameList<WorkloadName>(args, "workloads", WORKLOAD_NAMES, WORKLOAD_NAMES);
    const o = {
      ...repeatOptions(args, 3), threads: posint(args, "threads", availableParallelism()), model,
      prefixTokens: posint(args, "prefix-tokens", 1536), suffixTokens: posint(args, "suffix-tokens", 32),
      distinctRequests: posint(args, "distinct-requests", 4), distinctPromptTokens: posint(args, "distinct-prompt-tokens", 256),
      distinctOutputTokens: posint(args, "distinct-output-tokens", 16),
      workloads, requests: posint(args, "requests", 20), outputTokens: posint(args, "output-tokens", 128),
      maxNumSeqs: posint(args, "max-num-seqs", 4), numBlocks: numberOption(args, "num-blocks", "posint") ?? null,
      policies: nameList<EvictionPolicyName>(args, "eviction-policies", EVICTION_POLICIES, EVICTION_POLICIES),
      seed: nonNegInt(args, "seed", 1), kvType: kvTypeOption(args),
    };
    if (args.restart === true) {
      // The block files go on the disk the models live on (a fresh folder, removed afterwards), not a RAM-backed /tmp.
      const r = await runRestartBench({ ...o, blockSize: 16, scratchDir: str(args, "models-dir") ?? DEFAULT_MODELS_DIR });
      const settings: Settings = { reps: o.reps, warmup: o.warmup, threads: o.threads, model: model.label, prefixTokens: o.prefixTokens, suffixTokens: o.suffixTokens, seed: o.seed };
      emit("prefix-restart", run, settings, [...modelNotes([model]), ...restartNotes(r)], r, [restartTable(r)]);
      return;
    }
    const r = await runPrefixBench(o);
    const settings: Settings = {
      reps: o.reps, warmup: o.warmup, threads: o.threads, model: model.label, prefixTokens: o.prefixTokens, suffixTokens: o.suffixTokens,
      distinctRequests: o.distinctRequests, distinctPromptTokens: o.distinctPromptTokens, distinctOutputTokens: o.distinctOutputTokens,
      workloads: [...o.workloads], requests: o.requests, outputTokens: o.outputTokens, maxNumSeqs: o.maxNumSeqs, numBlocks: o.numBlocks ?? "per workload",
      evictionPolicies: [...o.policies], seed: o.seed,
    };
    emit("prefix", run, settings, [...modelNotes([model]), ...prefixNotes(r)], r, prefixTables(r));
  },
});

const grammarArgs = {
  dir: { type: "positional", description: "A folder of MaskBench files (../shared/grammar/maskbench-sample holds 300)", valueHint: "dir", required: true },
  vocab: { type: "string", description: "The vocabulary: a GGUF (vocabulary-only or model) or tokenizer.json file, e.g. ../shared/vocab/ggml-vocab-llama-bpe.gguf (Llama 3's, MaskBench's)", valueHint: "file" },
  model: { type: "string", description: "A GGUF model whose vocabulary to use (instead of --vocab)", valueHint: "file" },
  json: benchOutputArgs.json,
  limit: { type: "string", description: "Only the first N files (by name)", valueHint: "n" },
  "peer-xgrammar": {
    type: "string",
    description: "A folder with @mlc-ai/web-xgrammar installed (outside the project: npm install @mlc-ai/web-xgrammar): run it through the same method and print its column beside pagellm's",
    valueHint: "dir",
  },
  "xgrammar-mode": { type: "string", description: "compliant (default: JSON Schema's meaning, any whitespace, as pagellm) | default (xgrammar's strict defaults)", valueHint: "mode" },
} as const satisfies ArgsDef;

const grammarCommand = defineCommand({
  meta: {
    name: "grammar",
    description:
      "MaskBench (JSON Schema constrained decoding): for each schema, compile it, then feed each test instance's tokens with a mask computed before each; " +
      "passing, compile/validation/invalidation errors, mask and compile time percentiles",
  },
  args: grammarArgs,
  async run({ args, rawArgs }) {
    checkKnownOptions(rawArgs, grammarArgs);
    const json = jsonTarget(rawArgs);
    if (json !== null && json !== "stdout") checkWritable(json, "--json");
    const vocabPath = str(args, "vocab") ?? str(args, "model");
    if (vocabPath === undefined) throw new InputError("bench grammar needs --vocab FILE (e.g. ../shared/vocab/ggml-vocab-llama-bpe.gguf) or --model FILE");
    if (!existsSync(vocabPath)) throw new InputError(`${vocabPath}: file not found`);
    const mode = str(args, "xgrammar-mode") ?? "compliant";
    if (mode !== "compliant" && mode !== "default") throw new InputError(`--xgrammar-mode ${mode}: expected compliant or default`);
    const date = new Date().toISOString();
    const { tokenizer } = loadTokenizer(vocabPath);
    let files = readMaskBenchFiles(str(args, "dir")!);
    const limit = numberOption(args, "limit", "posint");
    if (limit !== undefined) files = files.slice(0, limit);
    const vocab = TokenVocabulary.fromTokenizer(tokenizer);
    const engines: MaskBenchEngine[] = [pagellmEngine(vocab)];
    const peer = str(args, "peer-xgrammar");
    if (peer !== undefined) engines.push(await xgrammarEngine(peer, tokenizer, vocab.size, mode));
    const results: MaskBenchResult[] = [];
    for (const engine of engines) {
      progress(`${engine.name}: ${files.length} schemas`);
      results.push(await runMaskBench(files, engine, vocab.encode, (i) => {
        if (i % 50 === 0 && i > 0) progress(`${engine.name}: ${i}/${files.length}`);
      }));
    }
    writeGrammarOutputs(results, { date, vocab: vocabPath, json });
  },
});

const benchSubCommands = {
  kernels: kernelsCommand,
  decode: decodeCommand,
  prefill: prefillCommand,
  batch: batchCommand,
  prefix: prefixCommand,
  serve: benchServeCommand,
  embed: benchEmbedCommand,
  threads: benchThreadsCommand,
  grammar: grammarCommand,
  all: allCommand,
  compare: compareCommand,
  chart: chartCommand,
};

export const benchCommand = defineCommand({
  meta: {
    name: "bench",
    description: "Benchmarks, each figure a ratio against a baseline measured in the same run (random-weight models of real shapes, cached in models/)",
  },
  subCommands: benchSubCommands,
  // Runs before the subcommand: the benches' progress lines honour --quiet as every command's do.
  setup() {
    setProgressSink(info);
  },
  async run({ rawArgs }) {
    // citty runs a parent's run after its subcommand too: list the benches only when none was named.
    if (rawArgs.some((a) => Object.hasOwn(benchSubCommands, a))) return;
    process.stdout.write(`${await renderUsage(benchCommand as CommandDef, { meta: { name: "pagellm" } })}\n`);
  },
});
