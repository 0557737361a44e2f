/**
 * API keys: `Authorization: Bearer KEY`, compared in constant time. Both sides are hashed first,
 * so the comparison takes the same time whatever the length or content of the key sent.
 */
import { createHash, timingSafeEqual } from "node:crypto";
import { ApiError } from "./api-error.ts";

export class ApiKeyCheck {
  private readonly digest: Buffer;

  constructor(key: string) {
    this.digest = sha256(key);
  }

  /** Throws a 401 unless the request carries the key. */
  check(req: Request): void {
    const header = req.headers.get("authorization") ?? "";
    const match = /^Bearer\s+(.+)$/i.exec(header.trim());
    const ok = timingSafeEqual(sha256(match?.[1] ?? ""), this.digest) && match !== null;
    if (!ok) {
      throw new ApiError(401, header === "" ? "missing API key: send 'Authorization: Bearer KEY'" : "invalid API key", "authentication_error", null, "invalid_api_key", {
        "WWW-Authenticate": "Bearer",
      });
    }
  }
}

function sha256(text: string): Buffer {
  return createHash("sha256").update(text).digest();
}
