/**
 * The Hugging Face hub cache, laid out exactly as huggingface_hub writes it, so files that
 * huggingface-cli or llama.cpp already downloaded are found and ours are found by them:
 *
 *   $HF_HUB_CACHE (or $HF_HOME/hub, or ~/.cache/huggingface/hub)
 *     models--OWNER--REPO/
 *       blobs/<etag>                    file contents, named by the LFS SHA-256 (or git blob SHA-1)
 *       blobs/<etag>.incomplete         a download in progress (never under the final name)
 *       snapshots/<commit>/<file>       relative symlink to ../../blobs/<etag>
 *       refs/main                       the commit that main pointed at when last downloaded
 *     .locks/models--OWNER--REPO/<etag>.lock
 */
import { existsSync, lstatSync, mkdirSync, readFileSync, readdirSync, readlinkSync, renameSync, rmSync, rmdirSync, symlinkSync, unlinkSync, writeFileSync } from "node:fs";
import { homedir } from "node:os";
import { dirname, join, relative, resolve, sep } from "node:path";

/** The hub cache folder, honouring HF_HUB_CACHE and HF_HOME like huggingface_hub. */
export function hubCacheDir(env: NodeJS.ProcessEnv = process.env): string {
  if (env.HF_HUB_CACHE) return env.HF_HUB_CACHE;
  const home = env.HF_HOME || join(env.XDG_CACHE_HOME || join(homedir(), ".cache"), "huggingface");
  return join(home, "hub");
}

/** Where one repository's files live in the cache. */
export class RepoCache {
  readonly dir: string;
  readonly lockDir: string;

  constructor(
    readonly cacheDir: string,
    readonly repo: string,
  ) {
    const folder = `models--${repo.replaceAll("/", "--")}`;
    this.dir = join(cacheDir, folder);
    this.lockDir = join(cacheDir, ".locks", folder);
  }

  blobPath(etag: string): string {
    return join(this.dir, "blobs", etag);
  }

  snapshotPath(commit: string, file: string): string {
    return join(this.dir, "snapshots", commit, ...file.split("/"));
  }

  lockPath(etag: string): string {
    return join(this.lockDir, `${etag}.lock`);
  }

  /** The commit refs/<revision> holds, or null. */
  readRef(revision = "main"): string | null {
    try {
      const commit = readFileSync(join(this.dir, "refs", revision), "utf8").trim();
      return /^[0-9a-f]{40}$/.test(commit) ? commit : null;
    } catch {
      return null;
    }
  }

  writeRef(commit: string, revision = "main"): void {
    if (this.readRef(revision) === commit) return;
    const path = join(this.dir, "refs", revision);
    mkdirSync(dirname(path), { recursive: true });
    const tmp = `${path}.${process.pid}.tmp`;
    writeFileSync(tmp, commit);
    renameSync(tmp, path);
  }

  /** The cached copy of `file` at main's commit, when refs/main and the snapshot entry both exist. */
  cachedFile(file: string): string | null {
    const commit = this.readRef();
    if (commit === null) return null;
    const path = this.snapshotPath(commit, file);
    return existsSync(path) ? path : null;
  }

  /** Files (relative paths) in main's snapshot, or [] when nothing is cached. */
  snapshotFiles(): string[] {
    const commit = this.readRef();
    if (commit === null) return [];
    return listFiles(join(this.dir, "snapshots", commit));
  }

  /**
   * Point snapshots/<commit>/<file> at blobs/<etag> with a relative symlink, as huggingface_hub does
   * (atomically: a temporary link renamed over the final name).
   */
  linkSnapshot(commit: string, file: string, etag: string): string {
    const link = this.snapshotPath(commit, file);
    mkdirSync(dirname(link), { recursive: true });
    const target = relative(dirname(link), this.blobPath(etag));
    const tmp = `${link}.${process.pid}.tmp`;
    rmSync(tmp, { force: true });
    symlinkSync(target, tmp);
    renameSync(tmp, link);
    return link;
  }
}

/** Relative paths of the files (and file symlinks) under `dir`, recursively; [] when it does not exist. */
export function listFiles(dir: string): string[] {
  if (!existsSync(dir)) return [];
  const out: string[] = [];
  for (const entry of readdirSync(dir, { withFileTypes: true, recursive: true })) {
    if (entry.isDirectory()) continue;
    const full = join(entry.parentPath, entry.name);
    out.push(relative(dir, full).split(sep).join("/"));
  }
  return out.sort();
}

/** One GGUF file found in the cache. */
export interface CachedModel {
  readonly repo: string;
  readonly file: string;
  readonly commit: string;
  /** The snapshot path (a symlink into blobs/). */
  readonly path: string;
  /** Whether this commit is the one refs/main names. */
  readonly isMain: boolean;
}

/** Every GGUF file in every snapshot of every model repository in the cache. */
export function listCachedModels(cacheDir: string): CachedModel[] {
  if (!existsSync(cacheDir)) return [];
  const out: CachedModel[] = [];
  for (const folder of readdirSync(cacheDir).sort()) {
    if (!folder.startsWith("models--")) continue;
    const repo = folder.slice("models--".length).replace("--", "/");
    const cache = new RepoCache(cacheDir, repo);
    const main = cache.readRef();
    const snapshots = join(cache.dir, "snapshots");
    if (!existsSync(snapshots)) continue;
    for (const commit of readdirSync(snapshots).sort()) {
      for (const file of listFiles(join(snapshots, commit))) {
        if (!/\.gguf$/i.test(file)) continue;
        const path = cache.snapshotPath(commit, file);
        if (!existsSync(path)) continue; // dangling link: blob removed
        out.push({ repo, file, commit, path, isMain: commit === main });
      }
    }
  }
  return out;
}

/**
 * Remove `file` from every snapshot of the repository, and each blob it pointed at that no other
 * snapshot entry still uses; then empty snapshot folders, and the repository folder when no snapshot
 * is left. Returns the paths removed (links and blobs).
 */
export function removeCachedFile(cache: RepoCache, file: string): string[] {
  const snapshots = join(cache.dir, "snapshots");
  if (!existsSync(snapshots)) return [];
  const removed: string[] = [];
  const blobsFreed = new Set<string>();
  for (const commit of readdirSync(snapshots)) {
    const link = cache.snapshotPath(commit, file);
    if (!isPresent(link)) continue;
    const blob = blobTarget(link);
    unlinkSync(link);
    removed.push(link);
    if (blob !== null) blobsFreed.add(blob);
    pruneEmptyDirs(dirname(link), snapshots);
  }
  const stillUsed = new Set(
    existsSync(snapshots) ? readdirSync(snapshots).flatMap((c) => listFiles(join(snapshots, c)).map((f) => blobTarget(cache.snapshotPath(c, f)))) : [],
  );
  for (const blob of blobsFreed) {
    if (stillUsed.has(blob) || !existsSync(blob)) continue;
    unlinkSync(blob);
    removed.push(blob);
  }
  if (!existsSync(snapshots) || readdirSync(snapshots).length === 0) {
    rmSync(cache.dir, { recursive: true, force: true });
    rmSync(cache.lockDir, { recursive: true, force: true });
  }
  return removed;
}

function isPresent(path: string): boolean {
  try {
    lstatSync(path);
    return true;
  } catch {
    return false;
  }
}

/** The absolute blob path a snapshot symlink points at; null for a plain file (no blob to free). */
function blobTarget(link: string): string | null {
  try {
    if (!lstatSync(link).isSymbolicLink()) return null;
    return resolve(dirname(link), readlinkSync(link));
  } catch {
    return null;
  }
}

/** Remove `dir` and its parents up to and including a snapshot folder while they are empty; `stop` stays. */
function pruneEmptyDirs(dir: string, stop: string): void {
  let current = dir;
  while (current !== stop && current.startsWith(stop)) {
    if (readdirSync(current).length > 0) return;
    rmdirSync(current);
    current = dirname(current);
  }
  if (current === stop && readdirSync(stop).length === 0) rmdirSync(stop);
}
