/**
 * Which kernels compute on each ggml tensor type, by type code (GGML_TYPES in model/gguf.ts).
 * Types whose values are 16-bit floats take f32 activations; every block type takes the int8
 * activations of quantizeActQ8 (assembly/ggml/common.ts) and does integer dots, as llama.cpp.
 */
import { ModelFormatError } from "../errors.ts";
import { GGML_TYPES } from "../model/gguf.ts";
import type { ParallelKernel } from "./thread-protocol.ts";
import type { KernelName } from "./kernels.ts";

export interface GGMLKernels {
  readonly name: string;
  /** "f32": the product reads the f32 activations; "q8": quantizeActQ8's int8 blocks. */
  readonly activations: "f32" | "q8";
  readonly matmul: ParallelKernel;
  readonly embed: KernelName;
}

const TABLE: ReadonlyMap<number, GGMLKernels> = new Map(
  (
    [
      [1, "F16", "f32"], [30, "BF16", "f32"],
      [8, "Q8_0", "q8"], [2, "Q4_0", "q8"], [3, "Q4_1", "q8"], [6, "Q5_0", "q8"], [7, "Q5_1", "q8"],
      [10, "Q2_K", "q8"], [11, "Q3_K", "q8"], [12, "Q4_K", "q8"], [13, "Q5_K", "q8"], [14, "Q6_K", "q8"],
    ] as const
  ).map(([code, name, activations]) => [code, { name, activations, matmul: `matmul${name}`, embed: `embed${name}` }]),
);

/** The kernels of ggml type `code`; the file is named in the error for a type without them. */
export function ggmlKernels(code: number, file = "model"): GGMLKernels {
  const k = TABLE.get(code);
  if (k === undefined) throw new ModelFormatError(file, `tensor type ${GGML_TYPES.get(code)?.name ?? code} has no kernels`);
  return k;
}
