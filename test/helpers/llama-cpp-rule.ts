/**
 * The comparison rule of ../shared/golden/llama-cpp/README.md, for tests that hold an engine's
 * log-probabilities to llama.cpp's (its `llref score` JSON):
 *   - F32 files: mean |log p - llama.cpp's| <= 0.02 and the same argmax at >= 97% of positions;
 *   - F16 and BF16: the F32 rule or the quantized rule;
 *   - quantized files: err(pagellm) <= 1.15 * err(llama.cpp) + 0.01, err(E) the mean over positions of
 *     |log p_E(file) - log p_llama.cpp(F32 original)|.
 */
import { expect } from "bun:test";
import { argmax, logSoftmaxAt } from "./gguf-rig.ts";

/** `llref score`'s answer: the text's tokens and, per position, [log p(next token), argmax]. */
export interface ScoreRef {
  tokens: number[];
  logprobs: [number, number][];
}

/** `llref greedy`'s answer: the prompt's ids and the greedy ones. */
export interface GreedyRef {
  tokens: number[];
  generated: number[];
}

export type RuleKind = "F32" | "F16/BF16" | "quantized";

/** What the rule reads, for one text. */
export interface RuleFigures {
  /** Mean |log p - llama.cpp's on the same file|. */
  diffOwn: number;
  /** Share of positions whose argmax is llama.cpp's. */
  agreement: number;
  /** Mean |log p - llama.cpp's on the F32 original|, for this engine and for llama.cpp. */
  errMine: number;
  errLlama: number;
}

const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;

/** The figures of `logits` (one row per position of own.tokens) against llama.cpp's run of the file (`own`) and of its F32 original. */
export function ruleFigures(logits: readonly Float32Array[], own: ScoreRef, f32: ScoreRef): RuleFigures {
  expect(own.tokens).toEqual(f32.tokens);
  const n = own.tokens.length - 1;
  const mine = Array.from({ length: n }, (_, p) => logSoftmaxAt(logits[p]!, own.tokens[p + 1]!));
  return {
    diffOwn: mean(mine.map((lp, p) => Math.abs(lp - own.logprobs[p]![0]))),
    agreement: mean(logits.slice(0, n).map((l, p) => (argmax(l) === own.logprobs[p]![1] ? 1 : 0))),
    errMine: mean(mine.map((lp, p) => Math.abs(lp - f32.logprobs[p]![0]))),
    errLlama: mean(own.logprobs.map(([lp], p) => Math.abs(lp - f32.logprobs[p]![0]))),
  };
}

/** One line of the figures, for PAGELLM_TEST_VERBOSE. */
export function describeFigures(f: RuleFigures): string {
  return `mean |d| vs llama.cpp same file ${f.diffOwn.toFixed(5)}, argmax agreement ${(100 * f.agreement).toFixed(1)}%, ` +
    `err vs F32 original: pagellm ${f.errMine.toFixed(5)}, llama.cpp ${f.errLlama.toFixed(5)}`;
}

/** Assert the README's rule of `kind`. */
export function expectRule(kind: RuleKind, f: RuleFigures): void {
  const f32Rule = f.diffOwn <= 0.02 && f.agreement >= 0.97;
  const quantRule = f.errMine <= 1.15 * f.errLlama + 0.01;
  if (kind === "F32") {
    expect(f.diffOwn).toBeLessThanOrEqual(0.02);
    expect(f.agreement).toBeGreaterThanOrEqual(0.97);
  } else if (kind === "F16/BF16") {
    expect(f32Rule || quantRule).toBe(true);
  } else {
    expect(f.errMine).toBeLessThanOrEqual(1.15 * f.errLlama + 0.01);
  }
}
