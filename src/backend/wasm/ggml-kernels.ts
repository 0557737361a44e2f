/**
 * Which kernels compute on each ggml tensor type, by type code (GGML_TYPES in model/gguf.ts).
 * Types whose values are 16-bit floats take f32 activations rounded to their own type; every
 * block type takes the int8 activations of quantizeActQ8 (assembly/ggml/common.ts) and does
 * integer dots: each as llama.cpp computes it.
 */
import { ModelFormatError } from "../../errors.ts";
import { GGML_TYPES } from "../../model/gguf.ts";
import type { ParallelKernel } from "./thread-protocol.ts";
import type { KernelName } from "./kernels.ts";

/**
 * What a product reads: f32 activations rounded to IEEE half or bfloat16 (roundActivations, kept
 * as f32), or quantizeActQ8's int8 blocks of 32 values (the 32-value types) or 256 (the
 * K-quants, whose super-blocks then sum in integers).
 */
export type ActivationFormat = "f16" | "bf16" | "q8x32" | "q8x256";

/** Whether the kernels of ggml type `code` read activations rounded to a 16-bit float (F16, BF16). */
export function readsRoundedActivations(code: number): boolean {
  const format = TABLE.get(code)?.activations;
  return format === "f16" || format === "bf16";
}

export interface GGMLKernels {
  readonly name: string;
  readonly activations: ActivationFormat;
  readonly matmul: ParallelKernel;
  readonly embed: KernelName;
}

/** Values per activation block of a quantized format. */
export function activationBlock(format: "q8x32" | "q8x256"): number {
  return format === "q8x32" ? 32 : 256;
}

const TABLE: ReadonlyMap<number, GGMLKernels> = new Map(
  (
    [
      [1, "F16", "f16"], [30, "BF16", "bf16"],
      [8, "Q8_0", "q8x32"], [2, "Q4_0", "q8x32"], [3, "Q4_1", "q8x32"], [6, "Q5_0", "q8x32"], [7, "Q5_1", "q8x32"], [39, "MXFP4", "q8x32"],
      [10, "Q2_K", "q8x256"], [11, "Q3_K", "q8x256"], [12, "Q4_K", "q8x256"], [13, "Q5_K", "q8x256"], [14, "Q6_K", "q8x256"],
    ] as const
  ).map(([code, name, activations]) => [code, { name, activations, matmul: `matmul${name}`, embed: `embed${name}` }]),
);

/** The kernels of ggml type `code`; the file is named in the error for a type without them. */
export function ggmlKernels(code: number, file = "model"): GGMLKernels {
  const k = TABLE.get(code);
  if (k === undefined) throw new ModelFormatError(file, `tensor type ${GGML_TYPES.get(code)?.name ?? code} has no kernels`);
  return k;
}
