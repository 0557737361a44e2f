/**
 * YaRN RoPE scaling (src/model/yarn.ts) against ggml's formulas written out in float64 here
 * (ggml_rope_yarn_corr_dims, rope_yarn) and llama.cpp's context factor, on gpt-oss's numbers.
 */
import { describe, expect, test } from "bun:test";
import { yarn, yarnAngle, yarnMagnitude } from "../src/model/yarn.ts";

describe("YaRN", () => {
  // gpt-oss: heads of 64 rotated, base 150000, factor 32 over 4096 positions.
  const y = yarn(32, 64, 4096, 150000);

  test("the blend's pair range is ggml's corr dims: floor and ceil of the pairs that turn 32 and 1 times in the original context", () => {
    const dim = (rotations: number) => (64 * Math.log(4096 / (rotations * 2 * Math.PI))) / (2 * Math.log(150000));
    expect(dim(32)).toBeCloseTo(8.09, 2);
    expect(dim(1)).toBeCloseTo(17.4, 1);
    expect(y).toEqual({ factor: 32, low: 8, high: 18 });
    // Clamped to the rotated pairs.
    expect(yarn(8, 8, 100, 2)).toMatchObject({ low: 0, high: 7 });
  });

  test("pairs at or below low keep their angle, pairs at or above high are interpolated by 1/factor, those between blend linearly", () => {
    for (const angle of [0.5, 3, 1234.5]) {
      const a = Math.fround(angle);
      expect(yarnAngle(y, a, 0)).toBe(a);
      expect(yarnAngle(y, a, 8)).toBe(a);
      expect(yarnAngle(y, a, 18)).toBe(Math.fround(Math.fround(1 / 32) * a));
      expect(yarnAngle(y, a, 31)).toBe(Math.fround(Math.fround(1 / 32) * a));
      const ramp = 1 - (13 - 8) / (18 - 8);
      expect(yarnAngle(y, a, 13)).toBeCloseTo((a / 32) * (1 - ramp) + a * ramp, 4);
    }
  });

  test("cos and sin are scaled by 1 + 0.1 ln(factor) (llama.cpp's context factor cancels ggml's own), or by the mscale ratio with a log multiplier", () => {
    expect(yarnMagnitude(32)).toBeCloseTo(1 + 0.1 * Math.log(32), 6);
    expect(yarnMagnitude(32, 1.5)).toBeCloseTo(1.5 * (1 + 0.1 * Math.log(32)), 5);
    // DeepSeek-style: attn factor mscale(f, 1) / mscale(f, m), ggml's correction cancelled by the context's.
    const m = 0.707;
    expect(yarnMagnitude(40, 1, m)).toBeCloseTo((0.1 * Math.log(40) + 1) / (0.1 * m * Math.log(40) + 1), 5);
    expect(yarnMagnitude(1)).toBe(1);
  });
});
