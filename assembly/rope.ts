// ============================================================================================
// Rotary position embedding
// ============================================================================================
//
// cos/sin tables are [position][ropeDim/2], filled by the host once per model. Pair k of a head
// rotates by angle pos * theta^(-2k/ropeDim). The two forms differ only in which elements pair up.
// Only the first ropeDim elements of a head rotate (ropeDim = headDim in every llama-family model
// so far; partial rotary models rotate fewer); the rest pass through.

/**
 * Rotate pair k of every head by its angle: elements at pairStride*k and pairStride*k + partner
 * (in floats from the head's start), with cos/sin of pair k at the token's position.
 */
@inline function rotatePairs(
  vec: usize, positions: usize, T: i32, nHeads: i32, headDim: i32, ropeDim: i32, rowStride: i32, cosTab: usize, sinTab: usize,
  pairStride: i32, partner: i32,
): void {
  const half = ropeDim >> 1;
  for (let t = 0; t < T; t++) {
    const pos = load<i32>(positions + (<usize>t << 2));
    const c = cosTab + (<usize>(pos * half) << 2);
    const s = sinTab + (<usize>(pos * half) << 2);
    for (let h = 0; h < nHeads; h++) {
      const head = vec + (<usize>(t * rowStride + h * headDim) << 2);
      for (let k = 0; k < half; k++) {
        const p0 = head + (<usize>(k * pairStride) << 2);
        const p1 = p0 + (<usize>partner << 2);
        const v0 = load<f32>(p0), v1 = load<f32>(p1);
        const fcr = load<f32>(c + (<usize>k << 2)), fci = load<f32>(s + (<usize>k << 2));
        store<f32>(p0, v0 * fcr - v1 * fci);
        store<f32>(p1, v0 * fci + v1 * fcr);
      }
    }
  }
}

/**
 * Interleaved pairs (x[2k], x[2k+1]): llama2.c and llama.cpp's `llama` architecture.
 * vec is [T][rowStride] floats; heads of headDim floats start at the row start.
 */
export function ropeInterleaved(
  vec: usize, positions: usize, T: i32, nHeads: i32, headDim: i32, ropeDim: i32, rowStride: i32, cosTab: usize, sinTab: usize,
): void {
  rotatePairs(vec, positions, T, nHeads, headDim, ropeDim, rowStride, cosTab, sinTab, 2, 1);
}

/** Half-split pairs (x[k], x[k + ropeDim/2]): GPT-NeoX and Hugging Face Llama layouts, Qwen. */
export function ropeNeox(
  vec: usize, positions: usize, T: i32, nHeads: i32, headDim: i32, ropeDim: i32, rowStride: i32, cosTab: usize, sinTab: usize,
): void {
  rotatePairs(vec, positions, T, nHeads, headDim, ropeDim, rowStride, cosTab, sinTab, 1, ropeDim >> 1);
}
