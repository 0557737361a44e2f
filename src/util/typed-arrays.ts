/** The arrays end to end, in a new array of their type (the one array itself when there is one). */
export function concatArrays<A extends Float32Array | Uint8Array>(arrays: readonly A[]): A {
  if (arrays.length === 1) return arrays[0]!;
  const out = new (arrays[0]!.constructor as new (n: number) => A)(arrays.reduce((n, a) => n + a.length, 0));
  let at = 0;
  for (const a of arrays) {
    out.set(a, at);
    at += a.length;
  }
  return out;
}
