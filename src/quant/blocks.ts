/**
 * Reference quantizers and dequantizers for ggml's 32-element block types, byte for byte as
 * ggml's `quantize_row_*_ref` (what `llama-quantize` writes without an importance matrix): float
 * arithmetic in f32 (Math.fround wherever C computes in float), C's roundf (half away from zero),
 * casts to int8 truncating toward zero, scales stored through GGML_FP32_TO_FP16.
 *
 * Block layouts (little-endian):
 *   Q8_0  34 bytes: d f16, qs[32] int8                              x = d * q
 *   Q4_0  18 bytes: d f16, qs[16] (element j low nibble, j+16 high)  x = d * (q - 8)
 *   Q4_1  20 bytes: d f16, m f16, qs[16]                            x = d * q + m
 *   Q5_0  22 bytes: d f16, qh u32 (bit j = 5th bit of element j), qs[16]   x = d * (q - 16)
 *   Q5_1  24 bytes: d f16, m f16, qh u32, qs[16]                    x = d * q + m
 */
import { fp16ToFp32, fp32ToFp16 } from "./fp16.ts";

export const QK = 32;

const fr = Math.fround;

/** C's roundf: half away from zero (|v| + 0.5 is exact in f64 for any f32 v). */
function roundf(v: number): number {
  const r = Math.floor(Math.abs(v) + 0.5);
  return v < 0 ? -r : r;
}

/** (int8_t)(float): truncation toward zero. */
function toInt8(v: number): number {
  return Math.trunc(v);
}

function blocksOf(n: number): number {
  if (n % QK !== 0) throw new RangeError(`row length ${n} is not a multiple of ${QK}`);
  return n / QK;
}

function putF16(out: DataView, at: number, v: number): void {
  out.setUint16(at, fp32ToFp16(v), true);
}

/** The value of largest magnitude (the first one on ties) and its magnitude. */
function signedMax(x: Float32Array, at: number): { amax: number; max: number } {
  let amax = 0;
  let max = 0;
  for (let j = 0; j < QK; j++) {
    const v = x[at + j]!;
    if (amax < Math.abs(v)) {
      amax = Math.abs(v);
      max = v;
    }
  }
  return { amax, max };
}

function minMax(x: Float32Array, at: number): { min: number; max: number } {
  let min = Infinity;
  let max = -Infinity;
  for (let j = 0; j < QK; j++) {
    const v = x[at + j]!;
    if (v < min) min = v;
    if (v > max) max = v;
  }
  return { min, max };
}

export function quantizeRowQ8_0(x: Float32Array): Uint8Array {
  const nb = blocksOf(x.length);
  const out = new Uint8Array(nb * 34);
  const view = new DataView(out.buffer);
  for (let i = 0; i < nb; i++) {
    let amax = 0;
    for (let j = 0; j < QK; j++) amax = Math.max(amax, Math.abs(x[i * QK + j]!));
    const d = fr(amax / 127);
    const id = d !== 0 ? fr(1 / d) : 0;
    putF16(view, i * 34, d);
    for (let j = 0; j < QK; j++) view.setInt8(i * 34 + 2 + j, roundf(fr(x[i * QK + j]! * id)));
  }
  return out;
}

export function quantizeRowQ4_0(x: Float32Array): Uint8Array {
  const nb = blocksOf(x.length);
  const out = new Uint8Array(nb * 18);
  const view = new DataView(out.buffer);
  for (let i = 0; i < nb; i++) {
    const { max } = signedMax(x, i * QK);
    const d = fr(max / -8);
    const id = d !== 0 ? fr(1 / d) : 0;
    putF16(view, i * 18, d);
    for (let j = 0; j < QK / 2; j++) {
      const x0 = fr(x[i * QK + j]! * id);
      const x1 = fr(x[i * QK + QK / 2 + j]! * id);
      const q0 = Math.min(15, toInt8(fr(x0 + 8.5)));
      const q1 = Math.min(15, toInt8(fr(x1 + 8.5)));
      out[i * 18 + 2 + j] = (q0 | (q1 << 4)) & 0xff;
    }
  }
  return out;
}

export function quantizeRowQ4_1(x: Float32Array): Uint8Array {
  const nb = blocksOf(x.length);
  const out = new Uint8Array(nb * 20);
  const view = new DataView(out.buffer);
  for (let i = 0; i < nb; i++) {
    const { min, max } = minMax(x, i * QK);
    const d = fr(fr(max - min) / 15);
    const id = d !== 0 ? fr(1 / d) : 0;
    putF16(view, i * 20, d);
    putF16(view, i * 20 + 2, min);
    for (let j = 0; j < QK / 2; j++) {
      const x0 = fr(fr(x[i * QK + j]! - min) * id);
      const x1 = fr(fr(x[i * QK + QK / 2 + j]! - min) * id);
      const q0 = Math.min(15, toInt8(fr(x0 + 0.5)));
      const q1 = Math.min(15, toInt8(fr(x1 + 0.5)));
      out[i * 20 + 4 + j] = (q0 | (q1 << 4)) & 0xff;
    }
  }
  return out;
}

export function quantizeRowQ5_0(x: Float32Array): Uint8Array {
  const nb = blocksOf(x.length);
  const out = new Uint8Array(nb * 22);
  const view = new DataView(out.buffer);
  for (let i = 0; i < nb; i++) {
    const { max } = signedMax(x, i * QK);
    const d = fr(max / -16);
    const id = d !== 0 ? fr(1 / d) : 0;
    putF16(view, i * 22, d);
    let qh = 0;
    for (let j = 0; j < QK / 2; j++) {
      const x0 = fr(x[i * QK + j]! * id);
      const x1 = fr(x[i * QK + QK / 2 + j]! * id);
      const q0 = Math.min(31, toInt8(fr(x0 + 16.5)));
      const q1 = Math.min(31, toInt8(fr(x1 + 16.5)));
      out[i * 22 + 6 + j] = ((q0 & 0xf) | ((q1 & 0xf) << 4)) & 0xff;
      qh |= ((q0 & 0x10) >> 4) << j;
      qh |= ((q1 & 0x10) >> 4) << (j + 16);
    }
    view.setUint32(i * 22 + 2, qh >>> 0, true);
  }
  return out;
}

export function quantizeRowQ5_1(x: Float32Array): Uint8Array {
  const nb = blocksOf(x.length);
  const out = new Uint8Array(nb * 24);
  const view = new DataView(out.buffer);
  for (let i = 0; i < nb; i++) {
    const { min, max } = minMax(x, i * QK);
    const d = fr(fr(max - min) / 31);
    const id = d !== 0 ? fr(1 / d) : 0;
    putF16(view, i * 24, d);
    putF16(view, i * 24 + 2, min);
    let qh = 0;
    for (let j = 0; j < QK / 2; j++) {
      const x0 = fr(fr(x[i * QK + j]! - min) * id);
      const x1 = fr(fr(x[i * QK + QK / 2 + j]! - min) * id);
      const q0 = toInt8(fr(x0 + 0.5)) & 0xff;
      const q1 = toInt8(fr(x1 + 0.5)) & 0xff;
      out[i * 24 + 8 + j] = ((q0 & 0xf) | ((q1 & 0xf) << 4)) & 0xff;
      qh |= ((q0 & 0x10) >> 4) << j;
      qh |= ((q1 & 0x10) >> 4) << (j + 16);
    }
    view.setUint32(i * 24 + 4, qh >>> 0, true);
  }
  return out;
}

/**
 * The integer parts of block `i` of a row: q[32] (element order) with x = d * q + m. For Q8_0,
 * Q4_0 and Q5_0 q is signed (the offset folded in) and m = 0; for Q4_1 and Q5_1 q is unsigned.
 */
export interface BlockInts {
  q: Int8Array;
  d: number;
  m: number;
}

export type Block32Type = "Q8_0" | "Q4_0" | "Q4_1" | "Q5_0" | "Q5_1";

export const BLOCK32_BYTES: Record<Block32Type, number> = { Q8_0: 34, Q4_0: 18, Q4_1: 20, Q5_0: 22, Q5_1: 24 };

export function blockInts(type: Block32Type, bytes: Uint8Array, i: number): BlockInts {
  const at = i * BLOCK32_BYTES[type];
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const q = new Int8Array(QK);
  const d = fp16ToFp32(view.getUint16(at, true));
  const hasMin = type === "Q4_1" || type === "Q5_1";
  const m = hasMin ? fp16ToFp32(view.getUint16(at + 2, true)) : 0;
  if (type === "Q8_0") {
    for (let j = 0; j < QK; j++) q[j] = view.getInt8(at + 2 + j);
    return { q, d, m };
  }
  const five = type === "Q5_0" || type === "Q5_1";
  const qhAt = at + (hasMin ? 4 : 2);
  const qh = five ? view.getUint32(qhAt, true) : 0;
  const qsAt = five ? qhAt + 4 : qhAt;
  const offset = type === "Q4_0" ? 8 : type === "Q5_0" ? 16 : 0;
  for (let j = 0; j < QK / 2; j++) {
    const byte = bytes[qsAt + j]!;
    const hi0 = five ? ((qh >>> j) & 1) << 4 : 0;
    const hi1 = five ? ((qh >>> (j + 16)) & 1) << 4 : 0;
    q[j] = ((byte & 0xf) | hi0) - offset;
    q[j + QK / 2] = ((byte >> 4) | hi1) - offset;
  }
  return { q, d, m };
}

/** Dequantize n values of a block-32 row: x = d * q + m in f32, as ggml's dequantize_row_*. */
export function dequantizeRowBlock32(type: Block32Type, bytes: Uint8Array, n: number): Float32Array {
  const out = new Float32Array(n);
  const hasMin = type === "Q4_1" || type === "Q5_1";
  for (let i = 0; i < blocksOf(n); i++) {
    const { q, d, m } = blockInts(type, bytes, i);
    for (let j = 0; j < QK; j++) out[i * QK + j] = hasMin ? fr(fr(q[j]! * d) + m) : fr(q[j]! * d);
  }
  return out;
}

export const dequantizeRowQ8_0 = (b: Uint8Array, n: number): Float32Array => dequantizeRowBlock32("Q8_0", b, n);
export const dequantizeRowQ4_0 = (b: Uint8Array, n: number): Float32Array => dequantizeRowBlock32("Q4_0", b, n);
export const dequantizeRowQ4_1 = (b: Uint8Array, n: number): Float32Array => dequantizeRowBlock32("Q4_1", b, n);
export const dequantizeRowQ5_0 = (b: Uint8Array, n: number): Float32Array => dequantizeRowBlock32("Q5_0", b, n);
export const dequantizeRowQ5_1 = (b: Uint8Array, n: number): Float32Array => dequantizeRowBlock32("Q5_1", b, n);
