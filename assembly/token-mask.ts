// ============================================================================================
// Constrained decoding: a token bitmask applied to a row of logits
// ============================================================================================

/**
 * logits[t] = -Infinity for every token t < n whose bit (bit t & 31 of mask word t >> 5) is clear;
 * allowed tokens keep their logit bit for bit. A word of all ones (every token allowed) is skipped
 * and a word of zeros stores 32 -Infinity at once; others select four lanes at a time. Tokens past
 * the last whole word go through the scalar tail, which does what the lanes do.
 */
export function applyTokenBitmask(logits: usize, mask: usize, n: i32): void {
  const negInf = f32x4.splat(-Infinity);
  const laneBits = i32x4(1, 2, 4, 8);
  const zero = i32x4.splat(0);
  const words = n >>> 5;
  for (let w = 0; w < words; w++) {
    const word = load<u32>(mask + (<usize>w << 2));
    if (word == 0xffffffff) continue;
    const base = logits + (<usize>w << 7);
    if (word == 0) {
      for (let k = 0; k < 8; k++) v128.store(base + (<usize>k << 4), negInf);
      continue;
    }
    for (let k = 0; k < 8; k++) {
      const nibble = i32x4.splat(<i32>((word >>> (<u32>k << 2)) & 15));
      const keep = i32x4.ne(v128.and(nibble, laneBits), zero);
      const p = base + (<usize>k << 4);
      v128.store(p, v128.bitselect(v128.load(p), negInf, keep));
    }
  }
  for (let t = words << 5; t < n; t++) {
    const bit = (load<u32>(mask + (<usize>(t >>> 5) << 2)) >>> (<u32>t & 31)) & 1;
    if (bit == 0) store<f32>(logits + (<usize>t << 2), -Infinity);
  }
}
