/// <reference types="@webgpu/types" />
/**
 * The WebGPU backend: the operations of a forward pass as WGSL dispatches on GPU buffers. Weights,
 * the KV arena and block tables live in GPU buffers; a matrix larger than one storage binding
 * (128 MiB under bun-webgpu's default limits) is split into row ranges, each its own buffer and
 * dispatch, which changes no output element's reduction order (a row never straddles parts).
 *
 * Ops mirror CpuBackend's, with GPUBuffers where CpuBackend takes linear-memory addresses. Every
 * op only records a dispatch; results are visible after flush() / a read-back (GpuRunner).
 */
import { DeviceError } from "../../errors.ts";
import type { GpuContext } from "./device.ts";
import { attentionScale, type AttentionScores } from "../../model/attention.ts";
import { params, GpuRunner, type GpuKernel } from "./runner.ts";
import { ATTENTION_HALF_WGSL, ATTENTION_WGSL, attentionGrid, attentionWgsl, MAX_HEAD_DIM } from "./wgsl-attention.ts";
import {
  ADD_LAYER_NORM_WGSL, ADD_RMSNORM_HALF_WGSL, ADD_RMSNORM_WGSL, ADD_WGSL, elementGrid, GATHER_ROWS_WGSL, GEGLU_HALF_WGSL, GEGLU_WGSL, GELU_WGSL,
  HALF_ACTIVATIONS_WGSL, LAYER_NORM_WGSL,
  RMSNORM_HALF_WGSL, RMSNORM_WGSL, ROPE_WRITE_KV_WGSL, ropeWriteKVWgsl, SCALE_WGSL, SWIGLU_HALF_WGSL, SWIGLU_OAI_HALF_WGSL, SWIGLU_OAI_WGSL,
  SWIGLU_WGSL, type GatedActivation,
} from "./wgsl-elementwise.ts";
import type { KVLayout, KVType } from "../../kv/kv-layout.ts";
import { HALF_BLOCK } from "./wgsl-half.ts";
import { GGML_SHADERS, MATMUL_F32_WGSL, matmulGgmlWgsl, matmulGrid } from "./wgsl-matmul.ts";
import { hasHalfProduct, matmulHalfWgsl } from "./wgsl-matmul-f16.ts";
import { expertGroupsBound, expertProductWgsl, GROUP_WGSL, GROUP_WORDS, MIX_WGSL, ROUTE_WGSL } from "./wgsl-experts.ts";
import type { ExpertsConfig } from "../../model/config.ts";

/** One row range of a weight matrix in its own buffer. */
export interface GpuMatrixPart {
  buffer: GPUBuffer;
  firstRow: number;
  rows: number;
}

/**
 * A weight matrix W[rows][cols] on the GPU: f32 row-major, or ggml blocks as the GGUF file has
 * them (`type` the ggml type code, `rowBytes` per row). It may be a stack of up to three matrices
 * of one type that multiply the same input (q, k and v; gate and up): `stack` holds each
 * member's rows, in order ([rows] for a single matrix), and one dispatch computes them all.
 */
export interface GpuWeightMatrix {
  kind: "f32" | "ggml";
  type: number;
  rows: number;
  cols: number;
  rowBytes: number;
  parts: GpuMatrixPart[];
  stack: readonly number[];
  /** A bias per row (of the whole stack), added to the product: qwen2's q, k and v. */
  bias: GPUBuffer | null;
}

/** What a matrix upload may add: the stack it is (see GpuWeightMatrix) and a bias per row. */
export interface MatrixExtras {
  stack?: readonly number[];
  bias?: Float32Array;
}

/**
 * The matrices of `count` experts, [count][rows][cols] (rows per expert), as one matrix of count
 * x rows rows split into parts of whole experts; a bias per row of each expert when it has one.
 */
export interface GpuExpertStack {
  matrix: GpuWeightMatrix;
  count: number;
  rows: number;
  bias: GPUBuffer | null;
}

/**
 * The GPU buffers a mixture of experts routes a step through, for up to maxTokens tokens: the
 * router's logits [T][count], each token's chosen experts and weights [T][used], the slot groups
 * (wgsl-experts.ts), each slot's token and each token's slots, and the per-expert counters.
 */
export interface ExpertRouting {
  logits: GPUBuffer;
  chosen: GPUBuffer;
  weights: GPUBuffer;
  groups: GPUBuffer;
  slotToken: GPUBuffer;
  tokenSlots: GPUBuffer;
  counts: GPUBuffer;
}

/** What a split matrix's parts hold whole: `rows` rows (an expert's, or one), named for errors. */
interface PartUnit {
  rows: number;
  label: string;
}

/** Most matrices one product dispatch stacks (its outputs are bindings). */
export const MAX_STACK = 3;

/**
 * The activations of one or more products: T rows of `cols` f32 values in `x`, as they are when
 * the ProductInput is made (make a new one after x is written). With f16 products, the first
 * product that needs them converts them once into the backend's f16 scratch (wgsl-matmul-f16.ts).
 */
export class ProductInput {
  constructor(readonly x: GPUBuffer, readonly T: number, readonly cols: number) {}
}

/** How a backend computes the products of quantized weights. */
export interface BackendOptions {
  /**
   * f16 arithmetic (wgsl-matmul-f16.ts); needs an adapter with `shader-f16`. Default: on where
   * the adapter offers it.
   */
  halfProducts?: boolean;
}

/** Kernel names and their sources; ggml products are added per type. */
const FIXED_KERNELS = {
  add: ADD_WGSL,
  swiglu: SWIGLU_WGSL,
  geglu: GEGLU_WGSL,
  swigluOai: SWIGLU_OAI_WGSL,
  scale: SCALE_WGSL,
  rmsnorm: RMSNORM_WGSL,
  addRmsnorm: ADD_RMSNORM_WGSL,
  ropeWriteKV: ROPE_WRITE_KV_WGSL,
  ropeWriteKVF16: ropeWriteKVWgsl("f16"),
  ropeWriteKVQ8_0: ropeWriteKVWgsl("q8_0"),
  gatherRows: GATHER_ROWS_WGSL,
  attention: ATTENTION_WGSL,
  attentionF16: attentionWgsl(false, "f16"),
  attentionQ8_0: attentionWgsl(false, "q8_0"),
  matmulF32: MATMUL_F32_WGSL,
  layerNorm: LAYER_NORM_WGSL,
  addLayerNorm: ADD_LAYER_NORM_WGSL,
  gelu: GELU_WGSL,
} as const;
type FixedKernel = keyof typeof FIXED_KERNELS;

/** Kernels that write activations in the f16 form of wgsl-half.ts (compiled with f16 products only). */
const HALF_KERNELS = {
  halfActivations: HALF_ACTIVATIONS_WGSL,
  rmsnormHalf: RMSNORM_HALF_WGSL,
  addRmsnormHalf: ADD_RMSNORM_HALF_WGSL,
  swigluHalf: SWIGLU_HALF_WGSL,
  gegluHalf: GEGLU_HALF_WGSL,
  swigluOaiHalf: SWIGLU_OAI_HALF_WGSL,
  attentionHalf: ATTENTION_HALF_WGSL,
  attentionHalfF16: attentionWgsl(true, "f16"),
  attentionHalfQ8_0: attentionWgsl(true, "q8_0"),
} as const;

/** The suffix of the kernels that read or write a KV arena of each type. */
const KV_KERNEL_SUFFIX = { f32: "", f16: "F16", q8_0: "Q8_0" } as const satisfies Record<KVType, string>;
type HalfKernel = keyof typeof HALF_KERNELS;

export class WebGpuBackend {
  readonly runner: GpuRunner;
  private readonly fixed = new Map<FixedKernel, GpuKernel>();
  private readonly ggml = new Map<number, GpuKernel>();
  /** The f16 products per ggml type, and the kernels writing the f16 form (none unless halfProducts). */
  private readonly halfMatmuls = new Map<number, GpuKernel>();
  private readonly halfFixed = new Map<HalfKernel, GpuKernel>();
  /** The f16 form of `halfInput`'s activations and their block scales; grown on demand. */
  private halfScratch: { values: GPUBuffer; scales: GPUBuffer; capacity: number } | null = null;
  private halfInput: ProductInput | null = null;
  /** The mixture-of-experts kernels (route, group, mix) and expert products by weight type (0: f32), compiled by prepareExperts. */
  private readonly expertKernels = new Map<string, GpuKernel>();
  /** Small buffers bound as a product's unused outputs (a stack of fewer than three) and missing bias. */
  private readonly placeholders: [GPUBuffer, GPUBuffer, GPUBuffer];
  /** Largest part of a split matrix, in bytes: one storage binding (tests lower it to force splits). */
  matrixPartBytes: number;

  private constructor(
    readonly gpu: GpuContext,
    /** Products of quantized weights run in f16 arithmetic (F32, F16 and BF16 weights stay f32). */
    readonly halfProducts: boolean,
  ) {
    this.runner = new GpuRunner(gpu.device);
    this.matrixPartBytes = this.runner.maxBinding;
    this.placeholders = [this.runner.buffer(4, "unused_output"), this.runner.buffer(4, "unused_output"), this.runner.buffer(4, "no_bias")];
  }

  /**
   * Compile every kernel up front, so a WGSL error surfaces at start-up as a DeviceError. f16
   * products asked for on an adapter without `shader-f16` are a DeviceError too.
   */
  static async create(gpu: GpuContext, opts: BackendOptions = {}): Promise<WebGpuBackend> {
    const halfProducts = opts.halfProducts ?? gpu.adapter.shaderF16;
    if (halfProducts && !gpu.adapter.shaderF16) throw new DeviceError(`webgpu: ${gpu.adapter.name} does not offer shader-f16 for f16 products`);
    const backend = new WebGpuBackend(gpu, halfProducts);
    for (const [name, code] of Object.entries(FIXED_KERNELS) as [FixedKernel, string][]) {
      backend.fixed.set(name, await backend.runner.compile(name, code));
    }
    for (const type of GGML_SHADERS.keys()) {
      backend.ggml.set(type, await backend.runner.compile(`matmulGgml${type}`, matmulGgmlWgsl(type)));
      if (halfProducts && hasHalfProduct(type)) backend.halfMatmuls.set(type, await backend.runner.compile(`matmulHalf${type}`, matmulHalfWgsl(type)));
    }
    if (halfProducts) {
      for (const [name, code] of Object.entries(HALF_KERNELS) as [HalfKernel, string][]) {
        backend.halfFixed.set(name, await backend.runner.compile(name, code));
      }
    }
    return backend;
  }

  /**
   * Compile the kernels of a mixture of experts whose expert matrices have ggml types `types` (0:
   * F32): routing, grouping, mixing and the expert products (f16 ones too with f16 products).
   * Kept apart from create() so that dense models do not pay for them at start-up.
   */
  async prepareExperts(types: readonly number[]): Promise<void> {
    for (const [name, code] of [["route", ROUTE_WGSL], ["group", GROUP_WGSL], ["mix", MIX_WGSL]] as const) {
      this.expertKernels.set(name, await this.runner.compile(`experts.${name}`, code));
    }
    for (const type of types) {
      if (type !== 0 && !GGML_SHADERS.has(type)) throw new DeviceError(`webgpu: ggml type ${type} has no WGSL product`);
      const half = this.halfProducts && hasHalfProduct(type);
      const name = `expertProduct${type}${half ? "Half" : ""}`;
      this.expertKernels.set(name, await this.runner.compile(name, expertProductWgsl(type, half)));
    }
  }

  /** The arithmetic of the products, for the device line. */
  get productArithmetic(): string {
    return this.halfProducts ? "quantized products in f16" : "products in f32";
  }

  // ------------------------------------------------------------------------------------------
  // Buffers
  // ------------------------------------------------------------------------------------------

  /** A zeroed f32 buffer of n elements. */
  f32Buffer(n: number, label: string): GPUBuffer {
    return this.runner.buffer(4 * n, label);
  }

  /** A buffer holding `data` (f32 or i32 values). */
  bufferFrom(data: Float32Array | Int32Array, label: string): GPUBuffer {
    const buf = this.runner.buffer(data.byteLength, label);
    this.runner.upload(buf, data);
    return buf;
  }

  /**
   * Upload an f32 matrix [rows][cols] (row-major), split into parts that fit one binding; extras:
   * the rows of the matrices it stacks (see GpuWeightMatrix), and a bias per row.
   */
  uploadF32Matrix(values: Float32Array, rows: number, cols: number, label: string, extras: MatrixExtras = {}, unit?: PartUnit): GpuWeightMatrix {
    if (values.length !== rows * cols) throw new Error(`${label}: ${values.length} values for [${rows}][${cols}]`);
    const rowBytes = 4 * cols;
    const parts = this.splitRows(rows, rowBytes, label, (first, count, buf) => {
      this.runner.upload(buf, values.subarray(first * cols, (first + count) * cols));
    }, unit);
    return { kind: "f32", type: 0, rows, cols, rowBytes, parts, ...this.extras(extras, rows, label) };
  }

  /** Upload ggml blocks as stored in the file: `rows` rows of rowBytes each (extras as for uploadF32Matrix). */
  uploadGgmlMatrix(bytes: Uint8Array, type: number, rows: number, cols: number, label: string, extras: MatrixExtras = {}, unit?: PartUnit): GpuWeightMatrix {
    const shader = GGML_SHADERS.get(type);
    if (shader === undefined) throw new DeviceError(`webgpu: ${label}: ggml type ${type} has no WGSL product`);
    if (cols % shader.blockValues !== 0) throw new Error(`${label}: ${cols} columns is not a whole number of ${shader.name} blocks`);
    const rowBytes = (cols / shader.blockValues) * shader.blockBytes;
    if (bytes.byteLength !== rows * rowBytes) throw new Error(`${label}: ${bytes.byteLength} bytes for ${rows} rows of ${rowBytes}`);
    const parts = this.splitRows(rows, rowBytes, label, (first, count, buf) => {
      this.runner.upload(buf, bytes.subarray(first * rowBytes, (first + count) * rowBytes));
    }, unit);
    return { kind: "ggml", type, rows, cols, rowBytes, parts, ...this.extras(extras, rows, label) };
  }

  /**
   * Upload `count` experts' matrices, [count][rows][cols] as one f32 array or as ggml blocks, split
   * into parts of whole experts; `bias`: [count][rows] when the experts have biases.
   */
  uploadExperts(data: Float32Array | Uint8Array, type: number, count: number, rows: number, cols: number, label: string, bias?: Float32Array): GpuExpertStack {
    const unit = { rows, label };
    const matrix = data instanceof Float32Array
      ? this.uploadF32Matrix(data, count * rows, cols, label, {}, unit)
      : this.uploadGgmlMatrix(data, type, count * rows, cols, label, {}, unit);
    if (bias !== undefined && bias.length !== count * rows) throw new Error(`${label}: ${bias.length} biases for ${count} x ${rows} rows`);
    return { matrix, count, rows, bias: bias === undefined ? null : this.bufferFrom(bias, `${label}.bias`) };
  }

  /** A matrix's stack (checked: at most MAX_STACK members whose rows add up) and bias buffer. */
  private extras(extras: MatrixExtras, rows: number, label: string): { stack: readonly number[]; bias: GPUBuffer | null } {
    const stack = extras.stack ?? [rows];
    if (stack.length < 1 || stack.length > MAX_STACK || stack.reduce((a, b) => a + b, 0) !== rows) {
      throw new Error(`${label}: a stack of [${stack.join(", ")}] rows for a matrix of ${rows}`);
    }
    if (extras.bias !== undefined && extras.bias.length !== rows) throw new Error(`${label}: ${extras.bias.length} biases for ${rows} rows`);
    return { stack, bias: extras.bias === undefined ? null : this.bufferFrom(extras.bias, `${label}.bias`) };
  }

  /** Parts of `rows` rows of rowBytes each, each part whole `unit`s of rows (an expert's) and at most one binding. */
  private splitRows(rows: number, rowBytes: number, label: string, fill: (first: number, count: number, buf: GPUBuffer) => void, unit: PartUnit = { rows: 1, label: "row" }): GpuMatrixPart[] {
    const rowsPerPart = Math.floor(Math.min(this.matrixPartBytes, this.runner.maxBinding) / (rowBytes * unit.rows)) * unit.rows;
    if (rowsPerPart === 0) throw new DeviceError(`webgpu: ${label}: one ${unit.label} (${rowBytes * unit.rows} bytes) exceeds a storage binding`);
    const parts: GpuMatrixPart[] = [];
    for (let first = 0; first < rows; first += rowsPerPart) {
      const count = Math.min(rowsPerPart, rows - first);
      const buffer = this.runner.buffer(count * rowBytes, `${label}[${first}..${first + count})`);
      fill(first, count, buffer);
      parts.push({ buffer, firstRow: first, rows: count });
    }
    return parts;
  }

  // ------------------------------------------------------------------------------------------
  // Ops (CpuBackend's, on buffers)
  // ------------------------------------------------------------------------------------------

  /** The activations of the products that follow: T rows of cols values in x. */
  productInput(x: GPUBuffer, T: number, cols: number): ProductInput {
    return new ProductInput(x, T, cols);
  }

  /**
   * out[t] = m · x[t] for the input's T tokens, out [T][m.rows]; for a stack, one output per
   * member, [T][its rows], all in one dispatch per part.
   */
  matmul(out: GPUBuffer | readonly GPUBuffer[], input: ProductInput, m: GpuWeightMatrix): void {
    const outs = Array.isArray(out) ? out : [out];
    if (outs.length !== m.stack.length) throw new Error(`matmul: ${outs.length} outputs for a stack of ${m.stack.length}`);
    if (input.cols !== m.cols) throw new Error(`matmul: ${input.cols} activations for ${m.cols} columns`);
    const split1 = outs.length > 1 ? m.stack[0]! : m.rows;
    const split2 = outs.length > 2 ? split1 + m.stack[1]! : m.rows;
    // Unused outputs and a missing bias are bound to placeholders (WebGPU forbids two writable bindings of one buffer).
    const [out2, out3] = [outs[1] ?? this.placeholders[0], outs[2] ?? this.placeholders[1]];
    const bias = m.bias ?? this.placeholders[2];
    const T = input.T;
    const half = m.kind === "ggml" ? this.halfMatmuls.get(m.type) : undefined;
    const kernel = half ?? (m.kind === "f32" ? this.kernel("matmulF32") : this.ggml.get(m.type));
    if (kernel === undefined) throw new DeviceError(`webgpu: ggml type ${m.type} has no WGSL product`);
    const x = half !== undefined ? this.halfCopy(input) : null;
    for (const part of m.parts) {
      const p = params(part.rows, m.cols, split1, part.firstRow, m.rowBytes, T, split1, split2, m.rows, m.bias === null ? 0 : 1);
      const buffers = x !== null ? [part.buffer, x.values, outs[0]!, x.scales, out2, out3, bias] : [part.buffer, input.x, outs[0]!, out2, out3, bias];
      this.runner.dispatch(kernel, p, buffers, matmulGrid(part.rows, T));
    }
  }

  /** matmul() over a list of stacks (uploadStacks in llama-gpu.ts), the outputs in the order of their members. */
  matmulStacks(outs: readonly GPUBuffer[], input: ProductInput, stacks: readonly GpuWeightMatrix[]): void {
    let at = 0;
    for (const m of stacks) {
      this.matmul(outs.slice(at, at + m.stack.length), input, m);
      at += m.stack.length;
    }
    if (at !== outs.length) throw new Error(`matmulStacks: ${outs.length} outputs for ${at} matrices`);
  }

  /**
   * The scratch holding `input` in f16 form: converted by one dispatch unless the kernel that
   * computed it wrote that form too, or it is the input converted last (q, k and v, or gate and
   * up, share one conversion).
   */
  private halfCopy(input: ProductInput): { values: GPUBuffer; scales: GPUBuffer } {
    const n = input.T * input.cols;
    if (input.cols % HALF_BLOCK !== 0) throw new Error(`f16 products: ${input.cols} columns is not a whole number of ${HALF_BLOCK}-value blocks`);
    const scratch = this.halfScratchFor(n);
    if (this.halfInput !== input) {
      const blocks = n / HALF_BLOCK;
      this.runner.dispatch(this.halfKernel("halfActivations"), params(blocks), [input.x, scratch.values, scratch.scales], elementGrid(blocks));
      this.halfInput = input;
    }
    return scratch;
  }

  /**
   * With f16 products, size the f16 scratch now for a model's largest product input (values), so
   * that it never grows in the middle of a run: a grown scratch is a new buffer, and every bind
   * group of the steps before would be made again for it.
   */
  reserveHalfScratch(values: number): void {
    if (this.halfProducts) this.halfScratchFor(values);
  }

  /** The f16 scratch, grown to hold n values (forgetting what it held). */
  private halfScratchFor(n: number): { values: GPUBuffer; scales: GPUBuffer } {
    if (this.halfScratch !== null && this.halfScratch.capacity >= n) return this.halfScratch;
    // Recorded dispatches may read the old buffers: submit them before the buffers go.
    this.runner.flush();
    this.halfScratch?.values.destroy();
    this.halfScratch?.scales.destroy();
    const capacity = Math.max(n, Math.min(2 * (this.halfScratch?.capacity ?? 0), Math.floor(this.runner.maxBinding / 2)));
    this.halfScratch = {
      values: this.runner.buffer(2 * capacity, "half_activations"),
      scales: this.runner.buffer((4 * capacity) / HALF_BLOCK, "half_scales"),
      capacity,
    };
    this.halfInput = null;
    return this.halfScratch;
  }

  /**
   * Dispatch `f32Kernel`, or with f16 products its `halfKernel` twin, which also writes its output
   * in f16 form: the products that read `output` then need no conversion of their own. `fusable`:
   * the twin can write this shape (whole 32-value blocks, each written by one workgroup or invocation).
   */
  private producingInput(
    output: ProductInput, fusable: boolean, f32Kernel: FixedKernel, halfKernel: HalfKernel, f32Params: Uint32Array, halfParams: Uint32Array,
    buffers: GPUBuffer[], f32Grid: [number, number, number], halfGrid: [number, number, number],
  ): ProductInput {
    if (!this.halfProducts || !fusable) {
      this.runner.dispatch(this.kernel(f32Kernel), f32Params, buffers, f32Grid);
      return output;
    }
    const scratch = this.halfScratchFor(output.T * output.cols);
    this.runner.dispatch(this.halfKernel(halfKernel), halfParams, [...buffers, scratch.values, scratch.scales], halfGrid);
    this.halfInput = output;
    return output;
  }

  /** out[t] = row tokens[t] of an f32 table (tokens: i32 buffer). */
  embed(out: GPUBuffer, table: GpuWeightMatrix, tokens: GPUBuffer, T: number): void {
    this.gatherRows(out, table, tokens, T, table.cols);
  }

  /** out[r] = src row rows[r], for a matrix (split or not) or a plain [*][n] activation buffer. */
  gatherRows(out: GPUBuffer, src: GpuWeightMatrix | GPUBuffer, rows: GPUBuffer, R: number, n: number): void {
    const parts = "parts" in src ? src.parts : [{ buffer: src, firstRow: 0, rows: 0x7fffffff }];
    if ("parts" in src && src.kind !== "f32") throw new DeviceError("webgpu: embedding look-up of ggml tables is not implemented");
    for (const part of parts) {
      this.runner.dispatch(this.kernel("gatherRows"), params(R, n, part.firstRow, part.rows), [out, part.buffer, rows], elementGrid(R * n));
    }
  }

  /** out[t] = weight * x[t] / rms(x[t]); out must not be x (WebGPU forbids aliasing a writable binding). */
  rmsnorm(out: GPUBuffer, x: GPUBuffer, weight: GPUBuffer, T: number, n: number, eps: number): void {
    if (out === x) throw new Error("webgpu rmsnorm: out and x must be different buffers");
    this.runner.dispatch(this.kernel("rmsnorm"), params(n, { f32: eps }), [out, x, weight], [T, 1, 1]);
  }

  /** rmsnorm() whose output is the input of the products that follow (written in f16 form too with f16 products). */
  rmsnormInput(out: GPUBuffer, x: GPUBuffer, weight: GPUBuffer, T: number, n: number, eps: number): ProductInput {
    if (out === x) throw new Error("webgpu rmsnorm: out and x must be different buffers");
    const p = params(n, { f32: eps });
    return this.producingInput(new ProductInput(out, T, n), n % HALF_BLOCK === 0, "rmsnorm", "rmsnormHalf", p, p, [out, x, weight], [T, 1, 1], [T, 1, 1]);
  }

  /**
   * x[t] += y[t], then out[t] = weight * x[t] / rms(x[t]): add() then rmsnorm() in one dispatch, the
   * same bits; out is the input of the products that follow.
   */
  addRmsnorm(out: GPUBuffer, x: GPUBuffer, y: GPUBuffer, weight: GPUBuffer, T: number, n: number, eps: number): ProductInput {
    if (out === x || out === y) throw new Error("webgpu addRmsnorm: out must differ from x and y");
    const p = params(n, { f32: eps });
    return this.producingInput(new ProductInput(out, T, n), n % HALF_BLOCK === 0, "addRmsnorm", "addRmsnormHalf", p, p, [out, x, y, weight], [T, 1, 1], [T, 1, 1]);
  }

  /** gate[t][i] = silu(gate[t][i]) * up[t][i] for T rows of n; gate is the input of the products that follow. */
  swiglu(gate: GPUBuffer, up: GPUBuffer, T: number, n: number): ProductInput {
    return this.gated("silu", gate, up, T, n);
  }

  /** gate[t][i] = act(gate[t][i]) * up[t][i] (SwiGLU, GeGLU with the tanh GELU, or gpt-oss's clamped SwiGLU); gate is the input of the products that follow. */
  gated(act: GatedActivation, gate: GPUBuffer, up: GPUBuffer, T: number, n: number): ProductInput {
    const blocks = (T * n) / HALF_BLOCK;
    const kernels = { silu: ["swiglu", "swigluHalf"], gelu: ["geglu", "gegluHalf"], "silu-oai": ["swigluOai", "swigluOaiHalf"] } as const;
    const [f32Kernel, halfKernel] = kernels[act];
    return this.producingInput(
      new ProductInput(gate, T, n), n % HALF_BLOCK === 0, f32Kernel, halfKernel, params(T * n), params(blocks), [gate, up], elementGrid(T * n), elementGrid(blocks),
    );
  }

  /** x[t] = LayerNorm(x[t]) * weight + bias for T rows of n, in place; x is the input of the products that follow. */
  layerNorm(x: GPUBuffer, weight: GPUBuffer, bias: GPUBuffer, T: number, n: number, eps: number): ProductInput {
    this.runner.dispatch(this.kernel("layerNorm"), params(n, { f32: eps }), [x, weight, bias], [T, 1, 1]);
    return new ProductInput(x, T, n);
  }

  /** x[t] += y[t], then layerNorm(): an encoder's post-norm residual in one dispatch; y must not be x. */
  addLayerNorm(x: GPUBuffer, y: GPUBuffer, weight: GPUBuffer, bias: GPUBuffer, T: number, n: number, eps: number): ProductInput {
    if (x === y) throw new Error("webgpu addLayerNorm: x and y must be different buffers");
    this.runner.dispatch(this.kernel("addLayerNorm"), params(n, { f32: eps }), [x, weight, bias, y], [T, 1, 1]);
    return new ProductInput(x, T, n);
  }

  /** x[i] = gelu(x[i]) (the tanh GELU of gated("gelu")) for T rows of n; x is the input of the products that follow. */
  gelu(x: GPUBuffer, T: number, n: number): ProductInput {
    this.runner.dispatch(this.kernel("gelu"), params(T * n), [x], elementGrid(T * n));
    return new ProductInput(x, T, n);
  }

  /** x[i] *= s for n values. */
  scale(x: GPUBuffer, s: number, n: number): void {
    this.runner.dispatch(this.kernel("scale"), params(n, { f32: s }), [x], elementGrid(n));
  }

  add(x: GPUBuffer, y: GPUBuffer, n: number): void {
    this.runner.dispatch(this.kernel("add"), params(n), [x, y], elementGrid(n));
  }

  /**
   * RoPE on q ([T][qStride], in place) and k ([T][kvStride]), and k rotated and v written into
   * their slots of one layer's arena, in one dispatch (positions and slots: i32 buffers; ropeTable:
   * cos then sin, each [seqLen][ropeDim / 2]).
   */
  ropeWriteKV(
    style: "interleaved" | "neox",
    b: { q: GPUBuffer; k: GPUBuffer; v: GPUBuffer; kArena: GPUBuffer; vArena: GPUBuffer; positions: GPUBuffer; slots: GPUBuffer; ropeTable: GPUBuffer },
    s: { T: number; nHeads: number; nKvHeads: number; headDim: number; ropeDim: number; qStride: number; kvStride: number; blockSize: number; numBlocks: number; seqLen: number },
    kv: Pick<KVLayout, "type" | "rowBytes"> = { type: "f32", rowBytes: 4 * s.headDim },
  ): void {
    const half = s.ropeDim / 2;
    const [pairStride, partner] = style === "neox" ? [1, half] : [2, 1];
    const p = params(
      s.T, s.nHeads, s.nKvHeads, s.headDim, s.ropeDim, s.qStride, s.kvStride, pairStride, partner, s.blockSize, s.numBlocks, s.seqLen * half, kv.rowBytes / 4,
    );
    // An f16 or q8_0 arena is written a row per invocation (wgsl-kv-types.ts).
    const kvInvocations = kv.type === "f32" ? s.nKvHeads * (half + s.headDim - s.ropeDim) : s.nKvHeads;
    const invocations = s.T * (s.nHeads * half + kvInvocations);
    const kernel = this.kernel(`ropeWriteKV${KV_KERNEL_SUFFIX[kv.type]}`);
    this.runner.dispatch(kernel, p, [b.q, b.k, b.v, b.kArena, b.vArena, b.positions, b.slots, b.ropeTable], elementGrid(invocations));
  }

  /**
   * Paged attention for every new token of the step. seqInfo holds numSeqs records of
   * (queryStart, queryCount, contextLen, blockTable) with blockTable an element index into
   * `tables`; maxQueryCount is the largest queryCount (the grid's height). `out` ([T][qStride]) is
   * the input of the products that follow. `scores`: the layer's scale and sliding window (0: none);
   * `sinks`: nHeads f32 sink logits (gpt-oss), or none.
   */
  attention(
    out: GPUBuffer, q: GPUBuffer, kLayer: GPUBuffer, vLayer: GPUBuffer, seqInfo: GPUBuffer, tables: GPUBuffer,
    numSeqs: number, maxQueryCount: number, nHeads: number, nKvHeads: number, headDim: number,
    blockSize: number, numBlocks: number, qStride: number, T: number,
    kv: Pick<KVLayout, "type" | "rowBytes"> = { type: "f32", rowBytes: 4 * headDim },
    scores: AttentionScores = { scale: attentionScale(headDim), window: 0 },
    sinks: GPUBuffer | null = null,
  ): ProductInput {
    if (headDim > MAX_HEAD_DIM) throw new DeviceError(`webgpu: head dimension ${headDim} exceeds ${MAX_HEAD_DIM}`);
    // A row's start: an element index in an f32 arena, a byte offset in an f16 or q8_0 one.
    const rowStride = kv.type === "f32" ? headDim : kv.rowBytes;
    const p = params(nHeads, nKvHeads, headDim, blockSize, numBlocks, qStride, rowStride, { f32: scores.scale }, scores.window, sinks === null ? 0 : 1);
    const grid = attentionGrid(numSeqs, nHeads, maxQueryCount);
    const output = new ProductInput(out, T, qStride);
    const suffix = KV_KERNEL_SUFFIX[kv.type];
    const buffers = [out, q, kLayer, vLayer, seqInfo, tables];
    // The f16-form kernels: heads of whole 32-value blocks (no block straddles two heads'
    // workgroups), and no sinks (they read none; see wgsl-attention.ts).
    if (this.halfProducts && headDim % HALF_BLOCK === 0 && sinks === null) {
      return this.producingInput(output, true, `attention${suffix}`, `attentionHalf${suffix}`, p, p, buffers, grid, grid);
    }
    this.runner.dispatch(this.kernel(`attention${suffix}`), p, [...buffers, sinks ?? this.placeholders[2]], grid);
    return output;
  }

  /**
   * Choose each of T tokens' experts from their router logits (routing.logits, [T][count]) and
   * group the step's slots by expert (wgsl-experts.ts): chosen, weights, groups, slotToken and
   * tokenSlots of `routing`. A router's bias is added by its product (the matrix's bias).
   */
  routeExperts(routing: ExpertRouting, e: ExpertsConfig, T: number): void {
    const p = params(T, e.count, e.used, e.gating === "softmax-of-chosen" ? 1 : 0, e.normalizeWeights ? 1 : 0);
    this.runner.dispatch(this.expertKernel("route"), p, [routing.logits, routing.chosen, routing.weights], elementGrid(T));
    const g = [routing.chosen, routing.groups, routing.slotToken, routing.tokenSlots, routing.counts];
    this.runner.dispatch(this.expertKernel("group"), params(T, e.used, e.count), g, [1, 1, 1]);
  }

  /**
   * out[slot] = the slot's expert's matrix · its input, for the T tokens' T x used slots (out
   * [slots][rows]): the input rows are the slots' own (bySlot: the down product, over the gate's
   * output) or their tokens' (gate and up, over the normed input); each expert's bias added when
   * the stack has one.
   */
  expertMatmul(out: GPUBuffer, input: ProductInput, stack: GpuExpertStack, routing: ExpertRouting, e: ExpertsConfig, T: number, bySlot: boolean): void {
    const m = stack.matrix;
    if (input.cols !== m.cols) throw new Error(`expertMatmul: ${input.cols} activations for ${m.cols} columns`);
    const half = m.kind === "ggml" && this.halfProducts && hasHalfProduct(m.type);
    const kernel = this.expertKernel(`expertProduct${m.kind === "f32" ? 0 : m.type}${half ? "Half" : ""}`);
    const x = half ? this.halfCopy(input) : null;
    const bias = stack.bias ?? this.placeholders[2];
    const rowGroups = matmulGrid(stack.rows, 1);
    const grid: [number, number, number] = [rowGroups[0], expertGroupsBound(T, e.used, e.count), rowGroups[2]];
    for (const part of m.parts) {
      const p = params(stack.rows, m.cols, m.rowBytes, part.firstRow / stack.rows, part.rows / stack.rows, bySlot ? 1 : 0, stack.bias === null ? 0 : 1);
      // Bindings from 1: weights, activations, out, (f16 scales,) groups, slotToken, bias.
      const activations = x !== null ? [part.buffer, x.values, out, x.scales] : [part.buffer, input.x, out];
      this.runner.dispatch(kernel, p, [...activations, routing.groups, routing.slotToken, bias], grid);
    }
  }

  /** The routing buffers of a mixture of experts for steps of up to maxTokens tokens. */
  expertRoutingBuffers(maxTokens: number, e: ExpertsConfig, label: string): ExpertRouting {
    const slots = maxTokens * e.used;
    const words = (n: number, name: string) => this.runner.buffer(4 * n, `${label}.${name}`);
    return {
      logits: words(maxTokens * e.count, "logits"), chosen: words(slots, "chosen"), weights: words(slots, "weights"),
      groups: words(1 + GROUP_WORDS * expertGroupsBound(maxTokens, e.used, e.count), "groups"),
      slotToken: words(slots, "slot_token"), tokenSlots: words(slots, "token_slots"), counts: words(e.count, "counts"),
    };
  }

  /** out[t] = the weighted sum of token t's experts' rows of `down` ([slots][n]), in rank order. */
  mixExperts(out: GPUBuffer, down: GPUBuffer, routing: ExpertRouting, T: number, used: number, n: number): void {
    this.runner.dispatch(this.expertKernel("mix"), params(T, used, n), [out, down, routing.tokenSlots, routing.weights], elementGrid(T * n));
  }

  /** Submit recorded ops. */
  flush(): void {
    this.runner.flush();
  }

  close(): void {
    this.runner.destroy();
    this.gpu.device.destroy();
  }

  private halfKernel(name: HalfKernel): GpuKernel {
    const k = this.halfFixed.get(name);
    if (k === undefined) throw new Error(`kernel ${name} not compiled (f16 products are off)`);
    return k;
  }

  private expertKernel(name: string): GpuKernel {
    const k = this.expertKernels.get(name);
    if (k === undefined) throw new Error(`kernel ${name} not compiled: call prepareExperts with the model's expert types first`);
    return k;
  }

  private kernel(name: FixedKernel): GpuKernel {
    const k = this.fixed.get(name);
    if (k === undefined) throw new Error(`kernel ${name} not compiled`);
    return k;
  }
}
