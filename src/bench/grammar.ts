/**
 * `pagellm bench grammar`: MaskBench's method (github.com/guidance-ai/jsonschemabench, maskbench/
 * runner.py; ../shared/grammar/README.md) on a folder of its files. For each file: compile the
 * schema (a failure is a compile error); for each test instance, serialize `data` as Python's
 * `json.dumps(data, indent=None, ensure_ascii=False)`, tokenize it without special tokens and feed
 * the tokens one by one, computing the mask before each and then committing the token; the
 * instance is accepted when every token was allowed. A valid instance refused is a validation
 * error, an invalid one accepted an invalidation error; a schema passes when it compiles and has
 * neither. Times: per mask (compute + commit, as MaskBench times them) and per compile.
 *
 * Engines plug in through MaskBenchEngine, so another implementation runs through exactly this
 * code (docs/structured-output.md measures web-xgrammar this way).
 */
import { readdirSync, readFileSync, writeFileSync } from "node:fs";
import { loadavg } from "node:os";
import { join } from "node:path";
import { GrammarError, InputError } from "../errors.ts";
import { GrammarCompiler } from "../grammar/compiler.ts";
import { GRAMMAR_LIMITS } from "../grammar/limits.ts";
import { isObject, parseJsonText, pythonJsonDumps, type JsonValue } from "../grammar/json-value.ts";
import { GrammarMatcher } from "../grammar/matcher.ts";
import type { TokenVocabulary } from "../grammar/vocabulary.ts";
import { machineInfo } from "./machine.ts";
import { fmt, fmtPct, progress, reportText, type Table } from "./bench-report.ts";

/** One MaskBench file: its schema and test instances. */
export interface MaskBenchFile {
  readonly name: string;
  readonly schema: JsonValue;
  readonly tests: readonly { readonly valid: boolean; readonly data: JsonValue }[];
}

/** A grammar engine as MaskBench drives it (its Engine class: compile, reset, compute_mask, commit_token). */
export interface MaskBenchEngine {
  readonly name: string;
  /** Compile a schema; throws (or rejects) when it cannot: a compile error. */
  compile(schema: JsonValue): MaskBenchGrammar | Promise<MaskBenchGrammar>;
}
export interface MaskBenchGrammar {
  /** A matcher at the start (MaskBench's reset). */
  start(): MaskBenchSession | Promise<MaskBenchSession>;
}
/** An engine whose API is asynchronous (web-xgrammar's) returns promises; their awaiting is timed too. */
export interface MaskBenchSession {
  computeMask(): void | Promise<void>;
  /** Whether the token was allowed by the last mask (and, if so, take it). */
  commit(token: number): boolean;
}

export interface MaskBenchFailure {
  readonly file: string;
  readonly kind: "compile_error" | "validation_error" | "invalidation_error";
  readonly why: string;
}

export interface Percentiles {
  readonly [name: string]: number;
}

export interface MaskBenchResult {
  readonly engine: string;
  readonly schemas: number;
  readonly passing: number;
  readonly compile_error: number;
  readonly validation_error: number;
  readonly invalidation_error: number;
  readonly tokens: number;
  readonly mask_us: { p25: number; p50: number; p75: number; p90: number; p95: number; p99: number; p999: number; max: number };
  readonly compile_us: { p50: number; p90: number; p99: number };
  /** Seconds of the run: wall clock, and the process's CPU time (user + system; against wall, how much a busy machine took). */
  readonly wall_s: number;
  readonly cpu_s: number;
  readonly failures: readonly MaskBenchFailure[];
}

/** The MaskBench files of a folder (*.json), by name. */
export function readMaskBenchFiles(dir: string): MaskBenchFile[] {
  let names: string[];
  try {
    names = readdirSync(dir).filter((n) => n.endsWith(".json")).sort();
  } catch {
    throw new InputError(`${dir}: not a readable folder`);
  }
  if (names.length === 0) throw new InputError(`${dir}: no MaskBench files (*.json)`);
  return names.map((name) => {
    const path = join(dir, name);
    let doc: JsonValue;
    try {
      doc = parseJsonText(readFileSync(path, "utf8"), path);
    } catch (e) {
      throw new InputError(e instanceof GrammarError ? e.message : `${path}: cannot read`);
    }
    const tests = isObject(doc) ? doc.get("tests") : undefined;
    if (!isObject(doc) || !doc.has("schema") || !Array.isArray(tests)) throw new InputError(`${path}: not a MaskBench file (needs "schema" and "tests")`);
    return {
      name,
      schema: doc.get("schema")!,
      tests: tests.filter(isObject).map((t) => ({ valid: t.get("valid") === true, data: t.get("data") ?? null })),
    };
  });
}

/**
 * pagellm's engine, one compiler (and so one shared mask cache) for the whole run. Each schema is
 * compiled once, so the compiler keeps only a few grammars: the server's 256 would hold the parser
 * tables of 256 schemas for nothing.
 */
export function pagellmEngine(vocab: TokenVocabulary): MaskBenchEngine {
  const compiler = new GrammarCompiler(vocab, GRAMMAR_LIMITS.compileMs, { cacheEntries: 4 });
  const mask = new Uint32Array(vocab.words);
  return {
    name: "pagellm",
    compile(schema) {
      const grammar = compiler.compile({ kind: "json_schema", schema });
      return {
        start() {
          const m = new GrammarMatcher(grammar);
          return {
            computeMask: () => m.fillNextTokenBitmask(mask),
            commit: (t) => ((mask[t >>> 5]! >>> (t & 31)) & 1) === 1 && m.acceptToken(t),
          };
        },
      };
    },
  };
}

/** Run MaskBench's method over the files. `tokenize` splits text as the vocabulary's tokenizer does. */
export async function runMaskBench(
  files: readonly MaskBenchFile[], engine: MaskBenchEngine, tokenize: (text: string) => number[], onFile?: (done: number) => void,
): Promise<MaskBenchResult> {
  const maskUs: number[] = [];
  const compileUs: number[] = [];
  const failures: MaskBenchFailure[] = [];
  let passing = 0;
  const wall0 = performance.now();
  const cpu0 = process.cpuUsage();
  for (const [index, file] of files.entries()) {
    onFile?.(index);
    const outcome = await runMaskBenchFile(file, engine, tokenize, maskUs);
    if (outcome.compileUs !== null) compileUs.push(outcome.compileUs);
    if (outcome.failure === null) passing++;
    else failures.push(outcome.failure);
  }
  const cpu = process.cpuUsage(cpu0);
  const wall_s = (performance.now() - wall0) / 1000;
  const count = (kind: MaskBenchFailure["kind"]): number => failures.filter((f) => f.kind === kind).length;
  maskUs.sort((a, b) => a - b);
  compileUs.sort((a, b) => a - b);
  const p = (xs: readonly number[], q: number): number => percentile(xs, q);
  return {
    engine: engine.name,
    schemas: files.length,
    passing,
    compile_error: count("compile_error"),
    validation_error: count("validation_error"),
    invalidation_error: count("invalidation_error"),
    tokens: maskUs.length,
    mask_us: { p25: p(maskUs, 25), p50: p(maskUs, 50), p75: p(maskUs, 75), p90: p(maskUs, 90), p95: p(maskUs, 95), p99: p(maskUs, 99), p999: p(maskUs, 99.9), max: maskUs[maskUs.length - 1] ?? NaN },
    compile_us: { p50: p(compileUs, 50), p90: p(compileUs, 90), p99: p(compileUs, 99) },
    wall_s,
    cpu_s: (cpu.user + cpu.system) / 1e6,
    failures,
  };
}

/** What one file gave: its failure (null: it passed) and its compile time (null: it did not compile). */
export interface MaskBenchOutcome {
  readonly failure: MaskBenchFailure | null;
  readonly compileUs: number | null;
}

/**
 * One file by MaskBench's method; each mask's time is appended to `maskUs`. A schema the engine
 * cannot compile, or whose masks go over the engine's bounds (a GrammarError while matching:
 * pagellm's per-grammar mask limits), is a compile error, so one hostile schema costs at most the
 * limits and the run goes on.
 */
export async function runMaskBenchFile(
  file: MaskBenchFile, engine: MaskBenchEngine, tokenize: (text: string) => number[], maskUs: number[],
): Promise<MaskBenchOutcome> {
  const compileError = (e: unknown, compileUs: number | null): MaskBenchOutcome =>
    ({ failure: { file: file.name, kind: "compile_error", why: e instanceof Error ? e.message : String(e) }, compileUs });
  let grammar: MaskBenchGrammar;
  const t0 = performance.now();
  try {
    grammar = await engine.compile(file.schema);
  } catch (e) {
    return compileError(e, null);
  }
  const compileUs = (performance.now() - t0) * 1000;
  let invalidation: string | null = null;
  let validation: string | null = null;
  for (const [i, test] of file.tests.entries()) {
    let accepted: boolean;
    try {
      accepted = await acceptsAll(await grammar.start(), tokenize(pythonJsonDumps(test.data)), maskUs);
    } catch (e) {
      if (!(e instanceof GrammarError)) throw e;
      return compileError(e, compileUs);
    }
    if (accepted && !test.valid) invalidation ??= `test #${i}: should reject but didn't`;
    if (!accepted && test.valid) validation ??= `test #${i}: should accept but didn't`;
  }
  if (invalidation !== null) return { failure: { file: file.name, kind: "invalidation_error", why: invalidation }, compileUs };
  if (validation !== null) return { failure: { file: file.name, kind: "validation_error", why: validation }, compileUs };
  return { failure: null, compileUs };
}

/** Feed the tokens one by one, a mask before each (timed with its commit); whether every one was allowed. */
async function acceptsAll(session: MaskBenchSession, tokens: readonly number[], maskUs: number[]): Promise<boolean> {
  for (const t of tokens) {
    const start = performance.now();
    const pending = session.computeMask();
    if (pending !== undefined) await pending;
    const ok = session.commit(t);
    maskUs.push((performance.now() - start) * 1000);
    if (!ok) return false;
  }
  return true;
}

/** Linear-interpolated percentile of sorted values (numpy's default). */
export function percentile(sorted: readonly number[], q: number): number {
  if (sorted.length === 0) return NaN;
  const at = (q / 100) * (sorted.length - 1);
  const lo = Math.floor(at);
  const hi = Math.min(lo + 1, sorted.length - 1);
  return sorted[lo]! + (sorted[hi]! - sorted[lo]!) * (at - lo);
}

/** MaskBench's table: one column per engine. */
export function maskBenchTable(results: readonly MaskBenchResult[]): Table {
  const row = (label: string, f: (r: MaskBenchResult) => string): string[] => [label, ...results.map(f)];
  const us = (x: number): string => (Number.isFinite(x) ? fmt(x, 3) : "-");
  return {
    title: "MaskBench (times in microseconds)",
    columns: ["metric", ...results.map((r) => r.engine)],
    rows: [
      row("schemas", (r) => String(r.schemas)),
      row("passing", (r) => `${r.passing} (${fmtPct(r.passing / r.schemas)})`),
      row("compile error", (r) => String(r.compile_error)),
      row("validation error", (r) => String(r.validation_error)),
      row("invalidation error", (r) => String(r.invalidation_error)),
      row("tokens", (r) => String(r.tokens)),
      ...(["p25", "p50", "p75", "p90", "p95", "p99", "p999", "max"] as const).map((k) => row(`mask ${k === "p999" ? "p99.9" : k}`, (r) => us(r.mask_us[k]))),
      ...(["p50", "p90", "p99"] as const).map((k) => row(`compile ${k}`, (r) => us(r.compile_us[k]))),
      row("run: wall s / CPU s", (r) => `${fmt(r.wall_s, 3)} / ${fmt(r.cpu_s, 3)}`),
    ],
  };
}

export interface GrammarOutputOptions {
  readonly date: string;
  /** The vocabulary file, as given. */
  readonly vocab: string;
  /** json target: "stdout", a path, or null (tables only). */
  readonly json: string | null;
}

/**
 * Print the table (with the machine and its load: mask times are wall-clock on one thread) and
 * write the JSON document: pagellm's figures at the top level under MaskBench's names, each peer's
 * under "peers", and the schemas that failed with why.
 */
export function writeGrammarOutputs(results: readonly MaskBenchResult[], o: GrammarOutputOptions): void {
  const machine = machineInfo();
  const load = loadavg().map((x) => Number(x.toFixed(2)));
  const notes = [
    `vocabulary: ${o.vocab}`,
    `load average (1, 5, 15 min) at the end: ${load.join(", ")} on ${machine.cores} cores; mask and compile times are wall-clock on one thread, so a busy machine inflates them`,
    "mask time = computing the mask before a token plus committing the token, as MaskBench times it; compile time = compiling the schema",
  ];
  const [mine, ...peers] = results;
  const doc = { ...mine!, bench: "grammar", date: o.date, machine, vocab: o.vocab, load_average: load, peers };
  const jsonText = `${JSON.stringify(doc, null, 2)}\n`;
  if (o.json === "stdout") {
    process.stdout.write(jsonText);
    return;
  }
  process.stdout.write(reportText({ bench: "grammar", machine, date: o.date, notes }, [maskBenchTable(results)]));
  if (o.json !== null) {
    try {
      writeFileSync(o.json, jsonText);
    } catch (e) {
      throw new InputError(`--json ${o.json}: cannot write (${(e as NodeJS.ErrnoException).code ?? (e as Error).message})`);
    }
    progress(`wrote ${o.json}`);
  }
}
