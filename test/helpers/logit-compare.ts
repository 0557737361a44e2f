/**
 * The two ways tests compare a run's logits: bit for bit against another run of the engine (the
 * invariance tests: chunking, batching, threads), and within a tolerance against a float64 reference.
 */

/** True when both hold the same number of rows and every row is the same bits (NaN payloads and -0 included). */
export function sameBits(a: readonly Float32Array[], b: readonly Float32Array[]): boolean {
  const bytes = (x: Float32Array) => Buffer.from(x.buffer, x.byteOffset, x.byteLength);
  return a.length === b.length && a.every((x, p) => bytes(x).equals(bytes(b[p]!)));
}

/**
 * Normwise relative error of one position's logits `a` (engine) against `b` (reference):
 *
 *     max_j |a_j - b_j| / max(1, max_j |b_j|)
 *
 * Logits are compared as a vector, not element by element: an element-wise ratio blows up for logits that
 * happen to sit near zero, where float32 cancellation leaves an absolute error of the vector's scale, not
 * of the element's. Dividing by the vector's largest magnitude (its infinity norm) measures the error
 * against what float32 accumulation can promise and against what decides sampling (differences between
 * logits). The floor of 1 makes it an absolute error when every logit is small, so a near-zero vector is
 * not held to an impossible relative precision. NaN anywhere gives NaN (which fails every bound).
 */
export function relativeError(a: Float32Array, b: Float64Array): number {
  let maxDiff = 0;
  let maxRef = 0;
  for (let j = 0; j < b.length; j++) {
    const d = Math.abs(a[j]! - b[j]!);
    if (!(d <= maxDiff)) maxDiff = d; // also takes NaN
    maxRef = Math.max(maxRef, Math.abs(b[j]!));
  }
  return maxDiff / Math.max(1, maxRef);
}
