/**
 * ggml's 32-value block types, quantized as llama-quantize does without an importance matrix
 * (ggml-quants.c quantize_row_*_ref), byte for byte, and dequantized as dequantize_row_*. The
 * C code works in f32: every step here is rounded to f32 (Math.fround) the same way.
 */
import { f32ToHalf, halfToF32 } from "../../util/half.ts";

const fr = Math.fround;
export const QK = 32;

/** Block bytes of each type. */
export const LEGACY_BLOCK_BYTES = { Q8_0: 34, Q4_0: 18, Q4_1: 20, Q5_0: 22, Q5_1: 24 } as const;
export type LegacyType = keyof typeof LEGACY_BLOCK_BYTES;

/** C's roundf: half away from zero. */
function roundAway(v: number): number {
  return v < 0 ? -Math.floor(-v + 0.5) : Math.floor(v + 0.5);
}

/** C's (int8_t) cast of a float: truncation toward zero, wrapped to 8 bits. */
function toInt8(v: number): number {
  return (Math.trunc(v) << 24) >> 24;
}

/** The value of largest magnitude (the first such), and that magnitude. */
function signedAbsMax(x: Float32Array, at: number): { amax: number; max: number } {
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
  let min = 3.4028234663852886e38;
  let max = -3.4028234663852886e38;
  for (let j = 0; j < QK; j++) {
    const v = x[at + j]!;
    if (v < min) min = v;
    if (v > max) max = v;
  }
  return { min, max };
}

function setHalf(out: Uint8Array, at: number, x: number): void {
  const h = f32ToHalf(x);
  out[at] = h & 0xff;
  out[at + 1] = h >>> 8;
}

function setU32(out: Uint8Array, at: number, v: number): void {
  out[at] = v & 0xff;
  out[at + 1] = (v >>> 8) & 0xff;
  out[at + 2] = (v >>> 16) & 0xff;
  out[at + 3] = (v >>> 24) & 0xff;
}

/** Quantize x (a multiple of 32 values) to `type` blocks. */
export function quantizeLegacy(type: LegacyType, x: Float32Array): Uint8Array {
  if (x.length % QK !== 0) throw new RangeError(`${type} needs a multiple of ${QK} values, got ${x.length}`);
  const bs = LEGACY_BLOCK_BYTES[type];
  const nb = x.length / QK;
  const out = new Uint8Array(nb * bs);
  for (let i = 0; i < nb; i++) {
    const at = i * QK;
    const o = i * bs;
    switch (type) {
      case "Q8_0": {
        let amax = 0;
        for (let j = 0; j < QK; j++) amax = Math.max(amax, Math.abs(x[at + j]!));
        const d = fr(amax / 127);
        const id = d !== 0 ? fr(1 / d) : 0;
        setHalf(out, o, d);
        for (let j = 0; j < QK; j++) out[o + 2 + j] = roundAway(fr(x[at + j]! * id)) & 0xff;
        break;
      }
      case "Q4_0":
      case "Q5_0": {
        const levels = type === "Q4_0" ? 8 : 16;
        const { max } = signedAbsMax(x, at);
        const d = fr(max / -levels);
        const id = d !== 0 ? fr(1 / d) : 0;
        setHalf(out, o, d);
        const top = 2 * levels - 1;
        const offset = fr(levels + 0.5);
        let qh = 0;
        for (let j = 0; j < QK / 2; j++) {
          const xi0 = Math.min(top, toInt8(fr(fr(x[at + j]! * id) + offset))) & 0xff;
          const xi1 = Math.min(top, toInt8(fr(fr(x[at + QK / 2 + j]! * id) + offset))) & 0xff;
          if (type === "Q4_0") {
            out[o + 2 + j] = xi0 | (xi1 << 4);
          } else {
            out[o + 6 + j] = (xi0 & 0x0f) | ((xi1 & 0x0f) << 4);
            qh |= ((xi0 & 0x10) >>> 4) << j;
            qh |= ((xi1 & 0x10) >>> 4) << (j + QK / 2);
          }
        }
        if (type === "Q5_0") setU32(out, o + 2, qh >>> 0);
        break;
      }
      case "Q4_1":
      case "Q5_1": {
        const bits = type === "Q4_1" ? 4 : 5;
        const { min, max } = minMax(x, at);
        const d = fr(fr(max - min) / ((1 << bits) - 1));
        const id = d !== 0 ? fr(1 / d) : 0;
        setHalf(out, o, d);
        setHalf(out, o + 2, min);
        let qh = 0;
        for (let j = 0; j < QK / 2; j++) {
          const x0 = fr(fr(fr(x[at + j]! - min) * id) + 0.5);
          const x1 = fr(fr(fr(x[at + QK / 2 + j]! - min) * id) + 0.5);
          if (type === "Q4_1") {
            const xi0 = Math.min(15, toInt8(x0)) & 0xff;
            const xi1 = Math.min(15, toInt8(x1)) & 0xff;
            out[o + 4 + j] = xi0 | (xi1 << 4);
          } else {
            const xi0 = Math.trunc(x0) & 0xff; // (uint8_t) cast
            const xi1 = Math.trunc(x1) & 0xff;
            out[o + 8 + j] = (xi0 & 0x0f) | ((xi1 & 0x0f) << 4);
            qh |= ((xi0 & 0x10) >>> 4) << j;
            qh |= ((xi1 & 0x10) >>> 4) << (j + QK / 2);
          }
        }
        if (type === "Q5_1") setU32(out, o + 4, qh >>> 0);
        break;
      }
    }
  }
  return out;
}

/** The values of `type` blocks (n values), as dequantize_row_* computes them. */
export function dequantizeLegacy(type: LegacyType, bytes: Uint8Array, n: number): Float32Array {
  const bs = LEGACY_BLOCK_BYTES[type];
  const out = new Float32Array(n);
  const half = (at: number) => halfToF32(bytes[at]! | (bytes[at + 1]! << 8));
  const u32 = (at: number) => (bytes[at]! | (bytes[at + 1]! << 8) | (bytes[at + 2]! << 16) | (bytes[at + 3]! << 24)) >>> 0;
  for (let i = 0; i < n / QK; i++) {
    const o = i * bs;
    const d = half(o);
    for (let j = 0; j < QK; j++) {
      const nib = (qs: number) => (j < 16 ? bytes[o + qs + j]! & 0x0f : bytes[o + qs + j - 16]! >> 4);
      let v: number;
      switch (type) {
        case "Q8_0":
          v = ((bytes[o + 2 + j]! << 24) >> 24) * d;
          break;
        case "Q4_0":
          v = (nib(2) - 8) * d;
          break;
        case "Q4_1":
          v = fr(nib(4) * d) + half(o + 2);
          break;
        case "Q5_0":
          v = ((nib(6) | (((u32(o + 2) >>> j) & 1) << 4)) - 16) * d;
          break;
        case "Q5_1":
          v = fr((nib(8) | (((u32(o + 4) >>> j) & 1) << 4)) * d) + half(o + 2);
          break;
      }
      out[i * QK + j] = v;
    }
  }
  return out;
}
