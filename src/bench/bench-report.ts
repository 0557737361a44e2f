/**
 * How a benchmark's results are shown: readable tables on stdout, and the same figures unrounded
 * in one JSON document (`--json FILE`, or on stdout instead of the tables with a bare `--json`).
 * Progress lines go to stderr, so stdout stays a clean table or a clean document.
 */
import type { Summary } from "./measure.ts";
import { machineLine, type MachineInfo } from "./machine.ts";

export type { MachineInfo } from "./machine.ts";

export interface Table {
  title: string;
  columns: string[];
  rows: string[][];
}

/** Version of the JSON documents' layout; bumped when a field changes meaning or moves. */
export const BENCH_SCHEMA = "pagellm-bench/1";

/**
 * One figure of a report, flat: what `--compare` matches across runs (by bench and key) and
 * divides. `key` names the model, thread count, batch size... and the quantity, e.g.
 * "smollm2-135m Q8_0, 2 threads: decode tokens/s". A Summary contributes its median.
 */
export interface Figure {
  key: string;
  value: number;
  unit: string;
  /** Which direction is an improvement (TTFT and ns/token: lower). */
  better: "higher" | "lower";
}

/**
 * The JSON document of one sub-benchmark. `results` is that bench's own typed result object
 * (see BenchResults in src/bench/schema.ts); `figures` is the flat list derived from it.
 */
export interface BenchReport<R> {
  schema: typeof BENCH_SCHEMA;
  bench: string;
  /** When the run started, ISO 8601 UTC. */
  date: string;
  machine: MachineInfo;
  /** The settings the run used (options after defaults). */
  settings: Record<string, string | number | boolean | string[] | number[]>;
  /** Caveats the reader needs: shapes that differ from the real model, scaled-down workloads. */
  notes: string[];
  results: R;
  figures: Figure[];
}

/** A date as the reports print it: "2026-11-24 10:31 UTC". */
export function shortDate(iso: string): string {
  return `${iso.slice(0, 10)} ${iso.slice(11, 16)} UTC`;
}

/** Where progress lines go: stderr, unless the front end sets its own sink (the CLI's honours --quiet). */
let progressSink = (line: string): void => {
  process.stderr.write(`${line}\n`);
};

export function setProgressSink(sink: (line: string) => void): void {
  progressSink = sink;
}

/** Progress on stderr: benches run for minutes and should say what they are doing. */
export function progress(line: string): void {
  progressSink(`[bench] ${line}`);
}

/** The report as text: a line naming the bench and machine, the tables, the notes. */
export function reportText(report: Pick<BenchReport<unknown>, "bench" | "machine" | "date" | "notes">, tables: readonly Table[]): string {
  return `pagellm bench ${report.bench} — ${machineLine(report.machine, shortDate(report.date))}\n\n${tablesText(tables, report.notes)}`;
}

/** Tables, then notes, as text. */
export function tablesText(tables: readonly Table[], notes: readonly string[]): string {
  const lines: string[] = [];
  for (const t of tables) lines.push(...renderTable(t), "");
  for (const n of notes) lines.push(`note: ${n}`);
  return `${lines.join("\n").trimEnd()}\n`;
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

/** "1 thread", "2 threads". */
export function threadsLabel(n: number): string {
  return `${n} thread${n === 1 ? "" : "s"}`;
}

/**
 * A figure from a Summary (its median) or a plain number, as a list of none or one: a value
 * that is not finite (a ratio to nothing) is not a figure.
 */
export function figure(key: string, value: Summary | number, unit: string, better: Figure["better"] = "higher"): Figure[] {
  const v = typeof value === "number" ? value : value.median;
  return Number.isFinite(v) ? [{ key, value: v, unit, better }] : [];
}
