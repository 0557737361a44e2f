/**
 * Reference quantization of whole tensors, by ggml type code: what llama-quantize (no importance
 * matrix) writes for the type. The GGUF writer and the tests use it; K-quant types are added to
 * QUANTIZERS beside the 32-element ones.
 */
import { bf16ToFp32, fp16ToFp32, fp32ToBf16, fp32ToFp16 } from "./fp16.ts";
import {
  dequantizeRowQ4_0, dequantizeRowQ4_1, dequantizeRowQ5_0, dequantizeRowQ5_1, dequantizeRowQ8_0,
  quantizeRowQ4_0, quantizeRowQ4_1, quantizeRowQ5_0, quantizeRowQ5_1, quantizeRowQ8_0,
} from "./blocks.ts";

export * from "./fp16.ts";
export * from "./blocks.ts";
export * from "./dot.ts";

export function quantizeRowF16(x: Float32Array): Uint8Array {
  const out = new Uint16Array(x.length);
  for (let i = 0; i < x.length; i++) out[i] = fp32ToFp16(x[i]!);
  return new Uint8Array(out.buffer);
}

export function dequantizeRowF16(bytes: Uint8Array, n: number): Float32Array {
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  return Float32Array.from({ length: n }, (_, i) => fp16ToFp32(view.getUint16(2 * i, true)));
}

export function quantizeRowBF16(x: Float32Array): Uint8Array {
  const out = new Uint16Array(x.length);
  for (let i = 0; i < x.length; i++) out[i] = fp32ToBf16(x[i]!);
  return new Uint8Array(out.buffer);
}

export function dequantizeRowBF16(bytes: Uint8Array, n: number): Float32Array {
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  return Float32Array.from({ length: n }, (_, i) => bf16ToFp32(view.getUint16(2 * i, true)));
}

export interface RowCodec {
  quantize(x: Float32Array): Uint8Array;
  dequantize(bytes: Uint8Array, n: number): Float32Array;
}

/** By ggml type code. */
export const QUANTIZERS: Map<number, RowCodec> = new Map<number, RowCodec>([
  [1, { quantize: quantizeRowF16, dequantize: dequantizeRowF16 }],
  [30, { quantize: quantizeRowBF16, dequantize: dequantizeRowBF16 }],
  [8, { quantize: quantizeRowQ8_0, dequantize: dequantizeRowQ8_0 }],
  [2, { quantize: quantizeRowQ4_0, dequantize: dequantizeRowQ4_0 }],
  [3, { quantize: quantizeRowQ4_1, dequantize: dequantizeRowQ4_1 }],
  [6, { quantize: quantizeRowQ5_0, dequantize: dequantizeRowQ5_0 }],
  [7, { quantize: quantizeRowQ5_1, dequantize: dequantizeRowQ5_1 }],
]);

function codec(typeCode: number): RowCodec {
  const c = QUANTIZERS.get(typeCode);
  if (c === undefined) throw new RangeError(`no quantizer for ggml type ${typeCode}`);
  return c;
}

/** data[rows][cols] f32 -> the tensor's bytes in ggml type `typeCode`, row after row. */
export function quantizeTensor(typeCode: number, data: Float32Array, rows: number, cols: number): Uint8Array {
  if (data.length !== rows * cols) throw new RangeError(`tensor of ${rows} x ${cols} given ${data.length} values`);
  const c = codec(typeCode);
  const parts: Uint8Array[] = [];
  for (let r = 0; r < rows; r++) parts.push(c.quantize(data.subarray(r * cols, (r + 1) * cols)));
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}

/** One row of a tensor in ggml type `typeCode` back to f32. */
export function dequantizeRow(typeCode: number, bytes: Uint8Array, n: number): Float32Array {
  return codec(typeCode).dequantize(bytes, n);
}
