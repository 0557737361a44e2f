/**
 * A one-line progress bar on stderr for batch runs: requests done, tokens/s, prefix cache hit
 * rate. It draws only when stderr is a terminal, at most ten times a second.
 */
export interface ProgressState {
  done: number;
  total: number;
  generatedTokens: number;
  cacheHitRate: number;
}

export class ProgressBar {
  private readonly enabled = process.stderr.isTTY === true;
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
