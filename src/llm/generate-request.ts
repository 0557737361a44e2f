/**
 * The one generation request type, and the one place its fields are checked. The library takes a
 * GenerateRequest as it is; the server maps a JSON body to one, the command line its flags and
 * JSONL lines. checkRequest turns it into CheckedRequest (every field typed, in range, defaults
 * filled) or throws RequestFieldError naming the field as this type spells it; each front end
 * names it its own way (RequestFieldError.renamed). Limits that depend on the model (token ids,
 * samples per step) come in RequestLimits.
 */
import type { EmbeddedSpan } from "../model/batch.ts";
import { RequestFieldError } from "../errors.ts";
import { reservedVariable, type ChatMessage, type ChatToolCall } from "../chat/jinja-template.ts";
import { checkTools, type CheckedTools, type ToolChoice, type ToolDefinition } from "../tools/tool-types.ts";
import { integerOfNumberText } from "../util/json-number-text.ts";
import type { ConstraintSpec } from "../grammar/constraint-spec.ts";
import { DEFAULT_SAMPLING, type SamplingParams } from "../engine/sampler.ts";

/** One generation request; every field but the prompt (`prompt`, `promptTokenIds` or `messages`) falls back to a default. */
export interface GenerateRequest {
  /** Unique among the requests in flight; absent: one is given. */
  id?: string;
  prompt?: string;
  /** Token ids instead of `prompt` (BOS included if wanted). */
  promptTokenIds?: readonly number[];
  /** A conversation instead of `prompt`, rendered with the chat format (the model's template by default). */
  messages?: readonly ChatMessage[];
  /** More variables for the chat template when rendering `messages` (vLLM's chat_template_kwargs, e.g. enable_thinking). */
  chatTemplateKwargs?: Readonly<Record<string, unknown>>;
  /** Most tokens to generate; null or absent: until a stop or the end of the context. */
  maxTokens?: number | null;
  /** Strings that end the generation; the text is cut before the first one. */
  stop?: readonly string[];
  /** 0 = greedy. */
  temperature?: number;
  /** Keep the k most likely tokens; 0 = off. */
  topK?: number;
  /** Keep the smallest set whose probability reaches p; 1 = off. */
  topP?: number;
  /** Drop tokens less likely than minP times the most likely; 0 = off. */
  minP?: number;
  /** Divide positive (multiply negative) logits of the last repeatLastN tokens, prompt included; 1 = off. */
  repetitionPenalty?: number;
  repeatLastN?: number;
  /** OpenAI's: subtract this times a token's count among the generated tokens from its logit; 0 = off. */
  frequencyPenalty?: number;
  /** OpenAI's: subtract this from the logit of every token already generated; 0 = off. */
  presencePenalty?: number;
  /** Add a bias from -100 to 100 to a token's logit before sampling (OpenAI's logit_bias), by token id. */
  logitBias?: Readonly<Record<number, number>>;
  /** Seed of the random stream (sample i of `n` draws with seed + i); absent: a random one. */
  seed?: number;
  /** Samples of the prompt, computed from one prefill (the OpenAI API's `n`). */
  n?: number;
  /** Only requests with the same salt share cached KV blocks. */
  cacheSalt?: string;
  /** Report each generated token's log-probability and this many most likely alternatives. */
  logprobs?: number;
  /** Generate through end-of-generation tokens until max_tokens (llama.cpp's and vLLM's `ignore_eos`). */
  ignoreEos?: boolean;
  /** Functions the model may call (OpenAI's `tools`), rendered by the chat template; with `messages` only. */
  tools?: readonly ToolDefinition[];
  /** auto (default), none, required, or one named function (OpenAI's `tool_choice`). */
  toolChoice?: ToolChoice;
  /** Whether a reply may make several calls (default true). */
  parallelToolCalls?: boolean;
  /**
   * Hold the output to a JSON Schema, any JSON object, a regular expression, a choice of strings or
   * a GBNF grammar, token by token (after the reasoning of a model that reasons first).
   */
  constraint?: ConstraintSpec;
  /**
   * For a model that reasons first (`<think>`, `</think>`): the most tokens a reply may reason
   * for; once they are written, `</think>` is forced and the answer follows (llama.cpp's
   * --reasoning-budget, Anthropic's thinking.budget_tokens). 0: the reasoning closes at once.
   * Absent: no bound. A model without reasoning markers ignores it.
   */
  reasoningBudget?: number;
  /**
   * With `promptTokenIds`: spans of them whose input rows are given (an image prompt's, made by
   * src/vision/ from the image and its encoder), each also keying the cached blocks it covers.
   */
  embeds?: readonly EmbeddedSpan[];
}

/**
 * A request as a front end maps it from JSON: the same fields, their values not yet known to be of
 * their types (checkRequest finds out). A GenerateRequest is one.
 */
export type RequestInput = { readonly [K in keyof GenerateRequest]?: unknown };

/** Most alternatives a request may ask for per token (the OpenAI API's limit). */
export const MAX_LOGPROBS = 20;
/** Most stop strings per request. */
export const MAX_STOPS = 16;
/** Largest |bias| of logitBias (OpenAI's range). */
export const MAX_LOGIT_BIAS = 100;
/** Largest |frequencyPenalty| and |presencePenalty| (OpenAI's range). */
export const MAX_PENALTY = 2;

/** What checking a request needs to know of the engine and of the front end that took it. */
export interface RequestLimits {
  /** Token ids run from 0 to vocabSize - 1 (the model's embedding rows). */
  vocabSize: number;
  /** Most samples a request may ask for (the server caps it lower than a step holds). */
  maxSamples: number;
}

/** The prompt of a checked request. */
export type CheckedPrompt =
  | { kind: "text"; text: string }
  | { kind: "tokens"; ids: readonly number[] }
  | { kind: "messages"; messages: readonly ChatMessage[]; kwargs: Readonly<Record<string, unknown>> | null };

/** A request whose every field is typed, in range and filled. */
export interface CheckedRequest {
  id: string | null;
  prompt: CheckedPrompt;
  maxTokens: number | null;
  stop: readonly string[];
  /** Sample i draws with seed + i (mod 2^32); seed absent: each sample a random seed. */
  sampling: Omit<SamplingParams, "seed">;
  seed: number | null;
  n: number;
  cacheSalt: string | null;
  logprobs: number | null;
  ignoreEos: boolean;
  /** The tools offered, the choice and the parallel switch; null without tools. */
  tools: CheckedTools | null;
  constraint: ConstraintSpec | null;
  /** Most tokens of reasoning; null: no bound. */
  reasoningBudget: number | null;
}

/**
 * Checks every field of `r` (which may come from JSON: nothing is trusted) and fills the
 * defaults. Throws RequestFieldError naming the first field at fault.
 */
export function checkRequest(r: RequestInput, limits: RequestLimits): CheckedRequest {
  const f = new FieldReader(r);
  const d = DEFAULT_SAMPLING;
  const id = f.string("id");
  if (id === "") throw new RequestFieldError("id", "must be a non-empty string");
  return {
    id: id ?? null,
    prompt: checkPrompt(f, limits),
    maxTokens: f.nullableNumber("maxTokens", { integer: true, min: 1 }) ?? null,
    stop: checkStop(f),
    sampling: {
      temperature: f.number("temperature", { min: 0 }) ?? d.temperature,
      topK: f.number("topK", { integer: true, min: 0 }) ?? d.topK,
      topP: f.number("topP", { min: 0, minOpen: true, max: 1 }) ?? d.topP,
      minP: f.number("minP", { min: 0, max: 1 }) ?? d.minP,
      repetitionPenalty: f.number("repetitionPenalty", { min: 0, minOpen: true }) ?? d.repetitionPenalty,
      repeatLastN: f.number("repeatLastN", { integer: true, min: 0 }) ?? d.repeatLastN,
      frequencyPenalty: f.number("frequencyPenalty", { min: -MAX_PENALTY, max: MAX_PENALTY }) ?? d.frequencyPenalty,
      presencePenalty: f.number("presencePenalty", { min: -MAX_PENALTY, max: MAX_PENALTY }) ?? d.presencePenalty,
      logitBias: checkLogitBias(f, limits.vocabSize),
    },
    seed: checkSeed(f),
    n: f.number("n", { integer: true, min: 1, max: limits.maxSamples }) ?? 1,
    cacheSalt: checkCacheSalt(f),
    logprobs: f.number("logprobs", { integer: true, min: 0, max: MAX_LOGPROBS }) ?? null,
    ignoreEos: f.boolean("ignoreEos") ?? false,
    tools: checkRequestTools(f, r),
    constraint: checkConstraint(f),
    reasoningBudget: checkReasoningBudget(f),
  };
}

/** Largest reasoning budget (llama.cpp's is an int). */
export const MAX_REASONING_BUDGET = 2 ** 31 - 1;

/** The reasoning budget, llama.cpp's way: -1 no bound (null), 0 the reasoning closes at once, else at most that many tokens. */
function checkReasoningBudget(f: FieldReader): number | null {
  const budget = f.number("reasoningBudget", { integer: true, min: -1, max: MAX_REASONING_BUDGET });
  return budget === undefined || budget === -1 ? null : budget;
}

/** The seeds a request may give: 64-bit signed integers, as vLLM takes them (torch.long). */
const SEED_MIN = -(2n ** 63n);
const SEED_MAX = 2n ** 63n - 1n;
/** What a seed must be, in an error message. */
const SEED_RANGE = `an integer from ${SEED_MIN} to ${SEED_MAX}`;

/**
 * The seed (only its low 32 bits seed the stream), or null. Checked on the double it was parsed
 * to, which cannot tell 2^63 - 1 from 2^63 (both are 2^63): 2^63 passes here, and a front end
 * that has the JSON text checks it exactly (seedDigitsProblem).
 */
function checkSeed(f: FieldReader): number | null {
  const seed = f.number("seed", { integer: true });
  if (seed !== undefined && !(seed >= -(2 ** 63) && seed <= 2 ** 63)) throw new RequestFieldError("seed", `must be ${SEED_RANGE}, got ${excerpt(seed)}`);
  return seed ?? null;
}

/**
 * Why a seed parsed to `seed` is out of range, checked exactly on its digits (`text()`: the
 * number as the JSON or the command line wrote it) where the double has lost them: past 2^53,
 * -2^63 - 1 parses to -2^63 and 2^63 - 1 to 2^63, so checkRequest's check cannot tell them apart.
 * Null when it is in range, or not a number checkRequest would take anyway.
 */
export function seedDigitsProblem(seed: unknown, text: () => string | null): string | null {
  if (typeof seed !== "number" || Number.isSafeInteger(seed) || !Number.isInteger(seed)) return null;
  const written = text();
  const value = written === null ? null : integerOfNumberText(written);
  if (value === null || (value >= SEED_MIN && value <= SEED_MAX)) return null;
  return `must be ${SEED_RANGE}, got ${written!.length > 40 ? `${written!.slice(0, 40)}...` : written}`;
}

/** The seed of sample `index` of a request seeded with `seed` (vLLM's parallel sampling: seed + i), or a random one. */
export function sampleSeed(seed: number | null, index: number): number {
  if (seed === null) return (Math.random() * 2 ** 32) >>> 0;
  return (Number(BigInt.asUintN(32, BigInt(seed))) + index) >>> 0;
}

function checkPrompt(f: FieldReader, limits: RequestLimits): CheckedPrompt {
  const given = (["prompt", "promptTokenIds", "messages"] as const).filter((k) => f.has(k));
  if (given.length === 0) throw new RequestFieldError("prompt", "is required (or promptTokenIds, or messages)");
  if (given.length > 1) throw new RequestFieldError(given[1]!, `cannot be given with ${given[0]}`);
  const kwargs = f.record("chatTemplateKwargs");
  if (kwargs !== undefined && given[0] !== "messages") throw new RequestFieldError("chatTemplateKwargs", "applies only to messages");
  const reserved = kwargs === undefined ? null : reservedVariable(kwargs);
  if (reserved !== null) throw new RequestFieldError(`chatTemplateKwargs.${reserved.name}`, reserved.problem);
  switch (given[0]!) {
    case "prompt":
      return { kind: "text", text: f.string("prompt")! };
    case "promptTokenIds":
      return { kind: "tokens", ids: checkTokenIds(f.array("promptTokenIds")!, "promptTokenIds", limits.vocabSize) };
    case "messages":
      return { kind: "messages", messages: checkMessages(f.array("messages")!), kwargs: kwargs ?? null };
  }
}

/** The tool fields, which apply to messages only. */
function checkRequestTools(f: FieldReader, r: RequestInput): CheckedTools | null {
  const tools = checkTools(r.tools, r.toolChoice, r.parallelToolCalls);
  const given = (["tools", "toolChoice", "parallelToolCalls"] as const).find((k) => f.has(k));
  if (given !== undefined && !f.has("messages")) throw new RequestFieldError(given, "applies only to messages");
  return tools;
}

/** Token ids of the vocabulary, at least one: RequestFieldError naming `field[i]` for the first that is not. */
export function checkTokenIds(ids: readonly unknown[], field: string, vocabSize: number): number[] {
  if (ids.length === 0) throw new RequestFieldError(field, "must not be empty");
  ids.forEach((id, i) => {
    if (!(typeof id === "number" && Number.isInteger(id) && id >= 0 && id < vocabSize)) {
      throw new RequestFieldError(`${field}[${i}]`, `must be a token id from 0 to ${vocabSize - 1}, got ${excerpt(id)}`);
    }
  });
  return ids as number[];
}

function checkMessages(messages: readonly unknown[]): ChatMessage[] {
  if (messages.length === 0) throw new RequestFieldError("messages", "must not be empty");
  return messages.map((m, i) => {
    const at = `messages[${i}]`;
    if (typeof m !== "object" || m === null || Array.isArray(m)) throw new RequestFieldError(at, "must be an object with role and content");
    const fields = m as Readonly<Record<string, unknown>>;
    const { role, content } = fields;
    if (typeof role !== "string") throw new RequestFieldError(`${at}.role`, "must be a string");
    const calls = fields.tool_calls === undefined || fields.tool_calls === null ? undefined : checkToolCalls(fields.tool_calls, `${at}.tool_calls`);
    // An assistant message that only calls tools has no content (OpenAI sends null).
    if (typeof content !== "string" && !((content === null || content === undefined) && calls !== undefined)) {
      throw new RequestFieldError(`${at}.content`, "must be a string");
    }
    const message: ChatMessage = { role, content: typeof content === "string" ? content : "" };
    if (calls !== undefined) message.tool_calls = calls;
    for (const key of ["tool_call_id", "name", "reasoning_content"] as const) {
      const v = fields[key];
      if (v === undefined || v === null) continue;
      if (typeof v !== "string") throw new RequestFieldError(`${at}.${key}`, `must be a string, got ${excerpt(v)}`);
      message[key] = v;
    }
    return message;
  });
}

/** An assistant message's calls, in OpenAI's shape (arguments as JSON text). */
function checkToolCalls(calls: unknown, at: string): ChatToolCall[] {
  if (!Array.isArray(calls)) throw new RequestFieldError(at, "must be an array of calls");
  return calls.map((c: unknown, i) => {
    const where = `${at}[${i}]`;
    const call = typeof c === "object" && c !== null ? (c as Readonly<Record<string, unknown>>) : null;
    const fn = call !== null && typeof call.function === "object" && call.function !== null ? (call.function as Readonly<Record<string, unknown>>) : null;
    if (call === null || fn === null || typeof fn.name !== "string") throw new RequestFieldError(where, `must be {"id", "type": "function", "function": {"name", "arguments"}}`);
    if (typeof fn.arguments !== "string") throw new RequestFieldError(`${where}.function.arguments`, "must be a string (the arguments' JSON)");
    if (call.id !== undefined && typeof call.id !== "string") throw new RequestFieldError(`${where}.id`, "must be a string");
    return { id: typeof call.id === "string" ? call.id : "", type: "function", function: { name: fn.name, arguments: fn.arguments } };
  });
}

function checkStop(f: FieldReader): string[] {
  const stop = f.array("stop");
  if (stop === undefined) return [];
  if (stop.some((s) => typeof s !== "string")) throw new RequestFieldError("stop", "must be an array of strings");
  if (stop.length > MAX_STOPS) throw new RequestFieldError("stop", `may hold at most ${MAX_STOPS} strings, got ${stop.length}`);
  return (stop as string[]).filter((s) => s !== "");
}

function checkLogitBias(f: FieldReader, vocabSize: number): ReadonlyMap<number, number> {
  const bias = f.record("logitBias");
  const out = new Map<number, number>();
  if (bias === undefined) return out;
  // Counted first, before any entry is read or kept: a bias can name each token once at most.
  let entries = 0;
  for (const _ in bias) {
    if (++entries > vocabSize) throw new RequestFieldError("logitBias", `may hold at most ${vocabSize} entries (one per token of the vocabulary)`);
  }
  for (const key in bias) {
    const value = bias[key];
    const id = Number(key);
    const name = key.length > 24 ? `${key.slice(0, 24)}...` : key;
    if (!(/^\d+$/.test(key) && id < vocabSize)) throw new RequestFieldError(`logitBias.${name}`, `must be keyed by token ids from 0 to ${vocabSize - 1}`);
    if (!(typeof value === "number" && Number.isFinite(value) && Math.abs(value) <= MAX_LOGIT_BIAS)) {
      throw new RequestFieldError(`logitBias.${key}`, `must be a number from -${MAX_LOGIT_BIAS} to ${MAX_LOGIT_BIAS}, got ${excerpt(value)}`);
    }
    if (value !== 0) out.set(id, value);
  }
  return out;
}

/** A constraint's shape (its content is checked when it is compiled, by EngineClient.prepare). */
function checkConstraint(f: FieldReader): ConstraintSpec | null {
  const c = f.record("constraint");
  if (c === undefined) return null;
  const bad = (what: string, problem: string) => new RequestFieldError(`constraint.${what}`, problem);
  switch (c.kind) {
    case "json_schema": {
      const schema = c.schema;
      const ok = typeof schema === "boolean" || typeof schema === "string" || (typeof schema === "object" && schema !== null && !Array.isArray(schema));
      if (!ok) throw bad("schema", "must be a JSON Schema: an object, a boolean, or its text");
      return { kind: "json_schema", schema };
    }
    case "json_object":
      return { kind: "json_object" };
    case "regex":
      if (typeof c.pattern !== "string" || c.pattern === "") throw bad("pattern", "must be a non-empty string");
      return { kind: "regex", pattern: c.pattern };
    case "choice": {
      const choices = c.choices;
      if (!Array.isArray(choices) || choices.length === 0 || choices.some((x) => typeof x !== "string")) throw bad("choices", "must be a non-empty array of strings");
      return { kind: "choice", choices: choices as string[] };
    }
    case "gbnf":
      if (typeof c.grammar !== "string" || c.grammar.trim() === "") throw bad("grammar", "must be a non-empty GBNF grammar");
      return { kind: "gbnf", grammar: c.grammar };
    default:
      throw bad("kind", `must be one of json_schema, json_object, regex, choice, gbnf; got ${excerpt(c.kind)}`);
  }
}

/** The salt, or null for none (absent or empty: an empty salt isolates nothing). */
function checkCacheSalt(f: FieldReader): string | null {
  const salt = f.string("cacheSalt");
  return salt === undefined || salt === "" ? null : salt;
}

/** Bounds of a number field; inclusive unless marked open. */
interface NumberRange {
  min?: number;
  max?: number;
  minOpen?: boolean;
  maxOpen?: boolean;
  integer?: boolean;
}

/** Reads the fields of an untrusted object, each with its type checked (RequestFieldError naming it otherwise). */
class FieldReader {
  constructor(private readonly fields: Readonly<Record<string, unknown>>) {}

  /** Whether the field is present (neither undefined nor null). */
  has(name: string): boolean {
    return this.fields[name] !== undefined && this.fields[name] !== null;
  }

  private value(name: string): unknown {
    const v = this.fields[name];
    return v === null ? undefined : v;
  }

  string(name: string): string | undefined {
    const v = this.value(name);
    if (v === undefined || typeof v === "string") return v;
    throw new RequestFieldError(name, "must be a string");
  }

  boolean(name: string): boolean | undefined {
    const v = this.value(name);
    if (v === undefined || typeof v === "boolean") return v;
    throw new RequestFieldError(name, "must be a boolean");
  }

  array(name: string): readonly unknown[] | undefined {
    const v = this.value(name);
    if (v === undefined || Array.isArray(v)) return v as readonly unknown[] | undefined;
    throw new RequestFieldError(name, "must be an array");
  }

  record(name: string): Readonly<Record<string, unknown>> | undefined {
    const v = this.value(name);
    if (v === undefined) return undefined;
    if (typeof v === "object" && !Array.isArray(v)) return v as Readonly<Record<string, unknown>>;
    throw new RequestFieldError(name, "must be an object");
  }

  number(name: string, range: NumberRange = {}): number | undefined {
    const v = this.value(name);
    if (v === undefined) return undefined;
    return checkNumber(name, v, range);
  }

  /** A number field where null is a value of its own (maxTokens: null = no limit). */
  nullableNumber(name: string, range: NumberRange = {}): number | null | undefined {
    return this.fields[name] === null ? null : this.number(name, range);
  }
}

/** `v` as a number within `range`, else RequestFieldError naming `field`. */
export function checkNumber(field: string, v: unknown, range: NumberRange = {}): number {
  const { min, max, minOpen, maxOpen, integer } = range;
  if (typeof v !== "number" || !Number.isFinite(v) || (integer && !Number.isInteger(v))) {
    throw new RequestFieldError(field, `must be ${integer ? "an integer" : "a number"}, got ${excerpt(v)}`);
  }
  const belowMin = min !== undefined && (minOpen ? v <= min : v < min);
  const aboveMax = max !== undefined && (maxOpen ? v >= max : v > max);
  if (belowMin || aboveMax) {
    const lo = min === undefined ? "" : `${minOpen ? "above" : "at least"} ${min}`;
    const hi = max === undefined ? "" : `${maxOpen ? "below" : "at most"} ${max}`;
    throw new RequestFieldError(field, `must be ${[lo, hi].filter(Boolean).join(" and ")}, got ${v}`);
  }
  return v;
}

/** A short, one-line rendering of an untrusted value for an error message (never the whole of a large input). */
export function excerpt(v: unknown, limit = 40): string {
  let text: string;
  if (typeof v === "string") text = JSON.stringify(v.length > limit ? v.slice(0, limit) : v) + (v.length > limit ? "..." : "");
  else if (typeof v === "number" || typeof v === "boolean" || v === null || v === undefined) text = String(v);
  else text = Array.isArray(v) ? `an array of ${v.length}` : "an object";
  return text.length > limit + 8 ? `${text.slice(0, limit)}...` : text;
}

/**
 * The JSON name of each field, as OpenAI-style bodies and JSONL request lines spell it: the server
 * maps a body with these names and names a field at fault by them (`param`), as does `generate
 * --prompts` for a JSONL line.
 */
export const JSON_FIELD_NAMES: Readonly<Record<keyof GenerateRequest, string>> = {
  id: "id",
  prompt: "prompt",
  promptTokenIds: "prompt",
  messages: "messages",
  chatTemplateKwargs: "chat_template_kwargs",
  maxTokens: "max_tokens",
  stop: "stop",
  temperature: "temperature",
  topK: "top_k",
  topP: "top_p",
  minP: "min_p",
  repetitionPenalty: "repetition_penalty",
  repeatLastN: "repeat_last_n",
  frequencyPenalty: "frequency_penalty",
  presencePenalty: "presence_penalty",
  logitBias: "logit_bias",
  seed: "seed",
  n: "n",
  cacheSalt: "cache_salt",
  logprobs: "logprobs",
  ignoreEos: "ignore_eos",
  tools: "tools",
  toolChoice: "tool_choice",
  parallelToolCalls: "parallel_tool_calls",
  constraint: "constraint",
  reasoningBudget: "reasoning_budget",
  embeds: "images",
};

/** The JSON name of a request property (the property itself when it has none). */
export function jsonFieldName(property: string): string {
  return (JSON_FIELD_NAMES as Readonly<Record<string, string>>)[property] ?? property;
}
