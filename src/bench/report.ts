/**
 * How a benchmark's results are shown: readable tables on stdout, or with --json one JSON
 * document holding the same figures unrounded. Progress lines go to stderr, so stdout stays a
 * clean table or a clean document.
 */
import { availableParallelism, cpus } from "node:os";
import type { Summary } from "./measure.ts";
import { info } from "../cli/output.ts";

export interface Table {
  title: string;
  columns: string[];
  rows: string[][];
}

/** Where a result was measured: the only context that makes figures comparable. */
export interface MachineInfo {
  cpu: string;
  cores: number;
  bun: string;
  platform: string;
}

export interface BenchReport<R> {
  bench: string;
  machine: MachineInfo;
  /** The settings the run used (options after defaults). */
  settings: Record<string, string | number | boolean | string[] | number[]>;
  /** Caveats the reader needs: shapes that differ from the real model, scaled-down workloads. */
  notes: string[];
  results: R;
}

export function machineInfo(): MachineInfo {
  return { cpu: cpus()[0]?.model ?? "unknown", cores: availableParallelism(), bun: Bun.version, platform: `${process.platform}-${process.arch}` };
}

/** Progress on stderr: benches run for minutes and should say what they are doing. */
export function progress(line: string): void {
  info(`[bench] ${line}`);
}

/** Print a report: JSON (one document) or the tables with the notes under them. */
export function printReport<R>(report: BenchReport<R>, tables: Table[], json: boolean): void {
  if (json) {
    process.stdout.write(`${JSON.stringify(report, null, 2)}\n`);
    return;
  }
  const m = report.machine;
  const lines = [`pagellm bench ${report.bench} — ${m.cpu}, ${m.cores} cores, Bun ${m.bun}`, ""];
  for (const t of tables) lines.push(...renderTable(t), "");
  for (const n of report.notes) lines.push(`note: ${n}`);
  process.stdout.write(`${lines.join("\n").trimEnd()}\n`);
}

/** A table as aligned text: numbers right-aligned, text left-aligned. */
export function renderTable(t: Table): string[] {
  const widths = t.columns.map((c, i) => Math.max(c.length, ...t.rows.map((r) => (r[i] ?? "").length)));
  const numeric = t.columns.map((_, i) => t.rows.length > 0 && t.rows.every((r) => /^[-+]?[\d.,]+[x%]?$|^-$/.test(r[i] ?? "")));
  const cell = (s: string, i: number) => (numeric[i] ? s.padStart(widths[i]!) : s.padEnd(widths[i]!));
  const line = (cells: string[]) => cells.map(cell).join("  ").trimEnd();
  return [t.title, line(t.columns), widths.map((w) => "-".repeat(w)).join("  "), ...t.rows.map(line)];
}

/** A number with `digits` significant figures (at least the integer part), or "-" when not finite. */
export function fmt(x: number, digits = 3): string {
  if (!Number.isFinite(x)) return "-";
  if (x === 0) return "0";
  const magnitude = Math.floor(Math.log10(Math.abs(x))) + 1;
  return x.toFixed(Math.max(0, digits - magnitude));
}

/** A ratio as "1.23x". */
export function fmtRatio(x: number): string {
  return Number.isFinite(x) ? `${x.toFixed(2)}x` : "-";
}

/** A fraction as "12.3%" (small ones with two significant figures: "0.023%"). */
export function fmtPct(x: number): string {
  if (!Number.isFinite(x)) return "-";
  return x !== 0 && Math.abs(x) < 0.001 ? `${fmt(100 * x, 2)}%` : `${(100 * x).toFixed(1)}%`;
}

/** "median (min-max)" of a summary. */
export function fmtSpread(s: Summary, digits = 3): string {
  return `${fmt(s.median, digits)} (${fmt(s.min, digits)}-${fmt(s.max, digits)})`;
}
