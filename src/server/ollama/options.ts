/**
 * What ollama's chat and generate bodies share, read onto the engine's request: `options` (the
 * Modelfile parameters a request may set), `format` (`"json"` or a JSON Schema, through the
 * structured-output engine), `think`, `stream` (true unless false, as ollama streams by default),
 * `keep_alive` (checked: a duration "5m", seconds, negative for never, 0 to unload; with one model
 * per process nothing is ever unloaded), `truncate` and `shift`.
 *
 * A field left out takes the server's default (`pagellm serve --temperature ...`), else ollama's
 * (temperature 0.8, top_k 40, top_p 0.9, min_p 0, repeat_penalty 1, repeat_last_n 64, no limit on
 * the tokens), as ollama's clients expect. `num_ctx` is fixed when the model is loaded: another
 * value never reloads it, and a prompt longer than the context is refused with the limit named
 * (never truncated silently). Options that only tune how ollama loads or runs a model (num_gpu,
 * num_thread, num_batch, use_mmap, ...) change nothing here and are accepted; sampling options
 * this engine lacks (typical_p, tfs_z, mirostat) are accepted only at their neutral values;
 * any other key is a 400 naming it.
 */
import type { ConstraintSpec } from "../../grammar/constraint-spec.ts";
import type { GenerateRequest } from "../../llm/generate-request.ts";
import { ApiError, excerpt } from "../api-error.ts";
import { checkNumber, isObject, type BodyFields, type Json } from "../body-fields.ts";
import { fieldsOverDefaults, type GenerationSpec, type ServerRequestDefaults } from "../generation-fields.ts";

/** ollama's api.DefaultOptions() for the sampling fields. */
const OLLAMA_DEFAULTS: ServerRequestDefaults = { temperature: 0.8, topK: 40, topP: 0.9, minP: 0, repetitionPenalty: 1, repeatLastN: 64 };

/** Options taken onto the request, by their ollama names. */
const SAMPLING_OPTIONS: Record<string, keyof GenerateRequest> = {
  temperature: "temperature", top_k: "topK", top_p: "topP", min_p: "minP", seed: "seed", num_predict: "maxTokens", stop: "stop",
  repeat_penalty: "repetitionPenalty", repeat_last_n: "repeatLastN", presence_penalty: "presencePenalty", frequency_penalty: "frequencyPenalty",
};

/** Options about loading and running a model, which change nothing in what it generates here. */
const RUNNER_OPTIONS = new Set([
  "num_ctx", "num_batch", "num_gpu", "main_gpu", "use_mmap", "use_mlock", "num_thread", "numa", "low_vram", "f16_kv",
  "vocab_only", "logits_all", "embedding_only", "num_keep", "penalize_newline", "draft_num_predict",
]);

/** Sampling options this engine lacks, accepted at the value that turns them off. */
const NEUTRAL_OPTIONS: Record<string, (v: Json) => boolean> = {
  typical_p: (v) => v === 1, tfs_z: (v) => v === 1, mirostat: (v) => v === 0, mirostat_tau: () => true, mirostat_eta: () => true,
};

/** What a chat or generate body asks of the engine, besides its prompt. */
export interface OllamaSpec {
  spec: GenerationSpec;
  /** From `think`: the template's enable_thinking (and reasoning_effort for a level); null when not given. */
  think: { enabled: boolean; kwargs: Record<string, Json> } | null;
  /** keep_alive was 0: the client asks to unload (nothing is, here). */
  unload: boolean;
}

export function readOllamaSpec(f: BodyFields, defaults: ServerRequestDefaults): OllamaSpec {
  const aliases: GenerationSpec["aliases"] = {};
  const given = readOptions(f.raw("options"), aliases);
  const fields = fieldsOverDefaults(given, null, { ...OLLAMA_DEFAULTS, ...defaults });
  const constraint = readFormat(f.raw("format"));
  if (constraint !== null) {
    fields.constraint = constraint;
    aliases.constraint = "format";
  }
  const stream = f.boolean("stream") ?? true;
  const unload = readKeepAlive(f.raw("keep_alive"));
  onlyFalse(f, "truncate", "truncating a prompt longer than the context (it is refused with the limit named)");
  onlyFalse(f, "shift", "shifting the context when a reply reaches its end (the reply ends with done_reason length)");
  onlyFalse(f, "logprobs", "'logprobs' on ollama's routes (use /v1/chat/completions)");
  f.onlyNeutral("top_logprobs", "'top_logprobs' on ollama's routes", (v) => v === 0);
  const think = readThink(f.raw("think"));
  if (think !== null) aliases.chatTemplateKwargs = "think";
  return { spec: { fields, n: 1, logprobs: null, stream, includeUsage: false, aliases }, think, unload };
}

function onlyFalse(f: BodyFields, name: string, what: string): void {
  f.onlyNeutral(name, what, (v) => v === false);
}

function readOptions(v: Json | undefined, aliases: GenerationSpec["aliases"]): GenerationSpec["fields"] {
  const given: GenerationSpec["fields"] = {};
  if (v === undefined) return given;
  if (!isObject(v)) throw ApiError.badField("options", "'options' must be an object");
  for (const [key, value] of Object.entries(v)) {
    const at = `options.${excerpt(key)}`;
    if (value === null) continue;
    const property = SAMPLING_OPTIONS[key];
    if (property !== undefined) {
      given[property] = optionValue(key, value, at);
      aliases[property] = at;
    } else if (key === "num_ctx") {
      checkNumber(at, value, { integer: true, min: 1 });
    } else if (RUNNER_OPTIONS.has(key)) {
      continue;
    } else if (NEUTRAL_OPTIONS[key] !== undefined) {
      if (!NEUTRAL_OPTIONS[key]!(value)) throw ApiError.unsupported(at, `'${at}' ${JSON.stringify(value).slice(0, 20)}`);
    } else {
      throw ApiError.unsupported(at, `the option '${excerpt(key)}'`);
    }
  }
  return given;
}

/** An option's value as the engine takes it (its type and range are the engine's to check). */
function optionValue(key: string, value: Json, at: string): Json | undefined {
  switch (key) {
    case "num_predict":
      // -1: until a stop; -2: until the context is full. Either way: no limit but the context.
      return typeof value === "number" && value < 0 ? undefined : value;
    case "seed":
      // ollama's -1: a random seed.
      return value === -1 ? undefined : value;
    case "top_k":
      return typeof value === "number" && value < 0 ? 0 : value;
    case "repeat_last_n":
      return value === -1 ? Number.MAX_SAFE_INTEGER : value;
    case "stop":
      if (typeof value === "string") return [value];
      if (!Array.isArray(value) || !value.every((s) => typeof s === "string")) throw ApiError.badField(at, `'${at}' must be an array of strings`);
      return value;
    default:
      return value;
  }
}

/** `format`: "json" (a JSON object), a JSON Schema object, or "" / absent for none. */
function readFormat(v: Json | undefined): ConstraintSpec | null {
  if (v === undefined || v === "") return null;
  if (v === "json") return { kind: "json_object" };
  if (isObject(v)) return { kind: "json_schema", schema: v };
  throw ApiError.badField("format", `invalid format: ${excerpt(JSON.stringify(v))}: give "json" or a JSON Schema object`);
}

/** Go's time.ParseDuration units, in seconds. */
const DURATION_UNITS: Record<string, number> = { ns: 1e-9, us: 1e-6, "µs": 1e-6, ms: 1e-3, s: 1, m: 60, h: 3600 };
const DURATION = /^[-+]?(?:(?:\d+(?:\.\d*)?|\.\d+)(?:ns|us|µs|ms|s|m|h))+$/;

/** keep_alive: a number of seconds or a Go duration ("5m", "1h30m", "-1s"); whether it is 0 (unload now). */
export function readKeepAlive(v: Json | undefined): boolean {
  return keepAliveMs(v) === 0;
}

/**
 * keep_alive in milliseconds, as ollama reads it: a number of seconds or a Go duration ("5m",
 * "1h30m"), a string of digits as seconds; any negative value is -1 (never unload); undefined
 * when absent. `field` names it in the 400 (the server's --keep-alive reads the same way).
 */
export function keepAliveMs(v: Json | undefined, field = "keep_alive"): number | undefined {
  if (v === undefined) return undefined;
  const ms = (seconds: number) => (seconds < 0 ? -1 : Math.round(seconds * 1000));
  if (typeof v === "number" && Number.isFinite(v)) return ms(v);
  if (typeof v === "string") {
    if (/^[-+]?\d+(\.\d+)?$/.test(v)) return ms(Number(v));
    if (DURATION.test(v)) return ms((v.startsWith("-") ? -1 : 1) * durationSeconds(v));
  }
  throw ApiError.badField(field, `'${field}' must be a duration ("5m", "1h", "-1s") or a number of seconds, got ${excerpt(JSON.stringify(v))}`);
}

function durationSeconds(text: string): number {
  let total = 0;
  for (const [, n, unit] of text.matchAll(/(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)/g)) total += Number(n) * DURATION_UNITS[unit!]!;
  return total;
}

/** `think`: true or false, or a level ("low", "medium", "high", "max"), which turns thinking on at that effort. */
function readThink(v: Json | undefined): OllamaSpec["think"] {
  if (v === undefined) return null;
  if (typeof v === "boolean") return { enabled: v, kwargs: { enable_thinking: v } };
  if (v === "low" || v === "medium" || v === "high" || v === "max") {
    // Templates that take an effort (gpt-oss's) know low, medium and high.
    return { enabled: true, kwargs: { enable_thinking: true, reasoning_effort: v === "max" ? "high" : v } };
  }
  throw ApiError.badField("think", `invalid think value: ${excerpt(JSON.stringify(v))} (must be a boolean or "low", "medium", "high", "max")`);
}
