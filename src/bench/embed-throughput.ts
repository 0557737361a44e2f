/**
 * `pagellm bench embed`: embedding throughput of encoder models, inputs/s and tokens/s over a
 * fixed set of inputs (default 256 of 16-128 tokens) at several batch sizes (inputs per LLM.embed
 * call) and thread counts. Each figure is a ratio to one measured in the same run: batch 1 at the
 * same threads, the first thread count at the same batch, and llama.cpp's `llama-embedding` on
 * the same file, inputs and threads (--llama-embedding; peer-llama-embedding.ts says how both
 * are timed). The bar: at least 0.5x llama.cpp's inputs/s at batch 32 on one thread (aim 0.8x).
 */
import { LLM } from "../llm/llm.ts";
import { InputError } from "../errors.ts";
import { readEncoderCheckpoint } from "../model/encoder.ts";
import { ratio, repeat, summarize, type RepeatOptions, type Summary } from "./measure.ts";
import { figure, fmtRatio, fmtSpread, progress, threadsLabel, type Figure, type Table } from "./bench-report.ts";
import { embedInputs, type EmbedInputs } from "./embed-inputs.ts";
import type { EmbeddingPeer } from "./peer-llama-embedding.ts";
import { instructionFigures, instructionTable, runInstructionBench, type InstructionResult } from "./embed-instruction.ts";

export const EMBED_BATCH_SIZES = [1, 32, 256];
/** The comparison the bar is about, and the bar. */
export const EMBED_TARGET = { batch: 32, threads: 1, floor: 0.5, aim: 0.8 } as const;

export interface EmbedModelFile {
  /** "bge-small Q8_0" */
  label: string;
  path: string;
}

export interface EmbedBenchOptions extends RepeatOptions {
  models: readonly EmbedModelFile[];
  threads: readonly number[];
  batches: readonly number[];
  inputs: number;
  minTokens: number;
  maxTokens: number;
  seed: number;
  peer: EmbeddingPeer | null;
  /** Decoder embedders for the instruction case (embed-instruction.ts), each at every thread count. */
  instruction: readonly EmbedModelFile[];
  /** Queries of the instruction case. */
  queries: number;
}

export interface EmbedPeerFigure {
  llamaCpp: string;
  inputsPerSecond: Summary;
  tokensPerSecond: Summary;
  /** pagellm's inputs/s / llama.cpp's (medians). */
  ratio: number;
}

export interface EmbedRow {
  threads: number;
  batch: number;
  inputsPerSecond: Summary;
  tokensPerSecond: Summary;
  /** inputs/s against the first batch size at these threads. */
  vsFirstBatch: number;
  /** inputs/s against the first thread count at this batch size. */
  vsFirstThreads: number;
  peer: EmbedPeerFigure | null;
}

export interface EmbedModelResult {
  model: string;
  file: string;
  arch: string;
  pooling: string;
  inputs: number;
  tokens: number;
  rows: EmbedRow[];
}

export interface EmbedResult {
  minTokens: number;
  maxTokens: number;
  target: typeof EMBED_TARGET;
  models: EmbedModelResult[];
  /** The instruction case, prefix cache on against off (absent in reports made before it). */
  instruction?: InstructionResult[];
}

/** `items` cut into runs of `size`. */
function batchesOf<T>(items: readonly T[], size: number): T[][] {
  const out: T[][] = [];
  for (let i = 0; i < items.length; i += size) out.push(items.slice(i, i + size));
  return out;
}

/** pagellm's tokenization of the texts must give the ids it is timed on: the embeddings of a few, by text and by id, bit for bit. */
async function checkSameInputs(llm: LLM, inputs: EmbedInputs, model: string): Promise<void> {
  const n = Math.min(8, inputs.texts.length);
  const byText = await llm.embed(inputs.texts.slice(0, n), { normalize: -1 });
  const byIds = await llm.embed(inputs.tokenIds.slice(0, n), { normalize: -1 });
  const same = byText.embeddings.every((e, i) => e.tokenCount === byIds.embeddings[i]!.tokenCount && e.values.every((v, j) => Object.is(v, byIds.embeddings[i]!.values[j])));
  if (!same) throw new InputError(`${model}: its tokenizer does not turn the bench's texts into the ids they were made of (a vocabulary unlike BERT's?)`);
}

/** One model at each thread count and batch size; llama.cpp right after each of pagellm's measurements. */
async function benchModel(file: EmbedModelFile, o: EmbedBenchOptions): Promise<EmbedModelResult> {
  const ckpt = readEncoderCheckpoint(file.path);
  const inputs = embedInputs(file.path, o.inputs, o.minTokens, o.maxTokens, o.seed);
  const tokens = inputs.tokenIds.reduce((sum, ids) => sum + ids.length, 0);
  const rows: EmbedRow[] = [];
  for (const threads of o.threads) {
    const llm = await LLM.open({ model: file.path, engine: { threads } });
    try {
      await checkSameInputs(llm, inputs, file.label);
      for (const batch of o.batches) {
        progress(`${file.label}: ${o.inputs} inputs (${tokens} tokens) in batches of ${batch}, ${threadsLabel(threads)}`);
        const seconds = await repeat(o, async () => {
          const t0 = performance.now();
          for (const chunk of batchesOf(inputs.tokenIds, batch)) await llm.embed(chunk, { normalize: -1 });
          return (performance.now() - t0) / 1000;
        });
        rows.push({
          threads, batch, inputsPerSecond: summarize(seconds.map((s) => o.inputs / s)), tokensPerSecond: summarize(seconds.map((s) => tokens / s)),
          vsFirstBatch: 1, vsFirstThreads: 1, peer: o.peer === null ? null : peerFigure(o.peer, o, file, ckpt.config.pooling, inputs, threads, batch, tokens),
        });
      }
    } finally {
      llm.close();
    }
  }
  for (const row of rows) {
    const firstBatch = rows.find((r) => r.threads === row.threads && r.batch === o.batches[0])!;
    const firstThreads = rows.find((r) => r.threads === o.threads[0] && r.batch === row.batch)!;
    row.vsFirstBatch = ratio(row.inputsPerSecond, firstBatch.inputsPerSecond);
    row.vsFirstThreads = ratio(row.inputsPerSecond, firstThreads.inputsPerSecond);
  }
  return { model: file.label, file: file.path, arch: ckpt.config.arch, pooling: ckpt.config.pooling, inputs: o.inputs, tokens, rows };
}

function peerFigure(
  peer: EmbeddingPeer, o: EmbedBenchOptions, file: EmbedModelFile, pooling: string, inputs: EmbedInputs, threads: number, batch: number, tokens: number,
): EmbedPeerFigure {
  progress(`${file.label}: the same by llama.cpp's llama-embedding, batches of ${batch}, ${threadsLabel(threads)}`);
  const run = { model: file.path, threads, batches: batchesOf(inputs.texts, batch), pooling };
  const passes = Array.from({ length: o.reps }, () => peer.run(run));
  const counted = passes[0]!.tokens;
  if (counted !== tokens) throw new InputError(`llama-embedding computed ${counted} tokens of ${file.label}'s inputs, pagellm ${tokens}: they did not read the same inputs`);
  const inputsPerSecond = summarize(passes.map((p) => o.inputs / p.seconds));
  return { llamaCpp: passes[0]!.build, inputsPerSecond, tokensPerSecond: summarize(passes.map((p) => tokens / p.seconds)), ratio: Number.NaN };
}

export async function runEmbedBench(o: EmbedBenchOptions): Promise<EmbedResult> {
  const models: EmbedModelResult[] = [];
  for (const file of o.models) {
    const result = await benchModel(file, o);
    for (const row of result.rows) if (row.peer !== null) row.peer.ratio = ratio(row.inputsPerSecond, row.peer.inputsPerSecond);
    models.push(result);
  }
  const instruction: InstructionResult[] = [];
  for (const file of o.instruction) {
    for (const threads of o.threads) {
      instruction.push(await runInstructionBench({ reps: o.reps, warmup: o.warmup, label: file.label, path: file.path, threads, queries: o.queries, seed: o.seed }));
    }
  }
  return { minTokens: o.minTokens, maxTokens: o.maxTokens, target: EMBED_TARGET, models, instruction };
}

/** The figures --compare matches: inputs/s and tokens/s, and the ratios to llama.cpp. */
export function embedFigures(r: EmbedResult): Figure[] {
  return [...encoderFigures(r), ...(r.instruction ?? []).flatMap(instructionFigures)];
}

function encoderFigures(r: EmbedResult): Figure[] {
  return r.models.flatMap((m) => m.rows.flatMap((x) => {
    const at = `${m.model}, batch ${x.batch}, ${threadsLabel(x.threads)}`;
    return [
      ...figure(`${at}: embed inputs/s`, x.inputsPerSecond, "inputs/s"),
      ...figure(`${at}: embed tokens/s`, x.tokensPerSecond, "tokens/s"),
      ...(x.peer === null ? [] : figure(`${at}: embed vs llama.cpp`, x.peer.ratio, "x")),
    ];
  }));
}

export function embedTables(r: EmbedResult): Table[] {
  return [...encoderTables(r), ...(r.instruction ?? []).map(instructionTable)];
}

function encoderTables(r: EmbedResult): Table[] {
  return r.models.flatMap((m): Table[] => {
    const firstBatch = m.rows[0]?.batch ?? 1;
    const firstThreads = m.rows[0]?.threads ?? 1;
    const withPeer = m.rows.filter((x) => x.peer !== null);
    const t = EMBED_TARGET;
    const tables: Table[] = [{
      title: `embeddings of ${m.inputs} inputs of ${r.minTokens}-${r.maxTokens} tokens (${m.tokens} in all) on ${m.model} (${m.arch}, pooling ${m.pooling}, normalization off); median (min-max)`,
      columns: ["threads", "batch", "inputs/s", "tokens/s", `vs batch ${firstBatch}`, `vs ${threadsLabel(firstThreads)}`],
      rows: m.rows.map((x) => [String(x.threads), String(x.batch), fmtSpread(x.inputsPerSecond), fmtSpread(x.tokensPerSecond), fmtRatio(x.vsFirstBatch), fmtRatio(x.vsFirstThreads)]),
    }];
    if (withPeer.length > 0) {
      tables.push({
        title:
          `${m.model} against llama.cpp ${withPeer[0]!.peer!.llamaCpp} (llama-embedding, --llama-embedding) on the same file and inputs, run right after; ` +
          `target >= ${t.floor}x at batch ${t.batch}, ${threadsLabel(t.threads)} (aim ${t.aim}x); median (min-max)`,
        columns: ["threads", "batch", "pagellm inputs/s", "llama.cpp inputs/s", "llama.cpp tokens/s", "pagellm / llama.cpp"],
        rows: withPeer.map((x) => [String(x.threads), String(x.batch), fmtSpread(x.inputsPerSecond), fmtSpread(x.peer!.inputsPerSecond), fmtSpread(x.peer!.tokensPerSecond), fmtRatio(x.peer!.ratio)]),
      });
    }
    return tables;
  });
}

export function embedNotes(r: EmbedResult, peer: boolean): string[] {
  return [
    ...(r.models.length > 0
      ? ["pagellm is timed on LLM.embed calls given token ids (made of whole vocabulary words, checked once to equal its tokenization of the texts); each batch is one call, packed into steps of 2048 tokens"]
      : []),
    ...((r.instruction ?? []).length > 0
      ? ["instruction case: one LLM.embed call of every query per repetition, token ids given (random ordinary BPE pieces, the file's EOS last), engine defaults otherwise; the cache-off engine runs every repetition first, then the cache-on one, the cache-on warm-up computing the instruction"]
      : []),
    ...(peer && r.models.length > 0
      ? ["llama.cpp is given the texts, one process per batch (-c/-b/-ub 2048, the same packing); its time is read from its timestamped log, first step to perf summary (encoder passes and pooling), summed over the processes, without loading, warm-up or tokenizing"]
      : []),
  ];
}
