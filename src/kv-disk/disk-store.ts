/**
 * The disk tier: KV blocks in a folder, one file per block named by its hash (folder.ts,
 * block-file.ts), shared by every process that opens the same folder with the same model. A model
 * with sliding-window layers stores each KV cache group's block apart (kv-groups.ts): the same
 * hash, a name and a fingerprint per group, the group's layers' bytes (fingerprint.ts).
 *
 * Writes never hold up a step: store() queues the bytes (already copied out of the arena) and
 * returns; at most WRITE_CONCURRENCY files are written at once, each to a temporary name, synced,
 * then renamed into place, so a reader sees a whole block or none. Past MAX_PENDING_BYTES queued,
 * blocks are dropped rather than let memory grow. When the disk is full (or read-only, or not
 * ours), the tier warns once and stops writing: the run goes on with the memory cache only.
 *
 * Reads check everything (block-file.ts); a file that fails is removed and the block recomputed.
 * The folder stays within maxBytes across processes: after writing past the bound, this process
 * rescans the whole root and removes the least recently used blocks (folder.ts).
 */
import { existsSync, mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { InputError } from "../errors.ts";
import type { BlockHash } from "../kv/block-hash.ts";
import { KVCacheGroups } from "../kv/kv-groups.ts";
import type { KVLayout } from "../kv/kv-layout.ts";
import type { KVBlockKey, KVSecondTier, KVWriteMode, SecondTierStats } from "../kv/second-tier.ts";
import { blockFileBytes, decodeBlockFile, encodeBlockFile, type BlockFileProblem } from "./block-file.ts";
import { errorCode, nodeBlockFileOps, type BlockFileOps, type BlockRead } from "./file-ops.ts";
import { groupFingerprint, type KVFingerprint } from "./fingerprint.ts";
import { blockFileName, blockStem, isRegularFile, MODEL_INFO, removeLeastRecentlyUsed, scanModelFolder, scanRoot, type ModelInfo } from "./folder.ts";

const WRITE_CONCURRENCY = 4;
/** Reads in flight at once: a few keep the disk busy; dozens only contend for the I/O threads (measured: 2-4 beat 96). */
const READ_CONCURRENCY = 4;
const MAX_PENDING_BYTES = 512 << 20;
/**
 * A block read that takes longer than this (a hung network disk) is given up and the block
 * recomputed. Reading a block from the page cache takes well under a millisecond, from a busy
 * disk tens of milliseconds: only a disk that no longer answers reaches it.
 */
export const READ_TIMEOUT_MS = 10_000;
/** After removing blocks to honour the bound, the folder is left at this fraction of it, so removal is not run for every write. */
const LOW_WATER = 0.9;
/** Errors after which writing cannot succeed: the tier stops writing. */
const FATAL_WRITE_ERRORS = new Set(["ENOSPC", "EDQUOT", "EROFS", "EACCES", "EPERM", "EFBIG"]);

export interface DiskStoreOptions {
  /** The cache root (resolveCacheDir). */
  root: string;
  fingerprint: KVFingerprint;
  layout: KVLayout;
  /** The model's KV cache groups (KVCacheGroups.of(config)); default: one group of layout.slots layers. */
  groups?: KVCacheGroups;
  writeMode: KVWriteMode;
  /** Bound on the bytes of every block under the root, all models together. */
  maxBytes: number;
  /** Recorded in the model folder's model.json. */
  modelName: string;
  modelFormat: string;
  /** Told once per kind of trouble (a full disk, corrupt files), one line each. */
  onWarning?: (line: string) => void;
  /** File operations; tests stand in a failing disk. */
  fileOps?: BlockFileOps;
  /** Bound on one block's read, from the call (default READ_TIMEOUT_MS). */
  readTimeoutMs?: number;
}

export class DiskKVStore implements KVSecondTier {
  readonly writeMode: KVWriteMode;
  readonly stats: SecondTierStats = {
    blocksRead: 0, bytesRead: 0, readMs: 0, blocksWritten: 0, bytesWritten: 0, blocksRejected: 0, writesDropped: 0, blocksRemoved: 0,
  };
  /** The model folder: ROOT/MODEL16-LAYOUT8. */
  readonly dir: string;
  private readonly root: string;
  /** Per KV cache group: the fingerprint its files carry, and its blocks' KV bytes. */
  private readonly fingerprints: readonly Uint8Array[];
  private readonly groupBytes: readonly number[];
  private readonly maxBytes: number;
  private readonly ops: BlockFileOps;
  private readonly readTimeoutMs: number;
  private readonly warn: (line: string) => void;
  private readonly warned = new Set<string>();
  /** Blocks known to be stored, by blockStem (the folder's names; see folder.ts). */
  private readonly stored: Set<string>;
  /** Queued or being written, by blockStem. */
  private readonly pending = new Map<string, { key: KVBlockKey; bytes: Uint8Array }>();
  private readonly queue: string[] = [];
  private readonly writing = new Set<Promise<void>>();
  private pendingBytes = 0;
  private writesDisabled = false;
  /** Bytes under the root at the last scan, plus what this process wrote since. */
  private usage: number;
  private pruning: Promise<void> | null = null;
  /** Bytes written while a removal pass ran (its scan may have missed them). */
  private writtenWhilePruning = 0;
  private readsInFlight = 0;
  private readsStartMs = 0;
  /** Loads waiting for a read slot (READ_CONCURRENCY). */
  private readonly readQueue: (() => void)[] = [];

  constructor(o: DiskStoreOptions) {
    this.writeMode = o.writeMode;
    const groups = o.groups ?? KVCacheGroups.fromLayers(o.layout.slots, () => ({ kind: "full" }));
    this.groupBytes = groups.groups.map((g) => 2 * g.layers.length * o.layout.layerBlockBytes);
    this.fingerprints = groups.groups.map((_, g) => groupFingerprint(o.fingerprint.full, g));
    this.root = o.root;
    this.dir = join(o.root, o.fingerprint.folder);
    this.maxBytes = o.maxBytes;
    this.ops = o.fileOps ?? nodeBlockFileOps;
    this.readTimeoutMs = o.readTimeoutMs ?? READ_TIMEOUT_MS;
    this.warn = o.onWarning ?? (() => undefined);
    try {
      mkdirSync(this.dir, { recursive: true });
      this.stored = scanModelFolder(this.dir);
      const info: ModelInfo = {
        model: o.modelName, format: o.modelFormat, kvType: o.layout.type, blockSize: o.layout.blockSize, blockBytes: o.layout.blockBytes,
        groups: groups.groups.map((g, i) => ({
          attention: g.attention.kind, ...(g.attention.kind === "sliding" ? { window: g.attention.window } : {}), layers: [...g.layers], blockBytes: this.groupBytes[i]!,
        })),
      };
      if (!existsSync(join(this.dir, MODEL_INFO))) writeFileSync(join(this.dir, MODEL_INFO), `${JSON.stringify(info, null, 2)}\n`);
    } catch (e) {
      throw new InputError(`--kv-cache-dir ${o.root}: cannot use the folder (${errorCode(e) ?? (e as Error).message})`);
    }
    this.usage = scanRoot(this.root).reduce((n, f) => n + f.bytes, 0);
  }

  blockBytes(group: number): number {
    const bytes = this.groupBytes[group];
    if (bytes === undefined) throw new RangeError(`no KV cache group ${group}`);
    return bytes;
  }

  contains(hash: BlockHash, group: number): boolean {
    const stem = blockStem(hash, group);
    if (this.stored.has(stem) || this.pending.has(stem)) return true;
    // Another process may have written it since the scan (only a regular file can be a block).
    if (!isRegularFile(this.pathOf(hash, group))) return false;
    this.stored.add(stem);
    return true;
  }

  /**
   * The KV of block `key` from its file, or null (then the block is recomputed): when the file is
   * missing, is not a regular file (never opened for reading), has another size than the block's
   * (removed, never read), fails a check of its content (removed), or cannot be read within the
   * read time bound (left in place).
   */
  async load(key: KVBlockKey): Promise<Uint8Array | null> {
    const stem = blockStem(key.hash, key.group);
    const queued = this.pending.get(stem);
    if (queued !== undefined) return queued.bytes;
    const path = this.pathOf(key.hash, key.group);
    const kvBytes = this.blockBytes(key.group);
    const found = await this.readWithin(path, blockFileBytes(key, kvBytes));
    if (found?.kind !== "bytes") {
      this.stored.delete(stem);
      if (found?.kind === "not-a-file") this.warnOnce("not-a-file", `kv cache: ${path} is ${found.what}, not a block file; ignoring it and recomputing the block`);
      if (found?.kind === "size") await this.reject(path, "size");
      return null;
    }
    const file = found.bytes;
    const decoded = decodeBlockFile(file, this.fingerprints[key.group]!, key, kvBytes);
    if ("problem" in decoded) {
      this.stored.delete(stem);
      await this.reject(path, decoded.problem);
      return null;
    }
    this.stats.blocksRead++;
    this.stats.bytesRead += file.length;
    void this.ops.touch(path);
    return decoded.kv;
  }

  /** A block file that failed a check: counted, said once, removed. */
  private async reject(path: string, problem: BlockFileProblem): Promise<void> {
    this.stats.blocksRejected++;
    this.warnOnce("rejected", `kv cache: removed a block file that failed its ${problem} check (${path}); recomputing it`);
    await this.ops.remove(path).catch(() => undefined);
  }

  /**
   * Reads a block file in one of the READ_CONCURRENCY slots, within readTimeoutMs of the call
   * (the wait for a slot included); null when the read failed or took longer (said once each). A
   * read past the bound gives its slot back at once: a hung disk costs each block the bound, never
   * a request that waits for good.
   */
  private async readWithin(path: string, expectedBytes: number): Promise<BlockRead | null> {
    let holding = false;
    let timedOut = false;
    const giveBack = () => {
      if (!holding) return;
      holding = false;
      this.releaseRead();
    };
    const read = (async () => {
      await this.acquireRead();
      holding = true;
      // Past the bound while waiting for the slot: nothing to read for.
      if (timedOut) return giveBack();
      try {
        return await this.ops.read(path, expectedBytes);
      } finally {
        giveBack();
      }
    })();
    let timer: ReturnType<typeof setTimeout> | undefined;
    const deadline = new Promise<"timeout">((resolve) => (timer = setTimeout(() => resolve("timeout"), this.readTimeoutMs)));
    try {
      const result = await Promise.race([read, deadline]);
      if (result !== "timeout") return result ?? null;
      timedOut = true;
      giveBack();
      read.catch(() => undefined);
      this.warnOnce("slow", `kv cache: reading ${path} took more than ${this.readTimeoutMs / 1000} s; recomputing it`);
      return null;
    } catch (e) {
      this.warnOnce("read", `kv cache: cannot read ${path} (${errorCode(e) ?? (e as Error).message}); recomputing it`);
      return null;
    } finally {
      clearTimeout(timer);
    }
  }

  store(key: KVBlockKey, bytes: Uint8Array): void {
    const stem = blockStem(key.hash, key.group);
    if (this.stored.has(stem) || this.pending.has(stem)) return;
    if (bytes.length !== this.blockBytes(key.group)) throw new RangeError(`a KV block of group ${key.group} is ${this.blockBytes(key.group)} bytes, got ${bytes.length}`);
    if (this.writesDisabled || this.pendingBytes + bytes.length > MAX_PENDING_BYTES) {
      this.stats.writesDropped++;
      return;
    }
    this.pending.set(stem, { key, bytes });
    this.pendingBytes += bytes.length;
    this.queue.push(stem);
    this.pump();
  }

  async flush(): Promise<void> {
    while (this.writing.size > 0 || this.pruning !== null) {
      await Promise.all([...this.writing, this.pruning]);
    }
  }

  private pump(): void {
    while (this.writing.size < WRITE_CONCURRENCY && this.queue.length > 0) {
      const stem = this.queue.shift() as string;
      const job = this.write(stem).finally(() => {
        this.writing.delete(job);
        this.pump();
      });
      this.writing.add(job);
    }
  }

  private async write(stem: string): Promise<void> {
    const entry = this.pending.get(stem);
    if (entry === undefined) return;
    try {
      if (this.writesDisabled) {
        this.stats.writesDropped++;
        return;
      }
      const file = encodeBlockFile(this.fingerprints[entry.key.group]!, entry.key, entry.bytes);
      await this.writeFile(blockFileName(entry.key.hash, entry.key.group), file);
      this.stored.add(stem);
      this.stats.blocksWritten++;
      this.stats.bytesWritten += file.length;
      this.usage += file.length;
      if (this.pruning !== null) this.writtenWhilePruning += file.length;
      if (this.usage > this.maxBytes) this.prune();
    } catch (e) {
      this.stats.writesDropped++;
      const code = errorCode(e);
      if (code !== null && FATAL_WRITE_ERRORS.has(code)) {
        this.writesDisabled = true;
        this.warnOnce("write", `kv cache: cannot write to ${this.dir} (${code}); continuing with the memory cache only`);
      } else {
        this.warnOnce("write-other", `kv cache: writing a block to ${this.dir} failed (${code ?? (e as Error).message}); it stays in memory only`);
      }
    } finally {
      this.pending.delete(stem);
      this.pendingBytes -= entry.bytes.length;
    }
  }

  /** Writes a file into the model folder, creating the folder again if `pagellm cache clear` removed it. */
  private async writeFile(name: string, file: Uint8Array): Promise<void> {
    try {
      await this.ops.writeAtomic(this.dir, name, file);
    } catch (e) {
      if (errorCode(e) !== "ENOENT") throw e;
      mkdirSync(this.dir, { recursive: true });
      await this.ops.writeAtomic(this.dir, name, file);
    }
  }

  private prune(): void {
    if (this.pruning !== null) return;
    this.writtenWhilePruning = 0;
    this.pruning = removeLeastRecentlyUsed(this.root, Math.floor(this.maxBytes * LOW_WATER))
      .then(({ removed, bytes }) => {
        this.stats.blocksRemoved += removed;
        // The scan may or may not have seen the blocks written meanwhile: count them again (at worst a pass too early).
        this.usage = bytes + this.writtenWhilePruning;
        // The names this process knows may include removed blocks: contains() then says true and load() misses, once.
      })
      .catch((e: unknown) => this.warnOnce("prune", `kv cache: removing old blocks from ${this.root} failed (${errorCode(e) ?? (e as Error).message})`))
      .finally(() => {
        this.pruning = null;
        if (this.usage > this.maxBytes) this.prune();
      });
  }

  /** Waits for one of the READ_CONCURRENCY read slots; readMs runs while any slot is held. */
  private acquireRead(): Promise<void> {
    if (this.readsInFlight < READ_CONCURRENCY) {
      if (this.readsInFlight++ === 0) this.readsStartMs = performance.now();
      return Promise.resolve();
    }
    return new Promise((resolve) => this.readQueue.push(resolve));
  }

  private releaseRead(): void {
    const next = this.readQueue.shift();
    if (next !== undefined) return next(); // the slot passes straight to a waiting load
    if (--this.readsInFlight === 0) this.stats.readMs += performance.now() - this.readsStartMs;
  }

  private pathOf(hash: BlockHash, group: number): string {
    return join(this.dir, blockFileName(hash, group));
  }

  private warnOnce(kind: string, line: string): void {
    if (this.warned.has(kind)) return;
    this.warned.add(kind);
    this.warn(line);
  }
}
