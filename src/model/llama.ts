/**
 * The llama transformer's forward pass over one step: every new token of every scheduled
 * sequence goes through all layers together, so each weight matrix is read once per step.
 * Read top to bottom, like llama2.c's forward(). The optional parts of a layer (q/k/v biases of
 * qwen2, per-head q/k norms of qwen3) are the architectures' (see arch/); the rest is shared.
 */
import type { CpuBackend, SharedInputProducts } from "../backend/cpu.ts";
import { readsRoundedActivations } from "../backend/ggml-kernels.ts";
import type { KVArena } from "../kv/kv-arena.ts";
import { queryDim, type ModelConfig, type Numerics } from "./config.ts";
import type { ModelWeights } from "./weights.ts";
import type { StepBatch } from "./batch.ts";

/** Activation buffers for up to maxTokens tokens and maxLogits logit rows. */
interface Activations {
  x: number; // [T][dim] the residual stream
  xb: number; // [T][dim] normed input of a sublayer
  xb2: number; // [T][dim] a sublayer's output
  q: number; // [T][qDim], qDim = nHeads * headDim
  k: number; // [T][kvDim]
  v: number; // [T][kvDim]
  att: number; // [T][qDim] attention output, heads side by side
  hb: number; // [T][hidden] gate, then SwiGLU output
  hb2: number; // [T][hidden] up
  xLogits: number; // [maxLogits][dim] the rows whose logits are computed
  logits: number; // [maxLogits][vocab]
}

export class LlamaModel {
  private readonly act: Activations;
  /** Per layer: q, k, v from the attention input; gate and up from the feed-forward input. */
  private readonly qkv: SharedInputProducts[];
  private readonly gateUp: SharedInputProducts[];
  private readonly ropeCos: number; // [seqLen][ropeDim/2]
  private readonly ropeSin: number; // [seqLen][ropeDim/2]
  private readonly numerics: Numerics;

  constructor(
    readonly config: ModelConfig,
    readonly weights: ModelWeights,
    readonly backend: CpuBackend,
    readonly maxTokens: number,
    readonly maxLogits: number,
  ) {
    const mem = backend.mem;
    const { dim, hiddenDim, vocabSize } = config;
    const kvDim = config.nKvHeads * config.headDim;
    const qDim = queryDim(config);
    this.numerics = config.numerics ?? "default";
    backend.numerics = this.numerics;
    const f32s = (n: number) => mem.allocZeroed(4 * n);
    this.act = {
      x: f32s(maxTokens * dim), xb: f32s(maxTokens * dim), xb2: f32s(maxTokens * dim),
      q: f32s(maxTokens * qDim), k: f32s(maxTokens * kvDim), v: f32s(maxTokens * kvDim),
      att: f32s(maxTokens * qDim), hb: f32s(maxTokens * hiddenDim), hb2: f32s(maxTokens * hiddenDim),
      xLogits: f32s(maxLogits * dim), logits: f32s(maxLogits * vocabSize),
    };
    const a = this.act;
    this.qkv = weights.layers.map((L) => backend.prepareShared([{ out: a.q, m: L.wq }, { out: a.k, m: L.wk }, { out: a.v, m: L.wv }]));
    this.gateUp = weights.layers.map((L) => backend.prepareShared([{ out: a.hb, m: L.ffnGate }, { out: a.hb2, m: L.ffnUp }]));
    [this.ropeCos, this.ropeSin] = this.ropeTables();
    const matrices = [weights.tokenEmbedding, weights.output, ...weights.layers.flatMap((L) => [L.wq, L.wk, L.wv, L.wo, L.ffnGate, L.ffnUp, L.ffnDown])];
    const rounded = matrices.some((m) => m.kind === "ggml" && readsRoundedActivations(m.type));
    backend.reserveScratch(maxTokens, Math.max(dim, hiddenDim, qDim), config.nHeads / config.nKvHeads, this.numerics === "runq" ? config.seqLen : 0, rounded);
  }

  /** Address of the logits of row r (as returned by StepBatch.addSequence). */
  logitsAddr(r: number): number {
    return this.act.logits + 4 * r * this.config.vocabSize;
  }

  /**
   * Run the step: writes the K/V of every new token into its cache slot and the logits of the
   * batch's logit rows into logitsAddr(0..numLogits).
   */
  forward(batch: StepBatch, kv: KVArena): void {
    const c = this.config;
    const ops = this.backend;
    const a = this.act;
    const w = this.weights;
    const T = batch.numTokens;
    const kvDim = c.nKvHeads * c.headDim;
    const qDim = queryDim(c);
    if (T > this.maxTokens || batch.numLogits > this.maxLogits) throw new Error("forward: batch exceeds the model's buffers");

    ops.embed(a.x, w.tokenEmbedding, batch.tokens, T);

    for (let l = 0; l < c.nLayers; l++) {
      const L = w.layers[l]!;

      // ---- attention: x += wo · attention(rope(wq·xb), rope(wk·xb), wv·xb)
      ops.rmsnorm(a.xb, a.x, L.attnNorm, T, c.dim, c.normEps);
      ops.matmulShared(this.qkv[l]!, a.xb, T); // q, k, v
      if (L.qkvBias) {
        ops.addRows(a.q, L.qkvBias.q, T, qDim);
        ops.addRows(a.k, L.qkvBias.k, T, kvDim);
        ops.addRows(a.v, L.qkvBias.v, T, kvDim);
      }
      if (L.qkNorm) {
        // Each head is a row of headDim: T * heads rows, normalised with the same weights.
        ops.rmsnorm(a.q, a.q, L.qkNorm.q, T * c.nHeads, c.headDim, c.normEps);
        ops.rmsnorm(a.k, a.k, L.qkNorm.k, T * c.nKvHeads, c.headDim, c.normEps);
      }

      this.rope(a.q, batch.positions, T, c.nHeads, qDim);
      this.rope(a.k, batch.positions, T, c.nKvHeads, kvDim);
      ops.kernels.writeKV(kv.kLayer(l), kv.vLayer(l), a.k, a.v, batch.slots, T, c.nKvHeads, c.headDim, kv.blockSize, kv.numBlocks);
      ops.attention(
        a.att, a.q, kv.kLayer(l), kv.vLayer(l), batch.seqInfo, batch.numSeqs,
        c.nHeads, c.nKvHeads, c.headDim, kv.blockSize, kv.numBlocks, qDim, batch.contextTokens,
      );
      ops.matmul(a.xb2, a.att, L.wo, T);
      ops.add(a.x, a.xb2, T * c.dim);

      // ---- feed-forward: x += w2 · (silu(w1·xb) * (w3·xb))
      ops.rmsnorm(a.xb, a.x, L.ffnNorm, T, c.dim, c.normEps);
      ops.matmulShared(this.gateUp[l]!, a.xb, T); // gate (hb), up (hb2)
      ops.swiglu(a.hb, a.hb2, T, c.hiddenDim);
      ops.matmul(a.xb2, a.hb, L.ffnDown, T);
      ops.add(a.x, a.xb2, T * c.dim);
    }

    // ---- classifier, only for the rows whose next token is sampled
    const R = batch.numLogits;
    if (R === 0) return;
    ops.gatherRows(a.xLogits, a.x, batch.logitRows, R, c.dim);
    ops.rmsnorm(a.xLogits, a.xLogits, w.outputNorm, R, c.dim, c.normEps, "final");
    ops.matmul(a.logits, a.xLogits, w.output, R);
  }

  private rope(vec: number, positions: number, T: number, nHeads: number, rowStride: number): void {
    const c = this.config;
    const k = this.backend.kernels;
    const rope = c.ropeStyle === "neox" ? k.ropeNeox : k.ropeInterleaved;
    rope(vec, positions, T, nHeads, c.headDim, c.ropeDim ?? c.headDim, rowStride, this.ropeCos, this.ropeSin);
  }

  /**
   * cos/sin of pos * scale * theta^(-2k/ropeDim) / factor[k], computed like run.c (f32
   * frequency, f32 angle) so that rounding matches the reference implementation (scale 1 and no
   * factors there); runq numerics use its expf and sincosf.
   */
  private ropeTables(): [number, number] {
    const c = this.config;
    const ropeDim = c.ropeDim ?? c.headDim;
    const half = ropeDim / 2;
    const mem = this.backend.mem;
    const cos = mem.alloc(4 * c.seqLen * half);
    const sin = mem.alloc(4 * c.seqLen * half);
    if (this.numerics === "runq") {
      this.backend.kernels.ropeTablesRunq(cos, sin, c.seqLen, c.headDim, Math.fround(Math.log(c.ropeTheta)));
      return [cos, sin];
    }
    const f32 = mem.f32;
    const fr = Math.fround;
    const scale = c.ropeFreqScale ?? 1;
    for (let k = 0; k < half; k++) {
      let freq = fr(1 / fr(Math.pow(c.ropeTheta, fr((2 * k) / ropeDim))));
      if (c.ropeFreqFactors !== undefined) freq = fr(freq / c.ropeFreqFactors[k]!);
      for (let pos = 0; pos < c.seqLen; pos++) {
        const angle = fr((scale === 1 ? pos : fr(pos * scale)) * freq);
        f32[(cos >> 2) + pos * half + k] = Math.cos(angle);
        f32[(sin >> 2) + pos * half + k] = Math.sin(angle);
      }
    }
    return [cos, sin];
  }
}
