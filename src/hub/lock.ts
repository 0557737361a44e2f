/**
 * A lock file shared between processes: created with O_EXCL (open flag "wx"), holding the owner's pid.
 * A lock whose owner process is gone is stale and is taken over; so is one that nobody has touched for
 * STALE_AFTER_MS (a crashed owner on another host sharing the cache). Holders refresh the mtime while
 * they make progress, so a slow download is not mistaken for a dead one.
 *
 * huggingface_hub locks the same path with flock() and leaves the (empty) file behind afterwards. An
 * empty lock is therefore judged by activity: it is stale once neither it nor the download it guards
 * (`activityPath`, the .incomplete file) has changed for FOREIGN_IDLE_MS.
 */
import { closeSync, mkdirSync, openSync, readFileSync, statSync, unlinkSync, utimesSync, writeSync } from "node:fs";
import { dirname } from "node:path";

const POLL_MS = 50;
const STALE_AFTER_MS = 10 * 60 * 1000;
const FOREIGN_IDLE_MS = 30 * 1000;

export class FileLock {
  private constructor(readonly path: string) {}

  /** Wait until the lock is ours; stale locks are broken. */
  static async acquire(path: string, activityPath?: string): Promise<FileLock> {
    mkdirSync(dirname(path), { recursive: true });
    for (;;) {
      if (tryCreate(path)) return new FileLock(path);
      if (isStale(path, activityPath)) {
        try {
          unlinkSync(path);
        } catch {
          // another waiter broke it first
        }
        continue;
      }
      await Bun.sleep(POLL_MS);
    }
  }

  /** Mark the lock alive (call while making progress). */
  touch(): void {
    const now = new Date();
    try {
      utimesSync(this.path, now, now);
    } catch {
      // broken by someone who judged us stale; the final rename is still atomic
    }
  }

  release(): void {
    try {
      unlinkSync(this.path);
    } catch {
      // already gone
    }
  }
}

function tryCreate(path: string): boolean {
  try {
    const fd = openSync(path, "wx");
    writeSync(fd, `${process.pid}\n`);
    closeSync(fd);
    return true;
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "EEXIST") return false;
    throw error;
  }
}

function isStale(path: string, activityPath: string | undefined): boolean {
  let pid: number;
  let mtimeMs: number;
  try {
    pid = Number.parseInt(readFileSync(path, "utf8"), 10);
    mtimeMs = statSync(path).mtimeMs;
  } catch {
    return false; // vanished: the next tryCreate decides
  }
  if (Date.now() - mtimeMs > STALE_AFTER_MS) return true;
  if (Number.isInteger(pid) && pid > 0) return !processAlive(pid);
  // No pid: a huggingface_hub flock file (or ours, between create and write).
  return Date.now() - Math.max(mtimeMs, modifiedMs(activityPath)) > FOREIGN_IDLE_MS;
}

function modifiedMs(path: string | undefined): number {
  if (path === undefined) return 0;
  try {
    return statSync(path).mtimeMs;
  } catch {
    return 0;
  }
}

function processAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === "EPERM";
  }
}
