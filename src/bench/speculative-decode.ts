/**
 * `pagellm bench decode --speculate`: single-sequence decode tokens/s with and without prompt-lookup
 * speculation, measured in the same run (two engines on the same model, repetitions alternating
 * which goes first), on three workloads, each with its acceptance rate and a check that both gave
 * the same tokens:
 *   - stories: stories260K (real weights) continuing TinyStories openings for 256 tokens, greedy:
 *     real text, which repeats some of its own phrases;
 *   - repeating: the bench model decoding greedily from random prompts: random weights fall into
 *     loops, the output repeats itself (the best case);
 *   - no-repetition: the bench model sampling at temperature 1 with no truncation: random weights give
 *     near-uniform draws, nothing repeats (the worst case, where every draft is overhead).
 */
import { existsSync } from "node:fs";
import { dirname, join } from "node:path";
import { InputError } from "../errors.ts";
import type { CompletionResult, GenerateRequest, LLM } from "../llm/llm.ts";
import type { SpeculativeOptions } from "../engine/speculative.ts";
import { withLLM } from "./engine-runs.ts";
import { alternatingRates, runAlternating } from "./alternating.ts";
import type { RepeatOptions, Summary } from "./measure.ts";
import { benchModel, DEFAULT_MODELS_DIR, parseShape, SHARED_DIR, type BenchModel } from "./bench-models.ts";
import { TokenSource } from "./token-source.ts";
import { figure, fmtPct, fmtRatio, fmtSpread, progress, threadsLabel, type Figure, type Table } from "./bench-report.ts";

export type SpecWorkloadName = "stories" | "repeating" | "no-repetition";

/** stories260K beside this repository (../shared), used when --spec-stories is not given. */
export const DEFAULT_STORIES_MODEL = join(SHARED_DIR, "models", "llama2c", "stories260K.bin");

/** Tokens each story continues for: a story repeats its phrases more the longer it runs (stories260K decodes thousands a second). */
const STORY_TOKENS = 256;

/** TinyStories-style openings (tok512 covers their words). */
const STORY_PROMPTS: readonly string[] = [
  "Once upon a time, there was a little girl named Lily.",
  "One day, a big brown bear came out of the forest.",
  "Tom and Sam were best friends.",
  "The sun was shining and the birds were singing.",
  "There was a small cat who lived in a big house.",
  "Ben had a new toy car.",
  "Lily and her mom went to the store.",
  "The little dog wanted to play.",
];

export interface SpeculativeBenchOptions extends RepeatOptions {
  threads: number;
  speculative: SpeculativeOptions;
  /** Tokens generated per request. */
  genTokens: number;
  promptTokens: number;
  seed: number;
  /** The stories workload's llama2.c checkpoint (tokenizer.bin or tok512.bin beside it), or null: not run. */
  storiesModel: string | null;
}

/** One workload with and without speculation. */
export interface SpecWorkloadRow {
  workload: SpecWorkloadName;
  model: string;
  description: string;
  /** Decode tokens/s over the workload's requests (after each one's first token), per repetition. */
  plain: Summary;
  speculative: Summary;
  /** Median over repetitions of speculative / plain tokens/s (each repetition runs every request on both, back to back). */
  speedup: number;
  /**
   * Median over repetitions of plain / speculative CPU time of the whole requests (this process,
   * user + system): what the work costs, whatever else the machine runs (one thread: no workers).
   */
  cpuSpeedup: number;
  drafted: number;
  accepted: number;
  acceptanceRate: number | null;
  /** Every request generated the same tokens with and without. */
  identical: boolean;
}

export interface SpeculativeDecode {
  threads: number;
  options: SpeculativeOptions;
  rows: SpecWorkloadRow[];
  /** Workloads not run, and why. */
  skipped: string[];
}

/** The three workloads on `model` (repeating, no-repetition) and stories260K (stories), at o.threads. */
export async function runSpeculativeDecode(model: BenchModel, o: SpeculativeBenchOptions): Promise<SpeculativeDecode> {
  const rows: SpecWorkloadRow[] = [];
  const skipped: string[] = [];
  const stories = o.storiesModel === null ? null : storiesModel(o.storiesModel);
  if (stories === null) skipped.push(`stories: no stories260K checkpoint (--spec-stories PATH; default ${DEFAULT_STORIES_MODEL} is absent)`);
  else {
    rows.push(await compareWorkload(stories, o, "stories", `TinyStories openings, greedy, ${STORY_PROMPTS.length} requests x ${STORY_TOKENS} tokens`, (llm) =>
      STORY_PROMPTS.map((text) => ({ promptTokenIds: llm.encode(text), maxTokens: STORY_TOKENS, temperature: 0 }))));
  }
  const source = (llm: LLM) => new TokenSource(o.seed, llm.config.vocabSize);
  const n = 4;
  rows.push(await compareWorkload(model, o, "repeating", `random-weight greedy loops from ${n} random ${o.promptTokens}-token prompts, ${o.genTokens} tokens each`, (llm) => {
    const s = source(llm);
    return Array.from({ length: n }, () => ({ promptTokenIds: s.prompt(o.promptTokens), maxTokens: o.genTokens, temperature: 0, repetitionPenalty: 1 }));
  }));
  rows.push(await compareWorkload(model, o, "no-repetition", `temperature 1, no top-k/top-p/min-p, seeded, ${n} random prompts, ${o.genTokens} tokens each`, (llm) => {
    const s = source(llm);
    return Array.from({ length: n }, (_, i) => ({
      promptTokenIds: s.prompt(o.promptTokens), maxTokens: o.genTokens, temperature: 1, topK: 0, topP: 1, minP: 0, repetitionPenalty: 1, seed: o.seed + i,
    }));
  }));
  return { threads: o.threads, options: o.speculative, rows, skipped };
}

/** A stories checkpoint as a bench model, or null when absent. */
function storiesModel(path: string): BenchModel | null {
  if (!existsSync(path)) return null;
  const dir = dirname(path);
  const tokenizer = ["tokenizer.bin", "tok512.bin"].map((f) => join(dir, f)).find((f) => existsSync(f));
  if (tokenizer === undefined) throw new InputError(`${path}: no tokenizer.bin or tok512.bin beside it`);
  // The shape and folder are unused for a model file; benchModel reads its config from the file.
  return benchModel({ model: path, tokenizer, shape: parseShape("stories15M"), format: "f32", modelsDir: DEFAULT_MODELS_DIR }, progress);
}

/**
 * Decode the requests one at a time on a plain engine and a speculating one, each request on both
 * back to back (which goes first alternating), so that both see the same machine: on a busy
 * machine the load changes from second to second. The CPU time each takes is measured too: on a
 * shared machine it is the steadier figure of the work done. Per repetition, tokens/s = tokens after each
 * first token / their decode time, on each engine, and the repetition's speedup is their ratio.
 */
async function compareWorkload(
  model: BenchModel, o: SpeculativeBenchOptions, workload: SpecWorkloadName, description: string, build: (llm: LLM) => GenerateRequest[],
): Promise<SpecWorkloadRow> {
  progress(`speculative decode: ${workload} on ${model.label}, ${threadsLabel(o.threads)}`);
  return await withLLM(model, { threads: o.threads, speculative: null }, (plain) =>
    withLLM(model, { threads: o.threads, speculative: o.speculative }, async (spec): Promise<SpecWorkloadRow> => {
      const requests = build(plain);
      const { reps, last: lastRep } = await runAlternating(requests, o, (which, request) => decodeOne(which === "a" ? plain : spec, request));
      const rates = alternatingRates(reps);
      const last = { plain: lastRep.results.a, spec: lastRep.results.b };
      const drafted = last.spec.reduce((n, r) => n + (r.speculative?.drafted ?? 0), 0);
      const accepted = last.spec.reduce((n, r) => n + (r.speculative?.accepted ?? 0), 0);
      const identical = last.plain.every((r, i) => sameTokens(r.token_ids, last.spec[i]!.token_ids));
      return {
        workload, model: model.label, description, plain: rates.a, speculative: rates.b,
        speedup: rates.ratio, cpuSpeedup: rates.cpuRatio, drafted, accepted, acceptanceRate: drafted === 0 ? null : accepted / drafted, identical,
      };
    }));
}

async function decodeOne(llm: LLM, request: GenerateRequest): Promise<CompletionResult> {
  const [r] = await llm.generate([request]);
  if (!r || r.finish_reason === "error") throw new InputError(`speculative bench request failed: ${r?.error ?? "no result"}`);
  return r;
}

function sameTokens(a: readonly number[], b: readonly number[]): boolean {
  return a.length === b.length && a.every((t, i) => t === b[i]);
}

/** --compare figures: each workload's tokens/s with and without, the speedup and the acceptance rate. */
export function speculativeFigures(model: string, r: SpeculativeDecode): Figure[] {
  return r.rows.flatMap((x) => {
    const at = `${model}, speculative ${x.workload} (${x.model}), ${threadsLabel(r.threads)}`;
    return [
      ...figure(`${at}: plain tokens/s`, x.plain, "tokens/s"),
      ...figure(`${at}: speculative tokens/s`, x.speculative, "tokens/s"),
      ...figure(`${at}: speedup`, x.speedup, "x"),
      ...figure(`${at}: CPU-time speedup`, x.cpuSpeedup, "x"),
      ...(x.acceptanceRate === null ? [] : figure(`${at}: acceptance rate`, x.acceptanceRate, "")),
    ];
  });
}

export function speculativeTable(r: SpeculativeDecode): Table {
  const o = r.options;
  return {
    title:
      `speculative decoding (${o.method}, up to ${o.tokens} draft tokens, n-grams ${o.ngram.min}:${o.ngram.max}${o.adaptive ? ", adaptive" : ""}) ` +
      `vs plain decode in the same run, ${threadsLabel(r.threads)}, one request at a time; tokens/s median (min-max)`,
    columns: ["workload", "model", "plain tokens/s", "speculative tokens/s", "speedup", "CPU-time speedup", "drafted", "accepted", "acceptance", "same tokens"],
    rows: r.rows.map((x) => [
      x.workload, x.model, fmtSpread(x.plain), fmtSpread(x.speculative), fmtRatio(x.speedup), fmtRatio(x.cpuSpeedup), String(x.drafted), String(x.accepted),
      x.acceptanceRate === null ? "-" : fmtPct(x.acceptanceRate), x.identical ? "yes" : "NO",
    ]),
  };
}
