/**
 * Independent float64 reference forward pass of a llama-family transformer, written for clarity in the
 * shape of llama2.c's forward(): one token at a time, its own contiguous KV cache, no SIMD, no
 * WebAssembly, nothing from the engine. Weights stay Float32Array; every read turns into a float64
 * number and every activation is a Float64Array, so all arithmetic is float64.
 *
 * Used as ground truth for engine tests; keep it obviously correct rather than fast.
 */
import type { ModelConfig } from "../../src/model/config.ts";
import type { Llama2cWeights } from "../../src/synth/llama2c-writer.ts";

// ----------------------------------------------------------------------------
// Neural net blocks

/** o = x * weight / sqrt(mean(x²) + eps) */
function rmsnorm(o: Float64Array, x: Float64Array, weight: Float32Array, weightOffset: number, eps: number): void {
  let sumSquares = 0;
  for (let j = 0; j < x.length; j++) sumSquares += x[j]! * x[j]!;
  const inverseRms = 1 / Math.sqrt(sumSquares / x.length + eps);
  for (let j = 0; j < x.length; j++) o[j] = weight[weightOffset + j]! * (inverseRms * x[j]!);
}

/** In place over x[0..size), subtracting the max first so exp never overflows. */
function softmax(x: Float64Array, size: number): void {
  let max = x[0]!;
  for (let i = 1; i < size; i++) if (x[i]! > max) max = x[i]!;
  let sum = 0;
  for (let i = 0; i < size; i++) {
    x[i] = Math.exp(x[i]! - max);
    sum += x[i]!;
  }
  for (let i = 0; i < size; i++) x[i] = x[i]! / sum;
}

/** xout[i] = sum_j W[i][j] * x[j], W being rows [out][in] starting at wOffset inside w. */
function matmul(xout: Float64Array, x: Float64Array, w: Float32Array, wOffset: number): void {
  const n = x.length;
  for (let i = 0; i < xout.length; i++) {
    let value = 0;
    const row = wOffset + i * n;
    for (let j = 0; j < n; j++) value += w[row + j]! * x[j]!;
    xout[i] = value;
  }
}

function silu(x: number): number {
  return x / (1 + Math.exp(-x));
}

/**
 * Rotates each head of `vec` (nHeadsInVec heads of headDim) by the angles of position `pos`.
 * interleaved: pairs (2i, 2i+1), frequency theta^(-2i/headDim) (run.c).
 * neox: pairs (i, i + headDim/2), frequency theta^(-2i/headDim) (GPT-NeoX / Hugging Face).
 */
function rope(vec: Float64Array, nHeadsInVec: number, pos: number, config: ModelConfig): void {
  const { headDim, ropeTheta } = config;
  // Only the first ropeDim values of a head rotate; Llama 3.1's factors divide each frequency.
  const ropeDim = config.ropeDim ?? headDim;
  const half = ropeDim / 2;
  for (let h = 0; h < nHeadsInVec; h++) {
    const base = h * headDim;
    for (let i = 0; i < half; i++) {
      const freq = 1 / Math.pow(ropeTheta, (2 * i) / ropeDim) / (config.ropeFreqFactors?.[i] ?? 1);
      const angle = pos * (config.ropeFreqScale ?? 1) * freq;
      const cos = Math.cos(angle);
      const sin = Math.sin(angle);
      const a = config.ropeStyle === "interleaved" ? base + 2 * i : base + i;
      const b = config.ropeStyle === "interleaved" ? base + 2 * i + 1 : base + i + half;
      const v0 = vec[a]!;
      const v1 = vec[b]!;
      vec[a] = v0 * cos - v1 * sin;
      vec[b] = v0 * sin + v1 * cos;
    }
  }
}

// ----------------------------------------------------------------------------
// Transformer

/** Parts some architectures add, stacked over layers: qwen2's q/k/v biases, qwen3's q/k head norms. */
export interface ReferenceExtras {
  bq?: Float32Array; // (layer, nHeads * headDim)
  bk?: Float32Array; // (layer, kvDim)
  bv?: Float32Array; // (layer, kvDim)
  qNorm?: Float32Array; // (layer, headDim)
  kNorm?: Float32Array; // (layer, headDim)
  /** A mixture of experts in place of the feed-forward (config.experts): w1, w2, w3 are then unused. */
  experts?: {
    router: Float32Array; // (layer, count, dim)
    gate: Float32Array; // (layer, count, width, dim)
    up: Float32Array; // (layer, count, width, dim)
    down: Float32Array; // (layer, count, dim, width)
  };
}

/**
 * The mixture of experts of layer l on xb into xb2, by the definition: the softmax over all
 * router logits ("softmax") or over the chosen ones ("softmax-of-chosen"), the `used` largest
 * logits chosen, their weights renormalized when the config says, each expert a SwiGLU.
 */
function mixtureOfExperts(xb2: Float64Array, xb: Float64Array, c: ModelConfig, ex: NonNullable<ReferenceExtras["experts"]>, l: number): void {
  const e = c.experts!;
  const dim = c.dim;
  const width = e.hiddenDim;
  const logits = new Float64Array(e.count);
  matmul(logits, xb, ex.router, l * e.count * dim);
  const order = Array.from({ length: e.count }, (_, j) => j).sort((a, b) => logits[b]! - logits[a]! || a - b);
  const chosen = order.slice(0, e.used);
  const top = logits[chosen[0]!]!;
  const all = e.gating === "softmax" ? order.reduce((s, j) => s + Math.exp(logits[j]! - top), 0) : chosen.reduce((s, j) => s + Math.exp(logits[j]! - top), 0);
  let weights = chosen.map((j) => Math.exp(logits[j]! - top) / all);
  if (e.normalizeWeights) {
    const sum = weights.reduce((a, b) => a + b, 0);
    weights = weights.map((w) => w / sum);
  }
  const hb = new Float64Array(width);
  const hb2 = new Float64Array(width);
  const out = new Float64Array(dim);
  xb2.fill(0);
  chosen.forEach((j, r) => {
    const expert = l * e.count + j;
    matmul(hb, xb, ex.gate, expert * width * dim);
    matmul(hb2, xb, ex.up, expert * width * dim);
    for (let i = 0; i < width; i++) hb[i] = silu(hb[i]!) * hb2[i]!;
    matmul(out, hb, ex.down, expert * dim * width);
    for (let i = 0; i < dim; i++) xb2[i] = xb2[i]! + weights[r]! * out[i]!;
  });
}

/** Each head of vec (heads of headDim) RMS-normalised with weights w[offset..offset + headDim). */
function headNorm(vec: Float64Array, heads: number, headDim: number, w: Float32Array, offset: number, eps: number): void {
  for (let h = 0; h < heads; h++) {
    const head = vec.subarray(h * headDim, (h + 1) * headDim);
    rmsnorm(head, Float64Array.from(head), w, offset, eps);
  }
}

export class ReferenceTransformer {
  /** Next position to be filled; forward() must be called with pos === this.length. */
  length = 0;
  private readonly qDim: number;
  private readonly kvDim: number;
  // Activations for the current token.
  private readonly x: Float64Array; // (dim) residual stream
  private readonly xb: Float64Array; // (dim) normed input of a branch
  private readonly xb2: Float64Array; // (dim) output of a branch
  private readonly q: Float64Array; // (nHeads * headDim)
  private readonly att: Float64Array; // (nHeads * headDim) attention output, all heads
  private readonly scores: Float64Array; // (seqLen) one head's attention weights
  private readonly hb: Float64Array; // (hidden) gate, then gate * up
  private readonly hb2: Float64Array; // (hidden) up
  private readonly logits: Float64Array; // (vocab)
  // KV cache: [layer][pos][kvDim], keys already rotated.
  private readonly keyCache: Float64Array;
  private readonly valueCache: Float64Array;

  constructor(
    readonly config: ModelConfig,
    readonly weights: Llama2cWeights,
    readonly extras: ReferenceExtras = {},
  ) {
    const { dim, hiddenDim, nLayers, nHeads, nKvHeads, headDim, seqLen, vocabSize } = config;
    if (nHeads % nKvHeads !== 0 || headDim % 2 !== 0) throw new Error("reference: bad head layout");
    this.qDim = nHeads * headDim;
    this.kvDim = nKvHeads * headDim;
    this.x = new Float64Array(dim);
    this.xb = new Float64Array(dim);
    this.xb2 = new Float64Array(dim);
    this.q = new Float64Array(this.qDim);
    this.att = new Float64Array(this.qDim);
    this.scores = new Float64Array(seqLen);
    this.hb = new Float64Array(hiddenDim);
    this.hb2 = new Float64Array(hiddenDim);
    this.logits = new Float64Array(vocabSize);
    this.keyCache = new Float64Array(nLayers * seqLen * this.kvDim);
    this.valueCache = new Float64Array(nLayers * seqLen * this.kvDim);
  }

  /** Logits (a fresh copy) for the token at position `pos`, after every earlier position was forwarded. */
  forward(token: number, pos: number): Float64Array {
    const c = this.config;
    const w = this.weights;
    const { dim, hiddenDim, nHeads, nKvHeads, headDim, seqLen } = c;
    const { qDim, kvDim, x, xb, xb2, q, att, scores, hb, hb2 } = this;
    if (pos !== this.length || pos >= seqLen) throw new Error(`reference: pos ${pos}, expected ${this.length}`);
    if (!(token >= 0 && token < c.vocabSize)) throw new Error(`reference: token ${token} out of range`);
    const headsPerKv = nHeads / nKvHeads;

    // x = embedding row of the token
    for (let i = 0; i < dim; i++) x[i] = w.tokenEmbedding[token * dim + i]!;

    for (let l = 0; l < c.nLayers; l++) {
      // attention rmsnorm
      rmsnorm(xb, x, w.rmsAtt, l * dim, c.normEps);

      // q, k, v for this position; k and v go straight into the cache
      const cacheRow = (l * seqLen + pos) * kvDim;
      const k = this.keyCache.subarray(cacheRow, cacheRow + kvDim);
      const v = this.valueCache.subarray(cacheRow, cacheRow + kvDim);
      matmul(q, xb, w.wq, l * qDim * dim);
      matmul(k, xb, w.wk, l * kvDim * dim);
      matmul(v, xb, w.wv, l * kvDim * dim);
      const e = this.extras;
      if (e.bq && e.bk && e.bv) {
        for (let i = 0; i < qDim; i++) q[i] = q[i]! + e.bq[l * qDim + i]!;
        for (let i = 0; i < kvDim; i++) {
          k[i] = k[i]! + e.bk[l * kvDim + i]!;
          v[i] = v[i]! + e.bv[l * kvDim + i]!;
        }
      }
      if (e.qNorm && e.kNorm) {
        headNorm(q, nHeads, headDim, e.qNorm, l * headDim, c.normEps);
        headNorm(k, nKvHeads, headDim, e.kNorm, l * headDim, c.normEps);
      }

      // RoPE on every query head and every key head
      rope(q, nHeads, pos, c);
      rope(k, nKvHeads, pos, c);

      // causal multi-head attention; query head h reads kv head h / headsPerKv
      for (let h = 0; h < nHeads; h++) {
        const kvHead = Math.floor(h / headsPerKv);
        for (let t = 0; t <= pos; t++) {
          const keyAt = (l * seqLen + t) * kvDim + kvHead * headDim;
          let score = 0;
          for (let i = 0; i < headDim; i++) score += q[h * headDim + i]! * this.keyCache[keyAt + i]!;
          scores[t] = score / Math.sqrt(headDim);
        }
        softmax(scores, pos + 1);
        for (let i = 0; i < headDim; i++) att[h * headDim + i] = 0;
        for (let t = 0; t <= pos; t++) {
          const valueAt = (l * seqLen + t) * kvDim + kvHead * headDim;
          for (let i = 0; i < headDim; i++) att[h * headDim + i] = att[h * headDim + i]! + scores[t]! * this.valueCache[valueAt + i]!;
        }
      }

      // output projection and residual
      matmul(xb2, att, w.wo, l * dim * qDim);
      for (let i = 0; i < dim; i++) x[i] = x[i]! + xb2[i]!;

      // ffn rmsnorm, SwiGLU (or the mixture of experts), residual
      rmsnorm(xb, x, w.rmsFfn, l * dim, c.normEps);
      if (e.experts) mixtureOfExperts(xb2, xb, c, e.experts, l);
      else {
        matmul(hb, xb, w.w1, l * hiddenDim * dim);
        matmul(hb2, xb, w.w3, l * hiddenDim * dim);
        for (let i = 0; i < hiddenDim; i++) hb[i] = silu(hb[i]!) * hb2[i]!;
        matmul(xb2, hb, w.w2, l * dim * hiddenDim);
      }
      for (let i = 0; i < dim; i++) x[i] = x[i]! + xb2[i]!;
    }

    // final rmsnorm and classifier (the embedding table when shared)
    rmsnorm(xb, x, w.rmsFinal, 0, c.normEps);
    matmul(this.logits, xb, w.wcls ?? w.tokenEmbedding, 0);
    this.length = pos + 1;
    return this.logits.slice();
  }
}

// ----------------------------------------------------------------------------
// Decoding

/** Index of the largest value; the first one on ties, like run.c's sample_argmax. */
export function argmax(values: Float64Array): number {
  let best = 0;
  for (let i = 1; i < values.length; i++) if (values[i]! > values[best]!) best = i;
  return best;
}

/**
 * Greedy decoding: feeds the prompt, then appends argmax tokens. Returns the `steps` generated token
 * ids (prompt excluded). No stop token; callers cut at BOS/EOS as they need.
 */
export function referenceGreedy(
  config: ModelConfig,
  weights: Llama2cWeights,
  promptTokens: readonly number[],
  steps: number,
): number[] {
  if (promptTokens.length === 0) throw new Error("reference: empty prompt");
  if (promptTokens.length + steps - 1 > config.seqLen) throw new Error("reference: prompt + steps exceed seqLen");
  const model = new ReferenceTransformer(config, weights);
  const generated: number[] = [];
  let logits: Float64Array = new Float64Array(0);
  for (let pos = 0; pos < promptTokens.length; pos++) logits = model.forward(promptTokens[pos]!, pos);
  for (let step = 0; step < steps; step++) {
    const next = argmax(logits);
    generated.push(next);
    if (step + 1 < steps) logits = model.forward(next, promptTokens.length + step);
  }
  return generated;
}
