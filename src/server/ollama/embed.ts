/**
 * `POST /api/embed` (`input` a string or an array of strings; `truncate`, true unless false, cuts
 * an input longer than the context; `dimensions` keeps the first N values) and the older `POST
 * /api/embeddings` (`prompt` -> `embedding`), through LLM.embed as /v1/embeddings runs it. The
 * vectors are L2-normalized, as ollama's are (/api/embeddings's too: ollama normalizes both since
 * 0.3). An empty input (`""` or `[]`) gets no embeddings, as ollama answers it. `options` and
 * `keep_alive` are read as on the generation routes and change nothing here.
 */
import type { EmbedOptions } from "../../embed/embed-types.ts";
import { ApiError } from "../api-error.ts";
import type { BodyFields, Json } from "../body-fields.ts";
import { readInputs } from "../embedding-request.ts";
import { runEmbed } from "../embeddings.ts";
import type { OllamaContext } from "./context.ts";
import { doesNotSupport } from "./ollama-error.ts";
import { readKeepAlive } from "./options.ts";
import type { OllamaModel } from "./served-models.ts";

/** Euclidean, as ollama normalizes. */
const L2 = 2;

export async function ollamaEmbed(ctx: OllamaContext, f: BodyFields): Promise<Response> {
  const { model, name, clock } = pickEmbedder(ctx, f);
  const input = f.raw("input");
  const truncate = f.boolean("truncate") ?? true;
  const width = model.llm.capabilities.embeddingWidth;
  const dimensions = f.number("dimensions", { integer: true, min: 0 });
  if (dimensions !== undefined && dimensions > width) throw ApiError.badField("dimensions", `'dimensions' must be at most the model's embedding width ${width}, got ${dimensions}`);
  acceptUnused(f);
  f.rejectUnknown();
  const texts = embedTexts(input);
  if (texts.length === 0) return Response.json({ model: name, embeddings: [] });
  const options: EmbedOptions = { normalize: L2, truncate, ...(dimensions === undefined || dimensions === 0 ? {} : { dimensions }) };
  const result = await runEmbed(ctx.embedding(model), texts, options, "input", typeof input === "string");
  return Response.json({
    model: name,
    embeddings: result.embeddings.map((e) => Array.from(e.values)),
    total_duration: Math.round((performance.now() - clock) * 1e6),
    load_duration: 0,
    prompt_eval_count: result.promptTokens,
  });
}

export async function ollamaEmbeddings(ctx: OllamaContext, f: BodyFields): Promise<Response> {
  const { model } = pickEmbedder(ctx, f);
  const prompt = f.string("prompt") ?? "";
  acceptUnused(f);
  f.rejectUnknown();
  if (prompt === "") return Response.json({ embedding: [] });
  const result = await runEmbed(ctx.embedding(model), [prompt], { normalize: L2, truncate: true }, "prompt", true);
  return Response.json({ embedding: Array.from(result.embeddings[0]!.values) });
}

function pickEmbedder(ctx: OllamaContext, f: BodyFields): { model: OllamaModel; name: string; clock: number } {
  const requested = f.raw("model");
  const model = ctx.models.pick(requested);
  const name = requested as string;
  if (!model.llm.capabilities.embed) {
    const why = model.llm.capabilities.rerank ? "it is a reranker (pooling rank): it scores documents on /v1/rerank" : "it is served without pooling: serve it with --pooling mean, cls or last to embed";
    throw doesNotSupport(name, "embeddings", why);
  }
  return { model, name, clock: ctx.arrivedMs };
}

/** `options` and `keep_alive`: accepted (nothing in them changes an embedding; the model stays loaded). */
function acceptUnused(f: BodyFields): void {
  f.object("options");
  readKeepAlive(f.raw("keep_alive"));
}

/** ollama's inputs: a string (empty: none) or an array of strings. */
function embedTexts(v: Json | undefined): string[] {
  if (v === undefined || v === "") return [];
  if (Array.isArray(v) && v.length === 0) return [];
  if (typeof v !== "string" && !(Array.isArray(v) && v.every((s) => typeof s === "string"))) throw ApiError.badField("input", "invalid input type: 'input' must be a string or an array of strings");
  return readInputs("input", v).inputs as string[];
}
