/**
 * Model fetching against a local fake hub (scripts/fake-hub.ts): the real download code, the
 * huggingface_hub cache layout, resume, verification, errors, locking, and the pull/models/rm/info
 * commands. Nothing here reaches the internet.
 */
import { afterAll, beforeEach, describe, expect, spyOn, test } from "bun:test";
import { existsSync, lstatSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, readlinkSync, rmSync, statSync, symlinkSync, utimesSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { RepoCache, hubCacheDir } from "../src/hub/cache.ts";
import { ChecksumError, DownloadError, ModelSpecError } from "../src/hub/hub-errors.ts";
import type { HubOptions } from "../src/hub/http.ts";
import { pullUrl, resolveModel } from "../src/hub/resolve.ts";
import { parseModelSpec, pickQuantFile, quantOfName } from "../src/hub/spec.ts";
import { formatBytes, progressLine } from "../src/hub/progress.ts";
import { runPagellmAsync } from "./helpers/cli.ts";
import { FakeHub, sha256 } from "../scripts/fake-hub.ts";
import { PROCESS_TEST_MS } from "./helpers/limits.ts";

const hub = new FakeHub();
const tempDirs: string[] = [];
afterAll(() => {
  hub.stop();
  for (const dir of tempDirs) rmSync(dir, { recursive: true, force: true });
});

function randomBytes(n: number, seed: number): Uint8Array {
  const out = new Uint8Array(n);
  let x = seed >>> 0 || 1;
  for (let i = 0; i < n; i++) {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    out[i] = x & 0xff;
  }
  return out;
}

const REPO = "owner/tiny-GGUF";
const FILE = "tiny-Q8_0.gguf";
const BYTES = randomBytes(300_000, 7);
const SHA = hub.addFile(REPO, FILE, BYTES);
hub.addFile(REPO, "tiny-Q4_K_M.gguf", randomBytes(1000, 8));
hub.addFile(REPO, "tiny-Q4_K_S.gguf", randomBytes(1000, 9));
hub.addFile(REPO, "README.md", new TextEncoder().encode("# tiny\n"));
hub.addFile("owner/twins", "a-Q8_0.gguf", randomBytes(100, 1));
hub.addFile("owner/twins", "b-Q8_0.gguf", randomBytes(100, 2));
hub.addFile("owner/gated", FILE, BYTES);
hub.gate("owner/gated", "secret-token");
hub.rename("owner/old-name", REPO);

let cacheDir = "";
let opts: HubOptions;
beforeEach(() => {
  cacheDir = mkdtempSync(join(tmpdir(), "pagellm-hub-"));
  tempDirs.push(cacheDir);
  opts = { endpoint: hub.endpoint, token: undefined, cacheDir, progress: false };
  hub.faults = {};
  hub.requests.length = 0;
});

/** Resolves once the file at `path` holds at least `bytes` bytes (what a download has written); fails after a minute (a hang). */
async function fileReaches(path: string, bytes: number): Promise<void> {
  const size = () => (existsSync(path) ? statSync(path).size : 0);
  for (let waited = 0; size() < bytes; waited += 2) {
    if (waited > 60_000) throw new Error(`${path} has ${size()} bytes, never ${bytes}`);
    await Bun.sleep(2);
  }
}

function expectCachedLayout(repo: string, file: string, sha: string, bytes: Uint8Array): void {
  const cache = new RepoCache(cacheDir, repo);
  const link = cache.snapshotPath(hub.commit, file);
  expect(lstatSync(link).isSymbolicLink()).toBe(true);
  expect(readlinkSync(link)).toBe(`../../blobs/${sha}`);
  expect(readFileSync(join(cache.dir, "refs", "main"), "utf8")).toBe(hub.commit);
  expect(sha256(readFileSync(link))).toBe(sha256(bytes));
  expect(readdirSync(join(cache.dir, "blobs"))).toEqual([sha]);
  expect(readdirSync(cache.lockDir)).toEqual([]);
}

describe("model specs", () => {
  test("parse paths, files, quants and URLs", () => {
    expect(parseModelSpec("models/x.gguf")).toEqual({ kind: "path", path: "models/x.gguf" });
    expect(parseModelSpec("hf:a/b/sub/c.gguf")).toEqual({ kind: "hf-file", repo: "a/b", file: "sub/c.gguf" });
    expect(parseModelSpec("hf:bartowski/SmolLM2-135M-Instruct-GGUF:Q4_K_M")).toEqual({ kind: "hf-quant", repo: "bartowski/SmolLM2-135M-Instruct-GGUF", quant: "Q4_K_M" });
    expect(parseModelSpec("hf:a/b")).toEqual({ kind: "hf-quant", repo: "a/b", quant: null });
    expect(parseModelSpec("https://x.org/m.gguf")).toEqual({ kind: "url", url: "https://x.org/m.gguf" });
    expect(() => parseModelSpec("hf:nope")).toThrow(ModelSpecError);
    expect(() => parseModelSpec("hf:a/b/../c.gguf")).toThrow(ModelSpecError);
  });

  test("a quant matches a whole word of the file name, case-insensitively", () => {
    const files = ["m-Q4_K_M.gguf", "m-Q4_K.gguf", "m.Q8_0.gguf", "m-f16.gguf", "mmproj-m-f16.gguf", "m-Q2_K-00001-of-00002.gguf", "m-Q2_K-00002-of-00002.gguf", "README.md"];
    expect(pickQuantFile("o/r", files, "q4_k_m")).toBe("m-Q4_K_M.gguf");
    expect(pickQuantFile("o/r", files, "Q4_K")).toBe("m-Q4_K.gguf");
    expect(pickQuantFile("o/r", files, "Q8_0")).toBe("m.Q8_0.gguf");
    expect(pickQuantFile("o/r", files, "F16")).toBe("m-f16.gguf");
    expect(() => pickQuantFile("o/r", files, "Q5_K_M")).toThrow("no Q5_K_M GGUF file; it has: Q4_K_M, Q4_K, Q8_0, F16, Q2_K");
    expect(() => pickQuantFile("o/r", files, null)).toThrow("files match");
    expect(pickQuantFile("o/r", ["only.gguf", "x.txt"], null)).toBe("only.gguf");
    expect(() => pickQuantFile("o/r", files, "Q2_K")).toThrow("m-Q2_K-00001-of-00002.gguf is the first of 2 parts of a split GGUF");
    expect(quantOfName("SmolLM2-135M-Instruct-Q4_K_M.gguf")).toBe("Q4_K_M");
    expect(quantOfName("model-IQ2_XXS.gguf")).toBe("IQ2_XXS");
  });

  test("the progress line shows size, percentage, speed and ETA", () => {
    expect(progressLine("m.gguf", 50 * 2 ** 20, 200 * 2 ** 20, 40 * 2 ** 20, 4)).toBe(
      "m.gguf  [=====               ]  25%  50.0 MiB/200.0 MiB  10.0 MiB/s  ETA 0:15",
    );
    expect(progressLine("m.gguf", 0, 2 ** 30, 0, 0)).toEndWith("0 B/1.0 GiB  0 B/s  ETA --:--");
    expect(formatBytes(1536)).toBe("1.5 KiB");
  });

  test("the cache folder follows HF_HUB_CACHE, then HF_HOME/hub", () => {
    expect(hubCacheDir({ HF_HUB_CACHE: "/a", HF_HOME: "/b" })).toBe("/a");
    expect(hubCacheDir({ HF_HOME: "/b" })).toBe("/b/hub");
    expect(hubCacheDir({ XDG_CACHE_HOME: "/c" })).toBe("/c/huggingface/hub");
  });
});

describe("downloads from the hub", () => {
  test("HEAD without redirects, then the CDN; stored in the huggingface_hub layout", async () => {
    const path = await resolveModel(`hf:${REPO}/${FILE}`, opts);
    expect(path).toBe(new RepoCache(cacheDir, REPO).snapshotPath(hub.commit, FILE));
    expectCachedLayout(REPO, FILE, SHA, BYTES);
    expect(hub.requests.map((r) => `${r.method} ${r.path}`)).toEqual([`HEAD /${REPO}/resolve/main/${FILE}`, `GET /cdn/${SHA}`]);
    // Second time: straight from the cache, no request at all.
    expect(await resolveModel(`hf:${REPO}/${FILE}`, opts)).toBe(path);
    expect(hub.requests.length).toBe(2);
  }, PROCESS_TEST_MS);

  test("a cache populated by huggingface_hub is used without any request", async () => {
    const cache = new RepoCache(cacheDir, "someone/elsewhere");
    const commit = "fedcba9876543210fedcba9876543210fedcba98";
    mkdirSync(join(cache.dir, "blobs"), { recursive: true });
    mkdirSync(join(cache.dir, "refs"), { recursive: true });
    mkdirSync(join(cache.dir, "snapshots", commit), { recursive: true });
    writeFileSync(join(cache.dir, "blobs", SHA), BYTES);
    writeFileSync(join(cache.dir, "refs", "main"), commit);
    symlinkSync(`../../blobs/${SHA}`, join(cache.dir, "snapshots", commit, "model-Q8_0.gguf"));
    const expected = join(cache.dir, "snapshots", commit, "model-Q8_0.gguf");
    expect(await resolveModel("hf:someone/elsewhere/model-Q8_0.gguf", opts)).toBe(expected);
    expect(await resolveModel("hf:someone/elsewhere:q8_0", opts)).toBe(expected);
    expect(hub.requests).toEqual([]);
  }, PROCESS_TEST_MS);

  test("a file llama.cpp's -hf already downloaded into its own cache is used, by name or quantization, without any request", async () => {
    const llamaCache = mkdtempSync(join(tmpdir(), "pagellm-llama-cache-"));
    tempDirs.push(llamaCache);
    const path = join(llamaCache, "someone_elsewhere_model-Q8_0.gguf");
    writeFileSync(path, BYTES);
    writeFileSync(`${path}.etag`, SHA);
    writeFileSync(join(llamaCache, "someone_elsewhere_model-Q4_K_M.gguf.downloadInProgress"), BYTES.subarray(0, 10));
    const withLlama = { ...opts, llamaCppCacheDir: llamaCache, offline: true };
    expect(await resolveModel("hf:someone/elsewhere/model-Q8_0.gguf", withLlama)).toBe(path);
    expect(await resolveModel("hf:someone/elsewhere:Q8_0", withLlama)).toBe(path);
    // A download llama.cpp has not finished is not a file of the cache.
    await expect(resolveModel("hf:someone/elsewhere:Q4_K_M", withLlama)).rejects.toThrow("not in the cache and HF_HUB_OFFLINE is set");
    expect(hub.requests).toEqual([]);
  }, PROCESS_TEST_MS);

  test("HF_HUB_OFFLINE: cached files resolve, anything else fails without a request", async () => {
    await resolveModel(`hf:${REPO}/${FILE}`, opts);
    hub.requests.length = 0;
    const offline = { ...opts, offline: true };
    expect(await resolveModel(`hf:${REPO}:Q8_0`, offline)).toEndWith(FILE);
    await expect(resolveModel(`hf:${REPO}/tiny-Q4_K_M.gguf`, offline)).rejects.toThrow(`${REPO}/tiny-Q4_K_M.gguf: not in the cache and HF_HUB_OFFLINE is set`);
    await expect(resolveModel(`hf:${REPO}:Q4_K_S`, offline)).rejects.toThrow(`${REPO}: not in the cache and HF_HUB_OFFLINE is set`);
    expect(hub.requests).toEqual([]);
  }, PROCESS_TEST_MS);

  test("hf:OWNER/REPO:QUANT picks the file from the repository listing", async () => {
    const path = await resolveModel(`hf:${REPO}:q8_0`, opts);
    expect(path.endsWith(FILE)).toBe(true);
    expect(hub.requests[0]!.path).toBe(`/api/models/${REPO}`);
    await expect(resolveModel(`hf:${REPO}:Q5_K_M`, opts)).rejects.toThrow(`hf:${REPO}: no Q5_K_M GGUF file; it has: Q8_0, Q4_K_M, Q4_K_S`);
    await expect(resolveModel("hf:owner/twins:Q8_0", opts)).rejects.toThrow("2 files match (a-Q8_0.gguf, b-Q8_0.gguf)");
  }, PROCESS_TEST_MS);

  test("a connection dropped midway resumes with a Range request", async () => {
    const incomplete = `${new RepoCache(cacheDir, REPO).blobPath(SHA)}.incomplete`;
    hub.faults = { drop: { afterBytes: 100_000, times: 2, delivered: (bytes) => fileReaches(incomplete, bytes) } };
    await resolveModel(`hf:${REPO}/${FILE}`, opts);
    expectCachedLayout(REPO, FILE, SHA, BYTES);
    const gets = hub.requests.filter((r) => r.path.startsWith("/cdn/"));
    expect(gets.map((r) => r.range)).toEqual([null, "bytes=100000-", "bytes=200000-"]);
  }, PROCESS_TEST_MS);

  test("a download left .incomplete by an earlier run resumes from where it stopped", async () => {
    const cache = new RepoCache(cacheDir, REPO);
    mkdirSync(join(cache.dir, "blobs"), { recursive: true });
    writeFileSync(`${cache.blobPath(SHA)}.incomplete`, BYTES.subarray(0, 123_456));
    await resolveModel(`hf:${REPO}/${FILE}`, opts);
    expectCachedLayout(REPO, FILE, SHA, BYTES);
    expect(hub.requests.filter((r) => r.path.startsWith("/cdn/")).map((r) => r.range)).toEqual(["bytes=123456-"]);
  }, PROCESS_TEST_MS);

  test("a server that ignores Range makes the download start over, not splice", async () => {
    const cache = new RepoCache(cacheDir, REPO);
    mkdirSync(join(cache.dir, "blobs"), { recursive: true });
    writeFileSync(`${cache.blobPath(SHA)}.incomplete`, BYTES.subarray(0, 5000));
    hub.faults = { ignoreRange: true };
    await resolveModel(`hf:${REPO}/${FILE}`, opts);
    expectCachedLayout(REPO, FILE, SHA, BYTES);
  }, PROCESS_TEST_MS);

  test("a 206 that does not start where the partial file ends is not spliced in", async () => {
    const cache = new RepoCache(cacheDir, REPO);
    mkdirSync(join(cache.dir, "blobs"), { recursive: true });
    writeFileSync(`${cache.blobPath(SHA)}.incomplete`, BYTES.subarray(0, 5000));
    hub.faults = { rangeFromZero: true };
    await resolveModel(`hf:${REPO}/${FILE}`, opts);
    expectCachedLayout(REPO, FILE, SHA, BYTES);
    expect(hub.requests.filter((r) => r.path.startsWith("/cdn/")).map((r) => r.range)).toEqual(["bytes=5000-", null]);
  }, PROCESS_TEST_MS);

  test("a wrong checksum is refused and leaves no file behind", async () => {
    hub.faults = { corrupt: true };
    const err = await resolveModel(`hf:${REPO}/${FILE}`, opts).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ChecksumError);
    expect((err as Error).message).toStartWith(`${REPO}/${FILE}: SHA-256 mismatch`);
    const cache = new RepoCache(cacheDir, REPO);
    expect(readdirSync(join(cache.dir, "blobs"))).toEqual([]);
    expect(existsSync(join(cache.dir, "snapshots"))).toBe(false);
  }, PROCESS_TEST_MS);

  // The stand-in CDN streams chunked (no Content-Length), as a body cut short looks from here: the
  // short file is found by the resume that follows, whose 416 names the file's real size.
  test("a file shorter or longer than its announced size is a one-line error, nothing kept, no retry loop", async () => {
    for (const [extra, message, gets] of [
      [1000, `${REPO}/${FILE}: the server's file is 300000 bytes but it announced 301000; nothing was kept`, ["GET null", "GET bytes=300000-"]],
      [-1000, `${REPO}/${FILE}: the server sent more than the announced 299000 bytes`, ["GET null"]],
    ] as const) {
      hub.requests.length = 0;
      hub.faults = { announceExtraBytes: extra };
      const err = await resolveModel(`hf:${REPO}/${FILE}`, opts).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(DownloadError);
      expect((err as Error).message).toStartWith(message);
      expect(hub.requests.filter((r) => r.path.startsWith("/cdn/")).map((r) => `${r.method} ${r.range}`)).toEqual([...gets]);
      expect(readdirSync(join(new RepoCache(cacheDir, REPO).dir, "blobs")).filter((f) => !f.endsWith(".lock"))).toEqual([]);
    }
  }, PROCESS_TEST_MS);

  test("a whole file left .incomplete under a larger announced size: the resume's 416 says so, nothing kept", async () => {
    const cache = new RepoCache(cacheDir, REPO);
    mkdirSync(join(cache.dir, "blobs"), { recursive: true });
    hub.faults = { announceExtraBytes: 1000 };
    writeFileSync(`${cache.blobPath(SHA)}.incomplete`, BYTES);
    const err = await resolveModel(`hf:${REPO}/${FILE}`, opts).catch((e: unknown) => e);
    expect((err as Error).message).toStartWith(`${REPO}/${FILE}: the server's file is 300000 bytes but it announced 301000`);
    expect(hub.requests.filter((r) => r.path.startsWith("/cdn/")).map((r) => r.range)).toEqual(["bytes=300000-"]);
    expect(existsSync(`${cache.blobPath(SHA)}.incomplete`)).toBe(false);
  }, PROCESS_TEST_MS);

  test("404 names the file and says what to do", async () => {
    const err = await resolveModel(`hf:${REPO}/missing.gguf`, opts).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(DownloadError);
    expect((err as Error).message).toBe(`${REPO}/missing.gguf: 404 Not Found: the repository has no such file; \`pagellm pull hf:OWNER/REPO:QUANT\` picks one by quantization`);
  }, PROCESS_TEST_MS);

  test("a gated repository: 401 asks for HF_TOKEN; with the token it downloads", async () => {
    await expect(resolveModel(`hf:owner/gated/${FILE}`, opts)).rejects.toThrow("set HF_TOKEN");
    await expect(resolveModel(`hf:owner/gated/${FILE}`, { ...opts, token: "wrong" })).rejects.toThrow("HF_TOKEN was refused");
    hub.requests.length = 0;
    await resolveModel(`hf:owner/gated/${FILE}`, { ...opts, token: "secret-token" });
    expectCachedLayout("owner/gated", FILE, SHA, BYTES);
    expect(hub.requests[0]!.authorization).toBe("Bearer secret-token");
  }, PROCESS_TEST_MS);

  test("a renamed repository's relative redirect is followed", async () => {
    const path = await resolveModel(`hf:owner/old-name/${FILE}`, opts);
    expect(sha256(readFileSync(path))).toBe(SHA);
    expect(hub.requests.map((r) => r.path)).toEqual([`/owner/old-name/resolve/main/${FILE}`, `/${REPO}/resolve/main/${FILE}`, `/cdn/${SHA}`]);
  }, PROCESS_TEST_MS);

  test("an unreachable endpoint is a one-line network error", async () => {
    const closed = Bun.serve({ hostname: "127.0.0.1", port: 0, fetch: () => new Response() });
    const endpoint = `http://127.0.0.1:${closed.port}`;
    closed.stop(true);
    const err = await resolveModel(`hf:${REPO}/${FILE}`, { ...opts, endpoint }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(DownloadError);
    expect((err as Error).message).toContain(`${REPO}/${FILE}: network error reaching 127.0.0.1`);
  }, PROCESS_TEST_MS);

  test("a plain URL downloads into the pagellm cache, size verified", async () => {
    const saved = process.env.PAGELLM_CACHE;
    process.env.PAGELLM_CACHE = join(cacheDir, "pagellm");
    try {
      const url = `${hub.endpoint}/cdn/${SHA}`;
      const path = await pullUrl(opts, url);
      expect(path.startsWith(join(cacheDir, "pagellm", "downloads"))).toBe(true);
      expect(sha256(readFileSync(path))).toBe(SHA);
      hub.requests.length = 0;
      expect(await pullUrl(opts, url)).toBe(path);
      expect(hub.requests).toEqual([]);
      await expect(pullUrl(opts, `${hub.endpoint}/cdn/nope`)).rejects.toThrow("404 Not Found: check the URL");
    } finally {
      if (saved === undefined) delete process.env.PAGELLM_CACHE;
      else process.env.PAGELLM_CACHE = saved;
    }
  }, PROCESS_TEST_MS);

  test("two pulls of one file at once give one good file", async () => {
    hub.faults = { chunkDelayMs: 5 };
    const [a, b] = await Promise.all([resolveModel(`hf:${REPO}/${FILE}`, opts), resolveModel(`hf:${REPO}/${FILE}`, opts)]);
    expect(a).toBe(b);
    expectCachedLayout(REPO, FILE, SHA, BYTES);
    expect(hub.requests.filter((r) => r.path.startsWith("/cdn/")).length).toBe(1);
  }, PROCESS_TEST_MS);

  test("a lock left by a dead process is broken; a live one is waited for", async () => {
    const cache = new RepoCache(cacheDir, REPO);
    mkdirSync(cache.lockDir, { recursive: true });
    const dead = Bun.spawnSync(["true"]).pid;
    writeFileSync(cache.lockPath(SHA), `${dead}\n`);
    await resolveModel(`hf:${REPO}/${FILE}`, opts);
    expectCachedLayout(REPO, FILE, SHA, BYTES);

    // huggingface_hub leaves an empty flock file behind: an old one does not block us.
    const leftover = join(cacheDir, "leftover");
    const hfCache = new RepoCache(leftover, REPO);
    mkdirSync(hfCache.lockDir, { recursive: true });
    writeFileSync(hfCache.lockPath(SHA), "");
    const old = new Date(Date.now() - 3600_000);
    utimesSync(hfCache.lockPath(SHA), old, old);
    expect(sha256(readFileSync(await resolveModel(`hf:${REPO}/${FILE}`, { ...opts, cacheDir: leftover })))).toBe(SHA);

    const other = join(cacheDir, "other");
    const held = new RepoCache(other, REPO);
    mkdirSync(held.lockDir, { recursive: true });
    writeFileSync(held.lockPath(SHA), `${process.pid}\n`);
    // A waiter asks whether the holder (this process) lives each time it finds the lock taken: once
    // it has asked twice, it has found the lock alive and gone back to waiting, not downloaded.
    const realKill = process.kill.bind(process);
    let livenessChecks = 0;
    let askedTwice!: () => void;
    const waited = new Promise<"waited">((resolve) => (askedTwice = () => resolve("waited")));
    const kill = spyOn(process, "kill").mockImplementation((pid: number, signal?: string | number) => {
      if (pid === process.pid && signal === 0 && ++livenessChecks === 2) askedTwice();
      return realKill(pid, signal);
    });
    try {
      const downloadsBefore = hub.requests.filter((r) => r.path.startsWith("/cdn/")).length;
      const pending = resolveModel(`hf:${REPO}/${FILE}`, { ...opts, cacheDir: other });
      expect(await Promise.race([waited, pending.then(() => "finished while the lock was held")])).toBe("waited");
      expect(hub.requests.filter((r) => r.path.startsWith("/cdn/")).length).toBe(downloadsBefore);
      rmSync(held.lockPath(SHA));
      expect(sha256(readFileSync(await pending))).toBe(SHA);
    } finally {
      kill.mockRestore();
    }
  }, PROCESS_TEST_MS);

  test("two pagellm processes pulling one file give one good file", async () => {
    hub.faults = { chunkDelayMs: 10 };
    const env = { HF_HOME: cacheDir, HF_HUB_CACHE: "", HF_ENDPOINT: hub.endpoint, HF_TOKEN: "" };
    const pull = () => runPagellmAsync(["pull", `hf:${REPO}/${FILE}`], { env });
    const outs = await Promise.all([pull(), pull()]);
    for (const o of outs) expect(o).toEqual({ exitCode: 0, stdout: `${join(cacheDir, "hub", "models--owner--tiny-GGUF", "snapshots", hub.commit, FILE)}\n`, stderr: "" });
    cacheDir = join(cacheDir, "hub");
    expectCachedLayout(REPO, FILE, SHA, BYTES);
    expect(hub.requests.filter((r) => r.path.startsWith("/cdn/")).length).toBe(1);
  }, PROCESS_TEST_MS);
});
