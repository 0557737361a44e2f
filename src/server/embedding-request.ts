/**
 * Bodies of the embedding routes: `POST /v1/embeddings` as OpenAI defines it (`input` a string, an
 * array of strings, an array of token ids or an array of those; `encoding_format`; `dimensions`),
 * and llama-server's `POST /embedding` (`content`, or `input`, of the same forms). Both take
 * llama-server's `embd_normalize` and ollama's `truncate`. Every problem is a 400 naming the field
 * (`input[2][5]`) before anything runs; a token id past the vocabulary is the model's to find
 * (LLM.embed names it, embeddingError renames it).
 */
import type { EmbedInput } from "../embed/embed-types.ts";
import { RequestFieldError } from "../errors.ts";
import { ApiError, asApiError } from "./api-error.ts";
import type { BodyFields, Json } from "./body-fields.ts";

/** OpenAI's own bound on the inputs of one request (LangChain sends 512 at a time, the AI SDK 2048). */
export const MAX_EMBED_INPUTS = 2048;

export type EncodingFormat = "float" | "base64";

export interface EmbeddingRequest {
  model: string | undefined;
  /** The field the inputs came from (`input`, or `content` on llama-server's route): errors name it. */
  field: string;
  inputs: EmbedInput[];
  /** The request gave one input, not an array of them (its errors name `input`, not `input[0]`). */
  single: boolean;
  encodingFormat: EncodingFormat;
  /** Absent: the model's width. */
  dimensions: number | undefined;
  /** llama.cpp's --embd-normalize (absent: 2, Euclidean). */
  normalize: number | undefined;
  truncate: boolean;
}

/** A `/v1/embeddings` body; `width`: the model's embedding width (`dimensions` may not exceed it). */
export function readEmbeddingRequest(f: BodyFields, width: number): EmbeddingRequest {
  const model = f.string("model");
  const { inputs, single } = readInputs("input", f.raw("input"));
  const encodingFormat = readEncodingFormat(f.raw("encoding_format"));
  const dimensions = f.number("dimensions", { integer: true, min: 1 });
  if (dimensions !== undefined && dimensions > width) {
    throw ApiError.badField("dimensions", `'dimensions' must be at most the model's embedding width ${width}, got ${dimensions}`);
  }
  const common = readCommonFields(f);
  // OpenAI's end-user id: recorded by OpenAI for abuse monitoring, changes nothing in the result.
  f.string("user");
  f.rejectUnknown();
  return { model, field: "input", inputs, single, encodingFormat, dimensions, ...common };
}

/** A llama-server `/embedding` body: `content` (or `input`), `embd_normalize`, `truncate`. */
export function readLlamaEmbeddingRequest(f: BodyFields): EmbeddingRequest {
  const model = f.string("model");
  const field = f.raw("content") !== undefined || f.raw("input") === undefined ? "content" : "input";
  const { inputs, single } = readInputs(field, f.raw(field));
  const common = readCommonFields(f);
  f.rejectUnknown();
  return { model, field, inputs, single, encodingFormat: "float", dimensions: undefined, ...common };
}

function readCommonFields(f: BodyFields): { normalize: number | undefined; truncate: boolean } {
  const normalize = f.number("embd_normalize", { integer: true, min: -1 });
  const truncate = f.boolean("truncate") ?? false;
  return { normalize, truncate };
}

function readEncodingFormat(v: Json | undefined): EncodingFormat {
  if (v === undefined || v === "float" || v === "base64") return v ?? "float";
  const got = typeof v === "string" ? `'${v.slice(0, 40)}'` : `a ${Array.isArray(v) ? "array" : typeof v}`;
  throw ApiError.badField("encoding_format", `'encoding_format' must be 'float' or 'base64', got ${got}`);
}

const INPUT_FORMS = "a string, an array of strings, an array of token ids or an array of arrays of token ids";

/** The inputs of `field` in OpenAI's forms; `single`: one input given alone (not in an array). */
export function readInputs(field: string, v: Json | undefined): { inputs: EmbedInput[]; single: boolean } {
  if (v === undefined) throw ApiError.badField(field, `'${field}' is required: ${INPUT_FORMS}`);
  if (typeof v === "string") return { inputs: [nonEmptyText(field, v)], single: true };
  if (!Array.isArray(v)) throw ApiError.badField(field, `'${field}' must be ${INPUT_FORMS}`);
  if (v.length === 0) throw ApiError.badField(field, `'${field}' is an empty array: give at least one input`);
  // An array of numbers is one input's token ids; any other array holds one input per item.
  if (v.every((item) => typeof item === "number")) return { inputs: [tokenIds(field, v)], single: true };
  if (v.length > MAX_EMBED_INPUTS) {
    throw ApiError.badField(field, `'${field}' holds ${v.length} inputs; this server takes at most ${MAX_EMBED_INPUTS} in one request: send them in several`);
  }
  const kind = typeof v[0] === "string" ? "string" : "array";
  const inputs = v.map((item, i): EmbedInput => {
    const at = `${field}[${i}]`;
    if (kind === "string" && typeof item === "string") return nonEmptyText(at, item);
    if (kind === "array" && Array.isArray(item)) {
      if (item.length === 0) throw ApiError.badField(at, `'${at}' is an empty array of token ids`);
      return tokenIds(at, item);
    }
    throw ApiError.badField(at, `'${at}' must be ${kind === "string" ? "a string" : "an array of token ids"}, as the first item is (the items of '${field}' all of one kind)`);
  });
  return { inputs, single: false };
}

function nonEmptyText(at: string, text: string): string {
  if (text === "") throw ApiError.badField(at, `'${at}' is an empty string: there is nothing to embed`);
  return text;
}

/** Token ids as integers from 0 (whether each is in the vocabulary is the model's check). */
function tokenIds(at: string, items: readonly Json[]): number[] {
  return items.map((id, j) => {
    if (typeof id !== "number" || !Number.isInteger(id) || id < 0) {
      throw ApiError.badField(`${at}[${j}]`, `'${at}[${j}]' must be a token id (an integer from 0), got ${JSON.stringify(id)?.slice(0, 40)}`);
    }
    return id;
  });
}

/**
 * An error of LLM.embed or LLM.rerank as a 400 naming the request's own field: the front door's
 * `inputs[i]...` becomes `input[i]...` (`input...` for a single input), `documents[i]` stays, its
 * options by their JSON names.
 */
export function embeddingError(e: unknown, field: string, single: boolean): ApiError {
  if (!(e instanceof RequestFieldError)) return asApiError(e, field);
  const param = requestField(e.field, field, single);
  return ApiError.badField(param, `'${param}' ${e.problem}`);
}

/** The front door's field name as the request wrote it. */
function requestField(name: string, field: string, single: boolean): string {
  const inputs = /^inputs?(?:\[(\d+)\])?(.*)$/.exec(name);
  if (inputs !== null) {
    const [, index, rest] = inputs;
    if (index === undefined) return field + rest;
    return single && index === "0" ? field + rest : `${field}[${index}]${rest}`;
  }
  if (name === "topN") return "top_n";
  if (name === "normalize") return "embd_normalize";
  return name;
}
