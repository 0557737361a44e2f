/**
 * `POST /v1/embeddings` (OpenAI's shape) and `POST /embedding` (llama-server's): the inputs
 * through LLM.embed in one call, answered in input order. OpenAI's: one pooled vector per input,
 * as JSON numbers or (`encoding_format: "base64"`, what the `openai` package asks for when its
 * caller does not choose) the little-endian float32 bytes in base64. llama-server's: each input's
 * rows, one pooled (normalized as `embd_normalize` says) or, under pooling `none`, one per token
 * (never normalized, as llama-server leaves them); the only route for token embeddings, since
 * OpenAI's shape has room for one vector per input.
 */
import type { EmbedInput, EmbedOptions, EmbedResult, ModelCapabilities, RerankOptions, RerankResult } from "../embed/embed-types.ts";
import { ApiError } from "./api-error.ts";
import type { BodyFields } from "./body-fields.ts";
import { embeddingError, readEmbeddingRequest, readLlamaEmbeddingRequest, type EmbeddingRequest } from "./embedding-request.ts";
import type { Usage } from "./generation-run.ts";
import { checkModel } from "./models.ts";

/** What the embedding and rerank routes ask of the loaded model (LLM's front door). */
export interface EmbeddingModel {
  readonly capabilities: ModelCapabilities;
  embed(inputs: EmbedInput[], options: EmbedOptions): Promise<EmbedResult>;
  rerank(query: string, documents: string[], options: RerankOptions): Promise<RerankResult>;
}

export interface EmbeddingContext {
  model: EmbeddingModel;
  /** The served name. */
  name: string;
  onDone: (usage: Usage) => void;
}

export async function embeddings(ctx: EmbeddingContext, f: BodyFields): Promise<Response> {
  const caps = ctx.model.capabilities;
  checkEmbeddingModel(caps, ctx.name, "/v1/embeddings");
  if (caps.pooling === "none") {
    throw new ApiError(400, `'${ctx.name}' runs with pooling 'none', one vector per token, which the OpenAI embeddings shape cannot carry: ask /embedding for token vectors, or serve the model with --pooling mean, cls or last`, "invalid_request_error", "model", "pooling_none");
  }
  const request = readEmbeddingRequest(f, caps.embeddingWidth);
  checkModel(request.model, ctx.name);
  const result = await run(ctx, request, { normalize: request.normalize, dimensions: request.dimensions, truncate: request.truncate });
  const data = result.embeddings.map((e) => ({
    object: "embedding",
    index: e.index,
    embedding: request.encodingFormat === "base64" ? float32Base64(e.values) : Array.from(e.values),
  }));
  return Response.json({ object: "list", data, model: ctx.name, usage: { prompt_tokens: result.promptTokens, total_tokens: result.promptTokens } });
}

export async function llamaEmbedding(ctx: EmbeddingContext, f: BodyFields): Promise<Response> {
  const caps = ctx.model.capabilities;
  checkEmbeddingModel(caps, ctx.name, "/embedding");
  const request = readLlamaEmbeddingRequest(f);
  checkModel(request.model, ctx.name);
  const tokenRows = caps.pooling === "none";
  const result = await run(ctx, request, { normalize: tokenRows ? -1 : request.normalize, truncate: request.truncate });
  const width = caps.embeddingWidth;
  return Response.json(result.embeddings.map((e) => ({ index: e.index, embedding: rows(e.values, tokenRows ? e.tokenCount : 1, width) })));
}

/** 400 unless the model embeds: a reranker is sent to /v1/rerank, a generation model told how to embed. */
export function checkEmbeddingModel(caps: ModelCapabilities, name: string, route: string): void {
  if (caps.embed) return;
  const why = caps.rerank
    ? `'${name}' is a reranker (pooling rank): it scores documents against a query on /v1/rerank, it does not embed`
    : `'${name}' is a text generation model served without pooling: serve it with --pooling mean, cls or last to embed`;
  throw new ApiError(400, `${route}: ${why}`, "invalid_request_error", "model", "model_cannot_embed");
}

function run(ctx: EmbeddingContext, request: EmbeddingRequest, options: EmbedOptions): Promise<EmbedResult> {
  return runEmbed(ctx, request.inputs, options, request.field, request.single);
}

/**
 * The inputs through the model's embed, reported done; its errors as 400s naming `field` (the
 * body's field of the inputs; `single`: it held one input, not an array). Options left undefined are not passed.
 */
export async function runEmbed(ctx: EmbeddingContext, inputs: EmbedInput[], options: EmbedOptions, field: string, single: boolean): Promise<EmbedResult> {
  const defined = Object.fromEntries(Object.entries(options).filter(([, v]) => v !== undefined)) as EmbedOptions;
  let result: EmbedResult;
  try {
    result = await ctx.model.embed(inputs, defined);
  } catch (e) {
    throw embeddingError(e, field, single);
  }
  ctx.onDone({ prompt_tokens: result.promptTokens, completion_tokens: 0, total_tokens: result.promptTokens, prompt_tokens_details: { cached_tokens: 0 } });
  return result;
}

/** `values` as little-endian float32 bytes in base64 (OpenAI's `encoding_format: "base64"`), whatever the platform's byte order. */
export function float32Base64(values: Float32Array): string {
  const bytes = new DataView(new ArrayBuffer(values.length * 4));
  for (let i = 0; i < values.length; i++) bytes.setFloat32(i * 4, values[i]!, true);
  return Buffer.from(bytes.buffer).toString("base64");
}

/** `count` rows of `width` values each, as JSON arrays. */
function rows(values: Float32Array, count: number, width: number): number[][] {
  return Array.from({ length: count }, (_, r) => Array.from(values.subarray(r * width, (r + 1) * width)));
}
