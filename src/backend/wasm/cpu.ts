/**
 * The CPU backend: the operations a forward pass needs, each a call into a WebAssembly kernel on
 * the shared linear memory. This is the one place that knows how a weight is encoded and how
 * work is split across threads: a kernel with enough work is cut into ranges of rows or
 * attention items, every output element computed by exactly one thread in a fixed order, so the
 * results are the same bits at any thread count. Small kernels run on the caller alone.
 */
import { attentionScratchBytes, GGML_SEGMENT_INTS, MULTI_SEGMENT_INTS, type Kernels } from "./kernels.ts";
import { attentionScale, type AttentionScores } from "../../model/attention.ts";
import { SEQ_INFO_INTS } from "../../model/batch.ts";
import { ThreadPool, type ParallelCall } from "./thread-pool.ts";
import { instantiateKernels, kernelModule, LinearMemory } from "./wasm.ts";
import type { Numerics } from "../../model/config.ts";
import type { WeightMatrix } from "./weights.ts";
import { activationBlock, ggmlKernels, type ActivationFormat } from "./ggml-kernels.ts";
import { KV_TYPE_CODE, MAX_BLOCK_SIZE, type KVLayout } from "../../kv/kv-layout.ts";

type GGMLMatrix = Extract<WeightMatrix, { kind: "ggml" }>;

/**
 * A K-quant product's per-thread scratch: a 64-byte slot (a super-block's minimum sum), then
 * room to unpack one row for products of several tokens (kernels.unpackedRowBytes). F16 and
 * BF16 products use the same per-thread buffer for one row widened to f32 (halfRowScratchBytes).
 */
const SUPER_BLOCK_SLOT_BYTES = 64;
/**
 * Smallest row range a thread claims in a ggml product. Four rows (the default) of a 576-wide
 * Q8_0 matrix are ~0.2 us of work, less than claiming them and calling the kernel: SmolLM2-135M
 * Q8_0 decode on 2 threads went from 72 to 94-97 tokens/s with 32 (16: 89-95, 64: 94-98).
 */
const GGML_MIN_CHUNK_ROWS = 32;

/** Multiply-adds below which a product is not worth a dispatch (~10 µs of work on one core). */
const MIN_PARALLEL_MACS = 1 << 17;
/**
 * Key-dimension products below which attention runs on the caller alone. Lower than for matrix
 * products: decode attention is bound by memory latency (its K/V were evicted by the weight
 * stream), ~0.1 ms per layer at a 100-token context, so even short contexts gain from a split.
 */
const MIN_PARALLEL_ATTENTION = 1 << 13;

/**
 * Which RMSNorm of the forward pass: runq's compiled code computes the final norm (before the
 * classifier) differently from the layers' norms; the default kernels make no difference.
 */
export type NormSite = "layer" | "final";

/** One product of matmulSegments: out[t] = m · x[row + t] for t < T (out [T][m.rows]). */
export interface ProductSegment {
  out: number;
  m: WeightMatrix;
  row: number;
  T: number;
}

/** Products that share one input, prepared once (see matmulShared). */
export interface SharedInputProducts {
  parts: readonly { out: number; m: WeightMatrix }[];
  /** matmulF32Multi's segment table in linear memory, or null when a part is not f32. */
  table: number | null;
  /** Rows of the shared row space (each part padded to a multiple of 4). */
  rows: number;
}

/**
 * One memory of several (a model placed over several memories, see wasm-memories.ts): the
 * memory, the calling thread's kernel instance over it, the pool every memory shares, and the
 * memory's index in that pool.
 */
export interface MemorySlot {
  mem: LinearMemory;
  kernels: Kernels;
  pool: ThreadPool | null;
  index: number;
}

/** What reserveScratch sizes the scratch for (see there). */
export interface ScratchShape {
  maxTokens: number;
  maxWidth: number;
  group: number;
  /** Head width: pagedAttention's per-thread tile of K/V rows widened from an f16 or q8_0 cache. */
  headDim: number;
  runqContext: number;
  roundedActivations: boolean;
  /** Rows of activations one product quantizes: maxTokens, or maxTokens x the experts a token uses (absent: maxTokens). */
  activationRows?: number;
}

/** Alignment of every allocation (LinearMemory.alloc's default): each may waste up to this much. */
const ALIGN = 64;

/** The scratch buffers' sizes: shared activations, and the per-thread K-quant and attention scratch. */
function scratchSizes(kernels: Kernels, s: ScratchShape): { activations: number; superBlockPerThread: number; attentionPerThread: number } {
  const int8Bytes = kernels.actBytesPerToken(Math.ceil(s.maxWidth / 32) * 32);
  const unpacked = kernels.unpackedRowBytes(Math.ceil(s.maxWidth / 256) * 256);
  const widened = s.roundedActivations ? kernels.halfRowScratchBytes(s.maxWidth) : 0;
  return {
    activations: (s.activationRows ?? s.maxTokens) * Math.max(int8Bytes, s.roundedActivations ? 4 * s.maxWidth : 0),
    superBlockPerThread: Math.ceil(Math.max(SUPER_BLOCK_SLOT_BYTES + unpacked, widened) / 64) * 64,
    attentionPerThread: attentionScratchBytes(s.maxTokens * s.group, s.headDim),
  };
}

export class CpuBackend {
  readonly mem: LinearMemory;
  readonly kernels: Kernels;
  /** Null when running on the calling thread alone. */
  readonly pool: ThreadPool | null;
  /** Which of the pool's memories this backend's addresses are in. */
  readonly memoryIndex: number;
  /** Whether close() stops the pool (false when the pool belongs to a set of memories). */
  private readonly ownsPool: boolean;
  /** Scratch for int8-quantized activations: [maxTokens][maxWidth] int8 + scales. */
  private q8Values = 0;
  private q8Scales = 0;
  private q8Capacity = 0;
  /** Per-thread partial sums of the f32 matrix products (kernels.matmulScratchBytes() each). */
  readonly matmulScratch: number;
  readonly matmulScratchBytes: number;
  /** Per-thread attention scratch: a block of scores and (max, sum) per (query, head) row. */
  private attnScratch = 0;
  private attnScratchBytes = 0;
  private attnQueryRows = 0;
  /** Per-thread scores for runq attention, which softmaxes a whole context at once. */
  private runqScores = 0;
  private runqScoresCapacity = 0;
  /** int8 activation blocks of the ggml block types, for up to actTokens x actWidth values. */
  private actScratch = 0;
  private actTokens = 0;
  private actWidth = 0;
  /** Whether actScratch also holds maxTokens x maxWidth f32 (activations rounded for F16/BF16 products). */
  private actRounded = false;
  /** Per-thread scratch of the K-quant products (superBlockScratchBytes each). */
  private superBlockScratch = 0;
  private superBlockScratchBytes = SUPER_BLOCK_SLOT_BYTES;
  /** Which arithmetic the ops use; set once by the model this backend runs (see ModelConfig.numerics). */
  numerics: Numerics = "default";

  /**
   * A backend on a memory of its own with its own threads, or (`slot`) on one memory of a set
   * whose pool the set owns. A slot's half table must be built before its pool's workers start.
   */
  constructor(readonly threads = 1, slot?: MemorySlot) {
    if (slot === undefined) {
      this.mem = new LinearMemory();
      const module = kernelModule();
      this.kernels = instantiateKernels(this.mem.memory, module);
      // Before any worker starts: they read the same table in the shared memory.
      this.kernels.buildHalfTable();
      this.pool = threads > 1 ? new ThreadPool(threads, [this.mem.memory], module, [this.kernels]) : null;
      this.memoryIndex = 0;
      this.ownsPool = true;
    } else {
      this.mem = slot.mem;
      this.kernels = slot.kernels;
      this.pool = slot.pool;
      this.memoryIndex = slot.index;
      this.ownsPool = false;
    }
    this.matmulScratchBytes = this.kernels.matmulScratchBytes();
    this.matmulScratch = this.mem.alloc(this.matmulScratchBytes * threads);
  }

  /**
   * Reserve scratch for steps of up to maxTokens tokens: int8 activations up to maxWidth wide (and
   * f32 ones rounded to a 16-bit float, when `roundedActivations`: a model with F16 or BF16
   * matrices), and attention state for maxTokens queries times `group` query heads per kv head
   * (with a tile of `headDim`-wide K/V rows widened from an f16 or q8_0 cache).
   * Models with "runq" numerics also need `runqContext` (their seqLen) scores per thread; a
   * mixture of experts quantizes `activationRows` rows at once (every slot of a step).
   */
  reserveScratch(
    maxTokens: number, maxWidth: number, group: number, headDim: number, runqContext = 0, roundedActivations = false, activationRows = maxTokens,
  ): void {
    const sizes = scratchSizes(this.kernels, { maxTokens, maxWidth, group, headDim, runqContext, roundedActivations, activationRows });
    this.actTokens = activationRows;
    this.actWidth = maxWidth;
    this.actRounded = roundedActivations;
    this.actScratch = this.mem.alloc(sizes.activations);
    this.superBlockScratchBytes = sizes.superBlockPerThread;
    this.superBlockScratch = this.mem.alloc(this.superBlockScratchBytes * this.threads);
    this.q8Capacity = maxTokens * maxWidth;
    this.q8Values = this.mem.alloc(this.q8Capacity);
    this.q8Scales = this.mem.alloc(4 * this.q8Capacity);
    this.attnQueryRows = maxTokens * group;
    this.attnScratchBytes = sizes.attentionPerThread;
    this.attnScratch = this.mem.alloc(this.attnScratchBytes * this.threads);
    if (runqContext > 0) {
      this.runqScoresCapacity = runqContext;
      this.runqScores = this.mem.alloc(4 * runqContext * this.threads);
    }
  }

  /** Bytes (with alignment) that reserveScratch takes for `shape` on `threads` threads, and the matrix products' scratch. */
  static scratchBytes(kernels: Kernels, threads: number, shape: ScratchShape | null): number {
    const fixed = ALIGN + kernels.matmulScratchBytes() * threads;
    if (shape === null) return fixed;
    const s = scratchSizes(kernels, shape);
    return fixed + 6 * ALIGN + s.activations + threads * (s.superBlockPerThread + s.attentionPerThread + 4 * shape.runqContext) +
      5 * shape.maxTokens * shape.maxWidth;
  }

  /** out[t][0..m.rows) = m · x[t] for T tokens; x rows are m.cols wide, out rows m.rows wide. */
  matmul(out: number, x: number, m: WeightMatrix, T: number): void {
    const parallel = T * m.rows * m.cols >= MIN_PARALLEL_MACS;
    if (m.kind === "f32") {
      this.dispatch(this.matmulF32Call(out, x, m.addr, T, m.rows, m.cols), parallel);
      return;
    }
    if (m.kind === "ggml") {
      this.matmulGGML(out, x, m, T, parallel);
      return;
    }
    if (T * m.cols > this.q8Capacity) throw new Error(`q8 scratch too small for ${T} x ${m.cols}`);
    const runq = this.numerics === "runq";
    (runq ? this.kernels.quantizeQ8Runq : this.kernels.quantizeQ8)(this.q8Values, this.q8Scales, x, T, m.cols, m.groupSize);
    const args = [out, this.q8Values, this.q8Scales, m.q, m.s, T, m.cols, m.groupSize, m.rows, 0, m.rows];
    this.dispatch({ kernel: runq ? "matmulQ8Runq" : "matmulQ8", args, total: m.rows, granularity: 1 }, parallel);
  }

  /**
   * Describe products that read the same input (q, k, v; gate, up) so that matmulShared runs them
   * as one dispatch. Call once per layer at set-up; the table lives in linear memory.
   */
  prepareShared(parts: { out: number; m: WeightMatrix }[]): SharedInputProducts {
    const cols = parts[0]!.m.cols;
    if (parts.some((p) => p.m.cols !== cols)) throw new Error("prepareShared: products must share their input width");
    if (!parts.every((p) => p.m.kind === "f32")) return { parts, table: null, rows: 0 };
    const table = this.mem.alloc(4 * MULTI_SEGMENT_INTS * parts.length);
    let rows = 0;
    parts.forEach((p, i) => {
      const m = p.m as Extract<WeightMatrix, { kind: "f32" }>;
      this.mem.i32.set([m.addr, p.out, m.rows, m.rows, rows], (table >>> 2) + i * MULTI_SEGMENT_INTS);
      rows += Math.ceil(m.rows / 4) * 4;
    });
    return { parts, table, rows };
  }

  /** Run prepared products on x[T][cols]. */
  matmulShared(products: SharedInputProducts, x: number, T: number): void {
    if (products.table === null) {
      this.matmulSameInput(products.parts, x, T);
      return;
    }
    const cols = products.parts[0]!.m.cols;
    const args = [products.table, products.parts.length, x, T, cols, this.matmulScratch, 0, products.rows];
    const call: ParallelCall = { kernel: "matmulF32Multi", args, total: products.rows, granularity: 4, scratch: this.matmulScratchArg(5) };
    this.dispatch(call, T * products.rows * cols >= MIN_PARALLEL_MACS);
  }

  /**
   * Products of one input x[T][cols], without a prepared table: ggml parts read x rounded or
   * quantized once per activation format (the scratch holds the latest one); other parts each
   * quantize it, the same every time.
   */
  private matmulSameInput(parts: readonly { out: number; m: WeightMatrix }[], x: number, T: number): void {
    let prepared: ActivationFormat | null = null;
    for (const p of parts) {
      if (p.m.kind === "ggml") {
        const format = ggmlKernels(p.m.type).activations;
        this.matmulGGML(p.out, x, p.m, T, T * p.m.rows * p.m.cols >= MIN_PARALLEL_MACS, prepared === format);
        prepared = format;
      } else {
        this.matmul(p.out, x, p.m, T);
      }
    }
  }

  /**
   * Products of several matrices over row ranges of one input x[rows][cols] (a mixture of experts'
   * chosen experts, each over its slots): segment i is out_i[t] = m_i · x[row_i + t] for T_i rows.
   * Where every matrix is a block type read through one activation format, x is quantized once and
   * one dispatch computes every segment (assembly/ggml/segments.ts; `table` holds GGML_SEGMENT_INTS
   * i32 per segment); otherwise one product per segment. The same bits either way, and as each
   * product alone.
   */
  matmulSegments(table: number, segments: readonly ProductSegment[], x: number, rows: number): void {
    if (segments.length === 0) return;
    const cols = segments[0]!.m.cols;
    const formats = new Set(segments.map((s) => (s.m.kind === "ggml" ? ggmlKernels(s.m.type).activations : "none")));
    const format = formats.size === 1 ? [...formats][0]! : "none";
    if (format !== "q8x32" && format !== "q8x256") {
      for (const s of segments) this.matmul(s.out, x + 4 * s.row * cols, s.m, s.T);
      return;
    }
    if (rows > this.actTokens || cols > this.actWidth) throw new Error(`activation scratch too small for ${rows} x ${cols}`);
    const block = activationBlock(format);
    const act = this.activationBlocks(rows, cols, block);
    this.kernels.quantizeActQ8(act.xq, act.xd, act.xs, x, rows, cols, block);
    const i32 = this.mem.i32;
    let total = 0;
    let macs = 0;
    segments.forEach((s, i) => {
      const m = s.m as GGMLMatrix;
      // A segment's first token's blocks: quantizeActQ8's layout (xs: 16-value sums for 256-value blocks, block sums for 32).
      const xq = act.xq + s.row * cols;
      const xd = act.xd + 4 * s.row * (cols / block);
      const xs = act.xs + 4 * s.row * (cols / (block === 32 ? 32 : 16));
      i32.set([m.type, m.addr, m.rows, s.T, xq, xd, xs, s.out, total], (table >>> 2) + i * GGML_SEGMENT_INTS);
      total += m.rows;
      macs += s.T * m.rows * cols;
    });
    const args = [table, segments.length, cols, this.superBlockScratch, 0, total];
    const call: ParallelCall = { kernel: "matmulSegments", args, total, granularity: 1, minChunk: GGML_MIN_CHUNK_ROWS, scratch: { arg: 3, stride: this.superBlockScratchBytes } };
    this.dispatch(call, macs >= MIN_PARALLEL_MACS);
  }

  /** out[t] = row tokens[t] of the embedding table. */
  embed(out: number, table: WeightMatrix, tokens: number, T: number): void {
    if (table.kind === "f32") this.kernels.embedF32(out, table.addr, tokens, T, table.rows, table.cols);
    else if (table.kind === "ggml") this.embedGGML(out, table, tokens, T);
    else this.kernels.embedQ8(out, table.q, table.s, tokens, T, table.cols, table.groupSize);
  }

  rmsnorm(out: number, x: number, weight: number, T: number, n: number, eps: number, site: NormSite = "layer"): void {
    if (this.numerics === "runq") this.kernels.rmsnormRunq(out, x, weight, T, n, eps, site === "final" ? 1 : 0);
    else this.kernels.rmsnorm(out, x, weight, T, n, eps);
  }

  /** out[t] = LayerNorm(x[t]) * w + b for T rows of n (an encoder's norms: kernels.layerNorm); out may alias x. */
  layerNorm(out: number, x: number, weight: number, bias: number, T: number, n: number, eps: number): void {
    this.kernels.layerNorm(out, x, weight, bias, T, n, eps);
  }

  /**
   * An encoder's attention: every token of each of `numSeqs` sequences (token offsets at
   * seqStarts, i32 numSeqs + 1) attends to every token of its own, split by (sequence, head)
   * items, each computed by one thread; `scores` holds `scoresStride` bytes per thread.
   * `pairs` (the sum of the sequences' squared lengths) sizes the work.
   */
  encoderAttention(
    out: number, q: number, k: number, v: number, seqStarts: number, numSeqs: number, nHeads: number, headDim: number,
    scale: number, scores: number, scoresStride: number, pairs: number,
  ): void {
    const items = numSeqs * nHeads;
    const stride = nHeads * headDim;
    const args = [out, q, k, v, seqStarts, nHeads, nHeads, headDim, stride, stride, scale, scores, 0, items];
    const call: ParallelCall = { kernel: "encoderAttention", args, total: items, granularity: 1, minChunk: 1, scratch: { arg: 11, stride: scoresStride } };
    this.dispatch(call, items > 1 && pairs * nHeads * headDim >= MIN_PARALLEL_ATTENTION);
  }

  /** gate[t][i] = silu(gate[t][i]) * up[t][i] for T rows of n. */
  swiglu(gate: number, up: number, T: number, n: number): void {
    // runq splits each row into vector blocks and a scalar tail, so it needs the row length.
    if (this.numerics === "runq") this.kernels.swigluRunq(gate, up, T, n);
    else this.kernels.swiglu(gate, up, T * n);
  }

  /** gate[t][i] = gpt-oss's clamped SwiGLU of gate[t][i] and up[t][i] (kernels.swigluOai), T rows of n. */
  swigluOai(gate: number, up: number, T: number, n: number): void {
    this.kernels.swigluOai(gate, up, T * n);
  }

  /** gate[t][i] = gelu(gate[t][i]) * up[t][i] for T rows of n (GeGLU, tanh GELU). */
  geglu(gate: number, up: number, T: number, n: number): void {
    this.kernels.geglu(gate, up, T * n);
  }

  /** x[i] *= s for n values. */
  scale(x: number, s: number, n: number): void {
    this.kernels.scaleInPlace(x, s, n);
  }

  add(x: number, y: number, n: number): void {
    this.kernels.addInPlace(x, y, n);
  }

  /** x[t] += bias for T rows of n. */
  addRows(x: number, bias: number, T: number, n: number): void {
    this.kernels.addRows(x, bias, T, n);
  }

  gatherRows(out: number, src: number, rows: number, R: number, n: number): void {
    this.kernels.gatherRows(out, src, rows, R, n);
  }

  /** out[t] = the weighted sum of k rows of src (kernels.weightedRowSum), T rows of n. */
  weightedRowSum(out: number, src: number, rows: number, weights: number, T: number, k: number, n: number): void {
    this.kernels.weightedRowSum(out, src, rows, weights, T, k, n);
  }

  /**
   * Paged attention for every new token of the step; split by (sequence, kv head) items.
   * `contextTokens` (the sum of the sequences' context lengths) sizes the work. The cache's
   * element type and row bytes come from its KVLayout (f32 unless given); `scores`: the scale of
   * q · k and the sliding window (0: none) of this layer (AttentionScores).
   */
  attention(
    out: number, q: number, kLayer: number, vLayer: number, seqInfo: number, numSeqs: number,
    nHeads: number, nKvHeads: number, headDim: number, blockSize: number, numBlocks: number, qStride: number,
    contextTokens: number, layout: Pick<KVLayout, "type" | "rowBytes"> = { type: "f32", rowBytes: 4 * headDim },
    scores: AttentionScores = { scale: attentionScale(headDim), window: 0 },
  ): void {
    const items = numSeqs * nKvHeads;
    const parallel = items > 1 && contextTokens * nHeads * headDim >= MIN_PARALLEL_ATTENTION;
    if (this.numerics === "runq") {
      if (layout.type !== "f32") throw new Error(`runq attention reads an f32 KV cache, not ${layout.type}`);
      if (scores.window !== 0 || scores.scale !== attentionScale(headDim) || (scores.sinks ?? 0) !== 0) {
        throw new Error("runq attention has no sliding window or sinks and scores by 1/sqrt(headDim)");
      }
      // Two-pass softmax over the whole context: scores for every position of the longest sequence.
      const i32 = this.mem.i32;
      for (let s = 0; s < numSeqs; s++) {
        const contextLen = i32[(seqInfo >>> 2) + s * SEQ_INFO_INTS + 2]!;
        if (contextLen > this.runqScoresCapacity) {
          throw new Error(`runq attention scratch holds ${this.runqScoresCapacity} positions, a sequence has ${contextLen}`);
        }
      }
      const args = [out, q, kLayer, vLayer, seqInfo, nHeads, nKvHeads, headDim, blockSize, numBlocks, qStride, this.runqScores, 0, items];
      const stride = 4 * this.runqScoresCapacity;
      this.dispatch({ kernel: "pagedAttentionRunq", args, total: items, granularity: 1, minChunk: 1, scratch: { arg: 11, stride } }, parallel);
      return;
    }
    if (blockSize > MAX_BLOCK_SIZE) throw new Error(`block size ${blockSize} exceeds ${MAX_BLOCK_SIZE}`);
    if (this.attnQueryRows === 0) throw new Error("attention scratch not reserved");
    const args = [
      out, q, kLayer, vLayer, seqInfo, nHeads, nKvHeads, headDim, blockSize, numBlocks, qStride, KV_TYPE_CODE[layout.type], layout.rowBytes,
      scores.scale, scores.window, scores.sinks ?? 0, this.attnScratch, 0, items,
    ];
    this.dispatch({ kernel: "pagedAttention", args, total: items, granularity: 1, minChunk: 1, scratch: { arg: 16, stride: this.attnScratchBytes } }, parallel);
  }

  /**
   * The call computing out[t][0..rows) = W · x[t] for a packed f32 W[rows][cols] at `w`: output
   * rows `rows` apart, split on 4-row panels, each thread with its own partial-sum scratch.
   */
  matmulF32Call(out: number, x: number, w: number, T: number, rows: number, cols: number): ParallelCall {
    const args = [out, x, w, T, rows, cols, rows, this.matmulScratch, 0, rows];
    return { kernel: "matmulF32", args, total: rows, granularity: 4, scratch: this.matmulScratchArg(7) };
  }

  /** The matrix products' per-thread scratch as argument `arg` of a parallel call. */
  private matmulScratchArg(arg: number): { arg: number; stride: number } {
    return { arg, stride: this.matmulScratchBytes };
  }

  /**
   * A product on a ggml type (src/backend/wasm/ggml-kernels.ts): 16-bit floats read x rounded to
   * their type, block types read x quantized to int8 blocks; `prepared` says the scratch holds
   * that already (shared inputs).
   */
  private matmulGGML(out: number, x: number, m: GGMLMatrix, T: number, parallel: boolean, prepared = false): void {
    const k = ggmlKernels(m.type);
    if (T > this.actTokens || m.cols > this.actWidth) throw new Error(`activation scratch too small for ${T} x ${m.cols}`);
    if (k.activations === "f16" || k.activations === "bf16") {
      if (!this.actRounded) throw new Error("activation scratch reserved without room for rounded activations");
      if (!prepared) this.kernels.roundActivations(this.actScratch, x, T * m.cols, k.activations === "bf16" ? 1 : 0);
      const args = [out, this.actScratch, m.addr, T, m.cols, m.rows, this.superBlockScratch, 0, m.rows];
      const scratch = { arg: 6, stride: this.superBlockScratchBytes };
      this.dispatch({ kernel: k.matmul, args, total: m.rows, granularity: 1, minChunk: GGML_MIN_CHUNK_ROWS, scratch }, parallel);
      return;
    }
    const block = activationBlock(k.activations);
    if (m.cols % block !== 0) throw new Error(`${k.name} rows of ${m.cols} are not whole blocks of ${block}`);
    const act = this.activationBlocks(T, m.cols, block);
    if (!prepared) this.kernels.quantizeActQ8(act.xq, act.xd, act.xs, x, T, m.cols, block);
    if (k.activations === "q8x32") {
      const args = [out, act.xq, act.xd, act.xs, m.addr, T, m.cols, m.rows, 0, m.rows];
      this.dispatch({ kernel: k.matmul, args, total: m.rows, granularity: 1, minChunk: GGML_MIN_CHUNK_ROWS }, parallel);
      return;
    }
    const args = [out, act.xq, act.xd, act.xs, m.addr, T, m.cols, m.rows, this.superBlockScratch, 0, m.rows];
    this.dispatch({ kernel: k.matmul, args, total: m.rows, granularity: 1, minChunk: GGML_MIN_CHUNK_ROWS, scratch: { arg: 8, stride: this.superBlockScratchBytes } }, parallel);
  }

  /**
   * Where quantizeActQ8 puts T tokens of cols values in blocks of `block`: int8 values, then
   * block scales, then 16-value sums (the 32-value layout is the larger, and sizes the scratch).
   */
  private activationBlocks(T: number, cols: number, block: number): { xq: number; xd: number; xs: number } {
    const xq = this.actScratch;
    const xd = xq + T * cols;
    return { xq, xd, xs: xd + 4 * T * (cols / block) };
  }

  private embedGGML(out: number, table: GGMLMatrix, tokens: number, T: number): void {
    const fn = this.kernels[ggmlKernels(table.type).embed] as (out: number, w: number, tokens: number, T: number, cols: number) => void;
    fn(out, table.addr, tokens, T, table.cols);
  }

  /** Stop the worker threads (those of a set of memories are the set's to stop). */
  close(): void {
    if (this.ownsPool) this.pool?.close();
  }

  private dispatch(call: ParallelCall, parallel: boolean): void {
    if (this.pool !== null && parallel) {
      this.pool.run(call, this.memoryIndex);
      return;
    }
    const fn = this.kernels[call.kernel] as (...a: number[]) => void;
    fn(...call.args);
  }
}
