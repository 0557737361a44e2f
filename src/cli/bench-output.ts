/**
 * Where a bench's results go: the tables on stdout; `--json FILE` the JSON document (a bare
 * `--json` prints it on stdout instead of the tables); `--chart FILE.svg` the charts;
 * `--compare OLD.json` each figure's ratio to an earlier run. The files named are checked before
 * the bench runs, so a typo costs nothing.
 */
import { existsSync, statSync, writeFileSync } from "node:fs";
import { dirname } from "node:path";
import type { ArgsDef } from "citty";
import { InputError } from "../errors.ts";
import { chartSvg } from "../bench/charts.ts";
import { compareRuns, comparisonNotes, comparisonTables } from "../bench/compare.ts";
import { progress, tablesText } from "../bench/bench-report.ts";
import { readBenchDocument, reportsOf, type BenchDocument } from "../bench/schema.ts";
import type { ParsedValues } from "./options.ts";

export const benchOutputArgs = {
  json: {
    type: "boolean",
    description: "--json FILE: also write every figure, unrounded, as one JSON document to FILE; a bare --json prints the document on stdout instead of the tables",
  },
  chart: { type: "string", description: "Draw the results as one self-contained SVG file (open it in a browser or put it in a README)", valueHint: "file.svg" },
  compare: { type: "string", description: "Print each figure's ratio to the same figure of an earlier --json document, and which figures either side lacks", valueHint: "old.json" },
} as const satisfies ArgsDef;

/** The outputs a run was asked for, checked. */
export interface BenchOutputs {
  /** "stdout": the document instead of the tables; a path: the document there and the tables on stdout; null: tables only. */
  json: "stdout" | string | null;
  chart: string | null;
  compare: { name: string; doc: BenchDocument } | null;
}

/**
 * --json's file: the word after it unless that is another option (`--json out.json`,
 * `--json=out.json`); "-" or nothing means stdout. citty parses --json as a flag, so its file
 * arrives as a stray positional; any other positional is an error.
 */
export function jsonTarget(rawArgs: readonly string[]): BenchOutputs["json"] {
  let target: BenchOutputs["json"] = null;
  const positionals = new Set<number>();
  for (let i = 0; i < rawArgs.length; i++) {
    const arg = rawArgs[i]!;
    if (arg === "--") break;
    if (arg === "--json") {
      const next = rawArgs[i + 1];
      if (next !== undefined && (!next.startsWith("-") || next === "-")) {
        target = next === "-" ? "stdout" : next;
        positionals.add(++i);
      } else target = "stdout";
    } else if (arg.startsWith("--json=")) {
      const value = arg.slice("--json=".length);
      target = value === "" || value === "-" ? "stdout" : value;
    }
  }
  return target;
}

export function checkWritable(path: string, flag: string): string {
  const dir = dirname(path);
  if (!existsSync(dir) || !statSync(dir).isDirectory()) throw new InputError(`${flag} ${path}: folder ${dir} does not exist`);
  if (existsSync(path) && statSync(path).isDirectory()) throw new InputError(`${flag} ${path}: is a folder; give a file name`);
  return path;
}

/** Read and check the options before the bench runs. */
export function benchOutputs(values: ParsedValues, rawArgs: readonly string[]): BenchOutputs {
  const json = jsonTarget(rawArgs);
  if (json !== null && json !== "stdout") checkWritable(json, "--json");
  const chart = typeof values.chart === "string" && values.chart !== "" ? checkWritable(values.chart, "--chart") : null;
  const comparePath = typeof values.compare === "string" && values.compare !== "" ? values.compare : null;
  return { json, chart, compare: comparePath === null ? null : { name: comparePath, doc: readBenchDocument(comparePath, "--compare") } };
}

/** A run's checked outputs and its start date, taken before anything is measured. */
export interface StartedRun {
  out: BenchOutputs;
  date: string;
}

export function startRun(values: ParsedValues, rawArgs: readonly string[]): StartedRun {
  return { out: benchOutputs(values, rawArgs), date: new Date().toISOString() };
}

export function writeFile(path: string, text: string, flag: string): void {
  try {
    writeFileSync(path, text);
  } catch (e) {
    throw new InputError(`${flag} ${path}: cannot write (${(e as NodeJS.ErrnoException).code ?? (e as Error).message})`);
  }
  progress(`wrote ${path}`);
}

export interface FinishedRun {
  /** The document --json writes (one sub-benchmark's report, or bench all's). */
  doc: BenchDocument;
  /** The tables as text, with the machine line and notes. */
  text: string;
}

/** Print and write what the run was asked for. */
export function writeOutputs(run: FinishedRun, out: BenchOutputs): void {
  const jsonText = `${JSON.stringify(run.doc, null, 2)}\n`;
  if (out.json === "stdout") process.stdout.write(jsonText);
  else {
    process.stdout.write(run.text);
    if (out.json !== null) writeFile(out.json, jsonText, "--json");
  }
  if (out.chart !== null) writeFile(out.chart, chartSvg(run.doc), "--chart");
  if (out.compare !== null) {
    const c = compareRuns(reportsOf(run.doc), run.doc.machine, out.compare.doc, out.compare.name);
    // With the document on stdout, stdout stays one JSON document.
    (out.json === "stdout" ? process.stderr : process.stdout).write(`\n${tablesText(comparisonTables(c), comparisonNotes(c))}`);
  }
}
