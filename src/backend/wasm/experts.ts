/**
 * A mixture-of-experts feed-forward on the CPU backend (qwen3moe, gpt-oss), as llama.cpp's
 * build_moe_ffn computes it:
 *
 *   logits = router · x (+ bias)                       [T][experts]
 *   chosen = the `used` largest logits of each token, best first (route)
 *   weights from them (ExpertsConfig.gating, normalizeWeights)
 *   out[t] = sum over rank r of weight[t][r] * down_e(act(gate_e · x[t], up_e · x[t])),  e = chosen[t][r]
 *
 * A step's tokens are grouped by expert: every (token, rank) pair is a slot, slots are ordered by
 * expert, each token's input is gathered into its slots' rows, and each expert that some token
 * chose runs its three products once over its slots: its matrices are read once per step, and a
 * decode step reads only the chosen experts. Every chosen expert's gate and up products are one
 * dispatch, and their down products another (CpuBackend.matmulSegments: the slots' inputs
 * quantized once, the threads splitting all the experts' rows), not one per matrix. Each slot's rows are computed by the same kernels
 * whatever else shares the product (the products are batch-invariant), and weightedRowSum adds a
 * token's experts in rank order, so a token's output is the same bits alone, in any batch or
 * chunk, at any thread count.
 */
import type { CpuBackend, ProductSegment } from "./cpu.ts";
import { GGML_SEGMENT_INTS } from "./kernels.ts";
import type { ExpertsConfig, ModelConfig } from "../../model/config.ts";
import { expertMatrix, type ExpertWeights } from "./weights.ts";

/** Each token's chosen experts, best first, and their weights: [T][used] each. */
export interface Routing {
  experts: Int32Array;
  weights: Float32Array;
}

/** ggml's floor on the sum the chosen weights are divided by (the smallest normal half). */
const MIN_WEIGHT_SUM = 6.103515625e-5;

/**
 * Choose each of T tokens' experts from their router logits [T][count] (plus `bias` [count]) and
 * weight them (see ExpertsConfig). Ties go to the lower expert index. Weights are computed in
 * float64 and rounded to f32 once; they depend on the token's own logits alone.
 */
export function route(logits: Float32Array, bias: Float32Array | null, T: number, e: ExpertsConfig, out: Routing): void {
  const n = e.count;
  const k = e.used;
  const v = new Float64Array(n);
  const taken = new Uint8Array(n);
  const w = new Float64Array(k);
  for (let t = 0; t < T; t++) {
    for (let j = 0; j < n; j++) v[j] = bias === null ? logits[t * n + j]! : Math.fround(logits[t * n + j]! + bias[j]!);
    taken.fill(0);
    for (let r = 0; r < k; r++) {
      let best = -1;
      for (let j = 0; j < n; j++) if (taken[j] === 0 && (best < 0 || v[j]! > v[best]!)) best = j;
      taken[best] = 1;
      out.experts[t * k + r] = best;
    }
    const top = v[out.experts[t * k]!]!;
    for (let r = 0; r < k; r++) w[r] = Math.exp(v[out.experts[t * k + r]!]! - top);
    // "softmax": divided by the sum over every expert; "softmax-of-chosen": over the chosen ones.
    let total = 0;
    if (e.gating === "softmax") for (let j = 0; j < n; j++) total += Math.exp(v[j]! - top);
    else for (let r = 0; r < k; r++) total += w[r]!;
    for (let r = 0; r < k; r++) w[r] = w[r]! / total;
    if (e.normalizeWeights) {
      let sum = 0;
      for (let r = 0; r < k; r++) sum += w[r]!;
      for (let r = 0; r < k; r++) w[r] = w[r]! / Math.max(sum, MIN_WEIGHT_SUM);
    }
    for (let r = 0; r < k; r++) out.weights[t * k + r] = w[r]!;
  }
}

/** Linear-memory buffers of the experts for steps of up to maxTokens tokens (see ExpertFeedForward). */
interface ExpertBuffers {
  logits: number; // f32 [T][count]
  gathered: number; // f32 [T*used][dim]: each slot's token input, slots grouped by expert
  gate: number; // f32 [T*used][width], then the activation's output
  up: number; // f32 [T*used][width]
  down: number; // f32 [T*used][dim]
  slotToken: number; // i32 [T*used]: the token of each slot
  tokenSlots: number; // i32 [T][used]: the slot of each token's rank-r expert
  weights: number; // f32 [T][used]
  segments: number; // i32 [2 x count][GGML_SEGMENT_INTS]: matmulSegments' table
}

export class ExpertFeedForward {
  private readonly buf: ExpertBuffers;
  private readonly e: ExpertsConfig;
  private readonly routing: Routing;
  /** Slots per expert in this step, and where each expert's slots start. */
  private readonly counts: Int32Array;
  private readonly starts: Int32Array;

  constructor(
    private readonly config: ModelConfig,
    private readonly ops: CpuBackend,
    readonly maxTokens: number,
  ) {
    const e = config.experts;
    if (e === undefined) throw new Error("ExpertFeedForward: the model has no experts");
    this.e = e;
    const slots = maxTokens * e.used;
    // f32 and i32 buffers alike: n 4-byte words.
    const words = (n: number) => ops.mem.alloc(4 * n);
    this.buf = {
      logits: words(maxTokens * e.count), gathered: words(slots * config.dim), gate: words(slots * e.hiddenDim), up: words(slots * e.hiddenDim),
      down: words(slots * config.dim), slotToken: words(slots), tokenSlots: words(slots), weights: words(slots),
      segments: words(2 * e.count * GGML_SEGMENT_INTS),
    };
    this.routing = { experts: new Int32Array(slots), weights: new Float32Array(slots) };
    this.counts = new Int32Array(e.count);
    this.starts = new Int32Array(e.count);
  }

  /** Bytes the buffers take for steps of maxTokens tokens (with each allocation's alignment). */
  static bufferBytes(c: ModelConfig, maxTokens: number): number {
    const e = c.experts;
    if (e === undefined) return 0;
    const slots = maxTokens * e.used;
    return 4 * (maxTokens * e.count + slots * (2 * c.dim + 2 * e.hiddenDim + 3) + 2 * e.count * GGML_SEGMENT_INTS) + 9 * 64;
  }

  /** out[t] = the mixture of x[t]'s experts (x, out: [T][dim]). */
  forward(out: number, x: number, w: ExpertWeights, T: number): void {
    const { ops, buf, e } = this;
    const dim = this.config.dim;
    const width = e.hiddenDim;
    if (T > this.maxTokens) throw new Error("ExpertFeedForward: step exceeds the buffers");

    // ---- route: each token's experts and weights
    ops.matmul(buf.logits, x, w.router, T);
    const mem = ops.mem;
    const logits = mem.f32.subarray(buf.logits >>> 2, (buf.logits >>> 2) + T * e.count);
    const bias = w.routerBias === null ? null : mem.f32.subarray(w.routerBias >>> 2, (w.routerBias >>> 2) + e.count);
    route(logits, bias, T, e, this.routing);
    this.groupSlots(T);

    // ---- each chosen expert once, over its slots: gate and up, (biases), activation, down
    const slots = T * e.used;
    ops.gatherRows(buf.gathered, x, buf.slotToken, slots, dim);
    ops.matmulSegments(buf.segments, this.segments((ex, s, n) => [
      { out: buf.gate + 4 * s * width, m: expertMatrix(w.gate, ex), row: s, T: n },
      { out: buf.up + 4 * s * width, m: expertMatrix(w.up, ex), row: s, T: n },
    ]), buf.gathered, slots);
    if (w.biases !== null) {
      const b = w.biases;
      this.forChosen((ex, s, n) => {
        ops.addRows(buf.gate + 4 * s * width, b.gate + 4 * ex * width, n, width);
        ops.addRows(buf.up + 4 * s * width, b.up + 4 * ex * width, n, width);
      });
    }
    if (e.activation === "swiglu-oai") ops.swigluOai(buf.gate, buf.up, slots, width);
    else ops.swiglu(buf.gate, buf.up, slots, width);
    ops.matmulSegments(buf.segments, this.segments((ex, s, n) => [
      { out: buf.down + 4 * s * dim, m: expertMatrix(w.down, ex), row: s, T: n },
    ]), buf.gate, slots);
    if (w.biases !== null) {
      const b = w.biases;
      this.forChosen((ex, s, n) => ops.addRows(buf.down + 4 * s * dim, b.down + 4 * ex * dim, n, dim));
    }

    // ---- each token's experts, weighted, in rank order
    ops.weightedRowSum(out, buf.down, buf.tokenSlots, buf.weights, T, e.used, dim);
  }

  /** f(expert, its first slot, its slots) for every expert some token of the step chose, in expert order. */
  private forChosen(f: (ex: number, first: number, n: number) => void): void {
    for (let ex = 0; ex < this.e.count; ex++) if (this.counts[ex]! > 0) f(ex, this.starts[ex]!, this.counts[ex]!);
  }

  /** The products of every chosen expert, `of` giving each one's, in expert order. */
  private segments(of: (ex: number, first: number, n: number) => ProductSegment[]): ProductSegment[] {
    const out: ProductSegment[] = [];
    this.forChosen((ex, s, n) => out.push(...of(ex, s, n)));
    return out;
  }

  /**
   * Order the step's T x used slots by expert (a counting sort, tokens in order within an expert)
   * and write the slot tables and weights into linear memory.
   */
  private groupSlots(T: number): void {
    const { e, buf, routing, counts, starts } = this;
    const k = e.used;
    const i32 = this.ops.mem.i32;
    counts.fill(0);
    for (let i = 0; i < T * k; i++) counts[routing.experts[i]!]!++;
    let at = 0;
    for (let ex = 0; ex < e.count; ex++) {
      starts[ex] = at;
      at += counts[ex]!;
    }
    const next = Int32Array.from(starts);
    for (let t = 0; t < T; t++) {
      for (let r = 0; r < k; r++) {
        const slot = next[routing.experts[t * k + r]!]!++;
        i32[(buf.slotToken >>> 2) + slot] = t;
        i32[(buf.tokenSlots >>> 2) + t * k + r] = slot;
      }
    }
    this.ops.mem.f32.set(routing.weights.subarray(0, T * k), buf.weights >>> 2);
  }
}
