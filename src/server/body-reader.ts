/**
 * Request bodies, read within the server's bounds, so that no client can hold a connection or
 * memory for good by sending a body slowly or not at all:
 *
 *   - size: at most maxBodyBytes (413), by Content-Length or counted as it arrives;
 *   - time: the whole body within timeoutMs of its headers (408), however it trickles in;
 *   - memory: the bytes held by every body still arriving, all requests together, at most
 *     maxPendingBytes (429: the server is busy receiving; Retry-After);
 *   - encoding: the body is UTF-8 (400): invalid bytes are refused, never silently replaced.
 *
 * Each refusal while a body may still be arriving asks for the connection to be closed, so the
 * rest of the body is not read. A client that closes its connection mid-body gets a 400 it never
 * sees: its request was the client's to abandon, not a failure of the server.
 */
import { ApiError } from "./api-error.ts";

export interface BodyLimits {
  /** Largest body, in bytes (--max-body-mb). */
  maxBodyBytes: number;
  /** Time to receive a whole body from its headers, in ms (--body-timeout). */
  timeoutMs: number;
  /** Bytes all bodies still arriving may hold together (--max-pending-body-mb). */
  maxPendingBytes: number;
}

/** A response that the connection must not outlive: the rest of the body is never read. */
const CLOSE = { Connection: "close" };

export class BodyReader {
  /** Bytes held by bodies being received, all requests together. */
  private held = 0;

  constructor(private readonly limits: BodyLimits) {}

  /** Bytes held now by bodies still arriving. */
  get pendingBytes(): number {
    return this.held;
  }

  /** The body of `req` as text, within the bounds (ApiError 400, 408, 413 or 429 otherwise). */
  async read(req: Request): Promise<string> {
    const { maxBodyBytes, timeoutMs } = this.limits;
    const declared = Number(req.headers.get("content-length") ?? "0");
    if (declared > maxBodyBytes) throw tooLarge(maxBodyBytes);
    if (req.body === null) return "";
    const reader = req.body.getReader();
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      reader.cancel().catch(() => undefined);
    }, timeoutMs);
    const chunks: Uint8Array[] = [];
    let size = 0;
    let complete = false;
    try {
      for (;;) {
        let next: Awaited<ReturnType<typeof reader.read>>;
        try {
          next = await reader.read();
        } catch {
          if (timedOut) break;
          throw new ApiError(400, "the client closed the connection before its request body arrived", "invalid_request_error", null, "incomplete_body");
        }
        if (timedOut) break;
        if (next.done) {
          complete = true;
          break;
        }
        size += next.value.byteLength;
        this.held += next.value.byteLength;
        chunks.push(next.value);
        if (size > maxBodyBytes) throw tooLarge(maxBodyBytes);
        if (this.held > this.limits.maxPendingBytes) throw this.busy();
      }
    } finally {
      clearTimeout(timer);
      this.held -= size;
      // Refused before its end: the rest is never read (the response closes the connection).
      if (!complete) reader.cancel().catch(() => undefined);
    }
    if (timedOut) {
      throw new ApiError(408, `the request body did not arrive within ${timeoutMs / 1000} s (--body-timeout)`, "invalid_request_error", null, "request_timeout", CLOSE);
    }
    try {
      return new TextDecoder("utf-8", { fatal: true }).decode(Buffer.concat(chunks));
    } catch {
      throw new ApiError(400, "request body is not valid UTF-8", "invalid_request_error", null, "invalid_json");
    }
  }

  private busy(): ApiError {
    const mib = (bytes: number) => (bytes / 2 ** 20).toFixed(0);
    return new ApiError(
      429, `the server is receiving too many request bodies at once (more than ${mib(this.limits.maxPendingBytes)} MiB, --max-pending-body-mb); retry later`,
      "rate_limit_error", null, "server_busy", { "Retry-After": "1", ...CLOSE },
    );
  }
}

function tooLarge(limit: number): ApiError {
  return new ApiError(413, `request body is larger than ${limit} bytes (--max-body-mb)`, "invalid_request_error", null, "request_too_large", CLOSE);
}
