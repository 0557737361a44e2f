/**
 * The JSON documents `pagellm bench ... --json FILE` writes, one schema per sub-benchmark: the
 * common envelope (BenchReport in bench-report.ts: schema, bench, date, machine, settings, notes,
 * results, figures) around that bench's own typed results (BenchResults below). `bench all`
 * writes one AllDocument holding every sub-benchmark's report. Reading one back checks the
 * envelope, so --compare and `bench chart` fail with one line on a file that is not one.
 */
import { readFileSync } from "node:fs";
import { InputError } from "../errors.ts";
import { batchFigures, type BatchResult } from "./batch-decode.ts";
import { decodeFigures, type DecodeResult } from "./decode.ts";
import { kernelsFigures, type KernelsResult } from "./kernel-speed.ts";
import { machineInfo, type MachineInfo } from "./machine.ts";
import { prefillFigures, type PrefillResult } from "./prefill.ts";
import { prefixFigures, type PrefixResult } from "./prefix.ts";
import { BENCH_SCHEMA, type BenchReport, type Figure } from "./bench-report.ts";
import type { DecodeSet, PrefillSet } from "./type-comparison.ts";
import type { ServeBenchResult } from "./serve/serve-bench.ts";
import { serveFigures } from "./serve/serve-report.ts";
import { restartFigures, type RestartResult } from "./prefix-restart.ts";
import { embedFigures, type EmbedResult } from "./embed-throughput.ts";
import { threadScalingFigures, type ThreadScalingResult } from "./thread-scaling.ts";

/** Each sub-benchmark's `results`. */
export interface BenchResults {
  kernels: KernelsResult;
  /** One model: its DecodeResult; several: a DecodeSet. */
  decode: DecodeResult | DecodeSet;
  /** One model: its PrefillResult; several: a PrefillSet. */
  prefill: PrefillResult | PrefillSet;
  batch: BatchResult;
  prefix: PrefixResult;
  serve: ServeBenchResult;
  /** `bench prefix --restart`: fresh processes, cold vs the disk KV cache warm. */
  "prefix-restart": RestartResult;
  embed: EmbedResult;
  /** `bench threads`: prefill, decode and batched decode from one thread up, next to llama.cpp's scaling. */
  threads: ThreadScalingResult;
}

export type BenchName = keyof BenchResults;
export const BENCH_NAMES: readonly BenchName[] = ["kernels", "decode", "prefill", "batch", "prefix", "serve", "prefix-restart", "embed", "threads"];

/** A sub-benchmark's name and results, typed together. */
export type BenchRun = { [K in BenchName]: { bench: K; results: BenchResults[K] } }[BenchName];

/** The report of one sub-benchmark, typed by its name. */
export type AnyBenchReport = { [K in BenchName]: BenchReport<BenchResults[K]> & { bench: K } }[BenchName];

/** What `bench all` writes: the machine once, and each sub-benchmark's report in the order run. */
export interface AllDocument {
  schema: typeof BENCH_SCHEMA;
  bench: "all";
  date: string;
  machine: MachineInfo;
  /** Wall time of the whole set, seconds. */
  elapsedSeconds: number;
  settings: BenchReport<unknown>["settings"];
  notes: string[];
  reports: AnyBenchReport[];
}

export type BenchDocument = AnyBenchReport | AllDocument;

export function decodeResultsOf(r: BenchResults["decode"]): DecodeResult[] {
  return "models" in r ? r.models : [r];
}

export function prefillResultsOf(r: BenchResults["prefill"]): PrefillResult[] {
  return "models" in r ? r.models : [r];
}

/** The flat figures of a sub-benchmark's results. */
export function figuresOf(report: BenchRun): Figure[] {
  switch (report.bench) {
    case "kernels":
      return kernelsFigures(report.results);
    case "decode":
      return decodeResultsOf(report.results).flatMap(decodeFigures);
    case "prefill":
      return prefillResultsOf(report.results).flatMap(prefillFigures);
    case "batch":
      return batchFigures(report.results);
    case "prefix":
      return prefixFigures(report.results);
    case "serve":
      return serveFigures(report.results);
    case "prefix-restart":
      return restartFigures(report.results);
    case "embed":
      return embedFigures(report.results);
    case "threads":
      return threadScalingFigures(report.results);
  }
}

/** A sub-benchmark's report: the envelope around its results, and the figures --compare matches. */
export function makeReport<K extends BenchName>(
  bench: K, date: string, settings: BenchReport<unknown>["settings"], notes: string[], results: BenchResults[K],
): AnyBenchReport {
  const partial = { schema: BENCH_SCHEMA, bench, date, machine: machineInfo(), settings, notes, results, figures: [] } as AnyBenchReport;
  return { ...partial, figures: figuresOf(partial) };
}

/** The sub-benchmark reports of a document: itself, or those `bench all` holds. */
export function reportsOf(doc: BenchDocument): AnyBenchReport[] {
  return doc.bench === "all" ? doc.reports : [doc];
}

type JsonObject = Record<string, unknown>;

function isObject(v: unknown): v is JsonObject {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

/** Check one report's envelope; a report written before `figures` existed gets them from its results. */
function checkReport(v: unknown, where: string): AnyBenchReport {
  if (!isObject(v)) throw new InputError(`${where}: not a bench report (an object with bench, machine and results)`);
  const bench = v.bench;
  if (typeof bench !== "string" || !(BENCH_NAMES as readonly string[]).includes(bench)) {
    throw new InputError(`${where}: "bench" is ${JSON.stringify(bench)}, not one of ${[...BENCH_NAMES, "all"].join(", ")}`);
  }
  if (!isObject(v.results)) throw new InputError(`${where}: no "results" object`);
  let figures = v.figures;
  if (figures === undefined) {
    try {
      figures = figuresOf(v as unknown as AnyBenchReport);
    } catch {
      throw new InputError(`${where}: its ${bench} results lack the fields this pagellm reads (written by another version?)`);
    }
  }
  if (!Array.isArray(figures) || !figures.every((f) => isObject(f) && typeof f.key === "string" && typeof f.value === "number")) {
    throw new InputError(`${where}: "figures" must be a list of {key, value, unit, better}`);
  }
  return { ...(v as unknown as AnyBenchReport), figures: figures as Figure[] };
}

/** Parse and check a document from its text; `name` names it in errors. */
export function parseBenchDocument(text: string, name: string): BenchDocument {
  let v: unknown;
  try {
    v = JSON.parse(text);
  } catch (e) {
    throw new InputError(`${name}: not JSON (${(e as Error).message}); give a file written by pagellm bench --json`);
  }
  if (!isObject(v)) throw new InputError(`${name}: not a pagellm bench document`);
  if (v.schema !== undefined && v.schema !== BENCH_SCHEMA) {
    throw new InputError(`${name}: schema ${JSON.stringify(v.schema)}; this pagellm reads ${BENCH_SCHEMA}`);
  }
  if (v.bench !== "all") return checkReport(v, name);
  if (!Array.isArray(v.reports)) throw new InputError(`${name}: a "bench all" document without "reports"`);
  const reports = v.reports.map((r, i) => checkReport(r, `${name} reports[${i}]`));
  return { ...(v as unknown as AllDocument), reports };
}

/** Read a document written by --json; `option` (e.g. "--compare") names where the path came from in errors. */
export function readBenchDocument(path: string, option?: string): BenchDocument {
  let text: string;
  try {
    text = readFileSync(path, "utf8");
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    const where = option === undefined ? "" : ` (${option}: a --json document of an earlier run)`;
    throw new InputError(code === "ENOENT" ? `${path}: file not found${where}` : `${path}: cannot read (${code ?? (e as Error).message})${where}`);
  }
  return parseBenchDocument(text, path);
}
