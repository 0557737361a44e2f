/**
 * llama2.c checkpoint writer: layouts checked against an offset computation written here from run.c,
 * runq.c and export.py, against the real stories260K files, and for reproducible random weights.
 */
import { afterAll, describe, expect, test } from "bun:test";
import { mkdtempSync, readFileSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { makeConfig, type ModelConfig } from "../src/model/config.ts";
import {
  type Llama2cFormat,
  type Llama2cWeights,
  legacyRopeTables,
  llama2cFileSize,
  quantizeQ80,
  v2GroupSize,
  writeLlama2c,
} from "../src/synth/llama2c-writer.ts";
import { randomWeights } from "../src/synth/random-weights.ts";
import { Xoshiro128 } from "../src/util/random.ts";
import { InputError } from "../src/errors.ts";
import { sharedPath } from "./helpers/shared.ts";
import { readLlama2cCheckpoint } from "./reference/read-llama2c.ts";

const dir = mkdtempSync(join(tmpdir(), "pagellm-llama2c-writer-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** Odd everything: GQA (6 query heads, 2 kv heads), hidden not a multiple of dim, prime vocab and seq. */
const ODD = makeConfig({
  dim: 24, hiddenDim: 72, nLayers: 3, nHeads: 6, nKvHeads: 2, vocabSize: 37, seqLen: 11, sharedClassifier: true,
});

// ----------------------------------------------------------------------------
// Independent layout, written from run.c / runq.c / export.py

type Tensor = { name: string; data: Float32Array };

/** Every tensor in file order, split per layer where the format stores per-layer tensors. */
function fileOrder(c: ModelConfig, w: Llama2cWeights, format: Llama2cFormat): Tensor[] {
  const L = c.nLayers;
  const layers = (name: string, a: Float32Array): Tensor[] =>
    Array.from({ length: L }, (_, l) => ({ name: `${name}[${l}]`, data: a.subarray((l * a.length) / L, ((l + 1) * a.length) / L) }));
  const matrices = [
    ...layers("wq", w.wq), ...layers("wk", w.wk), ...layers("wv", w.wv), ...layers("wo", w.wo),
    ...layers("w1", w.w1), ...layers("w2", w.w2), ...layers("w3", w.w3),
  ];
  const cls = w.wcls === null ? [] : [{ name: "wcls", data: w.wcls }];
  if (format === "legacy") {
    // run.c memory_map_weights; the RoPE tables are checked separately
    return [
      { name: "tokenEmbedding", data: w.tokenEmbedding }, ...layers("rmsAtt", w.rmsAtt),
      ...layers("wq", w.wq), ...layers("wk", w.wk), ...layers("wv", w.wv), ...layers("wo", w.wo),
      ...layers("rmsFfn", w.rmsFfn), ...layers("w1", w.w1), ...layers("w2", w.w2), ...layers("w3", w.w3),
      { name: "rmsFinal", data: w.rmsFinal },
    ];
  }
  // export.py version1_export / version2_export: norms first, then the embedding, matrices, classifier
  return [
    { name: "rmsAtt", data: w.rmsAtt }, { name: "rmsFfn", data: w.rmsFfn }, { name: "rmsFinal", data: w.rmsFinal },
    { name: "tokenEmbedding", data: w.tokenEmbedding }, ...matrices, ...cls,
  ];
}

function view(path: string): DataView {
  const bytes = readFileSync(path);
  return new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
}

function expectF32At(file: DataView, offset: number, t: Tensor): number {
  for (let i = 0; i < t.data.length; i++) {
    const got = file.getFloat32(offset + 4 * i, true);
    if (!Object.is(got, t.data[i])) throw new Error(`${t.name}[${i}] at byte ${offset + 4 * i}: ${got} != ${t.data[i]}`);
  }
  return offset + 4 * t.data.length;
}

/** The header's 7 config ints, starting at byte `at`. */
function headerInts(file: DataView, at: number): number[] {
  return Array.from({ length: 7 }, (_, i) => file.getInt32(at + 4 * i, true));
}

function configInts(c: ModelConfig, vocab: number): number[] {
  return [c.dim, c.hiddenDim, c.nLayers, c.nHeads, c.nKvHeads, vocab, c.seqLen];
}

// ----------------------------------------------------------------------------
// Formats

describe.each([true, false])("sharedClassifier %p", (shared) => {
  const w = randomWeights(ODD, 7, { sharedClassifier: shared });
  const kvDim = 2 * 4;
  const matrixElements = 37 * 24 + 3 * (24 * 24 * 2 + kvDim * 24 * 2 + 72 * 24 * 3) + (shared ? 0 : 37 * 24);
  const normFloats = 3 * 24 * 2 + 24;

  test("legacy: header, size, tensors at run.c offsets, RoPE tables, classifier", () => {
    const path = join(dir, `legacy-${shared}.bin`);
    writeLlama2c(path, ODD, w, "legacy");
    const ropeFloats = 2 * 11 * (4 / 2);
    expect(statSync(path).size).toBe(28 + 4 * (normFloats + matrixElements + ropeFloats));
    expect(llama2cFileSize(ODD, "legacy", shared)).toBe(statSync(path).size);
    const file = view(path);
    expect(headerInts(file, 0)).toEqual(configInts(ODD, shared ? 37 : -37));
    let offset = 28;
    for (const t of fileOrder(ODD, w, "legacy")) offset = expectF32At(file, offset, t);
    // freq_cis_real then freq_cis_imag, [seq][headDim/2]: cos/sin(pos * 10000^(-2i/headDim))
    for (const table of [Math.cos, Math.sin]) {
      for (let pos = 0; pos < 11; pos++) {
        for (let i = 0; i < 2; i++) {
          expect(file.getFloat32(offset, true)).toBeCloseTo(table(pos * 10000 ** (-(2 * i) / 4)), 6);
          offset += 4;
        }
      }
    }
    if (!shared) offset = expectF32At(file, offset, { name: "wcls", data: w.wcls! });
    expect(offset).toBe(file.byteLength);
  });

  test("v1: 256-byte ak42 header, fp32 tensors in export.py order", () => {
    const path = join(dir, `v1-${shared}.bin`);
    writeLlama2c(path, ODD, w, "v1");
    expect(statSync(path).size).toBe(256 + 4 * (normFloats + matrixElements));
    expect(llama2cFileSize(ODD, "v1", shared)).toBe(statSync(path).size);
    const file = view(path);
    expect(file.getUint32(0, true)).toBe(0x616b3432);
    expect(new TextDecoder().decode(new Uint8Array(file.buffer, file.byteOffset, 4))).toBe("24ka"); // "ak42" as LE u32
    expect(file.getInt32(4, true)).toBe(1);
    expect(headerInts(file, 8)).toEqual(configInts(ODD, 37)); // v1 always stores a positive vocab
    expect(file.getUint8(36)).toBe(shared ? 1 : 0);
    for (let b = 37; b < 256; b++) expect(file.getUint8(b)).toBe(0);
    let offset = 256;
    for (const t of fileOrder(ODD, w, "v1")) offset = expectF32At(file, offset, t);
    expect(offset).toBe(file.byteLength);
  });

  test("v2: header with group size at byte 37, fp32 norms, per-tensor int8 then scales", () => {
    const path = join(dir, `v2-${shared}.bin`);
    writeLlama2c(path, ODD, w, "v2");
    const gs = 8; // largest power of two <= 64 dividing both dim 24 and hidden 72
    expect(v2GroupSize(ODD)).toBe(gs);
    expect(statSync(path).size).toBe(256 + 4 * normFloats + matrixElements + 4 * (matrixElements / gs));
    expect(llama2cFileSize(ODD, "v2", shared)).toBe(statSync(path).size);
    const file = view(path);
    expect(file.getUint32(0, true)).toBe(0x616b3432);
    expect(file.getInt32(4, true)).toBe(2);
    expect(headerInts(file, 8)).toEqual(configInts(ODD, 37));
    expect(file.getUint8(36)).toBe(shared ? 1 : 0);
    expect(file.getInt32(37, true)).toBe(gs);
    for (let b = 41; b < 256; b++) expect(file.getUint8(b)).toBe(0);
    const tensors = fileOrder(ODD, w, "v2");
    let offset = 256;
    for (const t of tensors.slice(0, 3)) offset = expectF32At(file, offset, t); // the norms stay fp32
    for (const t of tensors.slice(3)) {
      const n = t.data.length;
      for (let g = 0; g < n / gs; g++) {
        const scale = file.getFloat32(offset + n + 4 * g, true);
        let maxAbs = 0;
        for (let i = g * gs; i < (g + 1) * gs; i++) maxAbs = Math.max(maxAbs, Math.abs(t.data[i]!));
        expect(scale).toBe(Math.fround(maxAbs / 127));
        for (let i = g * gs; i < (g + 1) * gs; i++) {
          const q = file.getInt8(offset + i);
          expect(Math.abs(q)).toBeLessThanOrEqual(127);
          // round to nearest: the error is at most half a step (plus float32 slack)
          expect(Math.abs(q * scale - t.data[i]!)).toBeLessThanOrEqual(scale * 0.5 * (1 + 1e-6));
        }
      }
      offset += n + 4 * (n / gs);
    }
    expect(offset).toBe(file.byteLength);
  });
});

// ----------------------------------------------------------------------------
// Quantization and group size

describe("quantizeQ80", () => {
  test("scale = max|w|/127, max element maps to ±127, error <= scale/2", () => {
    const w = new Float32Array(4096);
    new Xoshiro128(3).fillNormalish(w, 0, 0.05);
    const { q, s } = quantizeQ80(w, 64);
    expect(q.length).toBe(4096);
    expect(s.length).toBe(64);
    for (let g = 0; g < 64; g++) {
      const group = w.subarray(g * 64, (g + 1) * 64);
      const maxAbs = Math.max(...Array.from(group, Math.abs));
      expect(s[g]).toBe(Math.fround(maxAbs / 127));
      const at = group.findIndex((v) => Math.abs(v) === maxAbs);
      expect(Math.abs(q[g * 64 + at]!)).toBe(127);
      for (let i = 0; i < 64; i++) {
        expect(Math.abs(q[g * 64 + i]! * s[g]! - group[i]!)).toBeLessThanOrEqual(s[g]! / 2 * (1 + 1e-6));
      }
    }
  });

  test("rounds halves to even like torch.round; zero groups give zero scale", () => {
    // scale = 127/127 = 1, so w/scale is w itself
    const w = new Float32Array([127, 0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 3.4999]);
    expect(Array.from(quantizeQ80(w, 8).q)).toEqual([127, 0, 2, 2, 0, -2, -2, 3]);
    const zeros = quantizeQ80(new Float32Array(4), 4);
    expect(Array.from(zeros.s)).toEqual([0]);
    expect(Array.from(zeros.q)).toEqual([0, 0, 0, 0]);
  });

  test("rejects a length that is not whole groups", () => {
    expect(() => quantizeQ80(new Float32Array(10), 4)).toThrow(InputError);
  });
});

describe("v2GroupSize", () => {
  const shape = (dim: number, hiddenDim: number, nHeads: number) =>
    makeConfig({ dim, hiddenDim, nLayers: 1, nHeads, nKvHeads: nHeads, vocabSize: 32000, seqLen: 256, sharedClassifier: true });
  test("default: largest power of two <= 64 dividing dim and hidden (export.py's answer on real shapes)", () => {
    expect(v2GroupSize(shape(288, 768, 6))).toBe(32); // stories15M
    expect(v2GroupSize(shape(768, 2048, 12))).toBe(64); // stories110M
    expect(v2GroupSize(shape(576, 1536, 9))).toBe(64); // SmolLM2-135M
    expect(v2GroupSize(shape(64, 172, 8))).toBe(4); // stories260K: export.py would pick 64, rows of 172 need 4
  });
  test("explicit: used as is when it divides dim, else an InputError", () => {
    expect(v2GroupSize(shape(64, 172, 8), 32)).toBe(32);
    expect(v2GroupSize(ODD, 12)).toBe(12);
    expect(() => v2GroupSize(ODD, 16)).toThrow(InputError);
    expect(() => writeLlama2c(join(dir, "bad.bin"), ODD, randomWeights(ODD, 1), "v2", { groupSize: 16 })).toThrow(InputError);
  });
});

// ----------------------------------------------------------------------------
// Validation, reproducibility, health

describe("writeLlama2c validation", () => {
  test("rejects weights of the wrong length and shapes llama2.c cannot express", () => {
    const w = randomWeights(ODD, 1);
    expect(() => writeLlama2c(join(dir, "x.bin"), ODD, { ...w, w2: w.w2.subarray(1) }, "v1")).toThrow(InputError);
    expect(() => writeLlama2c(join(dir, "x.bin"), { ...ODD, headDim: 8 }, w, "v1")).toThrow(InputError);
    expect(() => randomWeights({ ...ODD, nKvHeads: 4 }, 1)).toThrow(InputError);
  });
});

describe("randomWeights", () => {
  test("same seed, same weights; another seed, other weights", () => {
    const a = randomWeights(ODD, 42);
    const b = randomWeights(ODD, 42);
    const c = randomWeights(ODD, 43);
    expect(a.w2).toEqual(b.w2);
    expect(a.tokenEmbedding).toEqual(b.tokenEmbedding);
    expect(a.w2).not.toEqual(c.w2);
    expect(a.wcls).toBeNull();
    expect(randomWeights(ODD, 42, { sharedClassifier: false }).wcls?.length).toBe(37 * 24);
  });

  test("fan-in scaled matrices, norm gains near 1", () => {
    const config = makeConfig({ dim: 256, hiddenDim: 640, nLayers: 2, nHeads: 4, nKvHeads: 4, vocabSize: 300, seqLen: 8, sharedClassifier: true });
    const w = randomWeights(config, 5, { scale: 2 });
    const stats = (a: Float32Array) => {
      let sum = 0, squares = 0;
      for (const v of a) { sum += v; squares += v * v; }
      const mean = sum / a.length;
      return { mean, std: Math.sqrt(squares / a.length - mean * mean) };
    };
    expect(stats(w.wq).std).toBeCloseTo(2 / 16, 2);
    expect(stats(w.w2).std).toBeCloseTo(2 / Math.sqrt(640), 2);
    expect(Math.abs(stats(w.wq).mean)).toBeLessThan(1e-3);
    expect(stats(w.rmsAtt).mean).toBeCloseTo(1, 1);
    expect(Math.max(...Array.from(w.rmsFinal, (v) => Math.abs(v - 1)))).toBeLessThan(0.05 * 3.5);
  });

  test("a stories15M-shaped legacy file has exactly the size of the published stories15M.bin", () => {
    const config = makeConfig({ dim: 288, hiddenDim: 768, nLayers: 6, nHeads: 6, nKvHeads: 6, vocabSize: 32000, seqLen: 256, sharedClassifier: true });
    const path = join(dir, "stories15M-shape.bin");
    writeLlama2c(path, config, randomWeights(config, 15), "legacy");
    expect(statSync(path).size).toBe(60816028);
    rmSync(path);
  });
});

// ----------------------------------------------------------------------------
// Real llama2.c files

const STORIES_LEGACY = sharedPath("models/llama2c/stories260K.bin");
const STORIES_V1 = sharedPath("models/llama2c/variants/stories260K_v1.bin");
const STORIES_Q80 = sharedPath("models/llama2c/stories260K_q80.bin");
/** stories260K's header: dim 64, hidden 172, 5 layers, 8 heads, 4 kv heads, vocab 512 (shared), seq 512. */
const STORIES = makeConfig({ dim: 64, hiddenDim: 172, nLayers: 5, nHeads: 8, nKvHeads: 4, vocabSize: 512, seqLen: 512, sharedClassifier: true });

describe("stories260K files", () => {
  // kvDim = 32; matrices: embedding + 5 * (wq + wk + wv + wo + w1 + w2 + w3)
  const matrixElements = 512 * 64 + 5 * (64 * 64 + 32 * 64 + 32 * 64 + 64 * 64 + 3 * 172 * 64);
  const normFloats = 2 * 5 * 64 + 64;

  test.skipIf(STORIES_LEGACY === null)("legacy size and header", () => {
    if (STORIES_LEGACY === null) return;
    const file = view(STORIES_LEGACY);
    expect(headerInts(file, 0)).toEqual(configInts(STORIES, 512));
    expect(file.byteLength).toBe(28 + 4 * (normFloats + matrixElements + 2 * 512 * 4));
    expect(file.byteLength).toBe(llama2cFileSize(STORIES, "legacy", true));
  });

  test.skipIf(STORIES_V1 === null)("v1 size and header", () => {
    if (STORIES_V1 === null) return;
    const file = view(STORIES_V1);
    expect(file.getInt32(4, true)).toBe(1);
    expect(headerInts(file, 8)).toEqual(configInts(STORIES, 512));
    expect(file.byteLength).toBe(256 + 4 * (normFloats + matrixElements));
    expect(file.byteLength).toBe(llama2cFileSize(STORIES, "v1", true));
  });

  test.skipIf(STORIES_Q80 === null)("v2 size and header (group size 32, straddling rows of 172)", () => {
    if (STORIES_Q80 === null) return;
    const file = view(STORIES_Q80);
    expect(file.getInt32(4, true)).toBe(2);
    expect(headerInts(file, 8)).toEqual(configInts(STORIES, 512));
    expect(file.getUint8(36)).toBe(1);
    expect(file.getInt32(37, true)).toBe(32);
    expect(file.byteLength).toBe(256 + 4 * normFloats + matrixElements + 4 * (matrixElements / 32));
    expect(file.byteLength).toBe(llama2cFileSize(STORIES, "v2", true, 32));
  });

  // The strongest layout check: rewriting stories260K's weights reproduces export.py's files.
  test.skipIf(STORIES_LEGACY === null || STORIES_V1 === null || STORIES_Q80 === null)(
    "rewriting stories260K.bin's weights reproduces the v1 and q80 files byte for byte, legacy up to RoPE ulps",
    () => {
      if (STORIES_LEGACY === null || STORIES_V1 === null || STORIES_Q80 === null) return;
      const { weights } = readLlama2cCheckpoint(STORIES_LEGACY);
      const same = (written: string, original: string) =>
        expect(Buffer.compare(readFileSync(written), readFileSync(original))).toBe(0);
      writeLlama2c(join(dir, "s-v1.bin"), STORIES, weights, "v1");
      same(join(dir, "s-v1.bin"), STORIES_V1);
      writeLlama2c(join(dir, "s-q80.bin"), STORIES, weights, "v2", { groupSize: 32 });
      same(join(dir, "s-q80.bin"), STORIES_Q80);

      // Legacy: identical except the unused RoPE tables, where torch's float32 cos/sin may be 1 ulp off.
      writeLlama2c(join(dir, "s-legacy.bin"), STORIES, weights, "legacy");
      const written = readFileSync(join(dir, "s-legacy.bin"));
      const original = readFileSync(STORIES_LEGACY);
      const ropeStart = 28 + 4 * (normFloats + matrixElements);
      const ropeEnd = ropeStart + 4 * 2 * 512 * 4;
      expect(written.length).toBe(original.length);
      expect(Buffer.compare(written.subarray(0, ropeStart), original.subarray(0, ropeStart))).toBe(0);
      const file = new DataView(original.buffer, original.byteOffset, original.byteLength);
      const { cos, sin } = legacyRopeTables(STORIES);
      const tables = [...cos, ...sin];
      for (let i = 0; i < tables.length; i++) {
        expect(Math.abs(file.getFloat32(ropeStart + 4 * i, true) - tables[i]!)).toBeLessThanOrEqual(2 ** -23);
      }
      expect(ropeEnd).toBe(original.length);
    },
  );
});
