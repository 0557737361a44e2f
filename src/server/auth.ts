/**
 * API keys: `Authorization: Bearer KEY`, or `x-api-key: KEY` as Anthropic's clients send it,
 * compared in constant time. Both sides are hashed first,
 * so the comparison takes the same time whatever the length or content of the key sent.
 */
import { createHash, timingSafeEqual } from "node:crypto";
import { ApiError } from "./api-error.ts";

/**
 * Why `key` could never be matched by a request, or null when it can: a request's key is read
 * from a header trimmed of surrounding whitespace (so a key that begins or ends with a space or a
 * newline, as one read from a file often does, would be refused every time), and a header carries
 * only printable ASCII reliably (a control character cannot be sent; other characters reach the
 * server as bytes that do not decode back to the key).
 */
export function apiKeyProblem(key: string): string | null {
  if (key !== key.trim()) return "begins or ends with whitespace (a newline from a file?), which a request's key never has";
  if (/[\x00-\x1f\x7f]/.test(key)) return "contains a control character, which no HTTP header can carry";
  if (/[^\x20-\x7e]/.test(key)) return "contains a character outside printable ASCII, which an HTTP header does not carry reliably";
  return null;
}

export class ApiKeyCheck {
  private readonly digest: Buffer;

  /** Throws a RangeError for a key no request could match (apiKeyProblem). */
  constructor(key: string) {
    const problem = apiKeyProblem(key);
    if (problem !== null) throw new RangeError(`the API key ${problem}`);
    this.digest = sha256(key);
  }

  /** Throws a 401 unless the request carries the key. */
  check(req: Request): void {
    const header = req.headers.get("authorization") ?? "";
    const anthropic = req.headers.get("x-api-key");
    const key = /^Bearer\s+(.+)$/i.exec(header.trim())?.[1] ?? anthropic?.trim() ?? null;
    const ok = timingSafeEqual(sha256(key ?? ""), this.digest) && key !== null;
    if (!ok) {
      const missing = header === "" && anthropic === null;
      throw new ApiError(401, missing ? "missing API key: send 'Authorization: Bearer KEY' (or 'x-api-key: KEY')" : "invalid API key", "authentication_error", null, "invalid_api_key", {
        "WWW-Authenticate": "Bearer",
      });
    }
  }
}

function sha256(text: string): Buffer {
  return createHash("sha256").update(text).digest();
}
