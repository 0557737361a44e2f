/**
 * Reference quantizers (src/quant): bytes identical to llama.cpp's llama-quantize on the real
 * stories260K weights, half-precision conversions against known values, and round-trip bounds.
 */
import { describe, expect, test } from "bun:test";
import { closeSync, openSync, readSync } from "node:fs";
import { readGGUF, type GGUFTensorInfo } from "../src/model/gguf.ts";
import {
  bf16ToFp32, dequantizeRow, fp16ToFp32, fp32ToBf16, fp32ToFp16, quantizeTensor,
} from "../src/quant/index.ts";
import { Xoshiro128 } from "../src/util/random.ts";
import { randomArray } from "./helpers/random-data.ts";
import { describeShared } from "./helpers/shared.ts";

function tensorBytes(path: string, info: GGUFTensorInfo): Uint8Array {
  const fd = openSync(path, "r");
  try {
    const out = new Uint8Array(info.byteSize);
    readSync(fd, out, 0, info.byteSize, info.fileOffset);
    return out;
  } finally {
    closeSync(fd);
  }
}

const TYPES = ["Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "F16", "BF16"] as const;

describeShared("byte identity with llama-quantize", ["models/gguf/stories260K.gguf", ...TYPES.map((t) => `models/gguf/stories260K-${t}.gguf`)], (paths) => {
  const f32Path = paths[0]!;
  const f32File = readGGUF(f32Path);
  TYPES.forEach((typeName, i) => {
    test(typeName, () => {
      const qPath = paths[i + 1]!;
      const qFile = readGGUF(qPath);
      let compared = 0;
      for (const info of qFile.tensors) {
        if (info.typeName !== typeName) continue;
        const src = f32File.tensors.find((t) => t.name === info.name);
        if (src === undefined || src.type !== 0) continue;
        const bytes = tensorBytes(f32Path, src);
        const data = new Float32Array(bytes.buffer, 0, src.nElements);
        const cols = src.dims[0]!;
        const ours = quantizeTensor(info.type, data, src.nElements / cols, cols);
        const theirs = tensorBytes(qPath, info);
        expect(ours.length).toBe(theirs.length);
        const firstDiff = ours.findIndex((b, j) => b !== theirs[j]);
        expect({ tensor: info.name, firstDiff }).toEqual({ tensor: info.name, firstDiff: -1 });
        compared++;
      }
      expect(compared).toBeGreaterThan(0);
    });
  });
});

describe("half-precision conversions", () => {
  test("f16 known values and round-to-nearest-even", () => {
    expect(fp32ToFp16(1)).toBe(0x3c00);
    expect(fp32ToFp16(-2)).toBe(0xc000);
    expect(fp32ToFp16(65504)).toBe(0x7bff);
    expect(fp32ToFp16(65520)).toBe(0x7c00); // rounds up to infinity
    expect(fp32ToFp16(2 ** -24)).toBe(0x0001);
    expect(fp32ToFp16(2 ** -25)).toBe(0x0000); // tie to even (zero)
    expect(fp32ToFp16(3 * 2 ** -25)).toBe(0x0002); // tie to even (2)
    expect(fp32ToFp16(1 + 2 ** -11)).toBe(0x3c00); // tie, even mantissa stays
    expect(fp32ToFp16(1 + 3 * 2 ** -11)).toBe(0x3c02); // tie, odd rounds up
    expect(fp32ToFp16(NaN) & 0x7e00).toBe(0x7e00);
    expect(fp16ToFp32(0x3555)).toBe(Math.fround(0.333251953125));
    expect(fp16ToFp32(0xfc00)).toBe(-Infinity);
  });
  test("f16 round trip of every half is exact", () => {
    for (let h = 0; h < 0x10000; h++) {
      const v = fp16ToFp32(h);
      if (Number.isNaN(v)) continue;
      expect(fp32ToFp16(v)).toBe(h);
    }
  });
  test("bf16 rounding and NaN", () => {
    expect(fp32ToBf16(1)).toBe(0x3f80);
    expect(fp32ToBf16(Math.fround(1 + 2 ** -8))).toBe(0x3f80); // tie to even
    expect(fp32ToBf16(Math.fround(1 + 3 * 2 ** -8))).toBe(0x3f82);
    expect(fp32ToBf16(NaN) & 0x7fc0).toBe(0x7fc0);
    expect(bf16ToFp32(0xc040)).toBe(-3);
  });
});

describe("round trip", () => {
  // Largest |x - dequantize(quantize(x))| relative to a block's max |x|, by type: half a step, a
  // whole step for Q4_0/Q5_0 (whose top level is clipped: q in [-8, 7] with d = max / -8), plus
  // the f16 rounding of the scales. Magnitudes stay where f16 scales are normal numbers.
  const BOUNDS: [number, string, number][] = [
    [8, "Q8_0", 1 / 127 / 2 + 1e-3],
    [2, "Q4_0", 1 / 8 + 1e-2],
    [3, "Q4_1", 2 / 15 / 2 + 1e-2],
    [6, "Q5_0", 1 / 16 + 1e-2],
    [7, "Q5_1", 2 / 31 / 2 + 1e-2],
    [1, "F16", 2 ** -11],
    [30, "BF16", 2 ** -8],
  ];
  for (const [code, name, bound] of BOUNDS) {
    test(name, () => {
      const rng = new Xoshiro128(code);
      for (let it = 0; it < 50; it++) {
        const cols = 32 * (1 + (it % 5));
        const x = randomArray(rng, cols, 10 ** ((it % 5) - 2));
        const back = dequantizeRow(code, quantizeTensor(code, x, 1, cols), cols);
        for (let b = 0; b < cols; b += 32) {
          const block = x.subarray(b, b + 32);
          const amax = Math.max(...Array.from(block, Math.abs));
          for (let j = b; j < b + 32; j++) expect(Math.abs(back[j]! - x[j]!)).toBeLessThanOrEqual(bound * amax);
        }
      }
    });
  }
});
