/**
 * Errors as ollama sends them: `{"error": "..."}` with the status (400 bad input, 404 a model it
 * does not have), and in a stream already under way one last NDJSON line `{"error": "..."}` (the
 * status was sent with the first line). The OpenAI error's `param` goes into the message, which
 * is all an ollama client reads.
 */
import { ApiError } from "../api-error.ts";

/** The message of `e` as one line, naming the field at fault when the message does not already. */
export function ollamaMessage(e: ApiError): string {
  return e.param === null || e.message.includes(e.param) ? e.message : `${e.param}: ${e.message}`;
}

export function ollamaErrorResponse(e: ApiError): Response {
  return Response.json({ error: ollamaMessage(e) }, { status: e.status, headers: e.headers });
}

/** ollama's 404 for a model it does not have. */
export function modelNotFound(requested: string): ApiError {
  return new ApiError(404, `model '${requested}' not found`, "not_found_error", null, "model_not_found");
}

/** ollama's 400 for a capability a model lacks (`"NAME" does not support thinking`), with what this server says of it. */
export function doesNotSupport(name: string, what: string, why = ""): ApiError {
  return new ApiError(400, `"${name}" does not support ${what}${why === "" ? "" : `: ${why}`}`, "invalid_request_error", null, "unsupported_capability");
}
