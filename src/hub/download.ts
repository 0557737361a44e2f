/**
 * Downloading one file into its final place safely.
 *
 * Invariants:
 *  - The bytes go to `<final>.incomplete`; only a file whose size and hash match what the server announced
 *    is renamed to the final name, so a partial or corrupt file never sits there.
 *  - A broken transfer resumes from the `.incomplete` file with a Range request (in this process, a few
 *    times, and in a later run); a server that ignores the Range makes us start over, never splice.
 *  - Callers hold a FileLock for the final name, so two processes never write one `.incomplete` file.
 */
import { closeSync, existsSync, ftruncateSync, openSync, readSync, renameSync, rmSync, statSync, writeSync } from "node:fs";
import { ChecksumError, DownloadError } from "./hub-errors.ts";
import { errorText, requestHeaders, statusError, type HubOptions } from "./http.ts";
import type { FileLock } from "./lock.ts";
import { DownloadProgress } from "./progress.ts";

export interface DownloadTarget {
  /** For messages: "owner/repo/file" or the URL. */
  readonly label: string;
  readonly kind: "hf" | "url";
  /** URL to GET (the CDN location after the hub's redirect). */
  readonly url: string;
  readonly dest: string;
  /** Expected bytes; null when the server did not say. */
  readonly size: number | null;
  /** Expected SHA-256 (64 hex) or git blob SHA-1 (40 hex); null when unknown. */
  readonly etag: string | null;
}

const MAX_ATTEMPTS = 5;
const RETRY_DELAY_MS = 200;
const READ_CHUNK = 1 << 20;

/** A transfer that broke off and may be resumed (network error, early end of the body). */
class TransferInterrupted extends Error {}

export async function downloadFile(opts: HubOptions, target: DownloadTarget, lock: FileLock | null): Promise<void> {
  const partial = `${target.dest}.incomplete`;
  for (let attempt = 1; ; attempt++) {
    try {
      await transfer(opts, target, partial, lock);
      break;
    } catch (error) {
      if (!(error instanceof TransferInterrupted)) throw error;
      if (attempt >= MAX_ATTEMPTS) {
        throw new DownloadError(target.label, `download broke off ${attempt} times (${error.message}); run the command again to resume`);
      }
      await Bun.sleep(RETRY_DELAY_MS * attempt);
    }
  }
  verify(target, partial);
  renameSync(partial, target.dest);
}

/** One GET from where `partial` ends to the end of the file. */
async function transfer(opts: HubOptions, target: DownloadTarget, partial: string, lock: FileLock | null): Promise<void> {
  let have = existsSync(partial) ? statSync(partial).size : 0;
  if (target.size !== null && have > target.size) have = 0;
  if (target.size !== null && have === target.size) return;
  const headers = requestHeaders(opts, target.url, have > 0 ? { Range: `bytes=${have}-` } : {});
  let response: Response;
  try {
    response = await fetch(target.url, { headers, redirect: "follow" });
  } catch (error) {
    throw new TransferInterrupted(`network error: ${errorText(error)}`);
  }
  if (response.status === 416 && have > 0) {
    // "bytes */TOTAL": a file of exactly what we have is complete on the server but not the size
    // it announced (retrying cannot help); otherwise our partial file is not a prefix of this file
    // any more: start over.
    rmSync(partial, { force: true });
    const total = /^bytes \*\/(\d+)$/.exec(response.headers.get("content-range") ?? "");
    if (total !== null && Number(total[1]) === have && target.size !== null) throw sizeMismatch(target, have);
    throw new TransferInterrupted("server refused the resume range");
  }
  if (!response.ok) throw statusError(opts, target.label, response, target.kind);
  if (response.status === 206 && rangeStart(response) !== have) {
    // Bytes from somewhere else than where our file ends: never splice them in.
    await response.body?.cancel();
    rmSync(partial, { force: true });
    throw new TransferInterrupted(`server answered the range from byte ${have} with ${response.headers.get("content-range")}`);
  }
  if (response.status !== 206) have = 0; // a 200 is the whole file: start over
  const fd = openSync(partial, have === 0 ? "w" : "r+");
  // A body that disagrees with the announced size (more bytes, or a shorter whole file) leaves nothing to resume from.
  let discard = false;
  try {
    ftruncateSync(fd, have);
    await writeBody(opts, target, response, fd, have, lock);
  } catch (error) {
    discard = error instanceof DownloadError;
    throw error;
  } finally {
    closeSync(fd);
    if (discard) rmSync(partial, { force: true });
  }
}

async function writeBody(opts: HubOptions, target: DownloadTarget, response: Response, fd: number, start: number, lock: FileLock | null): Promise<void> {
  const total = target.size ?? (Number(response.headers.get("content-length") ?? Number.NaN) + start);
  const progress = new DownloadProgress(target.label.split("/").pop()!, Number.isFinite(total) ? total : 0, start, opts.progress);
  let written = start;
  let lastTouch = performance.now();
  const body = response.body;
  if (body === null) throw new TransferInterrupted("empty response body");
  const reader = body.getReader();
  try {
    for (;;) {
      let chunk: Awaited<ReturnType<typeof reader.read>>;
      try {
        chunk = await reader.read();
      } catch (error) {
        throw new TransferInterrupted(`connection lost after ${written} bytes: ${errorText(error)}`);
      }
      if (chunk.done) break;
      writeAll(fd, chunk.value, written);
      written += chunk.value.length;
      if (target.size !== null && written > target.size) {
        throw new DownloadError(target.label, `the server sent more than the announced ${target.size} bytes; try again later`);
      }
      progress.update(written);
      if (lock !== null && performance.now() - lastTouch > 1000) {
        lock.touch();
        lastTouch = performance.now();
      }
    }
  } finally {
    progress.end();
    reader.releaseLock();
  }
  if (target.size !== null && written < target.size) {
    // A body that ended where its Content-Length said is the server's whole file, shorter than it
    // announced: no retry or resume can fix that. Without a Content-Length it is a broken transfer.
    const length = Number(response.headers.get("content-length") ?? Number.NaN);
    if (written - start === length) throw sizeMismatch(target, written);
    throw new TransferInterrupted(`connection closed after ${written} of ${target.size} bytes`);
  }
}

/** The server's file is `got` bytes, not the size it announced (the caller removes the partial file). */
function sizeMismatch(target: DownloadTarget, got: number): DownloadError {
  return new DownloadError(target.label, `the server's file is ${got} bytes but it announced ${target.size}; nothing was kept, try again later or report it to the host`);
}

function writeAll(fd: number, bytes: Uint8Array, position: number): void {
  let off = 0;
  while (off < bytes.length) off += writeSync(fd, bytes, off, bytes.length - off, position + off);
}

/** Start offset of a 206 answer's Content-Range ("bytes START-END/TOTAL"), or -1. */
function rangeStart(response: Response): number {
  const match = /^bytes (\d+)-/.exec(response.headers.get("content-range") ?? "");
  return match ? Number(match[1]) : -1;
}

/** Size and hash of the finished partial file against the announced ones; a mismatch deletes it. */
function verify(target: DownloadTarget, partial: string): void {
  const size = statSync(partial).size;
  if (target.size !== null && size !== target.size) {
    rmSync(partial, { force: true });
    throw new ChecksumError(target.label, `downloaded ${size} bytes, the server announced ${target.size}; discarded, run the command again`);
  }
  const etag = target.etag?.toLowerCase() ?? null;
  const algorithm = etag === null ? null : /^[0-9a-f]{64}$/.test(etag) ? "sha256" : /^[0-9a-f]{40}$/.test(etag) ? "sha1" : null;
  if (algorithm === null) return;
  const digest = hashFile(partial, algorithm, size);
  if (digest !== etag) {
    rmSync(partial, { force: true });
    throw new ChecksumError(target.label, `${algorithm === "sha256" ? "SHA-256" : "git SHA-1"} mismatch (got ${digest}, expected ${etag}); the download was corrupted and discarded, run the command again`);
  }
}

/**
 * SHA-256 of the file, or for a 40-hex git ETag the git blob SHA-1 (sha1("blob <size>\0" + bytes)), which
 * is what the hub announces for files that are not in LFS.
 */
export function hashFile(path: string, algorithm: "sha256" | "sha1", size: number): string {
  const hasher = new Bun.CryptoHasher(algorithm);
  if (algorithm === "sha1") hasher.update(`blob ${size}\0`);
  const fd = openSync(path, "r");
  try {
    const buffer = new Uint8Array(READ_CHUNK);
    for (let pos = 0; ; ) {
      const got = readSync(fd, buffer, 0, buffer.length, pos);
      if (got === 0) break;
      hasher.update(buffer.subarray(0, got));
      pos += got;
    }
  } finally {
    closeSync(fd);
  }
  return hasher.digest("hex");
}
