/**
 * The generation fields chat and text completions share: sampling, stops, `n`, `seed`,
 * streaming, `cache_salt`, and the OpenAI fields this server does not implement (a 400 naming
 * them). Defaults are the OpenAI API's (temperature 1, top_p 1, no top-k, min-p or penalty), as
 * OpenAI clients expect, not the command line's.
 */
import type { GenerationParams } from "../engine/sequence.ts";
import { ApiError } from "./api-error.ts";
import type { BodyFields, Json } from "./body-fields.ts";

/** Most samples per prompt (`n`). */
export const MAX_N = 8;
/** Most stop strings per request. */
export const MAX_STOPS = 16;
/** Most alternatives per token (`top_logprobs`, `logprobs`), as the OpenAI API allows. */
export const MAX_TOP_LOGPROBS = 20;

export interface GenerationSpec {
  /** null: until a stop or the end of the context. */
  maxTokens: number | null;
  stop: string[];
  temperature: number;
  topP: number;
  topK: number;
  minP: number;
  repetitionPenalty: number;
  /** Tokens the penalty looks back over (llama.cpp's repeat_last_n); null: the whole context, as vLLM. */
  repeatLastN: number | null;
  /** Sample i of a prompt draws with seed + i; null: a random seed each. */
  seed: number | null;
  /** Samples per prompt. */
  n: number;
  /** Alternatives reported per generated token; undefined: no log-probabilities. */
  logprobs: number | undefined;
  cacheSalt: string | undefined;
  stream: boolean;
  /** stream_options.include_usage: a last chunk carries the usage. */
  includeUsage: boolean;
  /** Generate through end-of-generation tokens (vLLM's and llama.cpp's `ignore_eos`). */
  ignoreEos: boolean;
}

/** Fields OpenAI clients send that change nothing in a local server. */
const IGNORED_FIELDS = ["user", "metadata", "store", "service_tier"];

/**
 * Read the shared fields. `maxTokensDefault` differs between chat (until a stop) and text
 * completions (16, the OpenAI default); `logprobs` is read by the endpoint (its type differs);
 * `maxTokensMin` is 0 where max_tokens 0 means "score the prompt only" (echoed completions).
 */
export function readGenerationFields(f: BodyFields, maxTokensDefault: number | null, logprobs: number | undefined, maxTokensMin = 1): GenerationSpec {
  f.ignore(...IGNORED_FIELDS);
  f.onlyNeutral("frequency_penalty", "'frequency_penalty' other than 0", (v) => v === 0);
  f.onlyNeutral("presence_penalty", "'presence_penalty' other than 0", (v) => v === 0);
  f.onlyNeutral("logit_bias", "'logit_bias'", (v) => typeof v === "object" && v !== null && Object.keys(v).length === 0);
  const n = f.number("n", { integer: true, min: 1, max: MAX_N }) ?? 1;
  const stream = f.boolean("stream") ?? false;
  const spec: GenerationSpec = {
    maxTokens: f.number("max_tokens", { integer: true, min: maxTokensMin }) ?? maxTokensDefault,
    stop: readStop(f.raw("stop")),
    temperature: f.number("temperature", { min: 0, max: 2 }) ?? 1,
    topP: f.number("top_p", { min: 0, minOpen: true, max: 1 }) ?? 1,
    topK: readTopK(f),
    minP: f.number("min_p", { min: 0, max: 1 }) ?? 0,
    repetitionPenalty: readRepetitionPenalty(f),
    repeatLastN: readRepeatLastN(f),
    seed: f.number("seed", { integer: true, min: -(2 ** 63), max: 2 ** 64 }) ?? null,
    n,
    logprobs,
    cacheSalt: readCacheSalt(f),
    stream,
    includeUsage: readStreamOptions(f, stream),
    ignoreEos: f.boolean("ignore_eos") ?? false,
  };
  return spec;
}

/** n samples run side by side: more than a step holds (--max-num-seqs) could never run. */
export function checkSamples(spec: GenerationSpec, maxNumSeqs: number): void {
  if (spec.n > maxNumSeqs) throw ApiError.badField("n", `'n' is ${spec.n}, more than the ${maxNumSeqs} sequences a step holds here (--max-num-seqs)`);
}

/** Per-sample engine params: sample `i` seeds its own stream (seed + i), as vLLM's parallel sampling. */
export function sampleParams(spec: GenerationSpec, i: number): GenerationParams {
  const seed = spec.seed === null ? (Math.random() * 2 ** 32) >>> 0 : (Number(BigInt.asUintN(32, BigInt(spec.seed))) + i) >>> 0;
  const params: GenerationParams = {
    maxTokens: spec.maxTokens,
    stop: spec.stop,
    sampling: {
      temperature: spec.temperature,
      topK: spec.topK,
      topP: spec.topP,
      minP: spec.minP,
      repetitionPenalty: spec.repetitionPenalty,
      repeatLastN: spec.repeatLastN ?? Number.MAX_SAFE_INTEGER,
      seed,
    },
  };
  if (spec.logprobs !== undefined) params.logprobs = spec.logprobs;
  if (spec.ignoreEos) params.ignoreEos = true;
  return params;
}

function readStop(v: Json | undefined): string[] {
  if (v === undefined) return [];
  const stops = typeof v === "string" ? [v] : v;
  if (!Array.isArray(stops) || stops.some((s) => typeof s !== "string")) throw ApiError.badField("stop", "'stop' must be a string or an array of strings");
  if (stops.length > MAX_STOPS) throw ApiError.badField("stop", `'stop' may hold at most ${MAX_STOPS} strings, got ${stops.length}`);
  return (stops as string[]).filter((s) => s !== "");
}

/** vLLM's repetition_penalty, or llama.cpp's name for it, repeat_penalty (not both). */
function readRepetitionPenalty(f: BodyFields): number {
  const vllm = f.number("repetition_penalty", { min: 0, minOpen: true });
  const llamaCpp = f.number("repeat_penalty", { min: 0, minOpen: true });
  if (vllm !== undefined && llamaCpp !== undefined) throw ApiError.badField("repeat_penalty", "give 'repetition_penalty' or its llama.cpp name 'repeat_penalty', not both");
  return vllm ?? llamaCpp ?? 1;
}

/** llama.cpp's repeat_last_n: -1 (or absent) the whole context, 0 no penalty. */
function readRepeatLastN(f: BodyFields): number | null {
  const n = f.number("repeat_last_n", { integer: true, min: -1 });
  return n === undefined || n === -1 ? null : n;
}

/** top_k: 0 or -1 (vLLM's "off") mean no top-k. */
function readTopK(f: BodyFields): number {
  const k = f.number("top_k", { integer: true, min: -1 });
  return k === undefined || k === -1 ? 0 : k;
}

function readCacheSalt(f: BodyFields): string | undefined {
  const salt = f.string("cache_salt");
  if (salt === "") throw ApiError.badField("cache_salt", "'cache_salt' must be a non-empty string");
  return salt;
}

function readStreamOptions(f: BodyFields, stream: boolean): boolean {
  const v = f.raw("stream_options");
  if (v === undefined) return false;
  if (!stream) throw ApiError.badField("stream_options", "'stream_options' is only allowed when 'stream' is true");
  if (typeof v !== "object" || v === null || Array.isArray(v)) throw ApiError.badField("stream_options", "'stream_options' must be an object");
  for (const [key, value] of Object.entries(v)) {
    if (key !== "include_usage") throw ApiError.unsupported(`stream_options.${key}`, `'stream_options.${key}'`);
    if (value !== null && typeof value !== "boolean") throw ApiError.badField("stream_options.include_usage", "'stream_options.include_usage' must be a boolean");
  }
  return v.include_usage === true;
}
