import { describe, expect, test } from "bun:test";
import { stepLine, stepTraceAsked } from "../src/cli/step-trace.ts";

describe("PAGELLM_DEBUG=steps", () => {
  test("is asked for by the word steps in the comma-separated list, and by nothing else", () => {
    expect(stepTraceAsked({ PAGELLM_DEBUG: "steps" })).toBe(true);
    expect(stepTraceAsked({ PAGELLM_DEBUG: "1, steps" })).toBe(true);
    expect(stepTraceAsked({ PAGELLM_DEBUG: "1" })).toBe(false);
    expect(stepTraceAsked({ PAGELLM_DEBUG: "stepsx" })).toBe(false);
    expect(stepTraceAsked({})).toBe(false);
  });

  test("a line gives the step's tokens, its time and the time outside steps before it", () => {
    const report = { step: 812, outputs: 3, sampled: 3, startMs: 1000.5, endMs: 1451.7, decodeTokens: 3, promptTokens: 32 };
    expect(stepLine(report, null)).toBe("step 812: 3 decode + 32 prompt tokens, 3 outputs, 451.2 ms");
    expect(stepLine(report, 999.7)).toBe("step 812: 3 decode + 32 prompt tokens, 3 outputs, 451.2 ms; 0.8 ms outside steps before it");
  });
});
