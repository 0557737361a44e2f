/**
 * The reference quantizers (src/synth/quant/): bytes identical with llama.cpp's llama-quantize on the
 * shared GGUF files, and round trips within each type's error bound.
 */
import { describe, expect, test } from "bun:test";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { readGGUF } from "../src/model/gguf.ts";
import { dequantize, f32ToHalf, halfToF32, f32ToBF16, bf16ToF32, quantize, quantTypeName, type QuantTypeName } from "../src/synth/quant/index.ts";
import { Xoshiro128 } from "../src/util/random.ts";
import { describeShared, SHARED_DIR } from "./helpers/shared.ts";
import { LONG_PROCESS_TEST_MS } from "./helpers/limits.ts";

/** The f32 values of a tensor of an F32 GGUF file. */
function f32Tensor(file: string, bytes: Buffer, name: string): Float32Array {
  const t = readGGUF(file).tensor(name)!;
  return new Float32Array(bytes.buffer.slice(bytes.byteOffset + t.fileOffset, bytes.byteOffset + t.fileOffset + t.byteSize));
}

/** For every non-F32 tensor of `quantizedFile`: does quantizing the same tensor of `f32File` give its bytes? */
function compareWithLlamaQuantize(f32File: string, quantizedFile: string): Map<string, { same: number; differ: string[] }> {
  const base = readFileSync(f32File);
  const q = readGGUF(quantizedFile);
  const qBytes = readFileSync(quantizedFile);
  const byType = new Map<string, { same: number; differ: string[] }>();
  for (const t of q.tensors) {
    const type = quantTypeName(t.type);
    if (type === undefined || type === "F32") continue;
    const ours = quantize(type, f32Tensor(f32File, base, t.name));
    const theirs = qBytes.subarray(t.fileOffset, t.fileOffset + t.byteSize);
    const entry = byType.get(type) ?? { same: 0, differ: [] };
    if (Buffer.compare(Buffer.from(ours), theirs) === 0) entry.same++;
    else entry.differ.push(t.name);
    byType.set(type, entry);
  }
  return byType;
}

describeShared(
  "32-value types and 16-bit floats are byte-identical with llama-quantize",
  ["models/gguf/stories260K.gguf", ...["Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "F16", "BF16"].map((t) => `models/gguf/stories260K-${t}.gguf`)],
  ([f32File, ...quantized]) => {
    for (const file of quantized) {
      test(file!.split("/").pop()!, () => {
        const result = compareWithLlamaQuantize(f32File!, file!);
        expect(result.size).toBeGreaterThan(0);
        for (const [type, { same, differ }] of result) {
          expect({ type, differ }).toEqual({ type, differ: [] });
          expect(same).toBeGreaterThan(0);
        }
      });
    }
  },
);

describeShared(
  "K-quants and MXFP4 are byte-identical with llama-quantize (F32 originals rewritten by make_refmodels.ts)",
  [
    "tools/llama-ref/make_refmodels.ts", "models/gguf/rnd-llama-Q4_K_M.gguf", "models/gguf/rnd-llama-Q2_K.gguf", "models/gguf/rnd-qwen2-Q5_K_M.gguf",
    "models/gguf/rnd-qwen3moe-Q4_K_M.gguf", "models/gguf/rnd-gptoss-MXFP4_MOE.gguf",
  ],
  ([script, q4km, q2k, q5km, moeQ4km, mxfp4]) => {
    test("Q2_K, Q3_K, Q4_K, Q5_K and Q6_K tensors; MXFP4 experts (3-D tensors, as Q4_K ones of the qwen3moe file)", () => {
      const dir = mkdtempSync(join(tmpdir(), "pagellm-refmodels-"));
      try {
        // Only the four F32 originals of the pairs below.
        const run = Bun.spawnSync(["bun", script!, dir, "rnd-llama", "rnd-qwen2", "rnd-qwen3moe", "rnd-gptoss"], { stdout: "pipe", stderr: "pipe", timeout: LONG_PROCESS_TEST_MS - 10_000 });
        expect(run.exitCode).toBe(0);
        const seen = new Set<string>();
        const pairs = [["rnd-llama-F32", q4km], ["rnd-llama-F32", q2k], ["rnd-qwen2-F32", q5km], ["rnd-qwen3moe-F32", moeQ4km], ["rnd-gptoss-F32", mxfp4]] as const;
        for (const [f32, quantized] of pairs) {
          for (const [type, { same, differ }] of compareWithLlamaQuantize(join(dir, `${f32}.gguf`), quantized!)) {
            expect({ type, differ }).toEqual({ type, differ: [] });
            if (same > 0) seen.add(type);
          }
        }
        expect([...seen].sort()).toEqual(["MXFP4", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "Q8_0"]);
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    }, LONG_PROCESS_TEST_MS);
  },
);

describe("round trips", () => {
  /** Largest error a type may make on a value, relative to the largest magnitude of its block. */
  const BOUND: Record<Exclude<QuantTypeName, "F32">, number> = {
    F16: 1e-3, BF16: 8e-3, // Half a step, plus the rounding of the stored half-precision scale and minimum.
    Q8_0: 1 / 127, Q4_0: 1 / 8, Q4_1: 1.1 / 15, Q5_0: 1 / 16, Q5_1: 1.1 / 31,
    Q2_K: 0.75, Q3_K: 0.35, Q4_K: 0.15, Q5_K: 0.08, Q6_K: 0.04,
    // The scale puts the block's largest magnitude in [8, 16) steps, and 12 is the largest code: values above 12 steps clip.
    MXFP4: 0.25,
  };
  for (const type of Object.keys(BOUND) as (keyof typeof BOUND)[]) {
    test(`${type}: dequantize(quantize(x)) is within the type's step`, () => {
      const rng = new Xoshiro128(17);
      for (let iter = 0; iter < 20; iter++) {
        const n = 512 * (1 + Math.floor(rng.nextFloat() * 3));
        const x = Float32Array.from({ length: n }, () => (rng.nextFloat() - 0.5) * (iter + 1));
        const y = dequantize(type, quantize(type, x), n);
        const block = type.endsWith("_K") ? 256 : 32;
        for (let b = 0; b < n; b += block) {
          let amax = 0;
          for (let i = b; i < b + block; i++) amax = Math.max(amax, Math.abs(x[i]!));
          for (let i = b; i < b + block; i++) expect(Math.abs(y[i]! - x[i]!)).toBeLessThanOrEqual(BOUND[type] * amax * 1.0001 + 1e-7);
        }
      }
    });
  }

  test("F16 conversion: exact for every half, round-to-nearest-even in between", () => {
    for (let h = 0; h < 0x7c00; h++) {
      expect(f32ToHalf(halfToF32(h))).toBe(h);
      expect(f32ToHalf(-halfToF32(h))).toBe(h === 0 ? 0x8000 : h | 0x8000);
    }
    // Halfway between 1 and the next half (1 + 2^-10): ties go to the even one, 1.
    expect(f32ToHalf(1 + 2 ** -11)).toBe(0x3c00);
    expect(f32ToHalf(1 + 3 * 2 ** -11)).toBe(0x3c02);
    expect(f32ToHalf(70000)).toBe(0x7c00);
    expect(bf16ToF32(f32ToBF16(1.00390625))).toBe(1); // 1 + 2^-8 ties to even
  });

  test("blocks of zeros stay zero", () => {
    for (const type of Object.keys(BOUND) as (keyof typeof BOUND)[]) {
      expect(Array.from(dequantize(type, quantize(type, new Float32Array(256)), 256)).every((v) => v === 0)).toBe(true);
    }
  });
});

test("shared data directory is where the tests look", () => {
  expect(SHARED_DIR.endsWith("shared")).toBe(true);
});
