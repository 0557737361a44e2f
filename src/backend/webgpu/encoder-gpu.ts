/// <reference types="@webgpu/types" />
/**
 * An encoder's forward pass (bert, nomic-bert; src/model/encoder.ts) on WebGPU, step for step as
 * src/backend/wasm/encoder.ts: every token of every sequence through all layers together, each
 * token attending to every token of its own sequence and no other, no KV cache kept between
 * steps. The input rows (token embedding, token type, learned position) are made by the
 * WebAssembly kernels, as the decoder's ggml embedding look-up is, and uploaded; the rest runs on
 * the GPU through the decoder's products (biases added by the product), RoPE and paged attention,
 * plus LayerNorm and GELU.
 *
 * Attention in both directions through the decoder's causal kernel: K and V of the step go into a
 * scratch arena of one-row blocks, block t holding token t, and every token is its own sequence
 * record (its row as the one query, its sequence's length as the context, its sequence's first
 * block as the block table, the table being 0, 1, 2, ...), so its one query sees all its
 * sequence's keys, in order, and no other. Every kernel computes a row from that row, or in
 * attention from its own sequence's rows, in an order fixed by the row alone: a sequence's output
 * is the same bits whatever else the step holds and where.
 */
import { DeviceError } from "../../errors.ts";
import { attentionScale } from "../../model/attention.ts";
import { EncoderTensor, type EncoderCheckpoint, type EncoderConfig } from "../../model/encoder.ts";
import { ropeTable } from "../../model/rope.ts";
import { CpuBackend } from "../wasm/cpu.ts";
import { classifierOutput, embedEncoderInput, loadEncoderInputWeights, type EncoderWeights } from "../wasm/encoder.ts";
import type { GpuWeightMatrix, WebGpuBackend } from "./backend.ts";
import { TensorFile } from "./file-weights.ts";
import { uploadFused, uploadStacks } from "./llama-gpu.ts";
import { MAX_HEAD_DIM } from "./wgsl-attention.ts";
import { MAX_GRID } from "./wgsl-elementwise.ts";

interface GpuNorm {
  w: GPUBuffer;
  b: GPUBuffer;
}

interface GpuEncoderLayer {
  qkv: GpuWeightMatrix[]; // wq, wk, wv [dim][dim] as one stack (bert: with their biases; nomic-bert: rows of attn_qkv)
  wo: GpuWeightMatrix; // [dim][dim], bert's bias with it
  attnNorm: GpuNorm;
  /** bert: up [hidden][dim] with its bias; nomic-bert: gate and up as one stack. */
  up: GpuWeightMatrix[];
  down: GpuWeightMatrix; // [dim][hidden], bert's bias with it
  outNorm: GpuNorm;
}

/** The reranker head: the dense product (with its bias) on the GPU, tanh and the output on the host. */
interface GpuClassifier {
  dense: GpuWeightMatrix;
  output: Float32Array;
  outputBias: Float32Array;
}

/** The most tokens one step may hold: the attention grid has one workgroup row per (token, head). */
export function encoderStepBound(c: Pick<EncoderConfig, "nHeads">): number {
  return Math.floor(MAX_GRID / c.nHeads);
}

/** Why the encoder cannot run on WebGPU (one line), or null: shapes the kernels do not take. */
export function encoderShapeRefusal(c: EncoderConfig): string | null {
  if (c.headDim > MAX_HEAD_DIM) return `head dimension ${c.headDim} exceeds the WGSL attention's ${MAX_HEAD_DIM}`;
  if (c.contextLength > encoderStepBound(c)) return `a context of ${c.contextLength} tokens x ${c.nHeads} heads exceeds one attention dispatch (${MAX_GRID} workgroups)`;
  return null;
}

export class GpuEncoderModel {
  private readonly layers: GpuEncoderLayer[];
  private readonly embedNorm: GpuNorm;
  private readonly classifier: GpuClassifier | null;
  /** cos then sin, [context][ropeDim / 2] each (nomic-bert); one unread value for bert. */
  private readonly ropeTable: GPUBuffer;
  private readonly ropeDim: number;
  private readonly act: Record<"x" | "xb" | "q" | "k" | "v" | "att" | "hb" | "hb2" | "kArena" | "vArena", GPUBuffer>;
  /** Per step: each token's position in its sequence, and its sequence record (see the file's comment). */
  private readonly positions: GPUBuffer;
  private readonly records: GPUBuffer;
  /** 0, 1, 2, ...: each token's arena slot and the block table. */
  private readonly identity: GPUBuffer;
  /** The input rows' tables and step buffers in WebAssembly memory. */
  private readonly input: {
    weights: Pick<EncoderWeights, "tokenEmbedding" | "tokenType0" | "positions">;
    act: { x: number; xb: number; tokens: number; positions: number };
  };
  private readonly owned: GPUBuffer[] = [];

  private constructor(
    readonly config: EncoderConfig,
    ckpt: EncoderCheckpoint,
    private readonly gpu: WebGpuBackend,
    private readonly cpu: CpuBackend,
    /** The most tokens one step runs (at least the context). */
    readonly maxTokens: number,
  ) {
    const c = config;
    const file = new TensorFile(ckpt);
    const T = EncoderTensor;
    const own = (b: GPUBuffer) => (this.owned.push(b), b);
    const ownMatrices = (ms: GpuWeightMatrix[]) => {
      for (const m of ms) {
        for (const part of m.parts) own(part.buffer);
        if (m.bias !== null) own(m.bias);
      }
      return ms;
    };
    const vector = (name: string) => own(gpu.bufferFrom(file.vector(name), name));
    const norm = (w: string, b: string): GpuNorm => ({ w: vector(w), b: vector(b) });
    const stack = (names: string[], label: string, biases: string[] | null) =>
      ownMatrices(uploadStacks(gpu, names.map((n) => file.matrix(n)), label, biases && biases.map((n) => file.vector(n))));
    const single = (name: string, bias: string | null) => stack([name], name, bias === null ? null : [bias])[0]!;
    this.layers = Array.from({ length: c.nLayers }, (_, l): GpuEncoderLayer => ({
      qkv: c.fusedQkv
        ? ownMatrices([uploadFused(gpu, file.matrix(T.qkv(l)), T.qkv(l), [c.dim, c.dim, c.dim])])
        : stack([T.q(l), T.k(l), T.v(l)], `qkv.${l}`, c.biases ? [T.qBias(l), T.kBias(l), T.vBias(l)] : null),
      wo: single(T.output(l), c.biases ? T.outputBias(l) : null),
      attnNorm: norm(T.attnNorm(l), T.attnNormBias(l)),
      up: c.ffn === "swiglu" ? stack([T.gate(l), T.up(l)], `ffn_gate_up.${l}`, null) : [single(T.up(l), c.biases ? T.upBias(l) : null)],
      down: single(T.down(l), c.biases ? T.downBias(l) : null),
      outNorm: norm(T.layerNorm(l), T.layerNormBias(l)),
    }));
    this.embedNorm = norm(T.embedNorm, T.embedNormBias);
    this.classifier = c.classifier === null
      ? null
      : { dense: single(T.cls, T.clsBias), output: file.vector(T.clsOutput).slice(), outputBias: file.vector(T.clsOutputBias).slice() };
    this.ropeDim = c.positions.kind === "rope" ? c.positions.ropeDim : 0;
    if (c.positions.kind === "rope") {
      const table = ropeTable({ theta: c.positions.theta, freqScale: 1, factors: null, attnFactor: 1, yarn: null }, c.contextLength, this.ropeDim);
      const both = new Float32Array(table.cos.length + table.sin.length);
      both.set(table.cos);
      both.set(table.sin, table.cos.length);
      this.ropeTable = own(gpu.bufferFrom(both, "rope_table"));
    } else {
      this.ropeTable = own(gpu.f32Buffer(1, "no_rope_table"));
    }
    const f32 = (n: number, label: string) => own(gpu.f32Buffer(n, label));
    const rows = maxTokens * c.dim;
    this.act = {
      x: f32(rows, "x"), xb: f32(rows, "xb"), q: f32(rows, "q"), k: f32(rows, "k"), v: f32(rows, "v"), att: f32(rows, "att"),
      hb: f32(maxTokens * c.hiddenDim, "hb"), hb2: f32(c.ffn === "swiglu" ? maxTokens * c.hiddenDim : 1, "hb2"),
      kArena: f32(rows, "k_scratch"), vArena: f32(rows, "v_scratch"),
    };
    this.positions = own(gpu.runner.buffer(4 * maxTokens, "positions"));
    this.records = own(gpu.runner.buffer(16 * maxTokens, "token_records"));
    this.identity = own(gpu.bufferFrom(Int32Array.from({ length: maxTokens }, (_, i) => i), "token_slots"));
    gpu.reserveHalfScratch(maxTokens * Math.max(c.dim, c.hiddenDim));
    const mem = cpu.mem;
    this.input = {
      weights: loadEncoderInputWeights(ckpt, { mem, kernels: cpu.kernels }),
      act: { x: mem.alloc(4 * rows), xb: mem.alloc(4 * rows), tokens: mem.alloc(4 * maxTokens), positions: mem.alloc(4 * maxTokens) },
    };
  }

  /** Upload the checkpoint's weights to `gpu`, with buffers for steps of up to `stepTokens` (at least the context, at most encoderStepBound). */
  static load(ckpt: EncoderCheckpoint, gpu: WebGpuBackend, stepTokens: number): GpuEncoderModel {
    const c = ckpt.config;
    const refusal = encoderShapeRefusal(c);
    if (refusal !== null) throw new DeviceError(`webgpu: ${ckpt.file}: ${refusal}`);
    const maxTokens = Math.max(Math.min(stepTokens, encoderStepBound(c)), c.contextLength);
    const cpu = new CpuBackend(1);
    try {
      return new GpuEncoderModel(c, ckpt, gpu, cpu, maxTokens);
    } catch (e) {
      cpu.close();
      throw e;
    }
  }

  /** Labels of the reranker's head (null: the model has none). */
  get labels(): readonly string[] | null {
    return this.config.classifier?.labels ?? null;
  }

  /** Every token's final hidden state, [T][dim], as EncoderModel.forward. */
  async forward(sequences: readonly (readonly number[])[]): Promise<Float32Array> {
    const c = this.config;
    const g = this.gpu;
    const a = this.act;
    const T = this.uploadStep(sequences);
    let input = g.layerNorm(a.x, this.embedNorm.w, this.embedNorm.b, T, c.dim, c.normEps);
    const scores = { scale: attentionScale(c.headDim), window: 0 };
    for (const L of this.layers) {
      // ---- attention: x = LayerNorm(x + wo · attention(wq·x, wk·x, wv·x)), q and k rotated (nomic-bert)
      g.matmulStacks([a.q, a.k, a.v], input, L.qkv);
      g.ropeWriteKV(
        "neox",
        { q: a.q, k: a.k, v: a.v, kArena: a.kArena, vArena: a.vArena, positions: this.positions, slots: this.identity, ropeTable: this.ropeTable },
        {
          T, nHeads: c.nHeads, nKvHeads: c.nHeads, headDim: c.headDim, ropeDim: this.ropeDim, qStride: c.dim, kvStride: c.dim,
          blockSize: 1, numBlocks: this.maxTokens, seqLen: c.contextLength,
        },
      );
      const att = g.attention(
        a.att, a.q, a.kArena, a.vArena, this.records, this.identity, T, 1, c.nHeads, c.nHeads, c.headDim, 1, this.maxTokens, c.dim, T, undefined, scores,
      );
      g.matmul(a.xb, att, L.wo);
      input = g.addLayerNorm(a.x, a.xb, L.attnNorm.w, L.attnNorm.b, T, c.dim, c.normEps);

      // ---- feed-forward: x = LayerNorm(x + down · act(up · x)), act GELU (bert) or SwiGLU with gate (nomic-bert)
      let hidden;
      if (c.ffn === "swiglu") {
        g.matmulStacks([a.hb, a.hb2], input, L.up);
        hidden = g.swiglu(a.hb, a.hb2, T, c.hiddenDim);
      } else {
        g.matmulStacks([a.hb], input, L.up);
        hidden = g.gelu(a.hb, T, c.hiddenDim);
      }
      g.matmul(a.xb, hidden, L.down);
      input = g.addLayerNorm(a.x, a.xb, L.outNorm.w, L.outNorm.b, T, c.dim, c.normEps);
    }
    return g.runner.readF32(a.x, T * c.dim);
  }

  /** The reranker's head on R rows of dim, as EncoderModel.classify: the dense product on the GPU, the rest on the host. */
  async classify(rows: Float32Array): Promise<Float32Array> {
    const head = this.classifier;
    if (head === null) throw new Error("classify: the model has no classifier head");
    const dim = this.config.dim;
    const R = rows.length / dim;
    if (R > this.maxTokens) throw new Error("classify: more rows than a step holds");
    const g = this.gpu;
    g.runner.upload(this.act.xb, rows);
    g.matmul(this.act.q, g.productInput(this.act.xb, R, dim), head.dense);
    const dense = await g.runner.readF32(this.act.q, R * dim);
    return classifierOutput(dense, head.output, head.outputBias, dim);
  }

  /** Free the model's GPU buffers and its WebAssembly memory (not the backend, which its owner closes). */
  close(): void {
    this.gpu.runner.forgetBindGroups();
    for (const b of this.owned) b.destroy();
    this.owned.length = 0;
    this.cpu.close();
  }

  /**
   * The step's input rows made by WebAssembly and uploaded to x, with each token's position and
   * sequence record; returns the step's token count.
   */
  private uploadStep(sequences: readonly (readonly number[])[]): number {
    const c = this.config;
    const i32 = this.cpu.mem.i32;
    const a = this.input.act;
    const total = sequences.reduce((n, s) => n + s.length, 0);
    if (total > this.maxTokens) throw new Error(`encoder: a step of more than ${this.maxTokens} tokens`);
    const records = new Int32Array(4 * total);
    let T = 0;
    for (const seq of sequences) {
      if (seq.length === 0 || seq.length > c.contextLength) throw new Error(`encoder: a sequence of ${seq.length} tokens (1..${c.contextLength})`);
      for (let i = 0; i < seq.length; i++) {
        i32[(a.tokens >>> 2) + T + i] = seq[i]!;
        i32[(a.positions >>> 2) + T + i] = i;
        records.set([T + i, 1, seq.length, T], 4 * (T + i));
      }
      T += seq.length;
    }
    embedEncoderInput(this.cpu, this.input.weights, a, T, c.dim);
    const run = this.gpu.runner;
    run.upload(this.act.x, this.cpu.mem.f32.subarray(a.x >>> 2, (a.x >>> 2) + T * c.dim));
    run.upload(this.positions, i32.subarray(a.positions >>> 2, (a.positions >>> 2) + T));
    run.upload(this.records, records);
    return T;
  }
}
