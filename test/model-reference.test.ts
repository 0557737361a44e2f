/**
 * The WebAssembly engine's forward pass against the independent float64 reference
 * (test/reference/forward-f64.ts), on random-weight llama2.c models of many shapes written to disk by the
 * project's writer and read back by the engine's own loader: GQA and plain multi-head attention, head
 * sizes 6 to 128, widths that are not multiples of 4 (so every SIMD kernel runs its scalar tail), shared
 * and separate classifiers, legacy and v1 files.
 *
 * For every shape, one 100-token sequence (seeded random ids) is run four ways over a paged KV cache
 * whose block tables are shuffled, non-contiguous picks from a larger arena, at block sizes 16 and 7
 * (neither divides 100, so the last block is always partial):
 *   (a) the whole prefill in one chunk, logits at every position;
 *   (b) uneven chunks of 1, 7, 13, 29 and 50 tokens, each with logits at every position;
 *   (c) token by token;
 *   (d) two chunks of 50, each in a batch with a second, unrelated sequence.
 * Every position's logits must match the reference to REL_TOL (see relativeError), and (b), (c), (d) must
 * be bitwise identical to (a): each kernel reduces every output element in one fixed order whatever else
 * is in the batch, so chunking and batching may not change a single bit.
 *
 * The arena is filled with NaN before each run and reused (dirty) between runs, so attention that reads
 * one slot beyond a sequence's context, or a slot of another block, turns the logits into NaN.
 */
import { afterAll, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { CpuBackend } from "../src/backend/wasm/cpu.ts";
import { KVArena } from "../src/backend/wasm/kv-arena.ts";
import { StepBatch } from "../src/model/batch.ts";
import { makeConfig, type ModelConfig } from "../src/model/config.ts";
import { LlamaModel } from "../src/backend/wasm/llama.ts";
import { type Llama2cFormat, type Llama2cWeights, writeLlama2c } from "../src/synth/llama2c-writer.ts";
import { openCheckpoint } from "../src/model/load.ts";
import { randomWeights } from "../src/synth/random-weights.ts";
import { loadWeights } from "../src/backend/wasm/weights.ts";
import { Xoshiro128 } from "../src/util/random.ts";
import { relativeError } from "./helpers/logit-compare.ts";
import { testThreads } from "./helpers/threads.ts";
import { ReferenceTransformer } from "./reference/forward-f64.ts";

const dir = mkdtempSync(join(tmpdir(), "pagellm-model-reference-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const THREADS = testThreads();
const SEQ_TOKENS = 100;
const CHUNKS = [1, 7, 13, 29, 50]; // (b): sums to SEQ_TOKENS
const BLOCK_SIZES = [16, 7];
/** Largest relative logit error allowed at any position (see relativeError). */
const REL_TOL = 1e-4;

// ----------------------------------------------------------------------------
// Shapes

interface Shape {
  name: string;
  config: ModelConfig;
  format: Llama2cFormat;
  seed: number;
}

function shape(
  name: string, format: Llama2cFormat, seed: number,
  c: { dim: number; hiddenDim: number; nLayers: number; nHeads: number; nKvHeads: number; vocabSize: number; shared: boolean },
): Shape {
  const config = makeConfig({
    dim: c.dim, hiddenDim: c.hiddenDim, nLayers: c.nLayers, nHeads: c.nHeads, nKvHeads: c.nKvHeads,
    vocabSize: c.vocabSize, seqLen: 113, sharedClassifier: c.shared,
  });
  return { name, config, format, seed };
}

const SHAPES: Shape[] = [
  // head size 8, GQA 4:1, hidden not a multiple of 4
  shape("dim 64, 8 heads of 8, 2 kv heads, hidden 171, vocab 101, shared, v1", "v1", 1,
    { dim: 64, hiddenDim: 171, nLayers: 2, nHeads: 8, nKvHeads: 2, vocabSize: 101, shared: true }),
  // head size 10 (odd number of rotation pairs), GQA 3:1, every width odd or 2 mod 4
  shape("dim 90, 9 heads of 10, 3 kv heads, hidden 97, vocab 131, shared, legacy", "legacy", 2,
    { dim: 90, hiddenDim: 97, nLayers: 2, nHeads: 9, nKvHeads: 3, vocabSize: 131, shared: true }),
  // multi-head (no GQA), odd widths, separate classifier
  shape("dim 50, 5 heads of 10, 5 kv heads, hidden 131, vocab 97, unshared, v1", "v1", 3,
    { dim: 50, hiddenDim: 131, nLayers: 2, nHeads: 5, nKvHeads: 5, vocabSize: 97, shared: false }),
  // head size 6 (below one SIMD vector), GQA 3:1, three layers
  shape("dim 36, 6 heads of 6, 2 kv heads, hidden 101, vocab 53, unshared, legacy", "legacy", 4,
    { dim: 36, hiddenDim: 101, nLayers: 3, nHeads: 6, nKvHeads: 2, vocabSize: 53, shared: false }),
  // head size 22, multi-query (one kv head)
  shape("dim 66, 3 heads of 22, 1 kv head, hidden 45, vocab 37, unshared, v1", "v1", 5,
    { dim: 66, hiddenDim: 45, nLayers: 2, nHeads: 3, nKvHeads: 1, vocabSize: 37, shared: false }),
  // head size 32, multi-head, hidden wider than dim
  shape("dim 96, 3 heads of 32, 3 kv heads, hidden 258, vocab 512, shared, legacy", "legacy", 6,
    { dim: 96, hiddenDim: 258, nLayers: 2, nHeads: 3, nKvHeads: 3, vocabSize: 512, shared: true }),
  // head size 64, multi-query
  shape("dim 128, 2 heads of 64, 1 kv head, hidden 203, vocab 75, unshared, legacy", "legacy", 7,
    { dim: 128, hiddenDim: 203, nLayers: 1, nHeads: 2, nKvHeads: 1, vocabSize: 75, shared: false }),
  // head size 128, multi-head
  shape("dim 256, 2 heads of 128, 2 kv heads, hidden 131, vocab 64, unshared, v1", "v1", 8,
    { dim: 256, hiddenDim: 131, nLayers: 2, nHeads: 2, nKvHeads: 2, vocabSize: 64, shared: false }),
  // head size 128, GQA 2:1, shared
  shape("dim 256, 2 heads of 128, 1 kv head, hidden 99, vocab 67, shared, legacy", "legacy", 9,
    { dim: 256, hiddenDim: 99, nLayers: 1, nHeads: 2, nKvHeads: 1, vocabSize: 67, shared: true }),
];

// ----------------------------------------------------------------------------
// The engine, driven one forward step at a time

/** Seeded distinct block ids out of [0, numBlocks), in shuffled order. */
function shuffledBlocks(rng: Xoshiro128, numBlocks: number, count: number): number[] {
  const ids = Array.from({ length: numBlocks }, (_, i) => i);
  for (let i = numBlocks - 1; i > 0; i--) {
    const j = Math.floor(rng.nextFloat() * (i + 1));
    [ids[i], ids[j]] = [ids[j]!, ids[i]!];
  }
  return ids.slice(0, count);
}

function randomTokens(rng: Xoshiro128, n: number, vocab: number): number[] {
  return Array.from({ length: n }, () => Math.floor(rng.nextFloat() * vocab));
}

class EngineRig {
  readonly backend: CpuBackend;
  readonly model: LlamaModel;
  readonly arena: KVArena;
  readonly batch: StepBatch;
  readonly blocksPerSeq: number;

  constructor(readonly config: ModelConfig, path: string, readonly blockSize: number) {
    this.backend = new CpuBackend(THREADS);
    try {
      const ckpt = openCheckpoint(path);
      expect(ckpt.config).toEqual(config);
      const weights = loadWeights(ckpt, this.backend.mem, this.backend.kernels);
      // Room for two sequences of SEQ_TOKENS at once (run (d)); logits for every token.
      const maxTokens = 2 * SEQ_TOKENS;
      this.model = new LlamaModel(config, weights, this.backend, maxTokens, maxTokens);
      this.blocksPerSeq = Math.ceil(SEQ_TOKENS / blockSize);
      // Three times what one sequence needs, plus a few: the tables are scattered over the arena.
      this.arena = new KVArena(this.backend.mem, config, 3 * this.blocksPerSeq + 5, blockSize);
      this.batch = new StepBatch(this.backend.mem, maxTokens, 2, Math.ceil(config.seqLen / blockSize), blockSize, maxTokens);
    } catch (e) {
      this.backend.close();
      throw e;
    }
  }

  close(): void {
    this.backend.close();
  }

  /** Fill the whole KV arena with NaN, so any read of a slot this run did not write shows in the logits. */
  poisonKV(): void {
    const c = this.config;
    const layerBytes = this.arena.layout.layerBlockBytes * this.arena.numBlocks;
    // The arena is one run of K, V, K, V, ... layer regions; refuse to write anywhere else.
    expect(this.arena.vLayer(c.nLayers - 1) + layerBytes).toBe(this.arena.kLayer(0) + 2 * c.nLayers * layerBytes);
    const floats = (2 * c.nLayers * layerBytes) / 4;
    const start = this.arena.kLayer(0) >> 2;
    this.backend.mem.f32.fill(NaN, start, start + floats);
  }

  /** Logits (copies) of the `n` rows starting at `row` of the last forward step. */
  private logitRows(row: number, n: number): Float32Array[] {
    const V = this.config.vocabSize;
    const out: Float32Array[] = [];
    for (let r = row; r < row + n; r++) {
      const at = this.model.logitsAddr(r) >> 2;
      out.push(this.backend.mem.f32.slice(at, at + V));
    }
    return out;
  }

  /** Run `tokens` in consecutive chunks of the given sizes, logits at every position. */
  runChunks(tokens: number[], chunks: number[], table: number[]): Float32Array[] {
    const out: Float32Array[] = [];
    let pos = 0;
    for (const n of chunks) {
      this.batch.reset();
      const row = this.batch.addSequence(tokens.slice(pos, pos + n), pos, [table], "all");
      this.model.forward(this.batch, this.arena);
      out.push(...this.logitRows(row, n));
      pos += n;
    }
    expect(pos).toBe(tokens.length);
    return out;
  }

  /**
   * Run `tokens` in chunks of `chunk`, each step batched with the matching chunk of `other` (a second
   * sequence with its own blocks), placed first so the sequence under test sits at a batch offset.
   */
  runBesideAnother(tokens: number[], chunk: number, table: number[], other: number[], otherTable: number[]): Float32Array[] {
    const out: Float32Array[] = [];
    for (let pos = 0; pos < tokens.length; pos += chunk) {
      this.batch.reset();
      this.batch.addSequence(other.slice(pos, pos + chunk), pos, [otherTable], "last");
      const row = this.batch.addSequence(tokens.slice(pos, pos + chunk), pos, [table], "all");
      this.model.forward(this.batch, this.arena);
      out.push(...this.logitRows(row, Math.min(chunk, tokens.length - pos)));
    }
    return out;
  }
}

// ----------------------------------------------------------------------------
// Tests

function bitsEqual(a: Float32Array[], b: Float32Array[]): { equal: boolean; firstDiff: string } {
  for (let p = 0; p < Math.max(a.length, b.length); p++) {
    const x = a[p];
    const y = b[p];
    if (x === undefined || y === undefined) return { equal: false, firstDiff: `position ${p} missing` };
    const xi = new Uint32Array(x.buffer, x.byteOffset, x.length);
    const yi = new Uint32Array(y.buffer, y.byteOffset, y.length);
    for (let j = 0; j < xi.length; j++) {
      if (xi[j] !== yi[j]) return { equal: false, firstDiff: `position ${p}, logit ${j}: ${x[j]} vs ${y[j]}` };
    }
  }
  return { equal: true, firstDiff: "" };
}

/** Largest relative error over positions, and where it is. */
function worstError(engine: Float32Array[], ref: Float64Array[]): { error: number; position: number } {
  expect(engine.length).toBe(ref.length);
  let worst = { error: 0, position: -1 };
  engine.forEach((row, p) => {
    const e = relativeError(row, ref[p]!);
    if (!(e <= worst.error)) worst = { error: e, position: p };
  });
  return worst;
}

/** Observed max relative error per shape, printed at the end with PAGELLM_TEST_VERBOSE=1. */
const observed: string[] = [];
afterAll(() => {
  if (process.env.PAGELLM_TEST_VERBOSE && observed.length > 0) console.log(`model-reference: max relative logit error (threads ${THREADS})\n  ${observed.join("\n  ")}`);
});

describe(`engine logits vs float64 reference, 100 positions (threads ${THREADS})`, () => {
  for (const s of SHAPES) {
    test(s.name, () => {
      const { config } = s;
      const weights: Llama2cWeights = randomWeights(config, s.seed, { sharedClassifier: config.sharedClassifier });
      const path = join(dir, `shape-${s.seed}-${s.format}.bin`);
      writeLlama2c(path, config, weights, s.format);

      const rng = new Xoshiro128(1000 + s.seed);
      const tokens = randomTokens(rng, SEQ_TOKENS, config.vocabSize);
      const other = randomTokens(rng, SEQ_TOKENS, config.vocabSize);
      const reference = new ReferenceTransformer(config, weights);
      const expected = tokens.map((t, pos) => reference.forward(t, pos));

      let shapeWorst = 0;
      for (const blockSize of BLOCK_SIZES) {
        const rig = new EngineRig(config, path, blockSize);
        try {
          const n = rig.blocksPerSeq;
          const table = () => shuffledBlocks(rng, rig.arena.numBlocks, n);

          rig.poisonKV();
          const oneChunk = rig.runChunks(tokens, [SEQ_TOKENS], table());
          // The later runs reuse the arena as the earlier ones left it, with new tables over its blocks.
          const uneven = rig.runChunks(tokens, CHUNKS, table());
          const byToken = rig.runChunks(tokens, Array<number>(SEQ_TOKENS).fill(1), table());
          rig.poisonKV();
          const both = shuffledBlocks(rng, rig.arena.numBlocks, 2 * n); // interleaved over the arena
          const beside = rig.runBesideAnother(tokens, 50, both.slice(0, n), other, both.slice(n));

          for (const [mode, logits] of [["one chunk", oneChunk], ["uneven chunks", uneven], ["token by token", byToken], ["beside another sequence", beside]] as const) {
            const worst = worstError(logits, expected);
            shapeWorst = Math.max(shapeWorst, worst.error);
            if (!(worst.error <= REL_TOL)) {
              throw new Error(`block size ${blockSize}, ${mode}: relative error ${worst.error} at position ${worst.position} exceeds ${REL_TOL}`);
            }
          }
          for (const [mode, logits] of [["uneven chunks", uneven], ["token by token", byToken], ["beside another sequence", beside]] as const) {
            const cmp = bitsEqual(logits, oneChunk);
            if (!cmp.equal) throw new Error(`block size ${blockSize}: ${mode} differs from one chunk at ${cmp.firstDiff}`);
          }
        } finally {
          rig.close();
        }
      }
      observed.push(`${shapeWorst.toExponential(2)}  ${s.name}`);
      expect(shapeWorst).toBeLessThanOrEqual(REL_TOL);
    });
  }
});

describe("the comparison has teeth", () => {
  // (Swapping two blocks would not do: attention is a softmax-weighted sum over a set of keys that carry
  // their rotation, so reading whole blocks in another order changes only the rounding.)
  test("a wrong block table (block 0 pointing at block 3) after the first 50 positions fails the bound", () => {
    const s = SHAPES[1]!;
    const { config } = s;
    const weights = randomWeights(config, s.seed, { sharedClassifier: config.sharedClassifier });
    const path = join(dir, `teeth-${s.seed}.bin`);
    writeLlama2c(path, config, weights, s.format);
    const rng = new Xoshiro128(77);
    const tokens = randomTokens(rng, SEQ_TOKENS, config.vocabSize);
    const reference = new ReferenceTransformer(config, weights);
    const expected = tokens.map((t, pos) => reference.forward(t, pos));
    const rig = new EngineRig(config, path, 16);
    try {
      rig.poisonKV();
      const table = shuffledBlocks(rng, rig.arena.numBlocks, rig.blocksPerSeq);
      const first = rig.runChunks(tokens.slice(0, 50), [50], table);
      // Positions 50.. read positions 48..63 twice and 0..15 never.
      const wrong = [table[3]!, ...table.slice(1)];
      const rest: Float32Array[] = [];
      rig.batch.reset();
      const row = rig.batch.addSequence(tokens.slice(50), 50, [wrong], "all");
      rig.model.forward(rig.batch, rig.arena);
      for (let r = 0; r < 50; r++) {
        const at = rig.model.logitsAddr(row + r) >> 2;
        rest.push(rig.backend.mem.f32.slice(at, at + config.vocabSize));
      }
      expect(worstError(first, expected.slice(0, 50)).error).toBeLessThanOrEqual(REL_TOL);
      expect(worstError(rest, expected.slice(50)).error).toBeGreaterThan(100 * REL_TOL);
    } finally {
      rig.close();
    }
  });

  test("the reference's logits are not all tiny (the floor of 1 in relativeError is not doing the work)", () => {
    for (const s of [SHAPES[0]!, SHAPES[7]!]) {
      const weights = randomWeights(s.config, s.seed, { sharedClassifier: s.config.sharedClassifier });
      const reference = new ReferenceTransformer(s.config, weights);
      const tokens = randomTokens(new Xoshiro128(5), 20, s.config.vocabSize);
      const largest = Math.max(...tokens.map((t, pos) => Math.max(...reference.forward(t, pos).map(Math.abs))));
      expect(largest).toBeGreaterThan(1);
    }
  });
});
