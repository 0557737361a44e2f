/**
 * Command-line options shared by the commands, and their conversion into typed engine, sampling
 * and load options. Every value is checked here, so a bad option is a one-line InputError.
 */
import type { ArgsDef } from "citty";
import { InputError, RequestFieldError } from "../errors.ts";
import { DEFAULT_CONTEXT, DEFAULT_ENGINE_OPTIONS, type EngineOptions } from "../engine/engine-options.ts";
import { checkRequest, MAX_LOGIT_BIAS, MAX_LOGPROBS, MAX_PENALTY, seedDigitsProblem, type GenerateRequest } from "../llm/generate-request.ts";
import { DEFAULT_SAMPLING } from "../engine/sampler.ts";
import { EVICTION_POLICIES } from "../kv/eviction.ts";
import { HASH_ALGORITHMS } from "../kv/block-hash.ts";
import { KV_WRITE_MODES, type KVWriteMode } from "../kv/second-tier.ts";
import { DEFAULT_DISK_MB } from "../kv-disk/open.ts";
import { KV_TYPES, type KVType } from "../kv/kv-layout.ts";
import { MAX_BLOCK_SIZE } from "../kv/kv-layout.ts";
import type { DeviceChoice } from "../backend/webgpu/device.ts";
import type { BackendOptions } from "../backend/webgpu/backend.ts";
import type { Pooling } from "../embed/embed-types.ts";
import { GLOBAL_FLAGS } from "./output.ts";
import {
  checkSpeculative, DEFAULT_SPECULATIVE, MAX_SPEC_TOKENS, parseNgramRange, SPECULATIVE_METHODS, type SpeculativeOptions,
} from "../engine/speculative.ts";

export const modelArgs = {
  model: {
    type: "string",
    description: "Model: a GGUF (llama, qwen2, qwen3) or llama2.c checkpoint path, hf:OWNER/REPO/FILE.gguf, hf:OWNER/REPO:QUANT, or an http(s) URL (downloaded into the Hugging Face cache)",
    valueHint: "model",
    required: true,
  },
  tokenizer: {
    type: "string",
    description: "Tokenizer: a GGUF file, llama2.c tokenizer.bin (default: the GGUF model's own, or tokenizer.bin next to a llama2.c model)",
    valueHint: "path",
  },
} as const satisfies ArgsDef;

export const samplingArgs = {
  "max-tokens": { type: "string", description: "Most tokens to generate per request (default: until EOS or the context is full)", valueHint: "n" },
  temperature: { type: "string", description: `Sampling temperature; 0 = greedy (default ${DEFAULT_SAMPLING.temperature})`, valueHint: "t" },
  "top-k": { type: "string", description: `Keep the k most likely tokens; 0 = off (default ${DEFAULT_SAMPLING.topK})`, valueHint: "k" },
  "top-p": { type: "string", description: `Nucleus sampling threshold; 1 = off (default ${DEFAULT_SAMPLING.topP})`, valueHint: "p" },
  "min-p": { type: "string", description: `Drop tokens below p times the top token's probability; 0 = off (default ${DEFAULT_SAMPLING.minP})`, valueHint: "p" },
  "repeat-penalty": { type: "string", description: `Penalty for recently seen tokens; 1 = off (default ${DEFAULT_SAMPLING.repetitionPenalty})`, valueHint: "x" },
  "repeat-last-n": { type: "string", description: `Tokens the repeat penalty looks back over (default ${DEFAULT_SAMPLING.repeatLastN})`, valueHint: "n" },
  "frequency-penalty": {
    type: "string",
    description: `Subtract this times a token's count in the output from its logit (OpenAI's frequency_penalty, -${MAX_PENALTY} to ${MAX_PENALTY}); 0 = off (default 0)`,
    valueHint: "x",
  },
  "presence-penalty": {
    type: "string",
    description: `Subtract this from the logit of every token already in the output (OpenAI's presence_penalty, -${MAX_PENALTY} to ${MAX_PENALTY}); 0 = off (default 0)`,
    valueHint: "x",
  },
  "logit-bias": {
    type: "string",
    description: `Add BIAS (-${MAX_LOGIT_BIAS} to ${MAX_LOGIT_BIAS}) to token ID's logit: ID=BIAS, or llama.cpp's ID+BIAS / ID-BIAS (repeatable)`,
    valueHint: "id=bias",
  },
  seed: { type: "string", description: "Random seed for sampling (default: random); the same seed reproduces the same output", valueHint: "n" },
  stop: { type: "string", description: "Stop when this text is generated (repeatable)", valueHint: "text" },
  logprobs: {
    type: "string",
    description: `Add each generated token's log-probability and its k most likely alternatives to the results (0-${MAX_LOGPROBS})`,
    valueHint: "k",
  },
  "reasoning-budget": {
    type: "string",
    description: "For a model that thinks (<think>...</think>): most tokens of reasoning before </think> is forced; 0 closes it at once; -1 = no bound (default)",
    valueHint: "n",
  },
} as const satisfies ArgsDef;

export const deviceArg = {
  device: {
    type: "string",
    description: "Backend: auto (WebGPU on a hardware GPU adapter, else WebAssembly) | wasm | webgpu (any adapter, software included; exit 2 if none) (default auto)",
    valueHint: "device",
  },
  "gpu-f16": {
    type: "string",
    description: "WebGPU: f16 arithmetic in the products of quantized weights: auto (where the adapter offers shader-f16) | on | off (default auto)",
    valueHint: "mode",
  },
} as const satisfies ArgsDef;

/** --device, checked: auto when absent. */
export function deviceOption(values: ParsedValues): DeviceChoice {
  return choice(values, "device", ["auto", "wasm", "webgpu"] as const, "auto");
}

/** How a model's token vectors become embeddings (embed, rerank, serve). */
export const poolingArg = {
  pooling: {
    type: "string",
    description: "Pooling of embeddings, over the model file's own: none (one vector per token) | mean | cls | last | rank (a reranker's score); a text generation model embeds only with one",
    valueHint: "type",
  },
} as const satisfies ArgsDef;

const POOLINGS = ["none", "mean", "cls", "last", "rank"] as const satisfies readonly Pooling[];

/** --pooling, checked: undefined (the file's own) when absent. */
export function poolingOption(values: ParsedValues): Pooling | undefined {
  return values.pooling === undefined ? undefined : choice(values, "pooling", POOLINGS, "mean");
}

/** --gpu-f16, checked: the WebGPU backend's options (auto leaves the choice to the adapter). */
export function gpuBackendOptions(values: ParsedValues): BackendOptions {
  const mode = choice(values, "gpu-f16", ["auto", "on", "off"] as const, "auto");
  return mode === "auto" ? {} : { halfProducts: mode === "on" };
}

export const engineArgs = {
  "ctx-size": {
    type: "string",
    description: `Context size in tokens (default ${DEFAULT_CONTEXT}, or the model's own if smaller; 0 = the model's full context)`,
    valueHint: "n",
  },
  "prefix-cache": {
    type: "boolean",
    default: true,
    description: "Automatic prefix caching (on by default)",
    negativeDescription: "Turn automatic prefix caching off",
  },
  "block-size": { type: "string", description: `Tokens per KV cache block (default ${DEFAULT_ENGINE_OPTIONS.blockSize})`, valueHint: "n" },
  "kv-cache-mb": { type: "string", description: `KV cache size in MiB (default ${DEFAULT_ENGINE_OPTIONS.kvCacheMb}, capped at what --max-num-seqs full contexts use)`, valueHint: "mb" },
  "num-blocks": { type: "string", description: "KV cache size in blocks (overrides --kv-cache-mb)", valueHint: "n" },
  "kv-type": {
    type: "string",
    description: `KV cache element type: ${KV_TYPES.join(" | ")} (as llama.cpp's --cache-type-k/-v; default f16 for GGUF models, f32 for llama2.c checkpoints)`,
    valueHint: "type",
  },
  "cache-salt": { type: "string", description: "Only requests with the same salt share cached KV blocks", valueHint: "text" },
  "eviction-policy": {
    type: "string",
    description: `Which free block is reused first: ${EVICTION_POLICIES.join(" | ")} (default ${DEFAULT_ENGINE_OPTIONS.evictionPolicy})`,
    valueHint: "policy",
  },
  "prefix-hash": {
    type: "string",
    description: `Block hash: ${HASH_ALGORITHMS.join(" | ")} (default ${DEFAULT_ENGINE_OPTIONS.prefixHash})`,
    valueHint: "hash",
  },
  "max-num-batched-tokens": { type: "string", description: `Token budget of one engine step (default ${DEFAULT_ENGINE_OPTIONS.maxNumBatchedTokens})`, valueHint: "n" },
  "max-prefill-while-decoding": {
    type: "string",
    description: `Prompt tokens a step may compute while any request decodes, so decoding streams keep a steady pace; with nothing decoding a step takes --max-num-batched-tokens (default ${DEFAULT_ENGINE_OPTIONS.maxPrefillWhileDecoding})`,
    valueHint: "n",
  },
  "max-num-seqs": { type: "string", description: `Sequences one step may hold (default ${DEFAULT_ENGINE_OPTIONS.maxNumSeqs})`, valueHint: "n" },
  schedule: { type: "string", description: "Admission order: fcfs | lpm (longest cached prefix first) (default fcfs)", valueHint: "policy" },
  admission: {
    type: "string",
    description: "What admission keeps free: finish (room for every admitted request to reach its max tokens: a stream is never preempted part way) | watermark (a block per running request: more at once, preempted and recomputed when the pool runs out) (default finish)",
    valueHint: "policy",
  },
  threads: {
    type: "string",
    description: "Threads the kernels run on; 1 = the main thread only (default: the cores this process may use)",
    valueHint: "n",
  },
  "kv-cache-dir": {
    type: "string",
    description: "Keep prefix-cache KV blocks on disk in this folder too, so they survive restarts and are shared between processes; auto = $PAGELLM_CACHE/kv or ~/.cache/pagellm/kv (default: off)",
    valueHint: "dir",
  },
  "kv-cache-write": {
    type: "string",
    description: `With --kv-cache-dir: write blocks to disk as soon as computed (through) or when evicted from memory and at exit (evict) (default through)`,
    valueHint: "mode",
  },
  "kv-cache-disk-mb": {
    type: "string",
    description: `With --kv-cache-dir: bound on the folder in MiB, all models together; least recently used blocks are removed first (default ${DEFAULT_DISK_MB})`,
    valueHint: "mb",
  },
  ...deviceArg,
} as const satisfies ArgsDef;

/** Speculative decoding (generate, chat, serve): off unless --speculate names a method. */
export const speculativeArgs = {
  speculate: {
    type: "string",
    description: `Speculative decoding: ${SPECULATIVE_METHODS.join(" | ")} (draft tokens from n-grams of the prompt and output, verified several a step; output identical) (default off)`,
    valueHint: "method",
  },
  "spec-tokens": { type: "string", description: `Most draft tokens verified per step with --speculate (default ${DEFAULT_SPECULATIVE.tokens})`, valueHint: "k" },
  "spec-ngram": {
    type: "string",
    description: `N-gram lengths --speculate ngram looks up, longest first (default ${DEFAULT_SPECULATIVE.ngram.min}:${DEFAULT_SPECULATIVE.ngram.max})`,
    valueHint: "min:max",
  },
} as const satisfies ArgsDef;

/** --speculate and its --spec-* options, checked: null when off (a --spec-* option without --speculate is an error). */
export function speculativeOption(values: ParsedValues): SpeculativeOptions | null {
  const method = str(values.speculate);
  if (method === undefined) {
    const stray = ["spec-tokens", "spec-ngram"].find((name) => values[name] !== undefined);
    if (stray !== undefined) throw new InputError(`--${stray} needs --speculate ngram`);
    return null;
  }
  const o: SpeculativeOptions = {
    method: choice(values, "speculate", SPECULATIVE_METHODS, DEFAULT_SPECULATIVE.method),
    tokens: numberOption(values, "spec-tokens", "posint", { max: MAX_SPEC_TOKENS }) ?? DEFAULT_SPECULATIVE.tokens,
    ngram: typeof values["spec-ngram"] === "string" ? parseNgramRange(values["spec-ngram"], "--spec-ngram") : { ...DEFAULT_SPECULATIVE.ngram },
    adaptive: true,
  };
  checkSpeculative(o);
  return o;
}

/** The disk tier options (--kv-cache-dir, --kv-cache-write, --kv-cache-disk-mb), checked; empty without --kv-cache-dir. */
export function kvCacheOptions(values: ParsedValues): { kvCacheDir?: string; kvCacheWrite?: KVWriteMode; kvCacheDiskMb?: number } {
  const dir = str(values["kv-cache-dir"]);
  const write = str(values["kv-cache-write"]);
  const diskMb = numberOption(values, "kv-cache-disk-mb", "number", { min: 0, minOpen: true });
  if (dir === undefined) {
    if (write !== undefined || diskMb !== undefined) throw new InputError("--kv-cache-write and --kv-cache-disk-mb need --kv-cache-dir");
    return {};
  }
  if (dir === "") throw new InputError("--kv-cache-dir needs a folder (or auto)");
  return { kvCacheDir: dir, kvCacheWrite: choice(values, "kv-cache-write", KV_WRITE_MODES, "through"), kvCacheDiskMb: diskMb };
}

export type ParsedValues = Record<string, string | number | boolean | string[] | undefined>;

/** Every value of an option that may be repeated (`--stop a --stop b`, `--stop=a`), in order. */
export function repeated(rawArgs: readonly string[], name: string): string[] {
  const values: string[] = [];
  for (let i = 0; i < rawArgs.length; i++) {
    const arg = rawArgs[i]!;
    if (arg === "--") break;
    if (arg === `--${name}` && i + 1 < rawArgs.length) values.push(rawArgs[++i]!);
    else if (arg.startsWith(`--${name}=`)) values.push(arg.slice(name.length + 3));
  }
  return values;
}

/**
 * Reject options no command defines (citty would silently ignore a misspelt one) and string options
 * given no value. A string option takes the next word as its value even when it starts with "-"
 * (`--temperature -1`), as citty parses it.
 */
export function checkKnownOptions(rawArgs: readonly string[], defs: ArgsDef): void {
  const kinds = new Map<string, "string" | "boolean">([["help", "boolean"], ["h", "boolean"]]);
  for (const flag of GLOBAL_FLAGS) for (const name of flag.names) kinds.set(name.replace(/^--?/, ""), "boolean");
  for (const [name, def] of Object.entries(defs)) {
    const kind = def.type === "boolean" ? "boolean" : "string";
    kinds.set(name, kind);
    if (kind === "boolean") kinds.set(`no-${name}`, "boolean");
    const aliases = "alias" in def && def.alias !== undefined ? [def.alias].flat() : [];
    for (const a of aliases) kinds.set(a, kind);
  }
  for (let i = 0; i < rawArgs.length; i++) {
    const arg = rawArgs[i]!;
    if (arg === "--") break;
    if (!arg.startsWith("-") || arg === "-") continue;
    const [name, inlineValue] = splitOption(arg);
    const kind = kinds.get(name);
    if (kind === undefined) throw new InputError(`unknown option ${arg.split("=")[0]} (see --help)`);
    if (kind === "string" && inlineValue === undefined) {
      if (i + 1 >= rawArgs.length) throw new InputError(`--${name} needs a value`);
      i++;
    }
  }
}

function splitOption(arg: string): [string, string | undefined] {
  const body = arg.replace(/^--?/, "");
  const eq = body.indexOf("=");
  return eq < 0 ? [body, undefined] : [body.slice(0, eq), body.slice(eq + 1)];
}

function str(v: ParsedValues[string]): string | undefined {
  return typeof v === "string" ? v : undefined;
}

/** Allowed range of a numeric option; bounds are inclusive unless marked open. */
export interface Range {
  min?: number;
  max?: number;
  minOpen?: boolean;
}

/**
 * A numeric option, or undefined when absent; InputError naming the option when it does not
 * parse, is not an integer where one is needed, or is out of range.
 */
export function numberOption(values: ParsedValues, name: string, check: "int" | "posint" | "number", range: Range = {}): number | undefined {
  const raw = str(values[name]);
  if (raw === undefined) return undefined;
  const v = Number(raw);
  const ok = raw.trim() !== "" && Number.isFinite(v) &&
    (check === "number" || (Number.isInteger(v) && (check === "int" ? true : v > 0)));
  if (!ok) throw new InputError(`--${name} expects ${check === "posint" ? "a positive integer" : check === "int" ? "an integer" : "a number"}, got "${raw}"`);
  const { min, max, minOpen } = range;
  const belowMin = min !== undefined && (minOpen ? v <= min : v < min);
  if (belowMin || (max !== undefined && v > max)) {
    const lo = min === undefined ? "" : `${minOpen ? "above" : "at least"} ${min}`;
    const hi = max === undefined ? "" : `at most ${max}`;
    throw new InputError(`--${name} must be ${[lo, hi].filter(Boolean).join(" and ")}, got ${raw}`);
  }
  return v;
}

function choice<T extends string>(values: ParsedValues, name: string, options: readonly T[], fallback: T): T {
  const raw = str(values[name]);
  if (raw === undefined) return fallback;
  if (!(options as readonly string[]).includes(raw)) throw new InputError(`--${name} must be one of ${options.join(", ")}, got "${raw}"`);
  return raw as T;
}

/** --kv-type, checked: null (the model's default) when absent. */
export function kvTypeOption(values: ParsedValues): KVType | null {
  return values["kv-type"] === undefined ? null : choice(values, "kv-type", KV_TYPES, "f32");
}

export function engineOptions(values: ParsedValues): EngineOptions {
  const d = DEFAULT_ENGINE_OPTIONS;
  return {
    ctxSize: numberOption(values, "ctx-size", "int", { min: 0 }) ?? d.ctxSize,
    blockSize: numberOption(values, "block-size", "posint", { max: MAX_BLOCK_SIZE }) ?? d.blockSize,
    numBlocks: numberOption(values, "num-blocks", "posint") ?? null,
    kvCacheMb: numberOption(values, "kv-cache-mb", "number", { min: 0, minOpen: true }) ?? d.kvCacheMb,
    enablePrefixCaching: values["prefix-cache"] !== false,
    evictionPolicy: choice(values, "eviction-policy", EVICTION_POLICIES, d.evictionPolicy),
    prefixHash: choice(values, "prefix-hash", HASH_ALGORITHMS, d.prefixHash),
    maxNumBatchedTokens: numberOption(values, "max-num-batched-tokens", "posint") ?? d.maxNumBatchedTokens,
    maxPrefillWhileDecoding: numberOption(values, "max-prefill-while-decoding", "posint") ?? d.maxPrefillWhileDecoding,
    maxNumSeqs: numberOption(values, "max-num-seqs", "posint") ?? d.maxNumSeqs,
    schedule: choice(values, "schedule", ["fcfs", "lpm"] as const, d.schedule),
    admission: choice(values, "admission", ["finish", "watermark"] as const, d.admission),
    threads: numberOption(values, "threads", "posint") ?? d.threads,
    speculative: speculativeOption(values),
    kvType: kvTypeOption(values),
    // PAGELLM_WASM_MEMORY_MB (read by the memory plan) sets it on the command line.
    wasmMemoryMb: d.wasmMemoryMb,
  };
}

/** The per-request fields the command line sets; a JSONL request's own fields override them. */
export type RequestDefaults = Omit<GenerateRequest, "id" | "prompt" | "promptTokenIds" | "messages">;

/** The option that sets each request field, for errors that name it. */
const REQUEST_OPTIONS: Readonly<Record<string, string>> = {
  maxTokens: "--max-tokens",
  temperature: "--temperature",
  topK: "--top-k",
  topP: "--top-p",
  minP: "--min-p",
  repetitionPenalty: "--repeat-penalty",
  repeatLastN: "--repeat-last-n",
  frequencyPenalty: "--frequency-penalty",
  presencePenalty: "--presence-penalty",
  logitBias: "--logit-bias",
  seed: "--seed",
  stop: "--stop",
  cacheSalt: "--cache-salt",
  logprobs: "--logprobs",
  prompt: "--prompt",
  chatTemplateKwargs: "--chat-template-kwargs",
  reasoningBudget: "--reasoning-budget",
};

/** A request field error as the option that set the field says it ("--logit-bias 512 must be ..."). */
export function optionErrorText(e: RequestFieldError): string {
  const within = e.field.slice(e.property.length).replace(/^\./, "");
  return `${requestOption(e.property)}${within === "" ? "" : ` ${within}`} ${e.problem}`;
}

/** The option that sets request property `property` ("--top-p" for "topP"). */
export function requestOption(property: string): string {
  return REQUEST_OPTIONS[property] ?? `--${property}`;
}

/**
 * The per-request defaults the command line sets, read as numbers here and checked by the
 * request's own checks (checkRequest): an error names the option ("--top-p must be ...").
 */
export function requestDefaults(values: ParsedValues, rawArgs: readonly string[]): RequestDefaults {
  const num = (name: string) => numberOption(values, name, "number");
  const defaults: RequestDefaults = {
    maxTokens: num("max-tokens") ?? null,
    temperature: num("temperature"),
    topK: num("top-k"),
    topP: num("top-p"),
    minP: num("min-p"),
    repetitionPenalty: num("repeat-penalty"),
    repeatLastN: num("repeat-last-n"),
    frequencyPenalty: num("frequency-penalty"),
    presencePenalty: num("presence-penalty"),
    logitBias: logitBiasOption(repeated(rawArgs, "logit-bias")),
    seed: seedOption(values),
    stop: repeated(rawArgs, "stop"),
    cacheSalt: str(values["cache-salt"]),
    logprobs: num("logprobs"),
    // llama.cpp's -1 (no bound) and 0 (no reasoning) are the request's own (checkRequest).
    reasoningBudget: num("reasoning-budget"),
  };
  for (const key of Object.keys(defaults) as (keyof RequestDefaults)[]) if (defaults[key] === undefined) delete defaults[key];
  checkOptions(defaults);
  return defaults;
}

/** --seed, its digits checked exactly (a 64-bit signed integer: seedDigitsProblem). */
export function seedOption(values: ParsedValues): number | undefined {
  const seed = numberOption(values, "seed", "number");
  const problem = seedDigitsProblem(seed, () => str(values.seed) ?? null);
  if (problem !== null) throw new InputError(`--seed ${problem}`);
  return seed;
}

/** The request checks on the options alone (any token id allowed until the model is known): InputError naming the option. */
export function checkOptions(defaults: RequestDefaults): void {
  try {
    checkRequest({ ...defaults, prompt: "" }, { vocabSize: Number.MAX_SAFE_INTEGER, maxSamples: Number.MAX_SAFE_INTEGER });
  } catch (e) {
    if (e instanceof RequestFieldError) throw new InputError(optionErrorText(e));
    throw e;
  }
}

/** --logit-bias values (ID=BIAS, ID+BIAS or ID-BIAS) as a bias by token id; undefined when none. */
export function logitBiasOption(values: readonly string[]): Record<number, number> | undefined {
  if (values.length === 0) return undefined;
  const bias: Record<number, number> = {};
  for (const v of values) {
    const m = /^\s*(\d+)\s*(=|(?=[+-]))\s*([+-]?[\d.]+(?:e[+-]?\d+)?)\s*$/i.exec(v);
    if (m === null || !Number.isFinite(Number(m[3]))) throw new InputError(`--logit-bias expects ID=BIAS (or ID+BIAS, ID-BIAS), got "${v}"`);
    bias[Number(m[1])] = Number(m[3]);
  }
  return bias;
}
