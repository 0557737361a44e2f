/**
 * The CPU backend: the operations a forward pass needs, each a call into a WebAssembly kernel on
 * the shared linear memory. This is the one place that knows how a weight is encoded and how
 * work is split across threads: a kernel with enough work is cut into ranges of rows or
 * attention items, every output element computed by exactly one thread in a fixed order.
 */
import type { Kernels } from "./kernels.ts";
import { instantiateKernels, LinearMemory } from "./wasm.ts";
import type { WeightMatrix } from "../model/weights.ts";

export class CpuBackend {
  readonly mem: LinearMemory;
  readonly kernels: Kernels;
  /** Scratch for int8-quantized activations: [maxTokens][maxWidth] int8 + scales. */
  private q8Values = 0;
  private q8Scales = 0;
  private q8Capacity = 0;
  /** Per-thread attention scratch (one block of scores). */
  private attnScratch = 0;
  private attnScratchCapacity = 0;

  constructor() {
    this.mem = new LinearMemory();
    this.kernels = instantiateKernels(this.mem.memory);
  }

  /** Reserve scratch sized for a model and a step size; call once, after the weights are placed. */
  reserveScratch(maxTokens: number, maxWidth: number, blockSize: number): void {
    this.q8Capacity = maxTokens * maxWidth;
    this.q8Values = this.mem.alloc(this.q8Capacity);
    this.q8Scales = this.mem.alloc(4 * this.q8Capacity);
    this.attnScratchCapacity = blockSize;
    this.attnScratch = this.mem.alloc(4 * blockSize);
  }

  /** out[t][0..m.rows) = m · x[t] for T tokens; x rows are m.cols wide, out rows m.rows wide. */
  matmul(out: number, x: number, m: WeightMatrix, T: number): void {
    if (m.kind === "f32") {
      this.kernels.matmulF32(out, x, m.addr, T, m.rows, m.cols, m.rows, 0, m.rows);
      return;
    }
    if (T * m.cols > this.q8Capacity) throw new Error(`q8 scratch too small for ${T} x ${m.cols}`);
    this.kernels.quantizeQ8(this.q8Values, this.q8Scales, x, T, m.cols, m.groupSize);
    this.kernels.matmulQ8(out, this.q8Values, this.q8Scales, m.q, m.s, T, m.cols, m.groupSize, m.rows, 0, m.rows);
  }

  /** out[t] = row tokens[t] of the embedding table. */
  embed(out: number, table: WeightMatrix, tokens: number, T: number): void {
    if (table.kind === "f32") this.kernels.embedF32(out, table.addr, tokens, T, table.rows, table.cols);
    else this.kernels.embedQ8(out, table.q, table.s, tokens, T, table.cols, table.groupSize);
  }

  rmsnorm(out: number, x: number, weight: number, T: number, n: number, eps: number): void {
    this.kernels.rmsnorm(out, x, weight, T, n, eps);
  }

  swiglu(gate: number, up: number, n: number): void {
    this.kernels.swiglu(gate, up, n);
  }

  add(x: number, y: number, n: number): void {
    this.kernels.addInPlace(x, y, n);
  }

  gatherRows(out: number, src: number, rows: number, R: number, n: number): void {
    this.kernels.gatherRows(out, src, rows, R, n);
  }

  attention(
    out: number, q: number, kLayer: number, vLayer: number, seqInfo: number, numSeqs: number,
    nHeads: number, nKvHeads: number, headDim: number, blockSize: number, qStride: number,
  ): void {
    if (blockSize > this.attnScratchCapacity) throw new Error(`attention scratch too small for block size ${blockSize}`);
    this.kernels.pagedAttention(
      out, q, kLayer, vLayer, seqInfo, nHeads, nKvHeads, headDim, blockSize, qStride,
      this.attnScratch, 0, numSeqs * nKvHeads,
    );
  }
}
