/**
 * Errors as the OpenAI API returns them: a status and `{"error": {"message", "type", "param",
 * "code"}}`. Handlers throw ApiError; the server turns it (and the engine's typed errors) into
 * that response, so a bad request gets a 4xx JSON error and never disturbs the others.
 */
import { resolve } from "node:path";
import { InputError, PagellmError, RequestTooLongError } from "../errors.ts";
import { ChatTemplateError } from "../chat/jinja-template.ts";

/** The `type` field OpenAI uses for each kind of failure. */
export type ApiErrorType = "invalid_request_error" | "authentication_error" | "not_found_error" | "rate_limit_error" | "server_error" | "service_unavailable";

/** Longest error message sent: a message that quotes the request quotes at most an excerpt of it. */
export const MAX_MESSAGE_CHARS = 500;
/** Longest `param` sent (a field path made of a client's own keys). */
export const MAX_PARAM_CHARS = 120;

export class ApiError extends Error {
  /** The request field at fault, as a path ("messages[2].content"), or null. */
  readonly param: string | null;

  constructor(
    readonly status: number,
    message: string,
    readonly type: ApiErrorType = "invalid_request_error",
    param: string | null = null,
    readonly code: string | null = null,
    readonly headers: Record<string, string> = {},
  ) {
    super(excerpt(message, MAX_MESSAGE_CHARS));
    this.name = "ApiError";
    this.param = param === null ? null : excerpt(param, MAX_PARAM_CHARS);
  }

  /** A 400 naming the field at fault. */
  static badField(param: string, message: string, code: string | null = null): ApiError {
    return new ApiError(400, message, "invalid_request_error", param, code);
  }

  /** A 400 for a field the server does not implement: a client must not believe it was applied. */
  static unsupported(param: string, what: string): ApiError {
    return new ApiError(400, `${what} is not supported by this server`, "invalid_request_error", param, "unsupported_parameter");
  }
}

/** A 405 naming the methods the route takes (its Allow header). */
export function methodNotAllowed(req: Request, allowed: string): ApiError {
  return new ApiError(405, `${req.method} is not allowed here; use ${allowed}`, "invalid_request_error", null, "method_not_allowed", { Allow: allowed });
}

/**
 * `text` when it has at most `max` characters, else its first `max` and how many more there were:
 * what an error message quotes of a client's input (a field name, a value).
 */
export function excerpt(text: string, max = 40): string {
  if (text.length <= max) return text;
  return `${text.slice(0, max)}... (${text.length - max} more characters)`;
}

/** The OpenAI error body of `e`. */
export function errorBody(e: ApiError): { error: { message: string; type: string; param: string | null; code: string | null } } {
  return { error: { message: e.message, type: e.type, param: e.param, code: e.code } };
}

/** A JSON response with the error's status and headers. */
export function errorResponse(e: ApiError): Response {
  return Response.json(errorBody(e), { status: e.status, headers: e.headers });
}

/**
 * An error thrown while preparing a request as an ApiError: the engine's and the tokenizer's
 * typed errors are the client's fault (400, `param` naming the field they came from); anything
 * else is a 500 with a one-line message.
 */
export function asApiError(e: unknown, param: string | null = null): ApiError {
  if (e instanceof ApiError) return e;
  if (e instanceof RequestTooLongError) return new ApiError(400, e.message, "invalid_request_error", param, "context_length_exceeded");
  if (e instanceof InputError || e instanceof ChatTemplateError) return new ApiError(400, e.message, "invalid_request_error", param);
  const message = e instanceof Error ? e.message.split("\n")[0]! : String(e);
  const kind = e instanceof PagellmError ? e.name : "internal error";
  return new ApiError(500, `${kind}: ${message}`, "server_error");
}

/**
 * `e` as a client may see it: every path of `files` (the model's, its vocabulary's, a template
 * file's; as given and made absolute) in its message replaced by `name`, the served model's name.
 * A name without a folder tells nothing of the server's disk and is left as it is (replacing a
 * short one would mangle words).
 */
export function withoutPaths(e: ApiError, files: readonly string[], name: string): ApiError {
  const paths = [...new Set(files.flatMap((f) => [resolve(f), f]))].filter((p) => p.includes("/")).sort((a, b) => b.length - a.length);
  let message = e.message;
  for (const path of paths) message = message.replaceAll(path, name);
  return message === e.message ? e : new ApiError(e.status, message, e.type, e.param, e.code, e.headers);
}
