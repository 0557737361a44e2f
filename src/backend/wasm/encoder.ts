/**
 * An encoder's forward pass (bert, nomic-bert; src/model/encoder.ts) over one step: every token of
 * every sequence goes through all layers together, so each weight matrix is read once per step,
 * and each token attends to every token of its own sequence and no other, without a KV cache.
 * Read top to bottom, like llama.cpp's llm_build_bert. Every kernel computes a token's row from
 * that row alone (matrix products, norms, activations) or, in attention, from its own sequence's
 * rows, each (sequence, head) on one thread: a sequence's output is the same bits whatever else
 * the step holds, in what order, and at any thread count.
 */
import { CpuBackend } from "./cpu.ts";
import { readsRoundedActivations } from "./ggml-kernels.ts";
import { loadF32Rows, loadTensorMatrix, matrixRows, FAST_STORAGE, type WeightMatrix, type WeightTarget } from "./weights.ts";
import { attentionScale } from "../../model/attention.ts";
import { ropeTable } from "../../model/rope.ts";
import { EncoderTensor, type EncoderCheckpoint, type EncoderConfig } from "../../model/encoder.ts";
import { ModelFormatError } from "../../errors.ts";

/** LayerNorm's weight and bias, f32 [dim] each. */
interface NormWeights {
  w: number;
  b: number;
}

interface EncoderLayerWeights {
  wq: WeightMatrix; // [dim][dim] (nomic-bert: rows 0..dim of attn_qkv [3 dim][dim], as wk and wv the next two)
  wk: WeightMatrix; // [dim][dim]
  wv: WeightMatrix; // [dim][dim]
  /** bert: f32 [dim] each. */
  qkvBias: { q: number; k: number; v: number } | null;
  wo: WeightMatrix; // [dim][dim]
  woBias: number | null; // f32 [dim] (bert)
  attnNorm: NormWeights; // after attention plus the layer's input
  up: WeightMatrix; // [hidden][dim]
  upBias: number | null; // f32 [hidden] (bert)
  gate: WeightMatrix | null; // [hidden][dim] (nomic-bert's SwiGLU)
  down: WeightMatrix; // [dim][hidden]
  downBias: number | null; // f32 [dim] (bert)
  outNorm: NormWeights; // after the feed-forward plus its input
}

/** A reranker's head: tanh(dense · x + bias), then output · that + its bias, one value per label. */
interface ClassifierWeights {
  dense: WeightMatrix; // cls.weight [dim][dim]
  denseBias: number; // f32 [dim]
  output: Float32Array; // cls.output.weight [labels][dim], row after row
  outputBias: Float32Array; // [labels]
}

export interface EncoderWeights {
  tokenEmbedding: WeightMatrix; // [vocab][dim]
  tokenType0: number | null; // f32 [dim]: row 0 of token_types
  positions: number | null; // f32 [context][dim] (bert)
  embedNorm: NormWeights;
  layers: EncoderLayerWeights[];
  classifier: ClassifierWeights | null;
}

/** Step buffers for up to maxTokens tokens. */
export interface EncoderActivations {
  x: number; // [T][dim] the residual stream (normed after each sublayer: post-norm)
  xb: number; // [T][dim] a sublayer's output
  q: number; // [T][dim]
  k: number; // [T][dim]
  v: number; // [T][dim]
  att: number; // [T][dim] attention output, heads side by side
  hb: number; // [T][hidden] up (SwiGLU: gate), then the activation's output
  hb2: number; // [T][hidden] SwiGLU's up
  ones: number; // [hidden] of 1: GELU as GeGLU against ones (x * 1 is exact)
  tokens: number; // i32 [T]
  positions: number; // i32 [T], each sequence from 0
  seqStarts: number; // i32 [T + 1]
  scores: number; // per thread: [context] attention scores
}

export class EncoderModel {
  private readonly act: EncoderActivations;
  private readonly rope: { cos: number; sin: number } | null;
  private readonly scoresStride: number;

  private constructor(
    readonly config: EncoderConfig,
    private readonly weights: EncoderWeights,
    private readonly backend: CpuBackend,
    /** The most tokens one step runs (at least the context, so that any sequence fits one step). */
    readonly maxTokens: number,
  ) {
    const c = config;
    const mem = backend.mem;
    const f32s = (n: number) => mem.allocZeroed(4 * n);
    this.scoresStride = 4 * c.contextLength;
    this.act = {
      x: f32s(maxTokens * c.dim), xb: f32s(maxTokens * c.dim), q: f32s(maxTokens * c.dim), k: f32s(maxTokens * c.dim), v: f32s(maxTokens * c.dim),
      att: f32s(maxTokens * c.dim), hb: f32s(maxTokens * c.hiddenDim), hb2: f32s(maxTokens * c.hiddenDim), ones: f32s(c.hiddenDim),
      tokens: f32s(maxTokens), positions: f32s(maxTokens), seqStarts: f32s(maxTokens + 1), scores: mem.alloc(this.scoresStride * backend.threads),
    };
    mem.f32.fill(1, this.act.ones >>> 2, (this.act.ones >>> 2) + c.hiddenDim);
    this.rope = c.positions.kind === "rope" ? this.ropeTables(c.positions.ropeDim, c.positions.theta) : null;
    const matrices = [weights.tokenEmbedding, ...weights.layers.flatMap((L) => [L.wq, L.wk, L.wv, L.wo, L.up, L.down, ...(L.gate ? [L.gate] : [])])];
    const rounded = matrices.some((m) => m.kind === "ggml" && readsRoundedActivations(m.type));
    backend.reserveScratch(maxTokens, Math.max(c.dim, c.hiddenDim), 1, c.headDim, 0, rounded, maxTokens);
  }

  /** Load the checkpoint's weights into a backend of `threads` threads, with buffers for steps of `maxTokens` (at least the context). */
  static load(ckpt: EncoderCheckpoint, threads: number, maxTokens: number): EncoderModel {
    const backend = new CpuBackend(threads);
    try {
      const weights = loadEncoderWeights(ckpt, { mem: backend.mem, kernels: backend.kernels });
      return new EncoderModel(ckpt.config, weights, backend, Math.max(maxTokens, ckpt.config.contextLength));
    } catch (e) {
      backend.close();
      throw e;
    }
  }

  get threads(): number {
    return this.backend.threads;
  }

  /**
   * Every token's final hidden state, [T][dim] with T the sequences' tokens end to end, for
   * sequences that together fit one step. Token ids must be in the vocabulary (the caller checks).
   */
  forward(sequences: readonly (readonly number[])[]): Float32Array {
    const c = this.config;
    const ops = this.backend;
    const a = this.act;
    const w = this.weights;
    const T = this.writeInputs(sequences);
    const S = sequences.length;
    const pairs = sequences.reduce((sum, s) => sum + s.length * s.length, 0);

    // ---- input: token embedding + token type 0 (+ learned position), then LayerNorm
    embedEncoderInput(ops, w, a, T, c.dim);
    ops.layerNorm(a.x, a.x, w.embedNorm.w, w.embedNorm.b, T, c.dim, c.normEps);

    for (const L of w.layers) {
      // ---- attention: x = LayerNorm(x + wo · attention(wq·x, wk·x, wv·x))
      ops.matmul(a.q, a.x, L.wq, T);
      ops.matmul(a.k, a.x, L.wk, T);
      ops.matmul(a.v, a.x, L.wv, T);
      if (L.qkvBias !== null) {
        ops.addRows(a.q, L.qkvBias.q, T, c.dim);
        ops.addRows(a.k, L.qkvBias.k, T, c.dim);
        ops.addRows(a.v, L.qkvBias.v, T, c.dim);
      }
      if (this.rope !== null && c.positions.kind === "rope") {
        const k = ops.kernels;
        k.ropeNeox(a.q, a.positions, T, c.nHeads, c.headDim, c.positions.ropeDim, c.dim, this.rope.cos, this.rope.sin);
        k.ropeNeox(a.k, a.positions, T, c.nHeads, c.headDim, c.positions.ropeDim, c.dim, this.rope.cos, this.rope.sin);
      }
      ops.encoderAttention(a.att, a.q, a.k, a.v, a.seqStarts, S, c.nHeads, c.headDim, attentionScale(c.headDim), a.scores, this.scoresStride, pairs);
      ops.matmul(a.xb, a.att, L.wo, T);
      if (L.woBias !== null) ops.addRows(a.xb, L.woBias, T, c.dim);
      ops.add(a.xb, a.x, T * c.dim);
      ops.layerNorm(a.x, a.xb, L.attnNorm.w, L.attnNorm.b, T, c.dim, c.normEps);

      // ---- feed-forward: x = LayerNorm(x + down · act(up · x)), act GELU (bert) or SwiGLU with gate (nomic-bert)
      if (L.gate !== null) {
        ops.matmul(a.hb, a.x, L.gate, T);
        ops.matmul(a.hb2, a.x, L.up, T);
        ops.swiglu(a.hb, a.hb2, T, c.hiddenDim);
      } else {
        ops.matmul(a.hb, a.x, L.up, T);
        if (L.upBias !== null) ops.addRows(a.hb, L.upBias, T, c.hiddenDim);
        for (let t = 0; t < T; t++) ops.geglu(a.hb + 4 * t * c.hiddenDim, a.ones, 1, c.hiddenDim);
      }
      ops.matmul(a.xb, a.hb, L.down, T);
      if (L.downBias !== null) ops.addRows(a.xb, L.downBias, T, c.dim);
      ops.add(a.xb, a.x, T * c.dim);
      ops.layerNorm(a.x, a.xb, L.outNorm.w, L.outNorm.b, T, c.dim, c.normEps);
    }
    return this.backend.mem.f32.slice(a.x >>> 2, (a.x >>> 2) + T * c.dim);
  }

  /** Labels of the reranker's head (null: the model has none). */
  get labels(): readonly string[] | null {
    return this.config.classifier?.labels ?? null;
  }

  /**
   * The reranker's head on R rows of dim (each a sequence's first token): tanh(cls · x + b), then
   * cls.output · that + its bias, R x labels values, as llama.cpp's rank pooling.
   */
  classify(rows: Float32Array): Float32Array {
    const head = this.weights.classifier;
    if (head === null) throw new Error("classify: the model has no classifier head");
    const dim = this.config.dim;
    const R = rows.length / dim;
    if (R > this.maxTokens) throw new Error("classify: more rows than a step holds");
    const f32 = this.backend.mem.f32;
    const a = this.act;
    f32.set(rows, a.xb >>> 2);
    this.backend.matmul(a.q, a.xb, head.dense, R);
    this.backend.addRows(a.q, head.denseBias, R, dim);
    return classifierOutput(f32.subarray(a.q >>> 2, (a.q >>> 2) + R * dim), head.output, head.outputBias, dim);
  }

  close(): void {
    this.backend.close();
  }

  /** Token ids, positions and sequence starts into linear memory; returns the step's token count. */
  private writeInputs(sequences: readonly (readonly number[])[]): number {
    const i32 = this.backend.mem.i32;
    const a = this.act;
    let T = 0;
    i32[a.seqStarts >>> 2] = 0;
    sequences.forEach((seq, s) => {
      if (seq.length === 0 || seq.length > this.config.contextLength) throw new Error(`encoder: a sequence of ${seq.length} tokens (1..${this.config.contextLength})`);
      if (T + seq.length > this.maxTokens) throw new Error(`encoder: a step of more than ${this.maxTokens} tokens`);
      for (let i = 0; i < seq.length; i++) {
        i32[(a.tokens >>> 2) + T + i] = seq[i]!;
        i32[(a.positions >>> 2) + T + i] = i;
      }
      T += seq.length;
      i32[(a.seqStarts >>> 2) + s + 1] = T;
    });
    return T;
  }

  private ropeTables(ropeDim: number, theta: number): { cos: number; sin: number } {
    const table = ropeTable({ theta, freqScale: 1, factors: null, attnFactor: 1, yarn: null }, this.config.contextLength, ropeDim);
    const mem = this.backend.mem;
    const [cos, sin] = [mem.alloc(4 * table.cos.length), mem.alloc(4 * table.sin.length)];
    mem.f32.set(table.cos, cos >>> 2);
    mem.f32.set(table.sin, sin >>> 2);
    return { cos, sin };
  }
}

/**
 * Input rows of T tokens into x (xb: scratch of as many rows): the token embedding, plus row 0 of
 * the token types and the learned position of each token where the model has them.
 */
export function embedEncoderInput(
  ops: CpuBackend, w: Pick<EncoderWeights, "tokenEmbedding" | "tokenType0" | "positions">,
  a: Pick<EncoderActivations, "x" | "xb" | "tokens" | "positions">, T: number, dim: number,
): void {
  ops.embed(a.x, w.tokenEmbedding, a.tokens, T);
  if (w.tokenType0 !== null) ops.addRows(a.x, w.tokenType0, T, dim);
  if (w.positions !== null) {
    ops.gatherRows(a.xb, w.positions, a.positions, T, dim);
    ops.add(a.x, a.xb, T * dim);
  }
}

/**
 * A reranker head's last part on R rows of `dense` (cls · x + bias, [R][dim]): tanh of each, then
 * output ([labels][dim]) · that + outputBias, R x labels values, in f32 left to right.
 */
export function classifierOutput(dense: Float32Array, output: Float32Array, outputBias: Float32Array, dim: number): Float32Array {
  const R = dense.length / dim;
  const labels = outputBias.length;
  const out = new Float32Array(R * labels);
  for (let r = 0; r < R; r++) {
    const hidden = dense.subarray(r * dim, (r + 1) * dim).map(Math.tanh);
    for (let l = 0; l < labels; l++) out[r * labels + l] = dotF32(output.subarray(l * dim, (l + 1) * dim), hidden) + outputBias[l]!;
  }
  return out;
}

/** a · b in f32, left to right. */
function dotF32(a: Float32Array, b: Float32Array): number {
  let s = 0;
  for (let i = 0; i < a.length; i++) s = Math.fround(s + Math.fround(a[i]! * b[i]!));
  return s;
}

/** The checkpoint's tensors as the kernels read them: matrices as stored, vectors and tables as f32 rows, in the target's memory. */
function tensorLoader(ckpt: EncoderCheckpoint, target: WeightTarget) {
  const info = (name: string) => {
    const t = ckpt.tensors.get(name);
    if (t === undefined) throw new ModelFormatError(ckpt.file, `missing tensor ${name}`);
    return t;
  };
  return {
    info,
    matrix: (name: string) => loadTensorMatrix(ckpt.file, info(name), target, FAST_STORAGE),
    rows: (name: string) => loadF32Rows(ckpt.file, info(name), target.mem),
  };
}

/** The tables of the input rows (embedEncoderInput) into the target's memory. */
export function loadEncoderInputWeights(ckpt: EncoderCheckpoint, target: WeightTarget): Pick<EncoderWeights, "tokenEmbedding" | "tokenType0" | "positions"> {
  const { matrix, rows } = tensorLoader(ckpt, target);
  const c = ckpt.config;
  return {
    tokenEmbedding: matrix(EncoderTensor.tokenEmbedding),
    tokenType0: c.tokenTypes > 0 ? rows(EncoderTensor.tokenTypes) : null,
    positions: c.positions.kind === "learned" ? rows(EncoderTensor.positions) : null,
  };
}

/** Every tensor of the checkpoint into the target's memory: matrices as stored for the kernels, vectors and tables as f32 rows. */
function loadEncoderWeights(ckpt: EncoderCheckpoint, target: WeightTarget): EncoderWeights {
  const c = ckpt.config;
  const { info, matrix, rows } = tensorLoader(ckpt, target);
  const floats = (name: string) => {
    const addr = rows(name);
    return target.mem.f32.slice(addr >>> 2, (addr >>> 2) + info(name).byteLength / 4);
  };
  const norm = (w: string, b: string): NormWeights => ({ w: rows(w), b: rows(b) });
  const T = EncoderTensor;
  const layers = Array.from({ length: c.nLayers }, (_, l): EncoderLayerWeights => {
    let qkv: [WeightMatrix, WeightMatrix, WeightMatrix];
    if (c.fusedQkv) {
      const fused = matrix(T.qkv(l));
      qkv = [matrixRows(fused, 0, c.dim), matrixRows(fused, c.dim, c.dim), matrixRows(fused, 2 * c.dim, c.dim)];
    } else {
      qkv = [matrix(T.q(l)), matrix(T.k(l)), matrix(T.v(l))];
    }
    return {
      wq: qkv[0], wk: qkv[1], wv: qkv[2],
      qkvBias: c.biases ? { q: rows(T.qBias(l)), k: rows(T.kBias(l)), v: rows(T.vBias(l)) } : null,
      wo: matrix(T.output(l)),
      woBias: c.biases ? rows(T.outputBias(l)) : null,
      attnNorm: norm(T.attnNorm(l), T.attnNormBias(l)),
      up: matrix(T.up(l)),
      upBias: c.biases ? rows(T.upBias(l)) : null,
      gate: c.ffn === "swiglu" ? matrix(T.gate(l)) : null,
      down: matrix(T.down(l)),
      downBias: c.biases ? rows(T.downBias(l)) : null,
      outNorm: norm(T.layerNorm(l), T.layerNormBias(l)),
    };
  });
  return {
    ...loadEncoderInputWeights(ckpt, target),
    embedNorm: norm(T.embedNorm, T.embedNormBias),
    layers,
    classifier: c.classifier === null ? null : {
      dense: matrix(T.cls), denseBias: rows(T.clsBias), output: floats(T.clsOutput), outputBias: floats(T.clsOutputBias),
    },
  };
}
