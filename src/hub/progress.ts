/**
 * Download progress on stderr: bytes done of total, percentage, speed and ETA, redrawn at most ten
 * times a second, and only when stderr is a terminal (pipes and logs stay clean).
 */
export class DownloadProgress {
  private readonly enabled: boolean;
  private readonly start = performance.now();
  private lastDraw = 0;

  constructor(
    private readonly label: string,
    private readonly total: number,
    /** Bytes already on disk when this run started (a resumed download); not counted in the speed. */
    private readonly resumedFrom: number,
    enabled = process.stderr.isTTY === true,
  ) {
    this.enabled = enabled;
  }

  update(done: number, force = false): void {
    if (!this.enabled) return;
    const now = performance.now();
    if (!force && now - this.lastDraw < 100) return;
    this.lastDraw = now;
    process.stderr.write(`\r${progressLine(this.label, done, this.total, done - this.resumedFrom, (now - this.start) / 1000)}\x1b[K`);
  }

  end(): void {
    if (this.enabled) process.stderr.write("\r\x1b[K");
  }
}

/** One progress line: "name  [=====     ]  45%  12.1/27.0 MiB  3.2 MiB/s  ETA 0:05". */
export function progressLine(label: string, done: number, total: number, transferred: number, seconds: number): string {
  const width = 20;
  const fraction = total > 0 ? Math.min(1, done / total) : 0;
  const filled = Math.round(fraction * width);
  const speed = seconds > 0 ? transferred / seconds : 0;
  const eta = speed > 0 ? (total - done) / speed : Number.NaN;
  return `${label}  [${"=".repeat(filled)}${" ".repeat(width - filled)}] ${(fraction * 100).toFixed(0).padStart(3)}%  ` +
    `${formatBytes(done)}/${formatBytes(total)}  ${formatBytes(speed)}/s  ETA ${formatDuration(eta)}`;
}

export function formatBytes(bytes: number): string {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let value = bytes;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit++;
  }
  return unit === 0 ? `${value.toFixed(0)} B` : `${value.toFixed(1)} ${units[unit]}`;
}

function formatDuration(seconds: number): string {
  if (!Number.isFinite(seconds)) return "--:--";
  const s = Math.round(seconds);
  const h = Math.floor(s / 3600);
  const m = Math.floor((s % 3600) / 60);
  const rest = String(s % 60).padStart(2, "0");
  return h > 0 ? `${h}:${String(m).padStart(2, "0")}:${rest}` : `${m}:${rest}`;
}
