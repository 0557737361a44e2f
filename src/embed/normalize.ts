/**
 * Normalization of embeddings, as llama.cpp's common_embd_normalize (--embd-normalize), and
 * Matryoshka truncation: the one place both are applied, on every path (encoders, decoder
 * embedders, the server, the CLI). The sums are in f64 as llama.cpp's `double sum`, the squares
 * of the Euclidean norm in f32 as its `inp[i] * inp[i]`, the scale f32 as its `float norm`.
 */
import { RequestFieldError } from "../errors.ts";

/** llama.cpp's default: Euclidean. */
export const DEFAULT_NORMALIZE = 2;
/** Normalization 0 scales the largest magnitude to this (int16's range, as llama.cpp). */
const MAX_ABS_TARGET = 32760;

/** What `normalize` divides a vector by: 1 (-1), max |x| / 32760 (0), the Euclidean norm (2), the p-norm (1, p > 2). */
export function normDivisor(values: Float32Array, normalize: number): number {
  if (normalize === -1) return 1;
  let sum = 0;
  if (normalize === 0) {
    for (const v of values) sum = Math.max(sum, Math.abs(v));
    return sum / MAX_ABS_TARGET;
  }
  if (normalize === 2) {
    for (const v of values) sum += Math.fround(v * v);
    return Math.sqrt(sum);
  }
  for (const v of values) sum += Math.abs(v) ** normalize;
  return sum ** (1 / normalize);
}

/** `values` scaled by 1 / normDivisor (zeros stay zeros), a new array. */
export function normalized(values: Float32Array, normalize: number): Float32Array {
  const divisor = normDivisor(values, normalize);
  const scale = Math.fround(divisor > 0 ? 1 / divisor : 0);
  const out = new Float32Array(values.length);
  for (let i = 0; i < values.length; i++) out[i] = values[i]! * scale;
  return out;
}

/**
 * One pooled vector (or, with pooling `none`, each of its rows of `width`) cut to its first
 * `dimensions` values, then normalized: Matryoshka's truncation, as ollama and vLLM apply it.
 */
export function finishEmbedding(values: Float32Array, width: number, normalize: number, dimensions: number = width): Float32Array {
  const rows = values.length / width;
  const out = new Float32Array(rows * dimensions);
  for (let r = 0; r < rows; r++) out.set(normalized(values.subarray(r * width, r * width + dimensions), normalize), r * dimensions);
  return out;
}

/** The `normalize` option checked: an integer of -1 or more (llama.cpp's --embd-normalize is an int). */
export function checkNormalize(normalize: number | undefined): number {
  if (normalize === undefined) return DEFAULT_NORMALIZE;
  if (!Number.isInteger(normalize) || normalize < -1) {
    throw new RequestFieldError("normalize", `must be an integer of -1 (none), 0 (max-abs int16), 1 (taxicab), 2 (Euclidean) or p > 2, got ${normalize}`);
  }
  return normalize;
}

/** The `dimensions` option checked against the model's width: 1..width (absent: width). */
export function checkDimensions(dimensions: number | undefined, width: number): number {
  if (dimensions === undefined) return width;
  if (!Number.isInteger(dimensions) || dimensions <= 0 || dimensions > width) {
    throw new RequestFieldError("dimensions", `must be an integer from 1 to the model's width of ${width}, got ${dimensions}`);
  }
  return dimensions;
}
