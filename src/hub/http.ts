/**
 * HTTP conventions of the Hugging Face hub: endpoint and token from the environment, the resolve/main
 * URL of a file, the metadata HEAD with redirects disabled, and status codes turned into DownloadErrors
 * that say what to do.
 */
import { DownloadError } from "./hub-errors.ts";
import { hubCacheDir } from "./cache.ts";
import { llamaCppCacheDir } from "./llama-cpp-cache.ts";

export interface HubOptions {
  /** Base URL, no trailing slash: HF_ENDPOINT or https://huggingface.co. */
  readonly endpoint: string;
  /** HF_TOKEN, sent as a Bearer token to the endpoint's host only. */
  readonly token: string | undefined;
  readonly cacheDir: string;
  /** llama.cpp's download cache, read (never written) for files its -hf option fetched (llama-cpp-cache.ts); absent: not read. */
  readonly llamaCppCacheDir?: string;
  /** Draw a progress bar (defaults to: stderr is a terminal). */
  readonly progress: boolean;
  /** HF_HUB_OFFLINE=1: use the cache only, never send a request. */
  readonly offline?: boolean;
}

export function hubOptionsFromEnv(env: NodeJS.ProcessEnv = process.env): HubOptions {
  return {
    endpoint: (env.HF_ENDPOINT || "https://huggingface.co").replace(/\/+$/, ""),
    token: env.HF_TOKEN || env.HUGGING_FACE_HUB_TOKEN || undefined,
    cacheDir: hubCacheDir(env),
    llamaCppCacheDir: llamaCppCacheDir(env),
    progress: process.stderr.isTTY === true,
    offline: ["1", "true", "yes", "on"].includes((env.HF_HUB_OFFLINE ?? "").toLowerCase()),
  };
}

/** `{endpoint}/OWNER/REPO/resolve/main/FILE`, each path segment URL-encoded. */
export function resolveUrl(opts: HubOptions, repo: string, file: string, revision = "main"): string {
  return `${opts.endpoint}/${repo}/resolve/${encodeURIComponent(revision)}/${file.split("/").map(encodeURIComponent).join("/")}`;
}

/** Request headers for `url`: identity encoding (sizes and hashes are of the raw bytes), and the token for the hub's own host. */
export function requestHeaders(opts: HubOptions, url: string, extra: Record<string, string> = {}): Record<string, string> {
  const headers: Record<string, string> = { "Accept-Encoding": "identity", "User-Agent": "pagellm", ...extra };
  if (opts.token !== undefined && new URL(url).host === new URL(opts.endpoint).host) headers.Authorization = `Bearer ${opts.token}`;
  return headers;
}

/** What the hub announces for one file. */
export interface FileMetadata {
  /** The commit main points at (X-Repo-Commit). */
  readonly commit: string;
  /** The LFS SHA-256 (X-Linked-Etag) or, for a small git file, its git blob SHA-1 (ETag); quotes removed. */
  readonly etag: string;
  /** Bytes (X-Linked-Size or Content-Length). */
  readonly size: number;
  /** Where the bytes are: the redirect target (the CDN) or the resolve URL itself. */
  readonly location: string;
}

const MAX_RELATIVE_REDIRECTS = 5;

/**
 * HEAD the resolve URL with redirects disabled, as huggingface_hub does: the hub's answer itself carries
 * X-Repo-Commit, X-Linked-Etag and X-Linked-Size, and its Location is the CDN URL to download from.
 * Relative redirects (a renamed repository) are followed.
 */
export async function fetchFileMetadata(opts: HubOptions, repo: string, file: string): Promise<FileMetadata> {
  const target = `${repo}/${file}`;
  let url = resolveUrl(opts, repo, file);
  for (let hop = 0; ; hop++) {
    const response = await request(target, url, { method: "HEAD", redirect: "manual", headers: requestHeaders(opts, url) }, opts.offline);
    const location = response.headers.get("location");
    const isRedirect = response.status >= 300 && response.status < 400 && location !== null;
    if (isRedirect && !/^https?:\/\//i.test(location) && hop < MAX_RELATIVE_REDIRECTS) {
      url = new URL(location, url).toString();
      continue;
    }
    if (!isRedirect && !response.ok) throw statusError(opts, target, response, "hf");
    const commit = response.headers.get("x-repo-commit");
    const etag = normalizeEtag(response.headers.get("x-linked-etag") ?? response.headers.get("etag"));
    const size = Number(response.headers.get("x-linked-size") ?? response.headers.get("content-length") ?? Number.NaN);
    if (commit === null || !/^[0-9a-f]{40}$/.test(commit)) throw new DownloadError(target, `the server sent no X-Repo-Commit header; is HF_ENDPOINT (${opts.endpoint}) a Hugging Face hub?`);
    if (etag === null) throw new DownloadError(target, "the server sent no ETag for the file; cannot verify it");
    if (!Number.isSafeInteger(size) || size < 0) throw new DownloadError(target, "the server sent no file size");
    return { commit, etag, size, location: isRedirect ? new URL(location, url).toString() : url };
  }
}

/** Names of the files in a repository: GET {endpoint}/api/models/OWNER/REPO (its "siblings"). */
export async function listRepoFiles(opts: HubOptions, repo: string): Promise<string[]> {
  const url = `${opts.endpoint}/api/models/${repo}`;
  const response = await request(repo, url, { headers: requestHeaders(opts, url) }, opts.offline);
  if (!response.ok) throw statusError(opts, repo, response, "hf");
  const body = (await response.json().catch(() => null)) as { siblings?: { rfilename?: unknown }[] } | null;
  if (body === null || !Array.isArray(body.siblings)) throw new DownloadError(repo, `${url} did not answer with a file list`);
  return body.siblings.flatMap((s) => (typeof s.rfilename === "string" ? [s.rfilename] : []));
}

/** fetch, with network failures turned into a DownloadError naming the target. */
export async function request(target: string, url: string, init: RequestInit, offline = false): Promise<Response> {
  if (offline) throw new DownloadError(target, "not in the cache and HF_HUB_OFFLINE is set; unset it to download");
  try {
    return await fetch(url, init);
  } catch (error) {
    throw new DownloadError(target, `network error reaching ${new URL(url).host}: ${errorText(error)} (check the connection or HF_ENDPOINT)`);
  }
}

export function errorText(error: unknown): string {
  return (error instanceof Error ? error.message : String(error)).split("\n")[0]!;
}

/** A non-success status as a DownloadError that says what to do about it. */
export function statusError(opts: HubOptions, target: string, response: Response, kind: "hf" | "url"): DownloadError {
  const status = response.status;
  const code = response.headers.get("x-error-code");
  if (kind === "hf" && status === 401) {
    return new DownloadError(target, opts.token === undefined
      ? "401 Unauthorized: the repository is gated, private or does not exist; set HF_TOKEN to a token that can read it"
      : "401 Unauthorized: HF_TOKEN was refused; check the token, or whether the repository exists");
  }
  if (kind === "hf" && status === 403) {
    return new DownloadError(target, `403 Forbidden: access to this gated repository is not granted to your token; accept its terms at ${opts.endpoint}/${target.split("/").slice(0, 2).join("/")}`);
  }
  if (status === 404) {
    if (kind === "url") return new DownloadError(target, "404 Not Found: check the URL");
    return new DownloadError(target, code === "EntryNotFound"
      ? "404 Not Found: the repository has no such file; `pagellm pull hf:OWNER/REPO:QUANT` picks one by quantization"
      : "404 Not Found: no such repository or file; check the name");
  }
  return new DownloadError(target, `HTTP ${status} ${response.statusText}`.trim() + (status >= 500 ? " (server error, try again later)" : ""));
}

/** ETag without W/ and quotes. */
export function normalizeEtag(etag: string | null): string | null {
  if (etag === null) return null;
  const clean = etag.replace(/^W\//, "").replace(/^"|"$/g, "");
  return clean === "" ? null : clean;
}
