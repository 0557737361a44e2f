/**
 * Minimal, independent reader of llama2.c checkpoints for the reference forward pass: legacy (run.c),
 * v1 and v2 (export.py / runq.c). v2 matrices are dequantized (q * scale) to fp32. It follows run.c's
 * and runq.c's memory_map_weights directly and shares no code with the engine's loader or the writer.
 */
import { readFileSync } from "node:fs";
import type { ModelConfig } from "../../src/model/config.ts";
import type { Llama2cWeights } from "../../src/synth/llama2c-writer.ts";

export interface ReferenceCheckpoint {
  config: ModelConfig;
  weights: Llama2cWeights;
  format: "legacy" | "v1" | "v2";
  /** Q8_0 group size (v2 only). */
  groupSize: number | null;
}

const MAGIC_AK42 = 0x616b3432;

export function readLlama2cCheckpoint(path: string): ReferenceCheckpoint {
  const bytes = readFileSync(path);
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  let format: ReferenceCheckpoint["format"] = "legacy";
  let ints = 0; // byte offset of the 7 config ints
  let shared: boolean;
  let groupSize: number | null = null;
  let offset: number; // byte offset of the first tensor
  if (view.getUint32(0, true) === MAGIC_AK42) {
    const version = view.getInt32(4, true);
    if (version !== 1 && version !== 2) throw new Error(`${path}: unknown llama2.c version ${version}`);
    format = version === 1 ? "v1" : "v2";
    ints = 8;
    shared = view.getUint8(36) === 1;
    if (version === 2) groupSize = view.getInt32(37, true);
    offset = 256;
  } else {
    shared = view.getInt32(20, true) > 0; // negative vocab_size = separate classifier
    offset = 28;
  }
  const field = (i: number): number => view.getInt32(ints + 4 * i, true);
  const dim = field(0);
  const hiddenDim = field(1);
  const nLayers = field(2);
  const nHeads = field(3);
  const nKvHeads = field(4);
  const vocabSize = Math.abs(field(5));
  const seqLen = field(6);
  const headDim = dim / nHeads;
  const kvDim = nKvHeads * headDim;
  const config: ModelConfig = {
    dim, hiddenDim, nLayers, nHeads, nKvHeads, vocabSize, seqLen, headDim,
    normEps: 1e-5, ropeTheta: 10000, ropeStyle: "interleaved", sharedClassifier: shared,
  };

  // Sequential readers; each copies so the result does not depend on the file buffer's alignment.
  const f32 = (count: number): Float32Array => {
    const out = new Float32Array(count);
    for (let i = 0; i < count; i++) out[i] = view.getFloat32(offset + 4 * i, true);
    offset += 4 * count;
    return out;
  };
  /** `n` Q8_0 tensors of `each` elements (int8 values then scales, per tensor), dequantized and stacked. */
  const q80 = (n: number, each: number): Float32Array => {
    const gs = groupSize ?? 0;
    const out = new Float32Array(n * each);
    for (let t = 0; t < n; t++) {
      const qAt = offset;
      const sAt = offset + each;
      for (let i = 0; i < each; i++) {
        out[t * each + i] = view.getInt8(qAt + i) * view.getFloat32(sAt + 4 * Math.floor(i / gs), true);
      }
      offset += each + 4 * (each / gs);
    }
    return out;
  };

  let weights: Llama2cWeights;
  if (format === "legacy") {
    const tokenEmbedding = f32(vocabSize * dim);
    const rmsAtt = f32(nLayers * dim);
    const wq = f32(nLayers * dim * dim);
    const wk = f32(nLayers * kvDim * dim);
    const wv = f32(nLayers * kvDim * dim);
    const wo = f32(nLayers * dim * dim);
    const rmsFfn = f32(nLayers * dim);
    const w1 = f32(nLayers * hiddenDim * dim);
    const w2 = f32(nLayers * dim * hiddenDim);
    const w3 = f32(nLayers * hiddenDim * dim);
    const rmsFinal = f32(dim);
    offset += 2 * 4 * seqLen * (headDim / 2); // the unused freq_cis_real / freq_cis_imag tables
    const wcls = shared ? null : f32(vocabSize * dim);
    weights = { tokenEmbedding, rmsAtt, wq, wk, wv, wo, rmsFfn, w1, w2, w3, rmsFinal, wcls };
  } else {
    const rmsAtt = f32(nLayers * dim);
    const rmsFfn = f32(nLayers * dim);
    const rmsFinal = f32(dim);
    const matrix = format === "v1" ? (n: number, each: number) => f32(n * each) : q80;
    const tokenEmbedding = matrix(1, vocabSize * dim);
    const wq = matrix(nLayers, dim * dim);
    const wk = matrix(nLayers, kvDim * dim);
    const wv = matrix(nLayers, kvDim * dim);
    const wo = matrix(nLayers, dim * dim);
    const w1 = matrix(nLayers, hiddenDim * dim);
    const w2 = matrix(nLayers, dim * hiddenDim);
    const w3 = matrix(nLayers, hiddenDim * dim);
    const wcls = shared ? null : matrix(1, vocabSize * dim);
    weights = { tokenEmbedding, rmsAtt, wq, wk, wv, wo, rmsFfn, w1, w2, w3, rmsFinal, wcls };
  }
  if (offset !== bytes.byteLength) {
    throw new Error(`${path}: layout ends at byte ${offset}, file has ${bytes.byteLength}`);
  }
  return { config, weights, format, groupSize };
}
