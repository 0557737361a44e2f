/**
 * The cache folder: where it is, what is in it, and keeping it within its size bound.
 *
 *   ROOT/                       --kv-cache-dir (auto: $PAGELLM_CACHE/kv or ~/.cache/pagellm/kv)
 *     MODEL16-LAYOUT8/          one folder per model fingerprint and KV layout (fingerprint.ts)
 *       model.json              which model file and layout made it (for `pagellm cache ls`)
 *       <sha256 block hash>.kvb one block (block-file.ts) of KV cache group 0 (every layer of a
 *                               model with one group)
 *       <hash>-g<N>.kvb         the block of group N of a model with sliding-window layers
 *
 * There is no separate index file to go stale: the folder is the index (a block's name is its
 * hash), each process holds the names in memory, rebuilt by scanning the folder when it opens it
 * and corrected whenever a lookup misses or a read fails. A block's modification time is its last
 * use (readers touch it), so the least recently used blocks of every process are removed first.
 */
import { existsSync, lstatSync, readdirSync, readFileSync, rmSync, statSync } from "node:fs";
import { homedir } from "node:os";
import { join, resolve } from "node:path";
import { unlink } from "node:fs/promises";
import { TEMP_SUFFIX } from "./file-ops.ts";

export const BLOCK_SUFFIX = ".kvb";
export const MODEL_INFO = "model.json";
const BLOCK_NAME = /^([0-9a-f]{64})(?:-g([1-9][0-9]{0,3}))?\.kvb$/;
const MODEL_FOLDER = /^[0-9a-f]{16}-[0-9a-f]{8}$/;
/** A temporary file older than this was left by a process that died while writing. */
const STALE_TEMP_MS = 10 * 60_000;

/** One KV cache group as model.json records it (kv-groups.ts). */
export interface GroupInfo {
  /** "full", or "sliding" for layers that attend to a window. */
  attention: "full" | "sliding";
  /** The window, tokens; absent for full attention. */
  window?: number;
  layers: number[];
  /** Bytes of one block's KV in this group. */
  blockBytes: number;
}

/** What model.json records about a model folder. */
export interface ModelInfo {
  /** The model file's name (not its path: the folder may be shared between machines' users). */
  model: string;
  format: string;
  kvType: string;
  blockSize: number;
  /** Bytes of one page of the memory pool (every layer, or a group's layers). */
  blockBytes: number;
  /** The KV cache groups, whose blocks are stored apart; absent in folders written before groups were stored (one group). */
  groups?: GroupInfo[];
}

/** The folder `--kv-cache-dir` names: `auto` is $PAGELLM_CACHE/kv, else ~/.cache/pagellm/kv. */
export function resolveCacheDir(given: string, env: Record<string, string | undefined> = process.env): string {
  if (given !== "auto") return resolve(given);
  const base = env.PAGELLM_CACHE !== undefined && env.PAGELLM_CACHE !== "" ? env.PAGELLM_CACHE : join(homedir(), ".cache", "pagellm");
  return resolve(base, "kv");
}

/** The file stem of block `hash` of KV cache group `group`: the hash, with -gN for a group after the first. */
export function blockStem(hash: string, group = 0): string {
  return group === 0 ? hash : `${hash}-g${group}`;
}

export function blockFileName(hash: string, group = 0): string {
  return `${blockStem(hash, group)}${BLOCK_SUFFIX}`;
}

/** The KV cache group of a block file's name; null when the name is not a block's. */
function groupOfName(name: string): number | null {
  const m = BLOCK_NAME.exec(name);
  return m === null ? null : Number(m[2] ?? 0);
}

/**
 * The stems (blockStem) of the blocks in a model folder; removes temporary files left by a crash.
 * Only a regular file is a block: a FIFO, a directory or a link under a block's name is not one.
 */
export function scanModelFolder(dir: string, now = Date.now()): Set<string> {
  const stems = new Set<string>();
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const name = entry.name;
    if (BLOCK_NAME.test(name)) {
      if (entry.isFile()) stems.add(name.slice(0, -BLOCK_SUFFIX.length));
    } else if (name.endsWith(TEMP_SUFFIX)) removeIfOld(join(dir, name), now);
  }
  return stems;
}

/** Whether `path` is a regular file (not followed if it is a link); false when it does not exist. */
export function isRegularFile(path: string): boolean {
  return lstatSync(path, { throwIfNoEntry: false })?.isFile() === true;
}

function removeIfOld(path: string, now: number): void {
  try {
    if (now - statSync(path).mtimeMs > STALE_TEMP_MS) rmSync(path, { force: true });
  } catch {
    // Gone already, or renamed into place by its writer meanwhile.
  }
}

/** One stored block, as the folder scan sees it. */
export interface StoredBlock {
  path: string;
  /** The KV cache group whose layers it holds. */
  group: number;
  bytes: number;
  /** Last use: the file's modification time. */
  lastUseMs: number;
}

/** One model folder's summary. */
export interface ModelFolder {
  folder: string;
  path: string;
  info: ModelInfo | null;
  blocks: StoredBlock[];
  bytes: number;
  /** Most recent use of any block; null when empty. */
  lastUseMs: number | null;
}

/** Every model folder under `root` with its blocks (missing root: none). */
export function scanRoot(root: string): ModelFolder[] {
  if (!existsSync(root)) return [];
  const folders: ModelFolder[] = [];
  for (const folder of readdirSync(root).sort()) {
    const path = join(root, folder);
    if (!MODEL_FOLDER.test(folder) || !isDirectory(path)) continue;
    const blocks: StoredBlock[] = [];
    for (const name of readdirSync(path)) {
      const group = groupOfName(name);
      if (group === null) continue;
      try {
        // Only regular files are blocks (a FIFO or a link under a block's name is not counted).
        const st = lstatSync(join(path, name));
        if (st.isFile()) blocks.push({ path: join(path, name), group, bytes: st.size, lastUseMs: st.mtimeMs });
      } catch {
        // Removed by another process between the listing and the stat.
      }
    }
    const bytes = blocks.reduce((n, b) => n + b.bytes, 0);
    const lastUseMs = blocks.length === 0 ? null : Math.max(...blocks.map((b) => b.lastUseMs));
    folders.push({ folder, path, info: readModelInfo(path), blocks, bytes, lastUseMs });
  }
  return folders;
}

export function readModelInfo(dir: string): ModelInfo | null {
  try {
    return JSON.parse(readFileSync(join(dir, MODEL_INFO), "utf8")) as ModelInfo;
  } catch {
    return null;
  }
}

/**
 * Removes the least recently used blocks of every model folder under `root` until they take at
 * most `targetBytes`; returns how many it removed. Safe while other processes read and write: a
 * reader that already opened a removed file reads it whole; one that had not finds it missing.
 */
export async function removeLeastRecentlyUsed(root: string, targetBytes: number): Promise<{ removed: number; bytes: number }> {
  const blocks = scanRoot(root).flatMap((f) => f.blocks).sort((a, b) => a.lastUseMs - b.lastUseMs);
  let bytes = blocks.reduce((n, b) => n + b.bytes, 0);
  let removed = 0;
  for (const block of blocks) {
    if (bytes <= targetBytes) break;
    await unlink(block.path).catch(() => undefined);
    bytes -= block.bytes;
    removed++;
  }
  return { removed, bytes };
}

function isDirectory(path: string): boolean {
  try {
    return statSync(path).isDirectory();
  } catch {
    return false;
  }
}
