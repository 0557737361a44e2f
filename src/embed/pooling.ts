/**
 * Pooling of one sequence's token vectors (rows of `width` floats) into its embedding, as
 * llama.cpp's build_pooling: mean (each row times 1/n, summed in token order in f32), cls (the
 * first row), last (the last row), none (every row). Rank pooling is the cls row through the
 * model's classifier head (EncoderModel.classify), so it is not here.
 */
import type { Pooling } from "./embed-types.ts";

/** `hidden` rows [start, start + n) of `width` pooled as `pooling` (not rank). */
export function poolRows(hidden: Float32Array, start: number, n: number, width: number, pooling: Exclude<Pooling, "rank">): Float32Array {
  const row = (t: number) => hidden.subarray((start + t) * width, (start + t + 1) * width);
  switch (pooling) {
    case "none":
      return hidden.slice(start * width, (start + n) * width);
    case "cls":
      return row(0).slice();
    case "last":
      return row(n - 1).slice();
    case "mean": {
      const out = new Float32Array(width);
      const inv = Math.fround(1 / n);
      for (let t = 0; t < n; t++) {
        const r = row(t);
        for (let i = 0; i < width; i++) out[i] = out[i]! + Math.fround(r[i]! * inv);
      }
      return out;
    }
  }
}
