/**
 * The llama transformer's forward pass over one step: every new token of every scheduled
 * sequence goes through all layers together, so each weight matrix is read once per step.
 * Read top to bottom, like llama2.c's forward(). The optional parts of a layer (q/k/v biases of
 * qwen2, per-head q/k norms of qwen3 and gemma3, gemma3's scaled embedding, post-norms, GeGLU and
 * sliding-window layers, smollm3's layers without RoPE, a mixture of experts in place of the
 * feed-forward in qwen3moe: experts.ts) are the architectures' (see arch/); the rest is shared.
 *
 * A LlamaModel runs the part of the model one memory holds (ModelPart): by default all of it.
 * A model placed over several memories is one LlamaModel per memory, chained by WasmForward.
 */
import { CpuBackend, type ScratchShape, type SharedInputProducts } from "./cpu.ts";
import type { Kernels } from "./kernels.ts";
import { readsRoundedActivations } from "./ggml-kernels.ts";
import type { KVArena } from "./kv-arena.ts";
import { KV_TYPE_CODE } from "../../kv/kv-layout.ts";
import { attentionScale, type AttentionScores } from "../../model/attention.ts";
import { feedForwardDim, layerWindow, queryDim, type ModelConfig, type Numerics } from "../../model/config.ts";
import { ExpertFeedForward } from "./experts.ts";
import { layerRopes, ropeTable } from "../../model/rope.ts";
import type { LayerWeights, ModelWeights, WeightMatrix } from "./weights.ts";
import type { StepBatch } from "../../model/batch.ts";

/**
 * Activation buffers for up to maxTokens tokens and maxLogits logit rows. A part without layers
 * has no layer buffers (0), one without the classifier no logit buffers.
 */
interface Activations {
  x: number; // [T][dim] the residual stream
  xb: number; // [T][dim] normed input of a sublayer
  xb2: number; // [T][dim] a sublayer's output
  q: number; // [T][qDim], qDim = nHeads * headDim
  k: number; // [T][kvDim]
  v: number; // [T][kvDim]
  att: number; // [T][qDim] attention output, heads side by side
  hb: number; // [T][hidden] gate, then SwiGLU (GeGLU) output (dense feed-forward)
  hb2: number; // [T][hidden] up
  xLogits: number; // [maxLogits][dim] the rows whose logits are computed
  logits: number; // [maxLogits][vocab]
}

/** What of the model one memory runs: the embedding lookup, layers [firstLayer, endLayer), the classifier. */
export interface ModelPart {
  embed: boolean;
  firstLayer: number;
  endLayer: number;
  classify: boolean;
}

export function wholeModel(config: ModelConfig): ModelPart {
  return { embed: true, firstLayer: 0, endLayer: config.nLayers, classify: true };
}

/** Floats of the layer buffers (xb .. hb2) and of the logit buffers (xLogits, logits) for these bounds. */
function bufferFloats(c: ModelConfig, maxTokens: number, maxLogits: number): { residual: number; layers: number; logits: number } {
  const kvDim = c.nKvHeads * c.headDim;
  const qDim = queryDim(c);
  return {
    residual: maxTokens * c.dim,
    layers: maxTokens * (2 * c.dim + 2 * qDim + 2 * kvDim + 2 * denseHiddenDim(c)),
    logits: maxLogits * (c.dim + c.vocabSize),
  };
}

/** Width of the dense feed-forward's buffers (none when the layers have experts, which have their own). */
function denseHiddenDim(c: ModelConfig): number {
  return c.experts === undefined ? c.hiddenDim : 0;
}

/** The matrices of a layer's feed-forward: the dense ones, or the router and the expert stacks' first experts (their shapes and types). */
function feedForwardMatrices(L: LayerWeights): WeightMatrix[] {
  const f = L.ffn;
  return f.kind === "dense" ? [f.gate, f.up, f.down] : [f.router, f.gate.expert, f.up.expert, f.down.expert];
}

export class LlamaModel {
  private readonly act: Activations;
  /** Per layer of the part: q, k, v from the attention input; gate and up from the feed-forward input. */
  private readonly qkv: SharedInputProducts[];
  private readonly gateUp: (SharedInputProducts | null)[];
  /** The experts' buffers and routing, when the layers have experts. */
  private readonly experts: ExpertFeedForward | null;
  /** cos and sin tables, [seqLen][ropeDim/2] each, of every distinct RoPE of the layers (rope.ts). */
  private readonly ropeTables: { cos: number; sin: number }[];
  /** Per layer of the part: its index into ropeTables (null: no RoPE), and how its attention scores keys. */
  private readonly ropeOf: (number | null)[];
  private readonly scores: AttentionScores[];
  private readonly numerics: Numerics;

  constructor(
    readonly config: ModelConfig,
    readonly weights: ModelWeights,
    readonly backend: CpuBackend,
    readonly maxTokens: number,
    readonly maxLogits: number,
    readonly part: ModelPart = wholeModel(config),
  ) {
    const mem = backend.mem;
    const { dim, vocabSize } = config;
    const hiddenDim = denseHiddenDim(config);
    const kvDim = config.nKvHeads * config.headDim;
    const qDim = queryDim(config);
    this.numerics = config.numerics ?? "default";
    backend.numerics = this.numerics;
    const f32s = (n: number) => mem.allocZeroed(4 * n);
    const hasLayers = part.endLayer > part.firstLayer;
    const layerF32s = (n: number) => (hasLayers ? f32s(n) : 0);
    const logitF32s = (n: number) => (part.classify ? f32s(n) : 0);
    this.act = {
      x: f32s(maxTokens * dim), xb: layerF32s(maxTokens * dim), xb2: layerF32s(maxTokens * dim),
      q: layerF32s(maxTokens * qDim), k: layerF32s(maxTokens * kvDim), v: layerF32s(maxTokens * kvDim),
      att: layerF32s(maxTokens * qDim), hb: layerF32s(maxTokens * hiddenDim), hb2: layerF32s(maxTokens * hiddenDim),
      xLogits: logitF32s(maxLogits * dim), logits: logitF32s(maxLogits * vocabSize),
    };
    const a = this.act;
    const layers = this.partLayers();
    this.qkv = layers.map((L) => backend.prepareShared([{ out: a.q, m: L.wq }, { out: a.k, m: L.wk }, { out: a.v, m: L.wv }]));
    this.gateUp = layers.map((L) => (L.ffn.kind === "dense" ? backend.prepareShared([{ out: a.hb, m: L.ffn.gate }, { out: a.hb2, m: L.ffn.up }]) : null));
    this.experts = hasLayers && config.experts !== undefined ? new ExpertFeedForward(config, backend, maxTokens) : null;
    const ropes = layerRopes(config);
    this.ropeTables = hasLayers ? this.makeRopeTables() : [];
    this.ropeOf = ropes.ofLayer.slice(part.firstLayer, part.endLayer);
    const scale = config.attnScale ?? attentionScale(config.headDim);
    this.scores = layers.map((L, i) => ({ scale, window: layerWindow(config, part.firstLayer + i), ...(L.attnSinks !== null ? { sinks: L.attnSinks } : {}) }));
    const scratch = LlamaModel.scratchShape(config, weights, part, maxTokens);
    if (scratch !== null) {
      backend.reserveScratch(
        scratch.maxTokens, scratch.maxWidth, scratch.group, scratch.headDim, scratch.runqContext, scratch.roundedActivations, scratch.activationRows,
      );
    }
  }

  /** The kernels' scratch a part needs (null: none, an embedding lookup alone). */
  static scratchShape(config: ModelConfig, weights: ModelWeights | null, part: ModelPart, maxTokens: number): ScratchShape | null {
    const hasLayers = part.endLayer > part.firstLayer;
    if (!hasLayers && !part.classify) return null;
    const layers = weights === null ? [] : weights.layers.slice(part.firstLayer, part.endLayer);
    const matrices = [
      ...(part.classify && weights !== null ? [weights.output] : []),
      ...layers.flatMap((L) => [L.wq, L.wk, L.wv, L.wo, ...feedForwardMatrices(L)]),
    ];
    return {
      maxTokens,
      maxWidth: hasLayers ? Math.max(config.dim, feedForwardDim(config), queryDim(config)) : config.dim,
      group: config.nHeads / config.nKvHeads,
      headDim: config.headDim,
      runqContext: hasLayers && (config.numerics ?? "default") === "runq" ? config.seqLen : 0,
      // Unknown weights (a plan before loading): room for rounded activations, the larger case.
      roundedActivations: weights === null || matrices.some((m) => m.kind === "ggml" && readsRoundedActivations(m.type)),
      // Experts quantize every slot of a step at once (ExpertFeedForward).
      activationRows: maxTokens * (hasLayers ? (config.experts?.used ?? 1) : 1),
    };
  }

  /**
   * Bytes a part allocates besides its weights and KV: activations, RoPE tables, the shared-input
   * tables, and the kernels' scratch (an upper bound: every allocation may lose 64 bytes to alignment).
   */
  static bufferBytes(config: ModelConfig, kernels: Kernels, threads: number, part: ModelPart, maxTokens: number, maxLogits: number): number {
    const floats = bufferFloats(config, maxTokens, maxLogits);
    const layers = part.endLayer - part.firstLayer;
    let bytes = 4 * floats.residual + 64;
    const ropeTables = layerRopes(config).sets.length;
    if (layers > 0) {
      bytes += 4 * floats.layers + 8 * 64 + 2 * ropeTables * (4 * config.seqLen * ((config.ropeDim ?? config.headDim) / 2) + 64) + layers * 2 * (4 * 5 * 3 + 64);
      bytes += ExpertFeedForward.bufferBytes(config, maxTokens);
    }
    if (part.classify) bytes += 4 * floats.logits + 2 * 64;
    return bytes + CpuBackend.scratchBytes(kernels, threads, LlamaModel.scratchShape(config, null, part, maxTokens));
  }

  /** The layers of this part. */
  private partLayers(): LayerWeights[] {
    return this.weights.layers.slice(this.part.firstLayer, this.part.endLayer);
  }

  /** Address of the residual stream [maxTokens][dim] (what is copied between the memories of a split model). */
  get residualAddr(): number {
    return this.act.x;
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
    this.runLayers(batch, kv);
    this.classify(batch);
  }

  /**
   * The part's embedding lookup (into the residual stream) and layers (on it, K/V into `kv`,
   * which holds this part's layers). A part without the embedding starts from the residual
   * stream the previous memory's part left, copied in.
   */
  runLayers(batch: StepBatch, kv: KVArena): void {
    const c = this.config;
    const ops = this.backend;
    const a = this.act;
    const w = this.weights;
    const T = batch.numTokens;
    const kvDim = c.nKvHeads * c.headDim;
    const qDim = queryDim(c);
    if (T > this.maxTokens || batch.numLogits > this.maxLogits) throw new Error("forward: batch exceeds the model's buffers");

    if (this.part.embed) {
      ops.embed(a.x, w.tokenEmbedding, batch.tokens, T);
      if (c.embedScale !== undefined) ops.scale(a.x, c.embedScale, T * c.dim); // gemma3: times sqrt(dim)
      // An image's rows replace its placeholder tokens' embeddings, unscaled (StepBatch.inputRows).
      if (batch.inputRows.length > 0 && this.numerics === "runq") throw new Error("forward: runq numerics take token prompts only");
      for (const { row, rows } of batch.inputRows) {
        if (row * c.dim + rows.length > T * c.dim) throw new Error("forward: input rows beyond the batch");
        ops.mem.f32.set(rows, (a.x >>> 2) + row * c.dim);
      }
    }

    for (let l = this.part.firstLayer; l < this.part.endLayer; l++) {
      const L = w.layers[l]!;
      const i = l - this.part.firstLayer;

      // ---- attention: x += wo · attention(rope(wq·xb), rope(wk·xb), wv·xb)
      ops.rmsnorm(a.xb, a.x, L.attnNorm, T, c.dim, c.normEps);
      ops.matmulShared(this.qkv[i]!, a.xb, T); // q, k, v
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

      const rope = this.ropeOf[i]!; // null: a NoPE layer (smollm3)
      if (rope !== null) {
        this.rope(a.q, batch.positions, T, c.nHeads, qDim, rope);
        this.rope(a.k, batch.positions, T, c.nKvHeads, kvDim, rope);
      }
      // The layer's KV cache group (a sliding window's or the global layers'): its slots and block tables.
      const group = kv.groupOf(l);
      ops.kernels.writeKV(
        kv.kLayer(l), kv.vLayer(l), a.k, a.v, batch.slotsOf(group), T, c.nKvHeads, c.headDim, kv.blockSize, kv.numBlocks, KV_TYPE_CODE[kv.layout.type], kv.layout.rowBytes,
      );
      ops.attention(
        a.att, a.q, kv.kLayer(l), kv.vLayer(l), batch.seqInfoOf(group), batch.numSeqs,
        c.nHeads, c.nKvHeads, c.headDim, kv.blockSize, kv.numBlocks, qDim, batch.contextTokens, kv.layout, this.scores[i]!,
      );
      ops.matmul(a.xb2, a.att, L.wo, T);
      if (L.woBias) ops.addRows(a.xb2, L.woBias, T, c.dim);
      if (L.postNorms) ops.rmsnorm(a.xb2, a.xb2, L.postNorms.attn, T, c.dim, c.normEps);
      ops.add(a.x, a.xb2, T * c.dim);

      // ---- feed-forward: x += w2 · (act(w1·xb) * (w3·xb)), act silu (SwiGLU) or gelu (GeGLU), or the mixture of xb's experts
      ops.rmsnorm(a.xb, a.x, L.ffnNorm, T, c.dim, c.normEps);
      if (L.ffn.kind === "experts") this.experts!.forward(a.xb2, a.xb, L.ffn, T);
      else {
        ops.matmulShared(this.gateUp[i]!, a.xb, T); // gate (hb), up (hb2)
        if (c.ffnActivation === "gelu") ops.geglu(a.hb, a.hb2, T, c.hiddenDim);
        else ops.swiglu(a.hb, a.hb2, T, c.hiddenDim);
        ops.matmul(a.xb2, a.hb, L.ffn.down, T);
      }
      if (L.postNorms) ops.rmsnorm(a.xb2, a.xb2, L.postNorms.ffn, T, c.dim, c.normEps);
      ops.add(a.x, a.xb2, T * c.dim);
    }
  }

  /**
   * The output norm and the classifier, only for the rows whose next token is sampled (when this
   * part holds it); the hidden rows (embeddings) get the norm alone, after the logit rows.
   */
  classify(batch: StepBatch): void {
    const R = batch.numLogits;
    const H = batch.numHidden;
    if (!this.part.classify || R + H === 0) return;
    const c = this.config;
    const ops = this.backend;
    const a = this.act;
    if (R + H > this.maxLogits) throw new Error("forward: batch exceeds the model's buffers");
    ops.gatherRows(a.xLogits, a.x, batch.logitRows, R, c.dim);
    if (H > 0) ops.gatherRows(this.hiddenAddr(R, 0), a.x, batch.hiddenRows, H, c.dim);
    ops.rmsnorm(a.xLogits, a.xLogits, this.weights.outputNorm, R + H, c.dim, c.normEps, "final");
    if (R > 0) ops.matmul(a.logits, a.xLogits, this.weights.output, R);
  }

  /** Address of hidden row h of a step of `numLogits` logit rows: the final norm's output, after the logit rows. */
  hiddenAddr(numLogits: number, h: number): number {
    return this.act.xLogits + 4 * (numLogits + h) * this.config.dim;
  }

  private rope(vec: number, positions: number, T: number, nHeads: number, rowStride: number, table: number): void {
    const c = this.config;
    const k = this.backend.kernels;
    const rope = c.ropeStyle === "neox" ? k.ropeNeox : k.ropeInterleaved;
    const { cos, sin } = this.ropeTables[table]!;
    rope(vec, positions, T, nHeads, c.headDim, c.ropeDim ?? c.headDim, rowStride, cos, sin);
  }

  /** The cos/sin tables of every distinct RoPE of the layers (rope.ts); runq numerics use its expf and sincosf. */
  private makeRopeTables(): { cos: number; sin: number }[] {
    const c = this.config;
    const ropeDim = c.ropeDim ?? c.headDim;
    const mem = this.backend.mem;
    const bytes = 4 * c.seqLen * (ropeDim / 2);
    if (this.numerics === "runq") {
      const [cos, sin] = [mem.alloc(bytes), mem.alloc(bytes)];
      this.backend.kernels.ropeTablesRunq(cos, sin, c.seqLen, c.headDim, Math.fround(Math.log(c.ropeTheta)));
      return [{ cos, sin }];
    }
    return layerRopes(c).sets.map((params) => {
      const table = ropeTable(params, c.seqLen, ropeDim);
      const [cos, sin] = [mem.alloc(bytes), mem.alloc(bytes)];
      mem.f32.set(table.cos, cos >>> 2);
      mem.f32.set(table.sin, sin >>> 2);
      return { cos, sin };
    });
  }
}
