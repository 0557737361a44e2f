/**
 * `--compare OLD.json`: each figure of this run against the same figure of an earlier one,
 * matched by sub-benchmark and key, as new / old; figures only one side has are listed, and a
 * different machine or Bun is said, since then the ratios measure the machines as much as pagellm.
 */
import type { MachineInfo } from "./machine.ts";
import { fmt, fmtRatio, shortDate, type Figure, type Table } from "./bench-report.ts";
import { reportsOf, type AnyBenchReport, type BenchDocument } from "./schema.ts";

export interface ComparedFigure {
  bench: string;
  key: string;
  unit: string;
  better: Figure["better"];
  old: number;
  new: number;
  /** new / old. */
  ratio: number;
}

export interface Comparison {
  /** The earlier run's file, date and machine. */
  oldName: string;
  oldDate: string;
  figures: ComparedFigure[];
  /** Figures the earlier run has and this one lacks (of the sub-benchmarks this run ran), and the other way round ("bench: key"). */
  onlyOld: string[];
  onlyNew: string[];
  /** Sub-benchmarks the earlier run has and this one did not run. */
  notRun: string[];
  /** "cpu: A -> B" for each machine field that differs. */
  machineChanges: string[];
}

function byKey(reports: readonly AnyBenchReport[]): Map<string, { bench: string; figure: Figure }> {
  const map = new Map<string, { bench: string; figure: Figure }>();
  for (const r of reports) for (const f of r.figures) map.set(`${r.bench}: ${f.key}`, { bench: r.bench, figure: f });
  return map;
}

function machineChanges(a: MachineInfo, b: MachineInfo): string[] {
  const fields: (keyof MachineInfo)[] = ["cpu", "cores", "memoryBytes", "bun", "os", "commit"];
  return fields.filter((f) => a[f] !== b[f]).map((f) => `${f}: ${String(a[f])} -> ${String(b[f])}`);
}

/** This run's reports against an earlier document. */
export function compareRuns(now: readonly AnyBenchReport[], machine: MachineInfo, old: BenchDocument, oldName: string): Comparison {
  const oldFigures = byKey(reportsOf(old));
  const newFigures = byKey(now);
  const figures: ComparedFigure[] = [];
  for (const [id, n] of newFigures) {
    const o = oldFigures.get(id);
    if (o === undefined) continue;
    figures.push({
      bench: n.bench, key: n.figure.key, unit: n.figure.unit, better: n.figure.better,
      old: o.figure.value, new: n.figure.value, ratio: o.figure.value !== 0 ? n.figure.value / o.figure.value : Number.NaN,
    });
  }
  const ran = new Set<string>(now.map((r) => r.bench));
  return {
    oldName, oldDate: old.date ?? "unknown date",
    figures,
    onlyOld: [...oldFigures].filter(([id, o]) => ran.has(o.bench) && !newFigures.has(id)).map(([id]) => id),
    notRun: [...new Set(reportsOf(old).map((r) => r.bench))].filter((b) => !ran.has(b)),
    onlyNew: [...newFigures.keys()].filter((id) => !oldFigures.has(id)),
    machineChanges: old.machine === undefined ? ["the earlier run names no machine"] : machineChanges(old.machine, machine),
  };
}

/** Whether a ratio is an improvement, in words ("-" when unchanged or not a number). */
function verdict(f: ComparedFigure): string {
  if (!Number.isFinite(f.ratio) || f.ratio === 1) return "-";
  return (f.ratio > 1) === (f.better === "higher") ? "better" : "worse";
}

export function comparisonTables(c: Comparison): Table[] {
  const when = /^\d{4}-\d\d-\d\dT/.test(c.oldDate) ? shortDate(c.oldDate) : c.oldDate;
  const tables: Table[] = c.figures.length === 0 ? [] : [{
    title: `against ${c.oldName} (${when}): each figure of this run / the same figure there`,
    columns: ["bench", "figure", "unit", "old", "new", "new/old", "change"],
    rows: c.figures.map((f) => [f.bench, f.key, f.unit, fmt(f.old), fmt(f.new), fmtRatio(f.ratio), verdict(f)]),
  }];
  if (c.onlyOld.length > 0) tables.push({ title: `missing from this run (only in ${c.oldName})`, columns: ["figure"], rows: c.onlyOld.map((k) => [k]) });
  if (c.onlyNew.length > 0) tables.push({ title: `new in this run (not in ${c.oldName})`, columns: ["figure"], rows: c.onlyNew.map((k) => [k]) });
  return tables;
}

/** Units of pagellm's speed (not the machine's bandwidth, not ratios or hit rates): what "overall" averages. */
const SPEED_UNITS = new Set(["tokens/s", "ms", "ns/token", "GFLOP/s"]);

/**
 * Per sub-benchmark, the geometric mean of how many times better each matched speed figure got
 * (new/old where higher is better, old/new where lower is): one number for "faster or slower overall".
 */
export function overallChange(c: Comparison): { bench: string; figures: number; factor: number }[] {
  const byBench = new Map<string, number[]>();
  for (const f of c.figures) {
    if (!SPEED_UNITS.has(f.unit) || !(f.ratio > 0) || !Number.isFinite(f.ratio)) continue;
    const logs = byBench.get(f.bench) ?? [];
    logs.push(Math.log(f.better === "higher" ? f.ratio : 1 / f.ratio));
    byBench.set(f.bench, logs);
  }
  return [...byBench].map(([bench, logs]) => ({ bench, figures: logs.length, factor: Math.exp(logs.reduce((a, b) => a + b, 0) / logs.length) }));
}

export function comparisonNotes(c: Comparison): string[] {
  const notes = [`${c.figures.length} figures matched, ${c.onlyOld.length} only in ${c.oldName}, ${c.onlyNew.length} only in this run`];
  for (const o of overallChange(c)) {
    notes.push(`${o.bench}: ${fmtRatio(o.factor)} ${o.factor >= 1 ? "better" : "worse"} overall (geometric mean over ${o.figures} speed figures, times inverted)`);
  }
  if (c.notRun.length > 0) notes.push(`${c.oldName} also has bench ${c.notRun.join(", ")}, not run now`);
  if (c.machineChanges.length > 0) notes.push(`the runs differ in ${c.machineChanges.join("; ")}`);
  return notes;
}
