/**
 * Cross-origin requests from browser pages (`--cors ORIGIN[,ORIGIN]`, off by default), as the
 * Fetch standard's CORS protocol asks:
 *
 *   - a preflight (OPTIONS with Origin and Access-Control-Request-Method) from an allowed origin is
 *     answered 204 before any other check (the API key's included: a browser never sends
 *     credentials with a preflight), with the methods, the headers the page asked to send, and
 *     Chrome's private-network permission when asked (a public page calling a local server);
 *   - every answer to an allowed origin, errors, streams and 404s included, carries
 *     Access-Control-Allow-Origin and exposes the headers a client reads (Retry-After);
 *   - another origin gets no Access-Control-* header at all (its preflight a 403), so the browser
 *     keeps the answer from its page.
 *
 * `*` allows every origin: every web page the user opens can then call the server from the user's
 * browser (docs/server.md says when that is safe).
 */
import { ApiError, errorResponse } from "./api-error.ts";

/** Methods the routes take. */
const METHODS = "GET, HEAD, POST, OPTIONS";
/** Headers a client may read from an answer, beyond the CORS-safelisted ones. */
const EXPOSED = "Retry-After, WWW-Authenticate";
/** How long a browser may reuse a preflight's answer, seconds (Chromium caps it at 7200). */
const MAX_AGE_S = 600;
/** Request headers allowed when a preflight names none (what the OpenAI clients send). */
const DEFAULT_HEADERS = "Authorization, Content-Type";

/** Why `origin` is not an origin --cors can take, or null when it is one (or `*`). */
export function corsOriginProblem(origin: string): string | null {
  if (origin === "*") return null;
  let url: URL;
  try {
    url = new URL(origin);
  } catch {
    return `"${origin}" is not an origin (scheme://host[:port], e.g. http://localhost:3000) or *`;
  }
  if (url.protocol !== "http:" && url.protocol !== "https:") return `"${origin}" is not an http or https origin`;
  if (url.origin !== origin.replace(/\/$/, "")) return `"${origin}" is not an origin: give scheme://host[:port] only (${url.origin})`;
  return null;
}

export class CorsPolicy {
  private readonly any: boolean;
  private readonly origins: ReadonlySet<string>;

  /** `origins`: origins as corsOriginProblem accepts them, or `*` (RangeError otherwise). */
  constructor(origins: readonly string[]) {
    for (const o of origins) {
      const problem = corsOriginProblem(o);
      if (problem !== null) throw new RangeError(problem);
    }
    this.any = origins.includes("*");
    this.origins = new Set(origins.filter((o) => o !== "*").map((o) => new URL(o).origin));
  }

  /** Whether `req` is a CORS preflight: OPTIONS with Origin and Access-Control-Request-Method. */
  isPreflight(req: Request): boolean {
    return req.method === "OPTIONS" && req.headers.has("origin") && req.headers.has("access-control-request-method");
  }

  /** The answer to a preflight: 204 for an allowed origin, else a 403 without CORS headers. */
  preflight(req: Request): Response {
    const origin = req.headers.get("origin")!;
    if (!this.allows(origin)) {
      return errorResponse(new ApiError(403, `the origin '${origin.slice(0, 100)}' is not allowed (--cors)`, "invalid_request_error", null, "origin_not_allowed"));
    }
    const headers = new Headers({
      "Access-Control-Allow-Methods": METHODS,
      "Access-Control-Allow-Headers": req.headers.get("access-control-request-headers") ?? DEFAULT_HEADERS,
      "Access-Control-Max-Age": String(MAX_AGE_S),
    });
    if (req.headers.get("access-control-request-private-network") === "true") headers.set("Access-Control-Allow-Private-Network", "true");
    this.setOrigin(headers, origin);
    // What was allowed depends on the request's headers: a cache must not serve it to another.
    headers.append("Vary", "Access-Control-Request-Method, Access-Control-Request-Headers, Access-Control-Request-Private-Network");
    return new Response(null, { status: 204, headers });
  }

  /** `response` with the CORS headers its request's origin is allowed (none for another origin or none sent). */
  apply(req: Request, response: Response): Response {
    const origin = req.headers.get("origin");
    if (origin !== null && this.allows(origin)) {
      this.setOrigin(response.headers, origin);
      response.headers.set("Access-Control-Expose-Headers", EXPOSED);
    } else if (!this.any) {
      // The answer differs by origin: a shared cache must not give one origin's to another.
      response.headers.append("Vary", "Origin");
    }
    return response;
  }

  private allows(origin: string): boolean {
    return this.any || this.origins.has(origin);
  }

  private setOrigin(headers: Headers, origin: string): void {
    if (this.any) {
      headers.set("Access-Control-Allow-Origin", "*");
    } else {
      headers.set("Access-Control-Allow-Origin", origin);
      headers.append("Vary", "Origin");
    }
  }
}
