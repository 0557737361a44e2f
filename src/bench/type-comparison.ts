/**
 * Tensor types of one shape side by side (`--type F32,Q8_0,Q4_K_M`): each figure as a ratio to
 * pagellm's own F32 model of the same shape, measured in the same run, and the decode floor
 * (Q8_0 and Q4_K_M decode at least 1.5x the F32 decode at one thread) checked against it.
 */
import type { ModelMix } from "../synth/gguf-model-writer.ts";
import { decodeTables, type DecodeResult } from "./decode.ts";
import { ratio, type Summary } from "./measure.ts";
import { prefillTables, type PrefillResult } from "./prefill.ts";
import { fmtRatio, fmtSpread, type Table } from "./bench-report.ts";

/** One model's figure at each thread count. */
export interface TypedFigure {
  label: string;
  /** Shape and mix of a random GGUF model; absent for a --model file or a llama2.c model. */
  gguf?: { shape: string; mix: ModelMix };
  rows: { threads: number; value: Summary }[];
}

/** The decode floor this bench must reach: these mixes at least `ratio` times F32 decode of the same shape, at `threads` thread(s). */
export const DECODE_FLOOR = { mixes: ["Q8_0", "Q4_K_M"] as readonly ModelMix[], ratio: 1.5, threads: 1 };

/** Models grouped by shape, the F32 model (else the first) of each group first. */
function byShape(items: readonly TypedFigure[]): TypedFigure[][] {
  const groups = new Map<string, TypedFigure[]>();
  for (const item of items) {
    const key = item.gguf?.shape ?? item.label;
    groups.set(key, [...(groups.get(key) ?? []), item]);
  }
  return [...groups.values()].map((g) => {
    const base = g.find((x) => x.gguf?.mix === "F32") ?? g[0]!;
    return [base, ...g.filter((x) => x !== base)];
  });
}

function valueAt(item: TypedFigure, threads: number): Summary | undefined {
  return item.rows.find((r) => r.threads === threads)?.value;
}

/** One table per shape with several models: `figure` of each, and its ratio to the shape's F32 model. */
export function typeComparisonTables(figure: string, items: readonly TypedFigure[]): Table[] {
  return byShape(items).filter((g) => g.length > 1).map((group) => {
    const base = group[0]!;
    // Within one shape a model is named by its mix alone.
    const name = (m: TypedFigure) => m.gguf?.mix ?? m.label;
    return {
      title: `${figure} of ${base.gguf?.shape ?? base.label} by tensor type, and the ratio to ${name(base)} in the same run; median (min-max)`,
      columns: ["threads", ...group.flatMap((m, i) => (i === 0 ? [name(m)] : [name(m), `vs ${name(base)}`]))],
      rows: base.rows.map(({ threads, value: first }) => [
        String(threads),
        ...group.flatMap((m, i) => {
          const v = valueAt(m, threads);
          if (v === undefined) return i === 0 ? ["-"] : ["-", "-"];
          return i === 0 ? [fmtSpread(v)] : [fmtSpread(v), fmtRatio(ratio(v, first))];
        }),
      ]),
    };
  });
}

/** The floor's verdict for every measured model it applies to: ratio to F32 of the same shape at its thread count. */
export interface FloorCheck {
  label: string;
  ratio: number;
  met: boolean;
}

/** `bench decode` with several models (--type, --f32-baseline, several --shape): each model, and the floor checks. */
export interface DecodeSet {
  models: DecodeResult[];
  /** Q8_0 / Q4_K_M decode against F32 of the same shape at one thread. */
  floor: FloorCheck[];
}

/** `bench prefill` with several models. */
export interface PrefillSet {
  models: PrefillResult[];
}

export function decodeFloorChecks(items: readonly TypedFigure[]): FloorCheck[] {
  const out: FloorCheck[] = [];
  for (const group of byShape(items)) {
    const base = group[0]!;
    const f32 = base.gguf?.mix === "F32" ? valueAt(base, DECODE_FLOOR.threads) : undefined;
    if (f32 === undefined) continue;
    for (const m of group.slice(1)) {
      const v = valueAt(m, DECODE_FLOOR.threads);
      if (v === undefined || m.gguf === undefined || !DECODE_FLOOR.mixes.includes(m.gguf.mix)) continue;
      const r = ratio(v, f32);
      out.push({ label: m.label, ratio: r, met: r >= DECODE_FLOOR.ratio });
    }
  }
  return out;
}

/** The floor checks as a table ([] when none applies). */
export function decodeFloorTables(items: readonly TypedFigure[]): Table[] {
  const checks = decodeFloorChecks(items);
  if (checks.length === 0) return [];
  return [{
    title: `quantized decode floor: ${DECODE_FLOOR.mixes.join(" and ")} decode at least ${DECODE_FLOOR.ratio}x pagellm's F32 decode of the same shape, ${DECODE_FLOOR.threads} thread`,
    columns: ["model", "vs F32", "floor"],
    rows: checks.map((c) => [c.label, fmtRatio(c.ratio), c.met ? "met" : "MISSED"]),
  }];
}

/** Decode results as a TypedFigure of tokens/s. */
function decodeFigure(r: DecodeResult): TypedFigure {
  return { label: r.model, gguf: r.gguf, rows: r.rows.map((x) => ({ threads: x.threads, value: x.tokensPerSecond })) };
}

/**
 * `bench decode`'s results and tables for its models: one model's result as it is, several as a
 * set with the floor checks; the tables of each, then the type comparison and the floor.
 */
export function decodeSet(results: DecodeResult[]): { results: DecodeResult | DecodeSet; tables: Table[] } {
  const figures = results.map(decodeFigure);
  const floor = decodeFloorChecks(figures);
  return {
    results: results.length === 1 && floor.length === 0 ? results[0]! : { models: results, floor },
    tables: [...results.flatMap(decodeTables), ...typeComparisonTables("decode tokens/s", figures), ...decodeFloorTables(figures)],
  };
}

/** `bench prefill`'s results and tables for its models (several: a set), with the type comparison. */
export function prefillSet(results: PrefillResult[]): { results: PrefillResult | PrefillSet; tables: Table[] } {
  const figures = results.map((r): TypedFigure => ({ label: r.model, gguf: r.gguf, rows: r.rows.map((x) => ({ threads: x.threads, value: x.prefillTokensPerSecond })) }));
  return {
    results: results.length === 1 ? results[0]! : { models: results },
    tables: [...results.flatMap(prefillTables), ...typeComparisonTables("prefill tokens/s", figures)],
  };
}
