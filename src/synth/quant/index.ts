/**
 * Reference quantizers and dequantizers of every tensor type pagellm computes on, by ggml type
 * code: what the GGUF writer stores and what the kernel tests compare against.
 */
import { bf16ToF32, f32ToBF16, f32ToHalf, halfToF32 } from "../../util/half.ts";
import { dequantizeK, K_BLOCK_BYTES, quantizeK, type KType } from "./kquants.ts";
import { dequantizeLegacy, LEGACY_BLOCK_BYTES, quantizeLegacy, type LegacyType } from "./legacy.ts";
import { dequantizeMxfp4, MXFP4_BLOCK_BYTES, MXFP4_BLOCK_VALUES, quantizeMxfp4 } from "./mxfp4.ts";

export { f32ToHalf, halfToF32, f32ToBF16, bf16ToF32 } from "../../util/half.ts";

/** ggml type codes of the types here (ggml.h). */
export const GGML_TYPE = {
  F32: 0, F16: 1, Q4_0: 2, Q4_1: 3, Q5_0: 6, Q5_1: 7, Q8_0: 8, Q2_K: 10, Q3_K: 11, Q4_K: 12, Q5_K: 13, Q6_K: 14, BF16: 30, MXFP4: 39,
} as const;
export type QuantTypeName = keyof typeof GGML_TYPE;

/** Values per block and bytes per block of each type. */
export function blockLayout(type: QuantTypeName): { values: number; bytes: number } {
  if (type === "F32") return { values: 1, bytes: 4 };
  if (type === "F16" || type === "BF16") return { values: 1, bytes: 2 };
  if (type === "MXFP4") return { values: MXFP4_BLOCK_VALUES, bytes: MXFP4_BLOCK_BYTES };
  if (type in LEGACY_BLOCK_BYTES) return { values: 32, bytes: LEGACY_BLOCK_BYTES[type as LegacyType] };
  return { values: 256, bytes: K_BLOCK_BYTES[type as KType] };
}

/** Bytes of a row of `cols` values of `type`. */
export function rowBytes(type: QuantTypeName, cols: number): number {
  const { values, bytes } = blockLayout(type);
  if (cols % values !== 0) throw new RangeError(`${type} rows hold whole blocks of ${values} values; ${cols} is not a multiple`);
  return (cols / values) * bytes;
}

/** Encode f32 values (rows of whole blocks) as `type`. */
export function quantize(type: QuantTypeName, x: Float32Array): Uint8Array {
  switch (type) {
    case "F32":
      return new Uint8Array(x.buffer.slice(x.byteOffset, x.byteOffset + x.byteLength));
    case "F16":
    case "BF16": {
      const out = new Uint16Array(x.length);
      const to = type === "F16" ? f32ToHalf : f32ToBF16;
      for (let i = 0; i < x.length; i++) out[i] = to(x[i]!);
      return new Uint8Array(out.buffer);
    }
    case "Q8_0": case "Q4_0": case "Q4_1": case "Q5_0": case "Q5_1":
      return quantizeLegacy(type, x);
    case "MXFP4":
      return quantizeMxfp4(x);
    default:
      return quantizeK(type, x);
  }
}

/** The values `n` encoded values of `type` stand for. */
export function dequantize(type: QuantTypeName, bytes: Uint8Array, n: number): Float32Array {
  switch (type) {
    case "F32":
      return new Float32Array(bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + 4 * n));
    case "F16":
    case "BF16": {
      const out = new Float32Array(n);
      const from = type === "F16" ? halfToF32 : bf16ToF32;
      for (let i = 0; i < n; i++) out[i] = from(bytes[2 * i]! | (bytes[2 * i + 1]! << 8));
      return out;
    }
    case "Q8_0": case "Q4_0": case "Q4_1": case "Q5_0": case "Q5_1":
      return dequantizeLegacy(type, bytes, n);
    case "MXFP4":
      return dequantizeMxfp4(bytes, n);
    default:
      return dequantizeK(type, bytes, n);
  }
}

/** The type name of a ggml code handled here, or undefined. */
export function quantTypeName(code: number): QuantTypeName | undefined {
  return (Object.keys(GGML_TYPE) as QuantTypeName[]).find((k) => GGML_TYPE[k] === code);
}
