/**
 * The float64 reference forward pass (test/reference/forward-f64.ts): it must reproduce run.c's greedy
 * output token for token on real llama2.c models, and satisfy identities that pin down GQA and both RoPE
 * forms on random models.
 */
import { describe, expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import { makeConfig, type ModelConfig } from "../src/model/config.ts";
import type { Llama2cWeights } from "../src/synth/llama2c-writer.ts";
import { randomWeights } from "../src/synth/random-weights.ts";
import { sharedPath } from "./helpers/shared.ts";
import { decodeTokens, readTokenPieces } from "./reference/decode-tokens.ts";
import { argmax, ReferenceTransformer, referenceGreedy } from "./reference/forward-f64.ts";
import { readLlama2cCheckpoint } from "./reference/read-llama2c.ts";

const BOS = 1;

// ----------------------------------------------------------------------------
// Real models against run.c

const TOKENIZER = sharedPath("models/llama2c/tok512.bin");
const GOLDEN = sharedPath("golden/runc-greedy.json");
const STORIES = sharedPath("models/llama2c/stories260K.bin");
const STORIES_V1 = sharedPath("models/llama2c/variants/stories260K_v1.bin");
const XS = sharedPath("models/llama2c/llama2xs_h192.bin");

interface GoldenEntry { model: string; tokenizer: string; prompt: string; steps: number; stdout: string; completion: string }

function golden(goldenPath: string, model: string, prompt: string): GoldenEntry {
  const entries = JSON.parse(readFileSync(goldenPath, "utf8")) as GoldenEntry[];
  const entry = entries.find((e) => e.model === model && e.prompt === prompt);
  if (entry === undefined) throw new Error(`no golden entry for ${model} / ${prompt}`);
  return entry;
}

/** run.c's prompt encodings with tok512 (read from a debug print in a copy of run.c's generate()). */
const ONCE_UPON_A_TIME = [1, 403, 407, 261, 378];
const THE_DOG = [1, 291, 400, 428];

/** run.c (gcc -O2) greedy ids for stories260K.bin, "Once upon a time", -n 256: all 252 generated tokens. */
const STORIES_ONCE_GREEDY = [
  432, 383, 286, 261, 376, 298, 315, 421, 395, 317, 426, 338, 401, 396, 267, 337, 410, 408, 419, 292, 411, 322, 265, 282,
  295, 433, 426, 385, 328, 432, 358, 394, 261, 370, 432, 352, 266, 268, 388, 426, 338, 391, 266, 267, 337, 335, 312, 432,
  398, 312, 286, 267, 414, 270, 333, 415, 426, 13, 438, 310, 439, 419, 357, 336, 432, 313, 438, 310, 432, 278, 316, 439,
  419, 298, 414, 267, 265, 282, 295, 433, 426, 436, 317, 286, 296, 418, 269, 279, 292, 416, 439, 413, 409, 416, 327, 263,
  415, 294, 267, 400, 426, 338, 336, 432, 313, 442, 391, 267, 337, 335, 364, 420, 268, 388, 432, 398, 359, 280, 303, 439,
  413, 272, 417, 264, 312, 426, 436, 13, 438, 310, 286, 296, 418, 269, 279, 292, 416, 439, 413, 409, 416, 327, 263, 415,
  294, 267, 400, 426, 338, 336, 432, 313, 442, 439, 423, 262, 304, 420, 422, 432, 317, 426, 359, 279, 292, 416, 439, 413,
  409, 416, 327, 263, 415, 294, 267, 400, 426, 436, 13, 438, 310, 279, 292, 416, 439, 413, 391, 267, 281, 421, 427, 311,
  357, 432, 384, 358, 336, 432, 313, 442, 439, 423, 262, 304, 420, 422, 432, 357, 426, 359, 279, 292, 416, 439, 413, 409,
  416, 327, 263, 415, 294, 267, 400, 426, 436, 320, 285, 357, 336, 432, 313, 455, 289, 439, 413, 263, 304, 420, 422, 432,
  317, 426, 410, 448, 411, 280, 303, 281, 421, 427, 364, 426,
];

/** What run.c prints for a greedy run: prompt and generated pieces up to (not including) BOS, then "\n". */
function runcStdout(pieces: Uint8Array[], prompt: number[], generated: number[]): string {
  const stop = generated.indexOf(BOS);
  const shown = stop === -1 ? generated : generated.slice(0, stop);
  return decodeTokens(pieces, prompt[0]!, [...prompt.slice(1), ...shown]) + "\n";
}

describe("reference vs run.c greedy", () => {
  test.skipIf(STORIES === null || TOKENIZER === null || GOLDEN === null)(
    "stories260K, 'Once upon a time': same 252 token ids as run.c, same text as the golden",
    () => {
      if (STORIES === null || TOKENIZER === null || GOLDEN === null) return;
      const { config, weights } = readLlama2cCheckpoint(STORIES);
      const entry = golden(GOLDEN, "llama2c/stories260K.bin", "Once upon a time");
      const generated = referenceGreedy(config, weights, ONCE_UPON_A_TIME, entry.steps - (ONCE_UPON_A_TIME.length - 1));
      expect(generated).toEqual(STORIES_ONCE_GREEDY);
      const pieces = readTokenPieces(TOKENIZER, config.vocabSize);
      expect(entry.completion.startsWith(decodeTokens(pieces, 378, generated.slice(0, 30)))).toBe(true);
      expect(runcStdout(pieces, ONCE_UPON_A_TIME, generated)).toBe(entry.stdout);
    },
  );

  test.skipIf(STORIES === null || TOKENIZER === null || GOLDEN === null)(
    "stories260K, 'The dog': same text as the golden, stopping at BOS like run.c",
    () => {
      if (STORIES === null || TOKENIZER === null || GOLDEN === null) return;
      const { config, weights } = readLlama2cCheckpoint(STORIES);
      const entry = golden(GOLDEN, "llama2c/stories260K.bin", "The dog");
      const generated = referenceGreedy(config, weights, THE_DOG, 200);
      expect(generated).toContain(BOS); // this run ends on BOS well before its 512 steps
      expect(runcStdout(readTokenPieces(TOKENIZER, config.vocabSize), THE_DOG, generated)).toBe(entry.stdout);
    },
  );

  test.skipIf(XS === null || TOKENIZER === null || GOLDEN === null)(
    "llama2xs_h192, 'Once upon a time': same text as the golden",
    () => {
      if (XS === null || TOKENIZER === null || GOLDEN === null) return;
      const { config, weights } = readLlama2cCheckpoint(XS);
      const entry = golden(GOLDEN, "llama2c/llama2xs_h192.bin", "Once upon a time");
      const generated = referenceGreedy(config, weights, ONCE_UPON_A_TIME, entry.steps - (ONCE_UPON_A_TIME.length - 1));
      expect(runcStdout(readTokenPieces(TOKENIZER, config.vocabSize), ONCE_UPON_A_TIME, generated)).toBe(entry.stdout);
    },
  );

  test.skipIf(STORIES === null || STORIES_V1 === null)("the reference reader sees the same weights in the legacy and v1 files", () => {
    if (STORIES === null || STORIES_V1 === null) return;
    const legacy = readLlama2cCheckpoint(STORIES);
    const v1 = readLlama2cCheckpoint(STORIES_V1);
    expect(v1.format).toBe("v1");
    expect(v1.config).toEqual(legacy.config);
    expect(v1.weights).toEqual(legacy.weights);
  });
});

// ----------------------------------------------------------------------------
// Identities on random models

/** GQA: 6 query heads over 2 kv heads, headDim 4. */
const SMALL = makeConfig({
  dim: 24, hiddenDim: 40, nLayers: 2, nHeads: 6, nKvHeads: 2, vocabSize: 50, seqLen: 12, sharedClassifier: false,
});
const TOKENS = [3, 17, 17, 42, 0, 9, 31, 5];

function allLogits(config: ModelConfig, weights: Llama2cWeights, tokens: number[]): Float64Array[] {
  const model = new ReferenceTransformer(config, weights);
  return tokens.map((t, pos) => model.forward(t, pos));
}

function maxAbsDiff(a: Float64Array[], b: Float64Array[]): number {
  let max = 0;
  a.forEach((row, i) => row.forEach((v, j) => (max = Math.max(max, Math.abs(v - b[i]![j]!)))));
  return max;
}

/** A layer-stacked matrix with `nRowsOut` rows per layer; new row r of a layer is old row `rowOf(r)`. */
function selectRows(m: Float32Array, nLayers: number, nRowsOut: number, width: number, rowOf: (r: number) => number): Float32Array {
  const nRowsIn = m.length / nLayers / width;
  const out = new Float32Array(nLayers * nRowsOut * width);
  for (let l = 0; l < nLayers; l++) {
    for (let r = 0; r < nRowsOut; r++) {
      const from = (l * nRowsIn + rowOf(r)) * width;
      out.set(m.subarray(from, from + width), (l * nRowsOut + r) * width);
    }
  }
  return out;
}

describe("reference identities", () => {
  const weights = randomWeights(SMALL, 11, { sharedClassifier: false });

  test("GQA equals full multi-head attention with each kv head repeated", () => {
    // kv head k serves query heads 3k..3k+2, so the MHA model's kv head h is GQA's kv head floor(h/3).
    const mha = { ...SMALL, nKvHeads: 6 };
    const head = SMALL.headDim;
    const repeat = (m: Float32Array) =>
      selectRows(m, SMALL.nLayers, 6 * head, SMALL.dim, (r) => Math.floor(Math.floor(r / head) / 3) * head + (r % head));
    const repeated = { ...weights, wk: repeat(weights.wk), wv: repeat(weights.wv) };
    expect(maxAbsDiff(allLogits(SMALL, weights, TOKENS), allLogits(mha, repeated, TOKENS))).toBeLessThan(1e-12);
  });

  test("neox RoPE on Hugging Face-permuted wq/wk equals interleaved RoPE on the originals", () => {
    // HF's permutation sends interleaved pair (2i, 2i+1) of each head to (i, i + headDim/2).
    const head = SMALL.headDim;
    const half = head / 2;
    const toNeox = (r: number) => {
      const base = r - (r % head);
      const j = r % head;
      return base + (j < half ? 2 * j : 2 * (j - half) + 1);
    };
    const permuted = {
      ...weights,
      wq: selectRows(weights.wq, SMALL.nLayers, SMALL.nHeads * head, SMALL.dim, toNeox),
      wk: selectRows(weights.wk, SMALL.nLayers, SMALL.nKvHeads * head, SMALL.dim, toNeox),
    };
    const interleaved = allLogits(SMALL, weights, TOKENS);
    const neox = allLogits({ ...SMALL, ropeStyle: "neox" }, permuted, TOKENS);
    expect(maxAbsDiff(interleaved, neox)).toBeLessThan(1e-12);
    // and the two styles really differ on the same weights past position 0
    const neoxSameWeights = allLogits({ ...SMALL, ropeStyle: "neox" }, weights, TOKENS);
    expect(maxAbsDiff(interleaved.slice(0, 1), neoxSameWeights.slice(0, 1))).toBe(0);
    expect(maxAbsDiff(interleaved, neoxSameWeights)).toBeGreaterThan(1e-3);
  });

  test("causal: a position's logits do not depend on later tokens", () => {
    const a = allLogits(SMALL, weights, TOKENS);
    const b = allLogits(SMALL, weights, [...TOKENS.slice(0, 4), 1, 2, 3, 4]);
    expect(maxAbsDiff(a.slice(0, 4), b.slice(0, 4))).toBe(0);
    expect(maxAbsDiff(a.slice(4), b.slice(4))).toBeGreaterThan(0);
  });

  test("the shared classifier is the embedding table", () => {
    const shared = { ...weights, wcls: null };
    const explicit = { ...weights, wcls: weights.tokenEmbedding };
    expect(maxAbsDiff(allLogits(SMALL, shared, TOKENS), allLogits(SMALL, explicit, TOKENS))).toBe(0);
  });

  test("random weights stay numerically healthy through 30 layers (SmolLM2-like head layout)", () => {
    const deep = makeConfig({
      dim: 72, hiddenDim: 192, nLayers: 30, nHeads: 9, nKvHeads: 3, vocabSize: 97, seqLen: 16, sharedClassifier: true,
    });
    const model = new ReferenceTransformer(deep, randomWeights(deep, 2024));
    const picks = new Set<number>();
    let token = 1;
    for (let pos = 0; pos < 16; pos++) {
      const logits = model.forward(token, pos);
      let sum = 0, squares = 0;
      for (const v of logits) {
        expect(Number.isFinite(v)).toBe(true);
        sum += v;
        squares += v * v;
      }
      const mean = sum / logits.length;
      const std = Math.sqrt(squares / logits.length - mean * mean);
      expect(std).toBeGreaterThan(0.2);
      expect(std).toBeLessThan(10);
      token = argmax(logits);
      picks.add(token);
    }
    expect(picks.size).toBeGreaterThan(1); // not stuck on one token from the start
  });
});
