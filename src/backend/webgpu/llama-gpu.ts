/// <reference types="@webgpu/types" />
/**
 * The llama forward pass on WebGPU, step for step the same as src/backend/wasm/llama.ts's forward(): the
 * same StepBatch (read from linear memory, where the scheduler wrote it), the same block ids into
 * a KV arena of the same shape, here kept in GPU buffers. Weights go from the model file to GPU
 * buffers (FileWeights: f32 rows, ggml blocks as they are) without staying in WebAssembly memory;
 * only a ggml embedding table is placed there, looked up by the WebAssembly kernel (T rows per
 * step) and the rows uploaded. The engine drives it through WebGpuForward (the ModelForward seam); "runq" numerics
 * and int8 (q8) llama2.c matrices are WebAssembly-only and refused here with a DeviceError.
 */
import type { BlockCopy } from "../../kv/kv-cache-manager.ts";
import { SEQ_INFO_INTS, type StepBatch } from "../../model/batch.ts";
import { KVCacheGroups } from "../../kv/kv-groups.ts";
import type { CpuBackend } from "../wasm/cpu.ts";
import { DeviceError } from "../../errors.ts";
import { layerWindow, queryDim, type ModelConfig } from "../../model/config.ts";
import { TensorName } from "../../model/checkpoint.ts";
import type { WeightMatrix } from "../wasm/weights.ts";
import { MAX_STACK, type GpuWeightMatrix, type ProductInput, type WebGpuBackend } from "./backend.ts";
import { attentionScale, type AttentionScores } from "../../model/attention.ts";
import { layerRopes, ropeTable } from "../../model/rope.ts";
import type { FileWeights, HostMatrix } from "./file-weights.ts";
import type { KVLayout } from "../../kv/kv-layout.ts";
import { GpuExperts, type GpuExpertLayer } from "./experts-gpu.ts";
import { concatArrays } from "../../util/typed-arrays.ts";

/** The step's shape: what the GPU buffers are sized for. */
export interface StepShape {
  maxTokens: number;
  maxLogits: number;
  maxSeqs: number;
  maxBlocksPerSeq: number;
  numBlocks: number;
  blockSize: number;
  /** The KV cache's element type and bytes (src/kv/kv-layout.ts). */
  kv: KVLayout;
}

interface GpuLayer {
  attnNorm: GPUBuffer; // [dim]
  qkv: GpuWeightMatrix[]; // wq [qDim][dim], wk [kvDim][dim], wv [kvDim][dim], stacked where they share a type (phi3: one fused stack); qwen2's biases with them
  wo: GpuWeightMatrix; // [dim][qDim], with gpt-oss's bias
  sinks: GPUBuffer | null; // [nHeads] (gpt-oss)
  postNorms: { attn: GPUBuffer; ffn: GPUBuffer } | null; // [dim] each (gemma3)
  ffnNorm: GPUBuffer; // [dim]
  ffn:
    | { kind: "dense"; gateUp: GpuWeightMatrix[] /* ffn_gate, ffn_up [hidden][dim], stacked where they share a type (phi3: one fused stack) */; down: GpuWeightMatrix /* [dim][hidden] */ }
    | ({ kind: "experts" } & GpuExpertLayer);
  qkNorm: { q: GPUBuffer; k: GPUBuffer } | null; // [headDim] each
  rope: GPUBuffer | null; // this layer's cos/sin table (one of ropeTables), null for a layer without RoPE (smollm3)
  scores: AttentionScores; // the scale of q · k and the sliding window (0: none)
  k: GPUBuffer; // KV arena of the layer's slot (kv-arena.ts), [kvHead][block][blockSize] rows of headDim values in the KV type
  v: GPUBuffer;
  group: number; // the KV cache group whose slots, records and block tables it reads (kv-groups.ts)
}

/** Per-step inputs copied from the StepBatch; slots, records and block tables one per KV cache group. */
interface StepInputs {
  tokens: GPUBuffer;
  positions: GPUBuffer;
  slots: GPUBuffer[];
  seqInfo: GPUBuffer[];
  tables: GPUBuffer[];
  logitRows: GPUBuffer;
}

export class GpuLlamaModel {
  private readonly layers: GpuLayer[];
  /** The KV arena: a K and a V buffer per slot of a block (kv-arena.ts); a layer reads its slot's. */
  private readonly slotArenas: { k: GPUBuffer; v: GPUBuffer }[];
  /** Null when the table is a ggml block type: looked up on the CPU (embedOnCpu). */
  private readonly embedding: GpuWeightMatrix | null;
  private readonly cpuEmbedding: { table: WeightMatrix; rows: number } | null;
  private readonly output: GpuWeightMatrix;
  private readonly outputNorm: GPUBuffer;
  /** Per distinct RoPE of the layers (model/rope.ts): cos then sin of every position and pair, [seqLen][ropeDim / 2] each. */
  private readonly ropeTables: GPUBuffer[];
  private readonly act: Record<"x" | "xb" | "xb2" | "q" | "k" | "v" | "att" | "hb" | "hb2" | "xLogits" | "logits", GPUBuffer>;
  private readonly inputs: StepInputs;
  /** The experts' routing and slot buffers, when the layers have experts. */
  private readonly experts: GpuExperts | null;
  /** Every buffer this model created, destroyed by destroy(). */
  private readonly owned: GPUBuffer[] = [];
  /** One kv head's rows of one block: the stop between two places of one KV buffer in copyBlocks. */
  private copyScratch: GPUBuffer | null = null;
  readonly maxTokens: number;
  readonly maxLogits: number;
  readonly numBlocks: number;
  readonly blockSize: number;
  /** The KV arena's element type and bytes. */
  readonly kv: KVLayout;

  constructor(
    readonly config: ModelConfig,
    weights: FileWeights,
    cpu: CpuBackend,
    readonly gpu: WebGpuBackend,
    shape: StepShape,
  ) {
    const c = config;
    const { maxTokens, maxLogits, maxSeqs, maxBlocksPerSeq } = shape;
    this.maxTokens = maxTokens;
    this.maxLogits = maxLogits;
    this.numBlocks = shape.numBlocks;
    this.blockSize = shape.blockSize;
    this.kv = shape.kv;
    if (maxLogits > maxTokens) throw new Error("GpuLlamaModel: logit rows are rows of the step, so maxLogits <= maxTokens");
    if ((c.numerics ?? "default") !== "default") throw new DeviceError(`webgpu: ${c.numerics} numerics run on WebAssembly only`);
    const kvDim = c.nKvHeads * c.headDim;
    const qDim = queryDim(c);
    const own = (b: GPUBuffer) => (this.owned.push(b), b);
    const vector = (name: string) => own(gpu.bufferFrom(weights.vector(name), name));
    const stacks = (names: string[], label: string, biases: string[] | null = null) => {
      const up = uploadStacks(gpu, names.map((n) => weights.matrix(n)), label, biases && biases.map((n) => weights.vector(n)));
      for (const m of up) {
        for (const part of m.parts) own(part.buffer);
        if (m.bias !== null) own(m.bias);
      }
      return up;
    };
    const matrix = (name: string) => stacks([name], name)[0]!;
    // One fused matrix (phi3's attn_qkv, ffn_up) as a stack of its row ranges: one dispatch, one output each.
    const fused = (name: string, rows: readonly number[]) => {
      const m = uploadFused(gpu, weights.matrix(name), name, rows);
      for (const part of m.parts) own(part.buffer);
      return [m];
    };
    // The arena in 4-byte words (a typed arena is read as u32 words): a K and a V buffer per slot.
    const arena = (this.kv.layerBlockBytes * this.numBlocks) / 4;
    const groups = KVCacheGroups.of(c);
    this.slotArenas = Array.from({ length: groups.numSlots }, (_, s) => ({
      k: own(gpu.f32Buffer(arena, `k_cache.${s}`)), v: own(gpu.f32Buffer(arena, `v_cache.${s}`)),
    }));
    const T = TensorName;
    const ropes = layerRopes(c);
    this.ropeTables = ropes.sets.map((params, i) => {
      const { cos, sin } = ropeTable(params, c.seqLen, c.ropeDim ?? c.headDim);
      const table = new Float32Array(cos.length + sin.length);
      table.set(cos);
      table.set(sin, cos.length);
      return own(gpu.bufferFrom(table, `rope_table.${i}`));
    });
    const scale = c.attnScale ?? attentionScale(c.headDim);
    this.layers = Array.from({ length: c.nLayers }, (_, l) => ({
      attnNorm: vector(T.attnNorm(l)),
      qkv: c.fusedQkv
        ? fused(T.attnQkv(l), [qDim, kvDim, kvDim])
        : stacks([T.attnQ(l), T.attnK(l), T.attnV(l)], `qkv.${l}`, c.qkvBias ? [T.attnQBias(l), T.attnKBias(l), T.attnVBias(l)] : null),
      wo: stacks([T.attnOutput(l)], T.attnOutput(l), c.attnOutputBias ? [T.attnOutputBias(l)] : null)[0]!,
      sinks: c.attnSinks ? vector(T.attnSinks(l)) : null,
      postNorms: c.postNorms ? { attn: vector(T.postAttnNorm(l)), ffn: vector(T.postFfnNorm(l)) } : null,
      ffnNorm: vector(T.ffnNorm(l)),
      ffn: c.experts === undefined
        ? {
          kind: "dense" as const,
          gateUp: c.fusedGateUp ? fused(T.ffnUp(l), [c.hiddenDim, c.hiddenDim]) : stacks([T.ffnGate(l), T.ffnUp(l)], `ffn_gate_up.${l}`),
          down: matrix(T.ffnDown(l)),
        }
        : { kind: "experts" as const, ...GpuExperts.upload(gpu, weights, c, l, own) },
      qkNorm: c.qkNorm ? { q: vector(T.attnQNorm(l)), k: vector(T.attnKNorm(l)) } : null,
      rope: ropes.ofLayer[l] === null ? null : this.ropeTables[ropes.ofLayer[l]!]!,
      scores: { scale, window: layerWindow(c, l) },
      ...this.slotArenas[groups.slotOf[l]!]!,
      group: groups.groupOf[l]!,
    }));
    this.embedding = weights.embeddingOnGpu ? matrix(T.tokenEmbedding) : null;
    this.cpuEmbedding = this.embedding !== null ? null : { table: weights.loadTokenEmbedding(cpu), rows: cpu.mem.alloc(4 * maxTokens * c.dim) };
    this.output = weights.outputName === T.tokenEmbedding && this.embedding !== null ? this.embedding : matrix(weights.outputName);
    this.outputNorm = vector(T.outputNorm);
    const f32 = (n: number, label: string) => own(gpu.f32Buffer(n, label));
    this.act = {
      x: f32(maxTokens * c.dim, "x"), xb: f32(maxTokens * c.dim, "xb"), xb2: f32(maxTokens * c.dim, "xb2"),
      q: f32(maxTokens * qDim, "q"), k: f32(maxTokens * kvDim, "k"), v: f32(maxTokens * kvDim, "v"),
      att: f32(maxTokens * Math.max(qDim, kvDim), "att"),
      hb: f32(maxTokens * (c.experts === undefined ? c.hiddenDim : 1), "hb"), hb2: f32(maxTokens * (c.experts === undefined ? c.hiddenDim : 1), "hb2"),
      xLogits: f32(maxLogits * c.dim, "x_logits"), logits: f32(maxLogits * c.vocabSize, "logits"),
    };
    this.experts = c.experts === undefined ? null : new GpuExperts(gpu, c, maxTokens, own);
    // The largest input of a product: a step's rows times the widest of dim, q and the feed-forward,
    // or the experts' slots (maxTokens x used) times the wider of dim and one expert's width.
    const denseInput = maxTokens * Math.max(c.dim, qDim, c.experts === undefined ? c.hiddenDim : 0);
    const expertInput = c.experts === undefined ? 0 : maxTokens * c.experts.used * Math.max(c.dim, c.experts.hiddenDim);
    gpu.reserveHalfScratch(Math.max(denseInput, expertInput));
    const i32 = (n: number, label: string) => own(gpu.runner.buffer(4 * n, label));
    const perGroup = (n: number, label: string) => groups.groups.map((_, g) => i32(n, `${label}.${g}`));
    this.inputs = {
      tokens: i32(maxTokens, "tokens"), positions: i32(maxTokens, "positions"), slots: perGroup(maxTokens, "slots"),
      seqInfo: perGroup(maxSeqs * SEQ_INFO_INTS, "seq_info"), tables: perGroup(maxSeqs * maxBlocksPerSeq, "block_tables"),
      logitRows: i32(maxLogits, "logit_rows"),
    };
  }

  /**
   * Run the step described by `batch` (in cpu's linear memory): K/V of the new tokens go into the
   * GPU arena, and the logits of the batch's logit rows come back, [numLogits][vocab], with the
   * normed hidden states of its hidden rows, [numHidden][dim].
   */
  async forward(batch: StepBatch, cpu: CpuBackend): Promise<{ logits: Float32Array; hidden: Float32Array }> {
    const c = this.config;
    const g = this.gpu;
    const a = this.act;
    const T = batch.numTokens;
    const kvDim = c.nKvHeads * c.headDim;
    const qDim = queryDim(c);
    const ropeDim = c.ropeDim ?? c.headDim;
    if (T > this.maxTokens || batch.numLogits + batch.numHidden > this.maxLogits) throw new Error("forward: batch exceeds the model's buffers");
    const maxQueryCount = this.uploadStep(batch, cpu);
    const inp = this.inputs;
    const rope = c.ropeStyle === "neox" ? "neox" : "interleaved";

    if (this.embedding !== null) g.embed(a.x, this.embedding, inp.tokens, T);
    else this.embedOnCpu(batch, cpu);
    if (c.embedScale !== undefined) g.scale(a.x, c.embedScale, T * c.dim); // gemma3: times sqrt(dim)
    let attnIn = g.rmsnormInput(a.xb, a.x, this.layers[0]!.attnNorm, T, c.dim, c.normEps);
    this.layers.forEach((L, l) => {
      // ---- attention: x += wo · attention(rope(wq·xb), rope(wk·xb), wv·xb); attnIn is rmsnorm(x),
      // made before the loop or at the previous layer's end (with f16 products, in f16 form too)
      g.matmulStacks([a.q, a.k, a.v], attnIn, L.qkv);
      if (L.qkNorm) {
        // Each head a row of headDim, normalised through att (a kernel may not read and write one buffer).
        g.runner.copy(a.q, 0, a.att, 0, 4 * T * qDim);
        g.rmsnorm(a.q, a.att, L.qkNorm.q, T * c.nHeads, c.headDim, c.normEps);
        g.runner.copy(a.k, 0, a.att, 0, 4 * T * kvDim);
        g.rmsnorm(a.k, a.att, L.qkNorm.k, T * c.nKvHeads, c.headDim, c.normEps);
      }
      // A layer without RoPE (smollm3's NoPE) rotates nothing: a rotary dimension of 0.
      g.ropeWriteKV(
        rope,
        { q: a.q, k: a.k, v: a.v, kArena: L.k, vArena: L.v, positions: inp.positions, slots: inp.slots[L.group]!, ropeTable: L.rope ?? this.ropeTables[0]! },
        {
          T, nHeads: c.nHeads, nKvHeads: c.nKvHeads, headDim: c.headDim, ropeDim: L.rope === null ? 0 : ropeDim, qStride: qDim, kvStride: kvDim,
          blockSize: this.blockSize, numBlocks: this.numBlocks, seqLen: c.seqLen,
        },
        this.kv,
      );
      const attnOut = g.attention(
        a.att, a.q, L.k, L.v, inp.seqInfo[L.group]!, inp.tables[L.group]!, batch.numSeqs, maxQueryCount,
        c.nHeads, c.nKvHeads, c.headDim, this.blockSize, this.numBlocks, qDim, T, this.kv, L.scores, L.sinks,
      );
      g.matmul(a.xb2, attnOut, L.wo);
      // x += the attention's output (gemma3: RMS-normalised first, into xb), and the feed-forward's input norm, in one dispatch
      let ffnIn: ProductInput;
      if (L.postNorms) {
        g.rmsnorm(a.xb, a.xb2, L.postNorms.attn, T, c.dim, c.normEps);
        ffnIn = g.addRmsnorm(a.xb2, a.x, a.xb, L.ffnNorm, T, c.dim, c.normEps);
      } else {
        ffnIn = g.addRmsnorm(a.xb, a.x, a.xb2, L.ffnNorm, T, c.dim, c.normEps);
      }

      // ---- feed-forward: x += w2 · (act(w1·xb) * (w3·xb)), act silu (SwiGLU) or gelu (GeGLU), or the mixture of xb's experts
      if (L.ffn.kind === "experts") this.experts!.forward(a.xb2, ffnIn, L.ffn, T);
      else {
        g.matmulStacks([a.hb, a.hb2], ffnIn, L.ffn.gateUp);
        g.matmul(a.xb2, g.gated(c.ffnActivation ?? "silu", a.hb, a.hb2, T, c.hiddenDim), L.ffn.down);
      }
      let ffnOut = a.xb2;
      if (L.postNorms) {
        g.rmsnorm(a.xb, a.xb2, L.postNorms.ffn, T, c.dim, c.normEps);
        ffnOut = a.xb;
      }
      // x += the feed-forward's output, and the next layer's attention norm, in one dispatch (after the last layer only the add)
      const next = this.layers[l + 1];
      if (next !== undefined) attnIn = g.addRmsnorm(ffnOut === a.xb ? a.xb2 : a.xb, a.x, ffnOut, next.attnNorm, T, c.dim, c.normEps);
      else g.add(a.x, ffnOut, T * c.dim);
    });

    // ---- the output norm of the logit rows and, after them, the hidden rows (embeddings); the
    // classifier for the logit rows only
    const R = batch.numLogits;
    const H = batch.numHidden;
    if (R + H === 0) {
      g.flush();
      return { logits: new Float32Array(0), hidden: new Float32Array(0) };
    }
    // Through xb: WebGPU forbids a kernel reading and writing one buffer through two bindings.
    g.gatherRows(a.xb, a.x, inp.logitRows, R + H, c.dim);
    const normed = g.rmsnormInput(a.xLogits, a.xb, this.outputNorm, R + H, c.dim, c.normEps);
    // Every row through the classifier when there are logits (a product's input is its rows together), none without.
    if (R > 0) g.matmul(a.logits, normed, this.output);
    else g.flush();
    const logits = R > 0 ? await g.runner.readF32(a.logits, R * c.vocabSize) : new Float32Array(0);
    const hidden = H > 0 ? await g.runner.readF32(a.xLogits, H * c.dim, R * c.dim) : new Float32Array(0);
    return { logits, hidden };
  }

  /**
   * Copy the K and V of block src into block dst, every slot and kv head (a forked request's
   * partly filled block), queued before the next forward's dispatches.
   */
  copyBlocks(copies: readonly BlockCopy[]): void {
    const c = this.config;
    if (copies.length === 0) return;
    const headBlockBytes = this.headBlockBytes;
    // WebGPU never copies within one buffer: each head's rows go through a scratch buffer.
    if (this.copyScratch === null) {
      this.copyScratch = this.gpu.f32Buffer(headBlockBytes / 4, "kv_copy");
      this.owned.push(this.copyScratch);
    }
    const scratch = this.copyScratch;
    const runner = this.gpu.runner;
    for (const { src, dst } of copies) {
      for (const slot of this.slotArenas) {
        for (const arena of [slot.k, slot.v]) {
          for (let h = 0; h < c.nKvHeads; h++) {
            const head = h * this.numBlocks * headBlockBytes;
            runner.copy(arena, head + src * headBlockBytes, scratch, 0, headBlockBytes);
            runner.copy(scratch, 0, arena, head + dst * headBlockBytes, headBlockBytes);
          }
        }
      }
    }
    runner.flush();
  }

  /**
   * Block `blockId` of KV cache group `group` as the disk tier stores it ([j][K, V][kvHead][row][headDim]
   * for the group's layers in slot order), read back from the GPU arena. The copies are recorded at
   * the call, so a later step that reuses the block cannot change what is read.
   */
  readKVBlock(blockId: number, group: number): Promise<ArrayBuffer> {
    return this.gpu.runner.readRegions([...this.kvBlockRegions(blockId, group)]);
  }

  /** Writes `data` (readKVBlock's layout) into block `blockId` of `group`'s layers, before any later step runs. */
  writeKVBlock(blockId: number, group: number, data: Uint8Array): void {
    let at = 0;
    for (const r of this.kvBlockRegions(blockId, group)) {
      this.gpu.runner.upload(r.buf, data.subarray(at, at + r.bytes), r.offset);
      at += r.bytes;
    }
  }

  /** Bytes of one block of `group`: its layers' K and V. */
  groupBlockBytes(group: number): number {
    return 2 * this.groupSlots(group) * this.kv.layerBlockBytes;
  }

  /**
   * Where block `blockId`'s rows are for `group`: per slot its layers occupy (layer layers[j] in slot
   * j), K then V, each kv head's rows (heads are numBlocks blocks apart).
   */
  private *kvBlockRegions(blockId: number, group: number): Generator<{ buf: GPUBuffer; offset: number; bytes: number }> {
    const headBlockBytes = this.headBlockBytes;
    for (const slot of this.slotArenas.slice(0, this.groupSlots(group))) {
      for (const buf of [slot.k, slot.v]) {
        for (let h = 0; h < this.config.nKvHeads; h++) yield { buf, offset: (h * this.numBlocks + blockId) * headBlockBytes, bytes: headBlockBytes };
      }
    }
  }

  /** Slots a block of `group` uses: its layer count. */
  private groupSlots(group: number): number {
    const layers = KVCacheGroups.of(this.config).groups[group]?.layers;
    if (layers === undefined) throw new RangeError(`no KV cache group ${group}`);
    return layers.length;
  }

  /** Bytes of one kv head's rows of one block in a layer's K or V buffer: the unit blocks are copied in. */
  private get headBlockBytes(): number {
    return this.kv.layerBlockBytes / this.config.nKvHeads;
  }

  /** Free the model's GPU buffers (weights, KV arena, activations); the model cannot run afterwards. */
  destroy(): void {
    this.gpu.runner.forgetBindGroups();
    for (const b of this.owned) b.destroy();
    this.owned.length = 0;
  }

  /** Embedding rows of a ggml table, dequantized by the WebAssembly kernel and uploaded to x. */
  private embedOnCpu(batch: StepBatch, cpu: CpuBackend): void {
    const e = this.cpuEmbedding!;
    const n = batch.numTokens * this.config.dim;
    cpu.embed(e.rows, e.table, batch.tokens, batch.numTokens);
    this.gpu.runner.upload(this.act.x, cpu.mem.f32.subarray(e.rows >>> 2, (e.rows >>> 2) + n));
  }

  /** Copy the batch's arrays to the GPU, each KV cache group's; block-table addresses become element indices. */
  private uploadStep(batch: StepBatch, cpu: CpuBackend): number {
    const i32 = cpu.mem.i32;
    const read = (addr: number, n: number) => i32.slice(addr >>> 2, (addr >>> 2) + n);
    const T = batch.numTokens;
    const run = this.gpu.runner;
    let maxQueryCount = 0;
    for (let g = 0; g < this.inputs.seqInfo.length; g++) {
      const info = read(batch.seqInfoOf(g), batch.numSeqs * SEQ_INFO_INTS);
      const tables: number[] = [];
      for (let s = 0; s < batch.numSeqs; s++) {
        const r = s * SEQ_INFO_INTS;
        maxQueryCount = Math.max(maxQueryCount, info[r + 1]!);
        const blocks = Math.ceil(info[r + 2]! / this.blockSize);
        const table = read(info[r + 3]!, blocks);
        info[r + 3] = tables.length;
        tables.push(...table);
      }
      run.upload(this.inputs.slots[g]!, read(batch.slotsOf(g), T));
      run.upload(this.inputs.seqInfo[g]!, info);
      if (tables.length > 0) run.upload(this.inputs.tables[g]!, new Int32Array(tables));
    }
    run.upload(this.inputs.tokens, read(batch.tokens, T));
    run.upload(this.inputs.positions, read(batch.positions, T));
    // The hidden rows after the logit rows: the classifier's gather takes them together.
    if (batch.numLogits + batch.numHidden > 0) {
      const rows = new Int32Array(batch.numLogits + batch.numHidden);
      rows.set(read(batch.logitRows, batch.numLogits));
      rows.set(read(batch.hiddenRows, batch.numHidden), batch.numLogits);
      run.upload(this.inputs.logitRows, rows);
    }
    return maxQueryCount;
  }
}

/**
 * Copy weight matrices that multiply one input (q, k and v; gate and up) to the GPU, each run of
 * consecutive matrices of one type as one stack (one dispatch for all of them; see
 * GpuWeightMatrix), in order; `biases`: each matrix's bias vector (one value per row), added by
 * the product.
 */
export function uploadStacks(gpu: WebGpuBackend, host: HostMatrix[], label: string, biases: Float32Array[] | null): GpuWeightMatrix[] {
  const sameType = (i: number, j: number) => {
    const [a, b] = [host[i]!, host[j]!];
    return a.kind === b.kind && (a.kind === "f32" || a.type === (b as { type: number }).type) && a.cols === b.cols;
  };
  const out: GpuWeightMatrix[] = [];
  for (let first = 0; first < host.length; ) {
    let end = first + 1;
    while (end < host.length && end - first < MAX_STACK && sameType(first, end)) end++;
    const members = host.slice(first, end);
    const stack = members.map((m) => m.rows);
    const rows = stack.reduce((a, b) => a + b, 0);
    const name = members.length === 1 ? label : `${label}[${first}..${end})`;
    const bias = biases && concatArrays(biases.slice(first, end));
    const extras = { stack, ...(bias !== null ? { bias } : {}) };
    const h = members[0]!;
    if (h.kind === "f32") {
      out.push(gpu.uploadF32Matrix(concatArrays(members.map((m) => (m as { values: Float32Array }).values)), rows, h.cols, name, extras));
    } else {
      const bytes = concatArrays(members.map((m) => (m as { bytes: Uint8Array }).bytes));
      out.push(gpu.uploadGgmlMatrix(bytes, h.type, rows, h.cols, name, extras));
    }
    first = end;
  }
  return out;
}

/** A fused matrix (phi3's attn_qkv: q, k, v rows; ffn_up: gate, up rows) as one stack of those row ranges. */
export function uploadFused(gpu: WebGpuBackend, host: HostMatrix, label: string, rows: readonly number[]): GpuWeightMatrix {
  return host.kind === "f32"
    ? gpu.uploadF32Matrix(host.values, host.rows, host.cols, label, { stack: rows })
    : gpu.uploadGgmlMatrix(host.bytes, host.type, host.rows, host.cols, label, { stack: rows });
}

