/**
 * `POST /v1/rerank` and `POST /rerank`, in the shape Jina, Cohere, vLLM and llama-server share:
 * `{query, documents (strings or {text}), top_n, return_documents}` -> `{results: [{index,
 * relevance_score, document}], usage}`, best first. `relevance_score` is in 0-1 (the sigmoid of
 * the head's logit, as vLLM, Jina and Cohere give it); `raw_scores: true` gives the logit itself,
 * as llama-server's /rerank does. Documents come back as `{text}` unless `return_documents` is
 * false (Jina's and vLLM's default; Cohere's v2 leaves them out by default).
 */
import type { RerankResult } from "../embed/embed-types.ts";
import { ApiError } from "./api-error.ts";
import { isObject, type BodyFields, type Json } from "./body-fields.ts";
import { embeddingError, MAX_EMBED_INPUTS } from "./embedding-request.ts";
import type { EmbeddingContext } from "./embeddings.ts";
import { responseId } from "./generation-run.ts";
import { checkModel } from "./models.ts";

export interface RerankRequest {
  model: string | undefined;
  query: string;
  documents: string[];
  topN: number | undefined;
  returnDocuments: boolean;
  rawScores: boolean;
}

export function readRerankRequest(f: BodyFields): RerankRequest {
  const model = f.string("model");
  const query = f.string("query");
  if (query === undefined) throw ApiError.badField("query", "'query' is required: the text the documents are scored against");
  if (query.trim() === "") throw ApiError.badField("query", "'query' is empty: there is nothing to score the documents against");
  const documents = readDocuments(f.raw("documents"));
  const topN = f.number("top_n", { integer: true, min: 1 });
  const returnDocuments = f.boolean("return_documents") ?? true;
  const rawScores = f.boolean("raw_scores") ?? false;
  f.rejectUnknown();
  return { model, query, documents, topN, returnDocuments, rawScores };
}

function readDocuments(v: Json | undefined): string[] {
  if (v === undefined) throw ApiError.badField("documents", "'documents' is required: an array of strings or of {\"text\"}");
  if (!Array.isArray(v)) throw ApiError.badField("documents", "'documents' must be an array of strings or of {\"text\"}");
  if (v.length === 0) throw ApiError.badField("documents", "'documents' is an empty array: give at least one document to score");
  if (v.length > MAX_EMBED_INPUTS) {
    throw ApiError.badField("documents", `'documents' holds ${v.length} documents; this server takes at most ${MAX_EMBED_INPUTS} in one request: send them in several`);
  }
  return v.map((d, i) => {
    if (typeof d === "string") return d;
    if (isObject(d) && typeof d.text === "string") return d.text;
    throw ApiError.badField(`documents[${i}]`, `'documents[${i}]' must be a string or {"text": string}`);
  });
}

export async function rerank(ctx: EmbeddingContext, f: BodyFields): Promise<Response> {
  const caps = ctx.model.capabilities;
  if (!caps.rerank) {
    const what = caps.embed ? `an embedding model (pooling ${caps.pooling}): it embeds on /v1/embeddings` : "a text generation model";
    throw new ApiError(400, `'${ctx.name}' is ${what}; reranking needs a reranker (a model with pooling rank)`, "invalid_request_error", "model", "model_cannot_rerank");
  }
  const request = readRerankRequest(f);
  checkModel(request.model, ctx.name);
  let result: RerankResult;
  try {
    result = await ctx.model.rerank(request.query, request.documents, request.topN === undefined ? {} : { topN: request.topN });
  } catch (e) {
    throw embeddingError(e, "documents", false);
  }
  const tokens = result.promptTokens;
  ctx.onDone({ prompt_tokens: tokens, completion_tokens: 0, total_tokens: tokens, prompt_tokens_details: { cached_tokens: 0 } });
  const results = result.results.map((r) => ({
    index: r.index,
    relevance_score: request.rawScores ? r.score : r.relevanceScore,
    ...(request.returnDocuments ? { document: { text: request.documents[r.index]! } } : {}),
  }));
  return Response.json({ id: responseId("rerank"), object: "list", model: ctx.name, results, usage: { prompt_tokens: tokens, total_tokens: tokens } });
}
