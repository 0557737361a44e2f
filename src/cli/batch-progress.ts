/**
 * A one-line progress bar on stderr for batch runs: requests done, tokens/s, prefix cache hit
 * rate. It draws only when stderr is a terminal, at most ten times a second.
 */
import { progressWanted } from "./output.ts";

export interface ProgressState {
  done: number;
  total: number;
  generatedTokens: number;
  cacheHitRate: number;
}

export class ProgressBar {
  private readonly enabled = progressWanted();
  private readonly start = performance.now();
  private lastDraw = 0;

  update(s: ProgressState, force = false): void {
    if (!this.enabled) return;
    const now = performance.now();
    if (!force && now - this.lastDraw < 100) return;
    this.lastDraw = now;
    const width = 24;
    const filled = s.total === 0 ? width : Math.round((s.done / s.total) * width);
    const tps = s.generatedTokens / Math.max(1e-3, (now - this.start) / 1000);
    const line = `[${"=".repeat(filled)}${" ".repeat(width - filled)}] ${s.done}/${s.total} requests | ` +
      `${tps.toFixed(1)} tok/s | cache hit ${(100 * s.cacheHitRate).toFixed(1)}%`;
    process.stderr.write(`\r${line}\x1b[K`);
  }

  /** Clear the line so later messages start clean. */
  end(): void {
    if (this.enabled) process.stderr.write("\r\x1b[K");
  }
}

/**
 * A byte progress bar for loading a model: percentage, MB/s and ETA on stderr, only on a
 * terminal and only for files over `minBytes` (loading a small model is instant).
 */
export function loadProgressBar(label: string, fileBytes: number, minBytes = 100 * 2 ** 20): ((done: number, total: number) => void) | undefined {
  if (!progressWanted() || fileBytes < minBytes) return undefined;
  const start = performance.now();
  let lastDraw = 0;
  return (done, total) => {
    const now = performance.now();
    if (done < total && now - lastDraw < 100) return;
    lastDraw = now;
    const width = 24;
    const filled = Math.round((done / Math.max(1, total)) * width);
    const seconds = (now - start) / 1000;
    const rate = done / 2 ** 20 / Math.max(1e-3, seconds);
    const eta = rate > 0 ? (total - done) / 2 ** 20 / rate : 0;
    const line = `loading ${label} [${"=".repeat(filled)}${" ".repeat(width - filled)}] ${(100 * done / Math.max(1, total)).toFixed(0)}% ` +
      `${(done / 2 ** 20).toFixed(0)}/${(total / 2 ** 20).toFixed(0)} MB, ${rate.toFixed(0)} MB/s, ETA ${eta.toFixed(0)} s`;
    process.stderr.write(done >= total ? "\r\x1b[K" : `\r${line}\x1b[K`);
  };
}
