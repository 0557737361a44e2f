/**
 * What may sit under a block file's name in the disk KV cache folder that is not a block file, and
 * a disk that stops answering: the tier never blocks on any of it and never reads more than a
 * block's size.
 *
 * - A FIFO (whose plain open waits for a writer forever), a directory or a symbolic link under a
 *   block's name: never opened for reading, never counted as a block (the folder scan, `contains`,
 *   `pagellm cache ls|du`'s scan), the load gives null at once and the block is recomputed.
 * - A 1.5 GiB sparse file under a block's name: refused on its size before a byte is read (the
 *   resident memory does not grow by it), removed.
 * - A read that never finishes: given up after the read bound, its slot given back, so the next
 *   read still runs.
 */
import { afterAll, expect, test } from "bun:test";
import { closeSync, constants, existsSync, mkdirSync, openSync, rmSync, symlinkSync, truncateSync } from "node:fs";
import { join } from "node:path";
import { DiskKVStore } from "../src/kv-disk/disk-store.ts";
import { encodeBlockFile } from "../src/kv-disk/block-file.ts";
import { nodeBlockFileOps, type BlockFileOps } from "../src/kv-disk/file-ops.ts";
import { kvFingerprint } from "../src/kv-disk/fingerprint.ts";
import { blockFileName, scanModelFolder, scanRoot } from "../src/kv-disk/folder.ts";
import { hashBlockTokens, ROOT_PARENT_HASH } from "../src/kv/block-hash.ts";
import { kvLayout } from "../src/kv/kv-layout.ts";
import type { KVBlockKey } from "../src/kv/second-tier.ts";
import { makeConfig } from "../src/model/config.ts";
import { scratchDir } from "./helpers/kv-disk.ts";

/** A load that has not returned by then is a hang (the read bound in these tests is far below it). */
const HANG_MS = 20_000;
const LIMIT_MS = 60_000;

const config = makeConfig({ dim: 64, hiddenDim: 64, nLayers: 2, nHeads: 2, nKvHeads: 2, vocabSize: 32, seqLen: 64, sharedClassifier: true });
const layout = kvLayout(config, 16);
const fingerprint = kvFingerprint(new Uint8Array(32).fill(3), layout, config, "files-test");
const keys: KVBlockKey[] = Array.from({ length: 4 }, (_, i) => {
  const tokens = Uint32Array.from({ length: 16 }, (_, t) => i * 16 + t);
  return { hash: hashBlockTokens(null, tokens, [`block ${i}`]), parentHash: ROOT_PARENT_HASH.sha256, tokens, extraKeys: new Uint8Array(0), group: 0 };
});
const kv = new Uint8Array(layout.blockBytes).fill(9);

const dirs: string[] = [];
afterAll(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

function newStore(opts: { fileOps?: BlockFileOps; readTimeoutMs?: number } = {}): { store: DiskKVStore; root: string; warnings: string[] } {
  const root = scratchDir("files");
  dirs.push(root);
  const warnings: string[] = [];
  const store = new DiskKVStore({
    root, fingerprint, layout, writeMode: "through", maxBytes: 1 << 30, modelName: "files-test", modelFormat: "test",
    onWarning: (line) => warnings.push(line), ...opts,
  });
  return { store, root, warnings };
}

/** Writes block `i`'s good file into the store's folder (as another process would). */
async function writeBlock(store: DiskKVStore, i: number): Promise<string> {
  await nodeBlockFileOps.writeAtomic(store.dir, blockFileName(keys[i]!.hash), encodeBlockFile(fingerprint.full, keys[i]!, kv));
  return join(store.dir, blockFileName(keys[i]!.hash));
}

/** `promise`, or "hang" when it has not settled within HANG_MS (then `unblock` runs). */
async function orHang<T>(promise: Promise<T>, unblock: () => void): Promise<T | "hang"> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const hang = new Promise<"hang">((resolve) => (timer = setTimeout(() => resolve("hang"), HANG_MS)));
  const result = await Promise.race([promise, hang]);
  clearTimeout(timer);
  if (result === "hang") {
    unblock();
    await promise.catch(() => undefined);
  }
  return result;
}

/** Opens a FIFO for writing and closes it: a reader blocked in its open gets an empty file. */
function releaseFifo(path: string): void {
  try {
    closeSync(openSync(path, constants.O_WRONLY | constants.O_NONBLOCK));
  } catch {
    // No reader waits on it.
  }
}

test("a FIFO under a block's name: never opened for reading, never counted; the load gives null at once", async () => {
  const { store, root, warnings } = newStore();
  await writeBlock(store, 0);
  const fifo = join(store.dir, blockFileName(keys[1]!.hash));
  expect(Bun.spawnSync(["mkfifo", fifo]).exitCode).toBe(0);
  // The folder as a new process sees it: only the regular file is a block.
  expect([...scanModelFolder(store.dir)]).toEqual([keys[0]!.hash]);
  expect(scanRoot(root).flatMap((f) => f.blocks.map((b) => b.path))).toEqual([join(store.dir, blockFileName(keys[0]!.hash))]);
  expect(store.contains(keys[1]!.hash, 0)).toBe(false);

  const loaded = await orHang(store.load(keys[1]!), () => releaseFifo(fifo));
  expect(loaded).toBeNull();
  expect(warnings).toEqual([expect.stringContaining("is a FIFO, not a block file")]);
  // The good block beside it still loads.
  expect(await store.load(keys[0]!)).toEqual(kv);
}, LIMIT_MS);

test("a directory or a symbolic link under a block's name is not a block", async () => {
  const { store, root, warnings } = newStore();
  const good = await writeBlock(store, 0);
  mkdirSync(join(store.dir, blockFileName(keys[1]!.hash)));
  // A link to a good block file: a block file is only ever written in place, never linked.
  symlinkSync(good, join(store.dir, blockFileName(keys[2]!.hash)));
  expect([...scanModelFolder(store.dir)]).toEqual([keys[0]!.hash]);
  expect(scanRoot(root)[0]!.blocks.length).toBe(1);
  for (const i of [1, 2]) {
    expect(store.contains(keys[i]!.hash, 0)).toBe(false);
    expect(await store.load(keys[i]!)).toBeNull();
  }
  expect(warnings).toEqual([expect.stringMatching(/is a directory, not a block file/)]);
  expect(store.stats.blocksRejected).toBe(0);
}, LIMIT_MS);

test("a 1.5 GiB sparse file under a block's name is refused on its size, never read, and removed", async () => {
  const { store, warnings } = newStore();
  const path = await writeBlock(store, 0);
  truncateSync(path, 1.5 * 2 ** 30);
  Bun.gc(true);
  const before = process.memoryUsage().rss;
  expect(await store.load(keys[0]!)).toBeNull();
  const grown = process.memoryUsage().rss - before;
  // Read whole, it would take 1.5 GiB; the block itself is 4 KiB.
  expect(grown).toBeLessThan(256 * 2 ** 20);
  expect(store.stats.blocksRejected).toBe(1);
  expect(warnings).toEqual([expect.stringContaining("failed its size check")]);
  expect(existsSync(path)).toBe(false);
}, LIMIT_MS);

test("a read that never finishes is given up after the read bound; its slot goes to the next read", async () => {
  let release: () => void = () => undefined;
  const hung = new Promise<void>((resolve) => (release = resolve));
  const hungPaths = new Set<string>();
  const fileOps: BlockFileOps = {
    ...nodeBlockFileOps,
    read: async (path, expected) => {
      if (hungPaths.has(path)) await hung;
      return nodeBlockFileOps.read(path, expected);
    },
  };
  const { store, warnings } = newStore({ fileOps, readTimeoutMs: 200 });
  for (let i = 0; i < 4; i++) await writeBlock(store, i);
  for (let i = 0; i < 4; i++) hungPaths.add(join(store.dir, blockFileName(keys[i]!.hash)));
  // Four hung reads take every read slot; each is given up.
  const given = await orHang(Promise.all(keys.map((k) => store.load(k))), release);
  expect(given).toEqual([null, null, null, null]);
  expect(warnings).toEqual([expect.stringMatching(/took more than 0\.2 s; recomputing it/)]);
  // Their slots were given back: a read that answers runs now.
  hungPaths.clear();
  expect(await orHang(store.load(keys[0]!), release)).toEqual(kv);
  release();
}, LIMIT_MS);
