/**
 * `GET /v1/models`, `GET /v1/models/{id}` and the `model` field: the server serves one model,
 * under one name. Its object says what it can be asked for: `capabilities` as ollama names them
 * (`completion`, `embedding`, and `rerank`), with the pooling and the embedding width.
 */
import type { ModelCapabilities } from "../embed/embed-types.ts";
import { ApiError, excerpt } from "./api-error.ts";

/** A request's `model` must be the served one when given (clients always send it; absent is accepted). */
export function checkModel(requested: string | undefined, served: string): void {
  if (requested === undefined || requested === served) return;
  throw new ApiError(404, `The model '${requested}' does not exist: this server serves '${served}'`, "not_found_error", "model", "model_not_found");
}

/** The model object of the served model, as OpenAI describes a model, with what it can do. */
function modelObject(served: string, created: number, caps: ModelCapabilities): Record<string, unknown> {
  const capabilities = [caps.generate ? "completion" : null, caps.embed ? "embedding" : null, caps.rerank ? "rerank" : null].filter((c) => c !== null);
  return { id: served, object: "model", created, owned_by: "pagellm", capabilities, pooling: caps.pooling, embedding_dimensions: caps.embeddingWidth };
}

/** The `GET /v1/models` body. */
export function modelList(served: string, created: number, caps: ModelCapabilities): Record<string, unknown> {
  return { object: "list", data: [modelObject(served, created, caps)] };
}

/**
 * The `GET /v1/models/{id}` body (`openai.models.retrieve`); `id` is the path's last part as sent,
 * percent-encoded (clients encode a `/` in a name as %2F). 404 for another model, as OpenAI answers.
 */
export function retrieveModel(encodedId: string, served: string, created: number, caps: ModelCapabilities): Record<string, unknown> {
  let id: string;
  try {
    id = decodeURIComponent(encodedId);
  } catch {
    id = encodedId;
  }
  if (id !== served) throw new ApiError(404, `The model '${excerpt(id, 100)}' does not exist: this server serves '${served}'`, "not_found_error", null, "model_not_found");
  return modelObject(served, created, caps);
}
