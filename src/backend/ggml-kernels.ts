/**
 * The kernels for each ggml tensor type, by type code: which activation format its products
 * read, and the matrix-product and embedding kernels. CpuBackend looks types up here and nowhere
 * else, so a new type is one row in GGML_KERNELS (plus its activation format, if new).
 *
 * Invariant: a type's matmul kernel reads activations in exactly its `activation` format, and
 * the format's quantizer is deterministic, so quantizing an input once and sharing it across
 * products (matmulShared) gives the same bits as quantizing it per product.
 */
import type { GGMLEmbedKernel, GGMLMatmulKernel, GGMLQuantizeKernel, Kernels } from "./kernels.ts";
import type { ParallelKernel } from "./thread-protocol.ts";
import { PagellmError } from "../errors.ts";
import { GGML_TYPES } from "../model/gguf.ts";

/** How activations are given to a type's products: f32 as they are, or quantized in blocks. */
export type ActivationFormat = "f32" | "q8_0" | "q8_1" | "q8_K";

export interface ActivationFormatInfo {
  /** Kernel quantizing x[T][cols] f32 into this format; null for f32 (used in place). */
  quantizer: KernelOf<GGMLQuantizeKernel> | null;
  /** Bytes of one quantized row of `cols` values (0 for f32: no scratch needed). */
  rowBytes(cols: number): number;
  /** Values per block: `cols` must be a multiple of it. */
  blockSize: number;
}

/** Names of the kernels with a given signature. */
type KernelOf<F> = { [K in keyof Kernels]: Kernels[K] extends F ? K : never }[keyof Kernels];

/** Formats of the quantized activations; layouts in assembly/ggml/common.ts. */
export const ACTIVATION_FORMATS: Partial<Record<ActivationFormat, ActivationFormatInfo>> = {
  f32: { quantizer: null, rowBytes: () => 0, blockSize: 1 },
  q8_0: { quantizer: "quantizeActQ8_0", rowBytes: (cols) => (cols / 32) * 52, blockSize: 32 },
  q8_1: { quantizer: "quantizeActQ8_1", rowBytes: (cols) => (cols / 32) * 40, blockSize: 32 },
};

export interface GGMLKernelSet {
  activation: ActivationFormat;
  /** (out, xAct, w, T, cols, outStride, rowStart, rowEnd), split by rows across threads. */
  matmul: ParallelKernel & KernelOf<GGMLMatmulKernel>;
  /** (out, w, tokens, T, cols). */
  embed: KernelOf<GGMLEmbedKernel>;
}

/** By ggml type code (GGML_TYPES in src/model/gguf.ts). F32 tensors are WeightMatrix kind "f32". */
export const GGML_KERNELS: ReadonlyMap<number, GGMLKernelSet> = new Map<number, GGMLKernelSet>([
  [1, { activation: "f32", matmul: "matmulF16", embed: "embedF16" }],
  [30, { activation: "f32", matmul: "matmulBF16", embed: "embedBF16" }],
  [8, { activation: "q8_0", matmul: "matmulQ8_0", embed: "embedQ8_0" }],
  [2, { activation: "q8_0", matmul: "matmulQ4_0", embed: "embedQ4_0" }],
  [3, { activation: "q8_1", matmul: "matmulQ4_1", embed: "embedQ4_1" }],
  [6, { activation: "q8_0", matmul: "matmulQ5_0", embed: "embedQ5_0" }],
  [7, { activation: "q8_1", matmul: "matmulQ5_1", embed: "embedQ5_1" }],
]);

/** A tensor type no kernel computes on. */
export class UnsupportedTensorTypeError extends PagellmError {
  override readonly exitCode = 2;
  constructor(readonly type: number) {
    super(`tensor type ${GGML_TYPES.get(type)?.name ?? `#${type}`} is not supported`);
  }
}

export function ggmlKernels(type: number): GGMLKernelSet {
  const set = GGML_KERNELS.get(type);
  if (set === undefined) throw new UnsupportedTensorTypeError(type);
  return set;
}

export function activationFormat(format: ActivationFormat): ActivationFormatInfo {
  const info = ACTIVATION_FORMATS[format];
  if (info === undefined) throw new Error(`activation format ${format} has no quantizer`);
  return info;
}

/** Bytes a step of `maxTokens` rows of up to `maxWidth` values needs in the widest quantized format. */
export function activationScratchBytes(maxTokens: number, maxWidth: number): number {
  let widest = 0;
  for (const info of Object.values(ACTIVATION_FORMATS)) {
    const cols = Math.ceil(maxWidth / info.blockSize) * info.blockSize;
    widest = Math.max(widest, info.rowBytes(cols));
  }
  return maxTokens * widest;
}
