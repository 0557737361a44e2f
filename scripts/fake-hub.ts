/**
 * A local stand-in for the Hugging Face hub (Bun.serve on 127.0.0.1, port 0) that answers the way the
 * real one does: GET /api/models/OWNER/REPO with "siblings"; HEAD/GET /OWNER/REPO/resolve/main/FILE with
 * X-Repo-Commit, X-Linked-Etag and X-Linked-Size and a 302 to a "CDN" URL; the CDN honours Range
 * (206 + Content-Range). Faults on demand: a connection dropped midway, corrupted bytes, Range ignored,
 * gated repositories (401 without the token), renamed repositories (relative redirect), slow transfers.
 * Lives in scripts/ because the README session script runs on it as well as the hub tests.
 */
import type { Server } from "bun";

export interface LoggedRequest {
  readonly method: string;
  readonly path: string;
  readonly range: string | null;
  readonly authorization: string | null;
}

export interface Faults {
  /** Drop the next `times` CDN responses after `afterBytes` bytes of the body (see Drop). */
  drop?: Drop;
  /** Serve the body with one byte flipped. */
  corrupt?: boolean;
  /** Answer Range requests with the whole file (200). */
  ignoreRange?: boolean;
  /** Answer the next Range request with 206 but the whole file (Content-Range from byte 0). */
  rangeFromZero?: boolean;
  /** Sleep this long between 16 KiB chunks. */
  chunkDelayMs?: number;
  /** Announce this many bytes more (or, negative, fewer) than the file has in X-Linked-Size. */
  announceExtraBytes?: number;
}

/**
 * A connection dropped midway: the body stops short of its Content-Length, which ends the
 * connection abruptly, and what the client has not read yet may be lost with it. So the stub closes
 * only once `delivered(bytes)` resolves: the test's word that the client holds the file's first
 * `bytes` bytes (a download writes each chunk to its .incomplete file before it reads the next).
 */
export interface Drop {
  afterBytes: number;
  times: number;
  delivered: (bytes: number) => Promise<void>;
}

const CHUNK = 16 * 1024;

export class FakeHub {
  readonly requests: LoggedRequest[] = [];
  readonly commit = "0123456789abcdef0123456789abcdef01234567";
  faults: Faults = {};
  private readonly files = new Map<string, Uint8Array>();
  private readonly blobs = new Map<string, Uint8Array>();
  private readonly gated = new Map<string, string>();
  private readonly renamed = new Map<string, string>();
  private readonly server: Server<undefined>;

  constructor() {
    this.server = Bun.serve({ hostname: "127.0.0.1", port: 0, fetch: (req) => this.handle(req) });
  }

  get endpoint(): string {
    return `http://127.0.0.1:${this.server.port}`;
  }

  /** Add repo/file with these bytes; returns its SHA-256 (the LFS etag). */
  addFile(repo: string, file: string, bytes: Uint8Array): string {
    const sha = sha256(bytes);
    this.files.set(`${repo}/${file}`, bytes);
    this.blobs.set(sha, bytes);
    return sha;
  }

  /** Requests to the repository need `Authorization: Bearer token`. */
  gate(repo: string, token: string): void {
    this.gated.set(repo, token);
  }

  /** `from` was renamed to `to`: its resolve URLs answer with a relative redirect. */
  rename(from: string, to: string): void {
    this.renamed.set(from, to);
  }

  stop(): void {
    this.server.stop(true);
  }

  private async handle(req: Request): Promise<Response> {
    const url = new URL(req.url);
    const path = decodeURIComponent(url.pathname);
    this.requests.push({ method: req.method, path, range: req.headers.get("range"), authorization: req.headers.get("authorization") });
    if (path.startsWith("/api/models/")) return this.apiModel(req, path.slice("/api/models/".length));
    if (path.startsWith("/cdn/")) return this.cdn(req, path.slice("/cdn/".length));
    const match = /^\/([^/]+\/[^/]+)\/resolve\/main\/(.+)$/.exec(path);
    if (match) return this.resolve(req, match[1]!, match[2]!);
    return new Response("not found", { status: 404 });
  }

  private denied(req: Request, repo: string): Response | null {
    const token = this.gated.get(repo);
    if (token === undefined || req.headers.get("authorization") === `Bearer ${token}`) return null;
    return new Response(null, { status: 401, headers: { "X-Error-Code": "GatedRepo" } });
  }

  private apiModel(req: Request, repo: string): Response {
    const denied = this.denied(req, repo);
    if (denied) return denied;
    const siblings = [...this.files.keys()].filter((k) => k.startsWith(`${repo}/`)).map((k) => ({ rfilename: k.slice(repo.length + 1) }));
    if (siblings.length === 0) return Response.json({ error: "Repository not found" }, { status: 404, headers: { "X-Error-Code": "RepoNotFound" } });
    return Response.json({ id: repo, sha: this.commit, siblings });
  }

  private resolve(req: Request, repo: string, file: string): Response {
    const newName = this.renamed.get(repo);
    if (newName !== undefined) return new Response(null, { status: 307, headers: { Location: `/${newName}/resolve/main/${file}` } });
    const denied = this.denied(req, repo);
    if (denied) return denied;
    const bytes = this.files.get(`${repo}/${file}`);
    if (bytes === undefined) return new Response(null, { status: 404, headers: { "X-Error-Code": "EntryNotFound" } });
    const sha = sha256(bytes);
    return new Response(null, {
      status: 302,
      headers: {
        Location: `${this.endpoint}/cdn/${sha}?signature=test`,
        "X-Repo-Commit": this.commit,
        "X-Linked-Etag": `"${sha}"`,
        "X-Linked-Size": String(bytes.length + (this.faults.announceExtraBytes ?? 0)),
        ETag: `"${sha.slice(0, 40)}"`,
      },
    });
  }

  private cdn(req: Request, sha: string): Response {
    const original = this.blobs.get(sha);
    if (original === undefined) return new Response(null, { status: 404 });
    const bytes = this.faults.corrupt ? flipped(original) : original;
    const range = /^bytes=(\d+)-$/.exec(req.headers.get("range") ?? "");
    const start = range && !this.faults.ignoreRange && !this.faults.rangeFromZero ? Number(range[1]) : 0;
    // As S3 and CloudFront: a range starting at or past the end is unsatisfiable, with the length.
    if (range && start > 0 && start >= bytes.length) return new Response(null, { status: 416, headers: { "Content-Range": `bytes */${bytes.length}` } });
    const headers: Record<string, string> = { "Content-Length": String(bytes.length - start), "Accept-Ranges": "bytes" };
    let status = start > 0 ? 206 : 200;
    if (start > 0) headers["Content-Range"] = `bytes ${start}-${bytes.length - 1}/${bytes.length}`;
    if (range && this.faults.rangeFromZero) {
      this.faults.rangeFromZero = false;
      headers["Content-Range"] = `bytes 0-${bytes.length - 1}/${bytes.length}`;
      status = 206;
    }
    if (req.method === "HEAD") return new Response(null, { status, headers });
    const drop = this.faults.drop;
    let cut: Cut | null = null;
    if (drop !== undefined && drop.times > 0) {
      cut = { at: start + drop.afterBytes, delivered: drop.delivered };
      drop.times--;
    }
    return new Response(bodyStream(bytes, start, cut, this.faults.chunkDelayMs ?? 0), { status, headers });
  }
}

/** Where a dropped body stops (a file offset), and the wait before its connection goes. */
interface Cut {
  at: number;
  delivered: (bytes: number) => Promise<void>;
}

/** The bytes from `start` in 16 KiB chunks; at a cut the stream stops short of the announced length. */
function bodyStream(bytes: Uint8Array, start: number, cut: Cut | null, delayMs: number): ReadableStream<Uint8Array> {
  let pos = start;
  return new ReadableStream({
    async pull(controller) {
      if (delayMs > 0) await Bun.sleep(delayMs);
      const end = Math.min(bytes.length, pos + CHUNK, cut?.at ?? Number.POSITIVE_INFINITY);
      if (pos >= end) {
        if (cut !== null && pos < bytes.length) await cut.delivered(pos);
        controller.close();
        return;
      }
      controller.enqueue(bytes.slice(pos, end));
      pos = end;
    },
  });
}

function flipped(bytes: Uint8Array): Uint8Array {
  const copy = bytes.slice();
  copy[copy.length >> 1]! ^= 0xff;
  return copy;
}

export function sha256(bytes: Uint8Array): string {
  return new Bun.CryptoHasher("sha256").update(bytes).digest("hex");
}
