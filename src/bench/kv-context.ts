/**
 * `bench decode --context N,N --kv-type f32,f16,q8_0`: one decode step at a long context for each
 * KV cache type, and its speed against f32's, measured in the same run with the types taking turns
 * repetition by repetition (so a busy machine slows them alike). One type's cache is in memory at a
 * time (16,384 positions of SmolLM2-135M are 755 MB in f32): each turn writes it, warms up with one
 * step, times its steps and frees it.
 *
 * The context is not prefilled: at 16,384 tokens a prefill does the attention of 8,192 decode steps,
 * hours on a small machine. Instead the KV rows of positions 0..N-2 are written with random values
 * through the type's own writer (writeKV), and then each timed step runs the whole forward pass of
 * one token at position N-1: every weight, the K/V write of the new token and attention over the N
 * positions. That is exactly a decode step's work at that context; only the values differ from a
 * real conversation's, and attention's speed does not depend on them.
 */
import { CpuBackend } from "../backend/wasm/cpu.ts";
import { KVArena } from "../backend/wasm/kv-arena.ts";
import { KVCacheGroups } from "../kv/kv-groups.ts";
import { KV_TYPE_CODE, kvLayout, type KVType } from "../kv/kv-layout.ts";
import { StepBatch } from "../model/batch.ts";
import type { ModelConfig } from "../model/config.ts";
import { LlamaModel } from "../backend/wasm/llama.ts";
import { openCheckpoint } from "../model/load.ts";
import { loadWeights } from "../backend/wasm/weights.ts";
import { Xoshiro128 } from "../util/random.ts";
import { InputError } from "../errors.ts";
import { ratio, summarize, type RepeatOptions, type Summary } from "./measure.ts";
import type { BenchModel } from "./bench-models.ts";
import { figure, fmt, fmtRatio, fmtSpread, progress, threadsLabel, type Figure, type Table } from "./bench-report.ts";

export interface KVContextOptions extends RepeatOptions {
  model: BenchModel;
  contexts: number[];
  kvTypes: KVType[];
  threads: number[];
  /** Decode steps timed per repetition (their mean is one sample). */
  steps: number;
  seed: number;
}

export interface KVContextRow {
  threads: number;
  context: number;
  kvType: KVType;
  /** Bytes of the KV cache at this context (every layer, K and V). */
  kvBytes: number;
  msPerToken: Summary;
  tokensPerSecond: Summary;
  /** tokens/s against the first type of the list at the same context and threads (f32 by default). */
  vsFirst: number;
}

export interface KVContextResult {
  model: string;
  blockSize: number;
  /** The model's own context, when a --context exceeds it (timed all the same), else null. */
  beyondModelContext: number | null;
  rows: KVContextRow[];
}

const BLOCK_SIZE = 16;
/** Positions written per writeKV call while filling the context. */
const FILL_CHUNK = 256;

export async function runKVContextBench(o: KVContextOptions): Promise<KVContextResult> {
  const ckpt = openCheckpoint(o.model.path);
  const maxContext = Math.max(...o.contexts);
  if (o.contexts.some((n) => n < 2)) throw new InputError("--context lengths must be at least 2 tokens");
  // Past the model's own context only the RoPE angles go where training never went: a decode
  // step's work is the same, so the timing holds (the result says so).
  const config: ModelConfig = { ...ckpt.config, seqLen: maxContext };
  const layouts = o.kvTypes.map((t) => kvLayout(config, BLOCK_SIZE, t));
  const rows: KVContextRow[] = [];
  for (const threads of o.threads) {
    const backend = new CpuBackend(threads);
    try {
      progress(`decode at long contexts of ${o.model.label}, ${threadsLabel(threads)}: loading`);
      const weights = loadWeights({ ...ckpt, config }, backend.mem, backend.kernels);
      const model = new LlamaModel(config, weights, backend, FILL_CHUNK, 1);
      const groups = KVCacheGroups.of(config);
      const batch = new StepBatch(backend.mem, FILL_CHUNK, 1, Math.ceil(maxContext / BLOCK_SIZE), BLOCK_SIZE, 1, groups.groups.length);
      for (const context of o.contexts) {
        const blocks = Math.ceil(context / BLOCK_SIZE);
        const tables = groups.disjointTables(Array.from({ length: blocks }, (_, i) => i), blocks);
        const samples = o.kvTypes.map(() => [] as number[]);
        progress(`decode at a ${context}-token context, ${threadsLabel(threads)}: ${o.kvTypes.join(", ")} in turn`);
        for (let rep = -o.warmup; rep < o.reps; rep++) {
          layouts.forEach((layout, i) => {
            const mark = backend.mem.mark();
            try {
              const arena = new KVArena(backend.mem, config, blocks * groups.groups.length, BLOCK_SIZE, layout.type);
              fillContext(backend, config, arena, context - 1, o.seed, blocks);
              const step = () => {
                batch.reset();
                batch.addSequence([1], context - 1, tables, "last");
                model.forward(batch, arena);
              };
              step(); // the freshly written cache's first read, untimed
              const t0 = performance.now();
              for (let s = 0; s < o.steps; s++) step();
              if (rep >= 0) samples[i]!.push((performance.now() - t0) / o.steps);
            } finally {
              backend.mem.release(mark);
            }
          });
        }
        const first = summarize(samples[0]!.map((ms) => 1000 / ms));
        o.kvTypes.forEach((kvType, i) => {
          const tps = summarize(samples[i]!.map((ms) => 1000 / ms));
          rows.push({
            threads, context, kvType, kvBytes: layouts[i]!.blockBytes * blocks, msPerToken: summarize(samples[i]!), tokensPerSecond: tps,
            vsFirst: ratio(tps, first),
          });
        });
      }
    } finally {
      backend.close();
    }
  }
  return { model: o.model.label, blockSize: BLOCK_SIZE, beyondModelContext: maxContext > ckpt.config.seqLen ? ckpt.config.seqLen : null, rows };
}

/**
 * Write random K and V rows (|x| < 2) for positions 0..positions-1 of every layer, through writeKV,
 * so the cache holds what the type's writer stores.
 */
/** K and V of `positions` random tokens in every layer, group g's at blocks from g * blocksPerGroup (KVCacheGroups.disjointTables). */
function fillContext(backend: CpuBackend, c: ModelConfig, arena: KVArena, positions: number, seed: number, blocksPerGroup: number): void {
  const kvDim = c.nKvHeads * c.headDim;
  const mem = backend.mem;
  const mark = mem.mark();
  try {
    const rng = new Xoshiro128(seed);
    const k = mem.alloc(4 * FILL_CHUNK * kvDim);
    const v = mem.alloc(4 * FILL_CHUNK * kvDim);
    for (let i = 0; i < FILL_CHUNK * kvDim; i++) {
      mem.f32[(k >> 2) + i] = 4 * rng.nextFloat() - 2;
      mem.f32[(v >> 2) + i] = 4 * rng.nextFloat() - 2;
    }
    const slots = mem.alloc(4 * FILL_CHUNK);
    const type = KV_TYPE_CODE[arena.layout.type];
    for (let start = 0; start < positions; start += FILL_CHUNK) {
      const T = Math.min(FILL_CHUNK, positions - start);
      for (let l = 0; l < c.nLayers; l++) {
        const first = arena.groupOf(l) * blocksPerGroup * BLOCK_SIZE;
        for (let t = 0; t < T; t++) mem.i32[(slots >> 2) + t] = first + start + t;
        backend.kernels.writeKV(arena.kLayer(l), arena.vLayer(l), k, v, slots, T, c.nKvHeads, c.headDim, BLOCK_SIZE, arena.numBlocks, type, arena.layout.rowBytes);
      }
    }
  } finally {
    mem.release(mark);
  }
}

export function kvContextTables(r: KVContextResult): Table[] {
  const first = r.rows[0]?.kvType ?? "f32";
  return [{
    title:
      `decode of ${r.model} at long contexts by KV cache type (context written, not prefilled; blocks of ${r.blockSize}` +
      `${r.beyondModelContext === null ? "" : `; past the model's own ${r.beyondModelContext} tokens for timing only`}); median (min-max)`,
    columns: ["threads", "context", "KV type", "KV MiB", "ms/token", "tokens/s", `vs ${first}`],
    rows: r.rows.map((x) => [
      String(x.threads), String(x.context), x.kvType, fmt(x.kvBytes / 2 ** 20, 4), fmtSpread(x.msPerToken), fmtSpread(x.tokensPerSecond), fmtRatio(x.vsFirst),
    ]),
  }];
}

export function kvContextFigures(r: KVContextResult): Figure[] {
  return r.rows.flatMap((x) => {
    const at = `${r.model}, ${threadsLabel(x.threads)}, context ${x.context}, KV ${x.kvType}`;
    return [...figure(`${at}: decode tokens/s`, x.tokensPerSecond, "tokens/s"), ...figure(`${at}: vs ${r.rows[0]!.kvType}`, x.vsFirst, "x")];
  });
}
