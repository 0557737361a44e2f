/**
 * HTTP/1.1 over a raw TCP socket on 127.0.0.1, for what fetch cannot do: a body sent in pieces or
 * never finished, several requests in one write (pipelining), bytes that are not UTF-8, a
 * disconnect at a chosen point. The answers are parsed back into responses.
 */
import { connect } from "node:net";

export interface RawResponse {
  status: number;
  /** Header names in lower case. */
  headers: Record<string, string>;
  body: string;
}

export interface RawExchange {
  /** The complete responses received, in order. */
  responses: RawResponse[];
  /** Whether the server closed the connection. */
  closed: boolean;
  /** Bytes received (complete responses or not). */
  bytes: number;
}

export interface RawOptions {
  /** Pause between two parts, ms (0: every part in one write). */
  gapMs?: number;
  /** Stop once this many responses are complete (default: wait for the server to close). */
  responses?: number;
  /** Close our side after writing the parts (a client that goes away). */
  hangUpAfterWrite?: boolean;
  /** Give up after this long, ms: a deadline for a broken server, never the expected path. */
  deadlineMs: number;
  /** The requests are HEAD requests: their responses have no body, whatever Content-Length says. */
  head?: boolean;
  /** Aborting it closes the connection (a client that goes away while it waits). */
  signal?: AbortSignal;
  /** Close our side once this many bytes of answer have come (a client that leaves part way). */
  bytes?: number;
}

/** Writes `parts` to a new connection to 127.0.0.1:port and collects the answers (see RawOptions). */
export function rawExchange(port: number, parts: readonly (string | Uint8Array)[], opts: RawOptions): Promise<RawExchange> {
  return new Promise((resolve) => {
    const socket = connect(port, "127.0.0.1");
    const received: Buffer[] = [];
    let closed = false;
    let finished = false;
    const finish = () => {
      if (finished) return;
      finished = true;
      clearTimeout(deadline);
      socket.destroy();
      const bytes = Buffer.concat(received);
      resolve({ responses: parseResponses(bytes, opts.head), closed, bytes: bytes.length });
    };
    const deadline = setTimeout(finish, opts.deadlineMs);
    opts.signal?.addEventListener("abort", finish);
    socket.on("data", (chunk: Buffer) => {
      received.push(chunk);
      if (opts.bytes !== undefined && received.reduce((n, c) => n + c.length, 0) >= opts.bytes) return finish();
      if (opts.responses !== undefined && parseResponses(Buffer.concat(received), opts.head).length >= opts.responses) finish();
    });
    socket.on("close", () => {
      closed = true;
      finish();
    });
    socket.on("error", () => undefined);
    socket.on("connect", async () => {
      for (const part of parts) {
        if (finished || socket.destroyed) return;
        socket.write(part);
        if ((opts.gapMs ?? 0) > 0) await Bun.sleep(opts.gapMs!);
      }
      if (opts.hangUpAfterWrite) finish();
    });
  });
}

/** A request's bytes: method, path, headers (Host and, for a body, Content-Length unless given) and body. */
export function rawRequest(method: string, path: string, body: string | Uint8Array | null = null, headers: Record<string, string> = {}): Buffer {
  const bytes = body === null ? null : typeof body === "string" ? Buffer.from(body, "utf8") : Buffer.from(body);
  const all: Record<string, string> = { Host: "127.0.0.1", ...headers };
  if (bytes !== null && !Object.keys(all).some((k) => k.toLowerCase() === "content-length")) all["Content-Length"] = String(bytes.length);
  const head = `${method} ${path} HTTP/1.1\r\n${Object.entries(all).map(([k, v]) => `${k}: ${v}\r\n`).join("")}\r\n`;
  return bytes === null ? Buffer.from(head, "latin1") : Buffer.concat([Buffer.from(head, "latin1"), bytes]);
}

/** The complete HTTP/1.1 responses at the start of `bytes` (Content-Length or chunked bodies; none for HEAD). */
export function parseResponses(bytes: Buffer, head = false): RawResponse[] {
  const out: RawResponse[] = [];
  let at = 0;
  while (at < bytes.length) {
    const headEnd = bytes.indexOf("\r\n\r\n", at, "latin1");
    if (headEnd < 0) break;
    const lines = bytes.subarray(at, headEnd).toString("latin1").split("\r\n");
    const status = Number(/^HTTP\/1\.[01] (\d{3})/.exec(lines[0] ?? "")?.[1]);
    const headers: Record<string, string> = {};
    for (const line of lines.slice(1)) {
      const colon = line.indexOf(":");
      if (colon > 0) headers[line.slice(0, colon).trim().toLowerCase()] = line.slice(colon + 1).trim();
    }
    let bodyStart = headEnd + 4;
    let body: Buffer;
    if (head) {
      body = Buffer.alloc(0);
    } else if (headers["transfer-encoding"]?.toLowerCase() === "chunked") {
      const chunks: Buffer[] = [];
      let complete = false;
      for (;;) {
        const sizeEnd = bytes.indexOf("\r\n", bodyStart, "latin1");
        if (sizeEnd < 0) break;
        const size = parseInt(bytes.subarray(bodyStart, sizeEnd).toString("latin1"), 16);
        if (!Number.isFinite(size) || sizeEnd + 2 + size + 2 > bytes.length) break;
        chunks.push(bytes.subarray(sizeEnd + 2, sizeEnd + 2 + size));
        bodyStart = sizeEnd + 2 + size + 2;
        if (size === 0) {
          complete = true;
          break;
        }
      }
      if (!complete) break;
      body = Buffer.concat(chunks);
    } else {
      const length = Number(headers["content-length"] ?? "0");
      if (bodyStart + length > bytes.length) break;
      body = bytes.subarray(bodyStart, bodyStart + length);
      bodyStart += length;
    }
    out.push({ status, headers, body: body.toString("utf8") });
    at = bodyStart;
  }
  return out;
}
