/**
 * `pagellm bench all`: the set a release records, in one run and one document. On one real shape
 * (SmolLM2-135M by default) in F32, Q8_0 and Q4_K_M: single-sequence decode and prefill at 1 and
 * 2 threads next to the bandwidth and compute limits, the per-type comparison, batched decode on
 * F32 at 1, 4 and 16 sequences, and time to first token against the cached prefix fraction. The
 * token counts and repetitions are chosen so the whole set takes under 15 minutes on 2 cores
 * (about 5 on this project's 2-core VM); `--quick` runs the same set tiny, in seconds, for tests.
 */
import type { ModelMix } from "../synth/gguf-model-writer.ts";
import { batchTables, runBatchBench } from "./batch-decode.ts";
import { runDecodeBench, type DecodeResult } from "./decode.ts";
import type { RepeatOptions } from "./measure.ts";
import type { BenchModel } from "./bench-models.ts";
import { runPrefillBench, type PrefillResult } from "./prefill.ts";
import { prefixTables, runPrefixBench } from "./prefix.ts";
import { progress, tablesText, type Table } from "./bench-report.ts";
import { makeReport, type AnyBenchReport } from "./schema.ts";
import { decodeSet, prefillSet } from "./type-comparison.ts";
import { DEFAULT_STORIES_MODEL } from "./speculative-decode.ts";
import { DEFAULT_SPECULATIVE } from "../engine/speculative.ts";

/** How much of everything `bench all` measures. */
export interface AllPlan {
  shape: string;
  types: ModelMix[];
  threads: number[];
  /** Repetitions of decode, prefill and the TTFT measurements. */
  repeat: RepeatOptions;
  streamBytes: number;
  decode: { promptTokens: number; genTokens: number };
  prefill: { promptTokens: number; decodeTokens: number };
  batch: { seqs: number[]; promptTokens: number; steps: number; warmupSteps: number; repeat: RepeatOptions };
  prefix: { prefixTokens: number; suffixTokens: number; distinctRequests: number; distinctPromptTokens: number; distinctOutputTokens: number };
}

export const DEFAULT_ALL_TYPES: readonly ModelMix[] = ["F32", "Q8_0", "Q4_K_M"];

/** The release set: SmolLM2-135M's shape, prompts long enough that prefill runs at its steady speed. */
export const FULL_PLAN: AllPlan = {
  shape: "smollm2-135m",
  types: [...DEFAULT_ALL_TYPES],
  threads: [1, 2],
  repeat: { warmup: 1, reps: 3 },
  streamBytes: 256 * 2 ** 20,
  decode: { promptTokens: 8, genTokens: 64 },
  prefill: { promptTokens: 256, decodeTokens: 16 },
  batch: { seqs: [1, 4, 16], promptTokens: 16, steps: 8, warmupSteps: 2, repeat: { warmup: 0, reps: 2 } },
  prefix: { prefixTokens: 512, suffixTokens: 32, distinctRequests: 2, distinctPromptTokens: 128, distinctOutputTokens: 8 },
};

/** A tiny llama shape whose GGUF form has Llama 2's vocabulary (a random GGUF model needs one). */
export const QUICK_SHAPE = "dim=64,hidden=256,layers=2,heads=4,kv=2,vocab=32000,seq=256";

/** The same set in seconds: for tests and for trying the options, not for figures. */
export const QUICK_PLAN: AllPlan = {
  shape: QUICK_SHAPE,
  types: [...DEFAULT_ALL_TYPES],
  threads: [1, 2],
  repeat: { warmup: 0, reps: 1 },
  streamBytes: 16 * 2 ** 20,
  decode: { promptTokens: 4, genTokens: 4 },
  prefill: { promptTokens: 32, decodeTokens: 4 },
  batch: { seqs: [1, 4], promptTokens: 8, steps: 2, warmupSteps: 0, repeat: { warmup: 0, reps: 1 } },
  prefix: { prefixTokens: 64, suffixTokens: 16, distinctRequests: 2, distinctPromptTokens: 16, distinctOutputTokens: 2 },
};

export interface AllRun {
  reports: AnyBenchReport[];
  /** Each sub-benchmark's tables and notes as text, headed by its name. */
  text: string;
}

/**
 * Run the set on `models` (the shape in each type, F32 first: the baseline of the others and the
 * model of the batch and prefix measurements), every report dated `date`.
 */
export async function runAll(plan: AllPlan, models: readonly BenchModel[], seed: number, date: string, notes: readonly string[]): Promise<AllRun> {
  const f32 = models[0]!;
  const reports: AnyBenchReport[] = [];
  const sections: string[] = [];
  const add = (report: AnyBenchReport, tables: Table[]) => {
    reports.push(report);
    sections.push(`## bench ${report.bench}\n\n${tablesText(tables, report.notes)}`);
  };
  const common = { ...plan.repeat, threads: plan.threads, seed };

  progress("bench all: decode");
  const decode: DecodeResult[] = [];
  for (const model of models) {
    // Speculation is measured on Q8_0 (the speculation aim, 2x at 80% acceptance, is set for SmolLM2-135M-shaped Q8_0 at one thread).
    const speculate = model.gguf?.mix === "Q8_0" ? { options: DEFAULT_SPECULATIVE, storiesModel: DEFAULT_STORIES_MODEL } : null;
    decode.push(await runDecodeBench({ ...common, model, ...plan.decode, streamBytes: plan.streamBytes, runc: null, peer: null, gpu: null, speculate, jsonSchema: null, kvType: null, kvContext: null, tools: false }));
  }
  const d = decodeSet(decode);
  const labels = models.map((m) => m.label);
  add(makeReport("decode", date, { ...plan.repeat, threads: plan.threads, models: labels, ...plan.decode, streamBytes: plan.streamBytes, seed }, [...notes], d.results), d.tables);

  progress("bench all: prefill");
  const prefill: PrefillResult[] = [];
  for (const model of models) prefill.push(await runPrefillBench({ ...common, model, ...plan.prefill, peer: null, gpu: null, kvType: null }));
  const p = prefillSet(prefill);
  add(makeReport("prefill", date, { ...plan.repeat, threads: plan.threads, models: labels, ...plan.prefill, seed }, [...notes], p.results), p.tables);

  progress("bench all: batch");
  const b = plan.batch;
  const batch = await runBatchBench({
    ...b.repeat, threads: plan.threads, models: [f32], batchSizes: b.seqs, promptTokens: b.promptTokens, steps: b.steps, warmupSteps: b.warmupSteps,
    streamBytes: plan.streamBytes, seed, gpu: null, kvType: null,
  });
  const batchSettings = { ...b.repeat, threads: plan.threads, models: [f32.label], seqs: b.seqs, promptTokens: b.promptTokens, steps: b.steps, warmupSteps: b.warmupSteps, seed };
  add(makeReport("batch", date, batchSettings, [...notes, "prefix caching on (the engine default); every sequence has a distinct prompt, so nothing hits"], batch), batchTables(batch));

  progress("bench all: prefix caching and TTFT");
  const threads = Math.max(...plan.threads);
  const prefix = await runPrefixBench({
    ...plan.repeat, threads, model: f32, ...plan.prefix, workloads: [], requests: 1, outputTokens: 1, maxNumSeqs: 1, numBlocks: null, kvType: null,
    policies: ["lru-keep-cached"], seed,
  });
  const prefixSettings = { ...plan.repeat, threads, model: f32.label, ...plan.prefix, workloads: [], seed };
  add(makeReport("prefix", date, prefixSettings, [...notes, "bench all runs no serving workloads (bench prefix does)"], prefix), prefixTables(prefix));

  return { reports, text: sections.join("\n") };
}
