/**
 * `pagellm bench decode --json-schema FILE`: single-sequence decode with a JSON Schema constraint
 * against the same decode unconstrained, on one engine in the same run (the floor it
 * checks: constrained at least 0.9x). Each random prompt is decoded greedily both ways back to back, which
 * goes first alternating, so both see the same machine; the schema is compiled before the first
 * timed repetition (compiled grammars are cached by content, as a server's are). Tokens/s counts
 * every generated token after the first, forced ones included (a forced run is appended without
 * sampling and computed as a chunk: it can make constrained decode faster). The CPU time of each
 * (this process, user + system) is the steadier figure on a shared machine.
 */
import { InputError } from "../errors.ts";
import type { CompletionResult, GenerateRequest, LLM } from "../llm/llm.ts";
import { withLLM } from "./engine-runs.ts";
import { alternatingRates, runAlternating } from "./alternating.ts";
import type { RepeatOptions, Summary } from "./measure.ts";
import type { BenchModel } from "./bench-models.ts";
import { TokenSource } from "./token-source.ts";
import { figure, fmt, fmtRatio, fmtSpread, progress, threadsLabel, type Figure, type Table } from "./bench-report.ts";

/** Prompts decoded both ways per repetition. */
const PROMPTS = 4;

export interface StructuredBenchOptions extends RepeatOptions {
  threads: number;
  /** The schema's text and where it came from (the report names it). */
  schema: { text: string; name: string };
  genTokens: number;
  promptTokens: number;
  seed: number;
}

export interface StructuredDecode {
  threads: number;
  schema: string;
  /** Milliseconds the first compile of the schema took (before timing). */
  compileMs: number;
  /** Decode tokens/s per repetition, each way. */
  unconstrained: Summary;
  constrained: Summary;
  /** Median over repetitions of constrained / unconstrained tokens/s. */
  ratio: number;
  /** Median over repetitions of unconstrained / constrained CPU time per generated token. */
  cpuRatio: number;
  /** Tokens the last repetition generated each way, and how many constrained outputs the schema ended. */
  tokens: { unconstrained: number; constrained: number; finished: number };
}

export async function runStructuredDecode(model: BenchModel, o: StructuredBenchOptions): Promise<StructuredDecode> {
  progress(`constrained decode (${o.schema.name}) vs unconstrained on ${model.label}, ${threadsLabel(o.threads)}`);
  return await withLLM(model, { threads: o.threads, speculative: null }, async (llm): Promise<StructuredDecode> => {
    const constraint = { kind: "json_schema", schema: o.schema.text } as const;
    const t0 = performance.now();
    llm.client.prepare({ promptTokenIds: [0], maxTokens: 1, constraint });
    const compileMs = performance.now() - t0;
    const source = new TokenSource(o.seed, llm.config.vocabSize);
    const requests: GenerateRequest[] = Array.from({ length: PROMPTS }, () => ({
      promptTokenIds: source.prompt(o.promptTokens), maxTokens: o.genTokens, temperature: 0, repetitionPenalty: 1,
    }));
    const { reps, last } = await runAlternating(requests, o, (which, request) => decodeOne(llm, which === "a" ? request : { ...request, constraint }));
    const rates = alternatingRates(reps);
    return {
      threads: o.threads, schema: o.schema.name, compileMs, unconstrained: rates.a, constrained: rates.b,
      ratio: rates.ratio, cpuRatio: rates.cpuRatio,
      tokens: { unconstrained: generated(last.results.a), constrained: generated(last.results.b), finished: last.results.b.filter((r) => r.finish_reason === "stop").length },
    };
  });
}

async function decodeOne(llm: LLM, request: GenerateRequest): Promise<CompletionResult> {
  const [r] = await llm.generate([request]);
  if (!r || r.finish_reason === "error") throw new InputError(`constrained decode bench request failed: ${r?.error ?? "no result"}`);
  return r;
}

function generated(results: readonly CompletionResult[]): number {
  return results.reduce((n, r) => n + r.completion_tokens, 0);
}

/** --compare figures: both tokens/s and their ratios. */
export function structuredFigures(model: string, r: StructuredDecode): Figure[] {
  const at = `${model}, constrained decode (${r.schema}), ${threadsLabel(r.threads)}`;
  return [
    ...figure(`${at}: unconstrained tokens/s`, r.unconstrained, "tokens/s"),
    ...figure(`${at}: constrained tokens/s`, r.constrained, "tokens/s"),
    ...figure(`${at}: constrained / unconstrained`, r.ratio, "x"),
    ...figure(`${at}: CPU-time ratio`, r.cpuRatio, "x"),
  ];
}

export function structuredTable(model: string, r: StructuredDecode): Table {
  return {
    title:
      `decode with a JSON Schema (${r.schema}, compiled in ${fmt(r.compileMs)} ms before timing) vs unconstrained in the same run, ${model}, ` +
      `${threadsLabel(r.threads)}, ${PROMPTS} greedy requests each way alternating; tokens/s median (min-max)`,
    columns: ["unconstrained tokens/s", "constrained tokens/s", "constrained / unconstrained", "CPU-time ratio", "tokens (free / held)", "held outputs the schema ended"],
    rows: [[
      fmtSpread(r.unconstrained), fmtSpread(r.constrained), fmtRatio(r.ratio), fmtRatio(r.cpuRatio),
      `${r.tokens.unconstrained} / ${r.tokens.constrained}`, `${r.tokens.finished} of ${PROMPTS}`,
    ]],
  };
}
