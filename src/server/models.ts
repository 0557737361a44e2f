/**
 * `GET /v1/models` and the `model` field: the server serves one model, under one name.
 */
import { ApiError } from "./api-error.ts";

/** A request's `model` must be the served one when given (clients always send it; absent is accepted). */
export function checkModel(requested: string | undefined, served: string): void {
  if (requested === undefined || requested === served) return;
  throw new ApiError(404, `The model '${requested}' does not exist: this server serves '${served}'`, "not_found_error", "model", "model_not_found");
}

/** The `GET /v1/models` body. */
export function modelList(served: string, created: number): Record<string, unknown> {
  return { object: "list", data: [{ id: served, object: "model", created, owned_by: "pagellm" }] };
}
