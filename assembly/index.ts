// The WebAssembly module's exports: every kernel family lives in its own file.
// All kernels work on addresses in one imported, shared linear memory that holds the weights,
// the activations and the KV block arena; none allocates.
export { packF32, unpackRowF32, embedF32, matmulF32, matmulF32Multi, matmulScratchBytes, matvecScalarF32, streamSumF32 } from "./matmul";
export { quantizeQ8, matmulQ8, embedQ8 } from "./quant";
export { rmsnorm } from "./norm";
export { layerNorm, layerNormRef, encoderAttention } from "./encoder";
export { ropeInterleaved, ropeNeox } from "./rope";
export { swiglu, swigluOai, geglu, scaleInPlace, addInPlace, addRows, softmax, gatherRows, weightedRowSum } from "./activation";
export { writeKV, pagedAttention } from "./attention";
export { f32ToHalf, quantizeRowQ8_0, storeKVRow, kvRowToF32, kvRowToF32Ref, halfRowScaled, halfRowScaledRef } from "./kv-types";
export {
  rmsnormRunq, quantizeQ8Runq, matmulQ8Runq, swigluRunq, ropeTablesRunq, pagedAttentionRunq, runqMath, runqFma,
} from "./runq";
export { expF32 } from "./math";
export { quantizeActQ8, actBytesPerToken, buildHalfTable, halfTableAddress } from "./ggml/common";
export { matmulF16, matmulBF16, embedF16, embedBF16, roundActivations, halfRowScratchBytes } from "./ggml/float";
export {
  matmulQ8_0, matmulQ4_0, matmulQ4_1, matmulQ5_0, matmulQ5_1, matmulMXFP4, embedQ8_0, embedQ4_0, embedQ4_1, embedQ5_0, embedQ5_1, embedMXFP4,
  transcodeQ5_0ToQ8_0,
} from "./ggml/legacy";
export {
  matmulQ2_K, matmulQ3_K, matmulQ4_K, matmulQ5_K, matmulQ6_K, unpackedRowBytes, embedQ2_K, embedQ3_K, embedQ4_K, embedQ5_K, embedQ6_K,
} from "./ggml/kquants";
export { matmulSegments } from "./ggml/segments";

/** First free byte after the module's static data: the host allocates from here up. */
export function heapBase(): usize {
  return __heap_base;
}
