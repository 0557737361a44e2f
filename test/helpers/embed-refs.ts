/** llama.cpp's llama-embedding references (make_encoder_refs.py: unnormalized) and the cosine the accuracy rule uses. */
import { expect } from "bun:test";
import { readFileSync } from "node:fs";

export interface EmbedRef {
  inputs: string[];
  tokens: number[][];
  embeddings: number[][];
}

export const readEmbedRef = (path: string): EmbedRef => JSON.parse(readFileSync(path, "utf8")) as EmbedRef;

/** cos(a, b), summed in f64. */
export function cosine(a: ArrayLike<number>, b: ArrayLike<number>): number {
  let dot = 0;
  let aa = 0;
  let bb = 0;
  for (let i = 0; i < a.length; i++) {
    dot += a[i]! * b[i]!;
    aa += a[i]! * a[i]!;
    bb += b[i]! * b[i]!;
  }
  return dot / Math.sqrt(aa * bb);
}

/**
 * llama.cpp's rule on every input: err(E) = 1 - cos(E, llama.cpp's F32 embedding), err(ours) <=
 * 1.15 x err(llama.cpp on the quantized file) + 0.0001, and each input's token count llama.cpp's.
 */
export function expectEmbeddingRule(ours: { embeddings: readonly { values: ArrayLike<number>; tokenCount: number }[] }, quantized: EmbedRef, f32: EmbedRef): void {
  expect(ours.embeddings.length).toBe(quantized.inputs.length);
  ours.embeddings.forEach((e, i) => {
    const mine = 1 - cosine(e.values, f32.embeddings[i]!);
    const theirs = 1 - cosine(quantized.embeddings[i]!, f32.embeddings[i]!);
    expect(e.tokenCount).toBe(quantized.tokens[i]!.length);
    expect(mine).toBeLessThanOrEqual(1.15 * theirs + 1e-4);
  });
}
