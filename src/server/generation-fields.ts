/**
 * The generation fields chat and text completions share, mapped from a JSON body onto the engine's
 * one request type (GenerateRequest): sampling, penalties, logit_bias, stops, `n`, `seed`,
 * `cache_salt`, `ignore_eos`, `reasoning_budget`, structured output (`response_format` and its llama-server and vLLM
 * spellings: structured-output.ts), plus the transport fields the engine does not see (`stream`,
 * `stream_options`). Values go over as given: the engine's request checks (checkRequest, through
 * EngineClient.prepare) check their types and ranges, and requestError names the field as the
 * client spelt it. A field the body leaves out takes the server's default for it (`pagellm serve
 * --temperature`, ...: ServerRequestDefaults), else the OpenAI API's (temperature 1, top_p 1, no
 * top-k, min-p or penalty), as OpenAI clients expect, not the command line's.
 */
import { RequestFieldError, RequestTooLongError } from "../errors.ts";
import { jsonFieldName, seedDigitsProblem, type GenerateRequest } from "../llm/generate-request.ts";
import { ApiError } from "./api-error.ts";
import type { BodyFields, Json } from "./body-fields.ts";
import { readStructuredOutput } from "./structured-output.ts";

/** Most samples per prompt (`n`): a request's cost is bounded, whatever a step holds. */
export const MAX_N = 8;

/** A body's generation fields: the request fields every prompt shares, and how to answer. */
export interface GenerationSpec {
  /** The request fields (all but the prompt and the id), as the body gave them: the engine checks them. */
  fields: Partial<Record<keyof GenerateRequest, unknown>>;
  /** Samples per prompt, as the engine will take it (checked there too). */
  n: number;
  /** Alternatives reported per generated token; null: no log-probabilities. */
  logprobs: number | null;
  stream: boolean;
  /** stream_options.include_usage: a last chunk carries the usage. */
  includeUsage: boolean;
  /** The JSON name the client used for a request property, where it used another than JSON_FIELD_NAMES's (an alias). */
  aliases: Partial<Record<keyof GenerateRequest, string>>;
}


/**
 * The server's own defaults for fields a request leaves out (`pagellm serve --temperature 0.7
 * --max-tokens 512 ...`), in place of the OpenAI API's; a request's own value wins.
 */
export type ServerRequestDefaults = Partial<Pick<GenerateRequest,
  "maxTokens" | "temperature" | "topK" | "topP" | "minP" | "seed" | "repetitionPenalty" | "repeatLastN" | "frequencyPenalty" | "presencePenalty">>;

/** Request fields taken from the body as they are, under their JSON names. */
const PASSED_FIELDS = ["temperature", "topP", "minP", "frequencyPenalty", "presencePenalty", "logitBias", "seed", "cacheSalt", "ignoreEos", "reasoningBudget"] as const;

/**
 * Read the shared fields. `maxTokensDefault` differs between chat (until a stop) and text
 * completions (16, the OpenAI default); `logprobs` is read by the endpoint (its type differs).
 * `defaults`: the server's (GenerationContext.defaults), for the fields the body leaves out.
 */
export function readGenerationFields(f: BodyFields, maxTokensDefault: number | null, logprobs: number | null, defaults: ServerRequestDefaults): GenerationSpec {
  readUnusedFields(f);
  const aliases: GenerationSpec["aliases"] = {};
  const given: GenerationSpec["fields"] = {
    maxTokens: f.raw("max_tokens"),
    stop: readStop(f.raw("stop")),
    topK: readTopK(f),
    repetitionPenalty: readRepetitionPenalty(f, aliases),
    repeatLastN: readRepeatLastN(f),
  };
  for (const key of PASSED_FIELDS) given[key] = f.raw(jsonFieldName(key));
  checkSeedDigits(f);
  const fields = fieldsOverDefaults(given, maxTokensDefault, defaults);
  const structured = readStructuredOutput(f);
  if (structured !== null) {
    fields.constraint = structured.spec;
    aliases.constraint = structured.path;
  }
  const n = f.raw("n");
  if (n !== undefined) fields.n = n;
  if (logprobs !== null) fields.logprobs = logprobs;
  const stream = f.boolean("stream") ?? false;
  return { fields, n: typeof n === "number" ? n : 1, logprobs, stream, includeUsage: readStreamOptions(f, stream), aliases };
}

/**
 * A request error of the engine as a 400 naming the field as the client spelt it: `param` is
 * its JSON name ("top_p", "logit_bias.50256", "messages[1].role"), `promptField` the body field
 * that held the prompt ("prompt" or "messages").
 */
export function requestError(e: unknown, spec: GenerationSpec, promptField: string): unknown {
  const name = (property: string) => spec.aliases[property as keyof GenerateRequest] ?? (property === "prompt" || property === "promptTokenIds" ? promptField : jsonFieldName(property));
  if (e instanceof RequestFieldError) {
    // The prompt is named as a whole (its index is in the message); other fields with their path.
    const path = `${name(e.property)}${e.field.slice(e.property.length)}`;
    const isPrompt = e.property === "prompt" || e.property === "promptTokenIds";
    return ApiError.badField(isPrompt ? promptField : path, `'${path}' ${e.problem}`);
  }
  if (e instanceof RequestTooLongError) {
    const code = e.field === "n" ? null : "context_length_exceeded";
    return new ApiError(400, e.message, "invalid_request_error", e.field === null ? null : name(e.field), code);
  }
  return e;
}

/** A seed past 2^53 checked on its digits, which the parsed double has lost (-2^63 - 1 parses to -2^63): a 400 naming it. */
function checkSeedDigits(f: BodyFields): void {
  const problem = seedDigitsProblem(f.raw("seed"), () => f.numberText("seed"));
  if (problem !== null) throw ApiError.badField("seed", `'seed' ${problem}`);
}

/**
 * Fields OpenAI clients send that change nothing in a local server, read with the types OpenAI
 * gives them (a client that sends `user: 5` is told, as OpenAI tells it): `user` (an end user's
 * id), `metadata` (string values), `store` (a boolean) and `service_tier` (a name).
 */
function readUnusedFields(f: BodyFields): void {
  f.string("user");
  f.stringMap("metadata");
  f.boolean("store");
  f.string("service_tier");
}

/**
 * The fields a body gave (undefined: left out) over the server's defaults, over what OpenAI
 * clients assume (the Anthropic and Responses APIs assume the same: temperature 1, top_p 1).
 */
export function fieldsOverDefaults(given: GenerationSpec["fields"], maxTokensDefault: number | null, defaults: ServerRequestDefaults): GenerationSpec["fields"] {
  const fields: GenerationSpec["fields"] = { ...openAiDefaults(maxTokensDefault), ...defaults };
  for (const [key, v] of Object.entries(given) as [keyof GenerateRequest, unknown][]) if (v !== undefined) fields[key] = v;
  return fields;
}

/** What OpenAI clients assume of a field they leave out. */
function openAiDefaults(maxTokens: number | null): GenerationSpec["fields"] {
  return { maxTokens, temperature: 1, topP: 1, topK: 0, minP: 0, repetitionPenalty: 1, repeatLastN: Number.MAX_SAFE_INTEGER };
}

function readStop(v: Json | undefined): Json | undefined {
  // One string or several: the engine takes a list.
  return typeof v === "string" ? [v] : v;
}

/** vLLM's repetition_penalty, or llama.cpp's name for it, repeat_penalty (not both). */
function readRepetitionPenalty(f: BodyFields, aliases: GenerationSpec["aliases"]): Json | undefined {
  const vllm = f.raw("repetition_penalty");
  const llamaCpp = f.raw("repeat_penalty");
  if (vllm !== undefined && llamaCpp !== undefined) throw ApiError.badField("repeat_penalty", "give 'repetition_penalty' or its llama.cpp name 'repeat_penalty', not both");
  if (llamaCpp !== undefined) aliases.repetitionPenalty = "repeat_penalty";
  return vllm ?? llamaCpp;
}

/** llama.cpp's repeat_last_n: -1 the whole context, 0 no penalty. */
function readRepeatLastN(f: BodyFields): Json | undefined {
  const n = f.raw("repeat_last_n");
  return n === -1 ? Number.MAX_SAFE_INTEGER : n;
}

/** top_k: 0 or -1 (vLLM's "off") mean no top-k. */
function readTopK(f: BodyFields): Json | undefined {
  const k = f.raw("top_k");
  return k === -1 ? 0 : k;
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
