/**
 * resolveModel: a model spec (path, hf:OWNER/REPO/FILE, hf:OWNER/REPO:QUANT, URL) to a local file path,
 * downloading into the hub cache when the file is not there yet. A file already in the cache at the
 * commit refs/main names is used without any request (works offline, and reuses what huggingface-cli
 * or llama.cpp downloaded, into the hub cache or into llama.cpp's own, llama-cpp-cache.ts).
 */
import { existsSync, mkdirSync } from "node:fs";
import { homedir } from "node:os";
import { basename, dirname, join } from "node:path";
import { InputError } from "../errors.ts";
import { RepoCache } from "./cache.ts";
import { downloadFile } from "./download.ts";
import { ModelSpecError } from "./hub-errors.ts";
import { fetchFileMetadata, hubOptionsFromEnv, listRepoFiles, normalizeEtag, request, requestHeaders, statusError, type HubOptions } from "./http.ts";
import { FileLock } from "./lock.ts";
import { llamaCppCachedFile, llamaCppCachedFiles } from "./llama-cpp-cache.ts";
import { parseModelSpec, pickQuantFile, type ModelSpec } from "./spec.ts";

export { parseModelSpec, type ModelSpec } from "./spec.ts";
export { hubOptionsFromEnv, type HubOptions } from "./http.ts";

/** The local path of the model `spec` names, downloading it first when needed. */
export async function resolveModel(spec: string, opts: HubOptions = hubOptionsFromEnv()): Promise<string> {
  return resolveParsed(parseModelSpec(spec), opts);
}

export async function resolveParsed(spec: ModelSpec, opts: HubOptions): Promise<string> {
  switch (spec.kind) {
    case "path":
      if (!existsSync(spec.path)) throw new InputError(`${spec.path}: model file not found (for a Hugging Face model write hf:OWNER/REPO/FILE.gguf)`);
      return spec.path;
    case "hf-file":
      return pullHubFile(opts, spec.repo, spec.file);
    case "hf-quant":
      return pullHubFile(opts, spec.repo, await quantFile(opts, spec.repo, spec.quant));
    case "url":
      return pullUrl(opts, spec.url);
  }
}

/**
 * The file of `repo` that `quant` picks: from the cached snapshot when that answers unambiguously (no
 * request), else from the hub's file list.
 */
export async function quantFile(opts: HubOptions, repo: string, quant: string | null): Promise<string> {
  const cached = [...new RepoCache(opts.cacheDir, repo).snapshotFiles(), ...(opts.llamaCppCacheDir === undefined ? [] : llamaCppCachedFiles(opts.llamaCppCacheDir, repo))];
  try {
    if (cached.length > 0) return pickQuantFile(repo, cached, quant);
  } catch (error) {
    if (!(error instanceof ModelSpecError)) throw error;
  }
  return pickQuantFile(repo, await listRepoFiles(opts, repo), quant);
}

/**
 * The cached copy of repo/file (the hub cache, else llama.cpp's own), downloading it into the hub
 * cache (HEAD for commit, etag and size; then the blob) when neither has it.
 */
export async function pullHubFile(opts: HubOptions, repo: string, file: string): Promise<string> {
  const cache = new RepoCache(opts.cacheDir, repo);
  const cached = cache.cachedFile(file) ?? (opts.llamaCppCacheDir === undefined ? null : llamaCppCachedFile(opts.llamaCppCacheDir, repo, file));
  if (cached !== null) return cached;
  const meta = await fetchFileMetadata(opts, repo, file);
  const blob = cache.blobPath(meta.etag);
  if (!existsSync(blob)) {
    mkdirSync(dirname(blob), { recursive: true });
    const lock = await FileLock.acquire(cache.lockPath(meta.etag), `${blob}.incomplete`);
    try {
      // Another process may have finished it while we waited for the lock.
      if (!existsSync(blob)) {
        await downloadFile(opts, { label: `${repo}/${file}`, kind: "hf", url: meta.location, dest: blob, size: meta.size, etag: meta.etag }, lock);
      }
    } finally {
      lock.release();
    }
  }
  const link = cache.linkSnapshot(meta.commit, file, meta.etag);
  cache.writeRef(meta.commit);
  return link;
}

/** Folder for files fetched by plain URL: $PAGELLM_CACHE or ~/.cache/pagellm, then downloads/. */
export function urlCacheDir(env: NodeJS.ProcessEnv = process.env): string {
  const base = env.PAGELLM_CACHE || join(env.XDG_CACHE_HOME || join(homedir(), ".cache"), "pagellm");
  return join(base, "downloads");
}

/** The folder one URL's download lives in: downloads/<first 16 hex of the URL's SHA-256>. */
export function urlDownloadDir(url: string): string {
  return join(urlCacheDir(), new Bun.CryptoHasher("sha256").update(url).digest("hex").slice(0, 16));
}

/**
 * A file by http(s) URL, kept at downloads/<hash of the URL>/<its name>. Hub-style headers, when the
 * server sends them, are verified the same way; otherwise the size from Content-Length is.
 */
export async function pullUrl(opts: HubOptions, url: string): Promise<string> {
  const name = basename(new URL(url).pathname) || "model.gguf";
  const dest = join(urlDownloadDir(url), decodeURIComponent(name));
  if (existsSync(dest)) return dest;
  const head = await request(url, url, { method: "HEAD", redirect: "follow", headers: requestHeaders(opts, url) }, opts.offline);
  if (!head.ok) throw statusError(opts, url, head, "url");
  const sizeHeader = head.headers.get("x-linked-size") ?? head.headers.get("content-length");
  const size = sizeHeader === null ? null : Number(sizeHeader);
  // A plain server's ETag is opaque (an MD5, a version stamp): only the hub's X-Linked-Etag is a content hash.
  const etag = normalizeEtag(head.headers.get("x-linked-etag"));
  mkdirSync(dirname(dest), { recursive: true });
  const lock = await FileLock.acquire(`${dest}.lock`, `${dest}.incomplete`);
  try {
    if (!existsSync(dest)) {
      await downloadFile(opts, { label: url, kind: "url", url: head.url || url, dest, size: Number.isSafeInteger(size) ? size : null, etag }, lock);
    }
  } finally {
    lock.release();
  }
  return dest;
}

