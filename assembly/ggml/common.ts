// ============================================================================================
// Shared pieces of the ggml block-type kernels: half floats, int8 activations, integer dots
// ============================================================================================
//
// Every quantized product here is computed as llama.cpp computes it on a CPU: the activations of
// a token are quantized to int8 in blocks (32 values for the 32-value weight types, 256 for the
// K-quants, one f32 scale each), each weight block is unpacked to small unsigned integers, and
// dots are exact integer sums. Only the float part has an order: per output element, block after
// block in row order,
//   acc[lane] += f32(isum[lane]) * (weightScale * activationScale)      (four fixed lanes)
//   mins      += minimumTerm                                            (weights with a minimum)
//   result     = ((acc0 + acc1) + (acc2 + acc3)) + mins
// so an element's bits never depend on how many tokens share the call or which rows a thread got.
//
// Activation buffers for T tokens of `cols` values (cols a multiple of the block):
//   xq  i8  [T][cols]          quantized values, |q| <= 127
//   xd  f32 [T][cols/block]    the scale of each block
//   xs  i32 [T][cols/16]       256-value blocks: the sum of the quantized values of each 16;
//       i32 [T][cols/32]       32-value blocks: the sum of each block (for offsets and minimums)
//
// The dot is WebAssembly's relaxed i8 x i7 dot product (x86 pmaddubsw + pmaddwd): its second
// operand must lie in 0..127, where every implementation computes the same exact sums, so weights
// enter it unsigned (ggml's stored values before their offset) and the offset is taken out with
// the activations' sums, exactly.

/**
 * IEEE half to f32, exact for every half. A normal half only needs its exponent re-biased (an
 * integer add); a subnormal one is its mantissa times 2^-24, a multiply of normal numbers. (The
 * obvious multiply of the shifted bits by 2^112 is exact too, but on a subnormal f32 when the
 * half is subnormal, which x86 runs through a slow microcode path: Q6_K scales of small weights
 * are subnormal halves.)
 */
@inline export function halfToF32(h: u32): f32 {
  // Normal halves (nearly every scale): sign-extended, fields shifted into place, sign kept by the
  // mask, exponent re-biased by an integer add. The rest (zeros, subnormals, inf/NaN) on a branch.
  const signed = (<i32>(<i16>h) << 13) & 0x8fffe000;
  if (<u32>((signed & 0x0fffe000) - 0x00800000) < 0x0f000000) return reinterpret<f32>(signed + 0x38000000);
  return rareHalfToF32(h);
}

/** halfToF32 for zeros, subnormals (mantissa * 2^-24, a multiply of normal numbers), inf and NaN. */
function rareHalfToF32(h: u32): f32 {
  const sign = (h & 0x8000) << 16;
  const em = h & 0x7fff;
  if (em < 0x0400) return reinterpret<f32>(reinterpret<u32>(<f32>em * <f32>5.9604644775390625e-8) | sign);
  return reinterpret<f32>((em << 13) | 0x7f800000 | sign);
}

/**
 * halfToF32 of every half (65536 f32, 256 KiB) at a fixed address the host reserves for it just
 * above the static data (src/backend/wasm/wasm.ts), filled once per memory by buildHalfTable. A block
 * scale then costs one load instead of a dozen scalar instructions (~10% of a Q8_0 or Q4_0 product
 * on one thread). The scales of one matrix span a few binades, a few KiB of the table.
 */
const HALF_TABLE: usize = 65536;

/** The address of the half table, for the host to check against its reservation. */
export function halfTableAddress(): usize {
  return HALF_TABLE;
}

/** Fill the half table (once per memory: every instance over the memory reads the same table). */
export function buildHalfTable(): void {
  for (let h: u32 = 0; h < 65536; h++) store<f32>(HALF_TABLE + (<usize>h << 2), halfToF32(h));
}

/** The half at p as f32, from the half table (exact: the table holds halfToF32). */
@inline export function loadHalf(p: usize): f32 {
  return load<f32>(HALF_TABLE + (<usize>load<u16>(p) << 2));
}

/** acc + dot(x, u) over 16 pairs, four consecutive products per i32 lane; u must hold 0..127. */
@inline export function dotAdd(x: v128, u: v128, acc: v128): v128 {
  return i32x4.relaxed_dot_i8x16_i7x16_add_s(x, u, acc);
}

/** acc + f32(isum) * scale, lane by lane. */
@inline export function accumulate(acc: v128, isum: v128, scale: f32): v128 {
  return f32x4.add(acc, f32x4.mul(f32x4.convert_i32x4_s(isum), f32x4.splat(scale)));
}

/** The fixed reduction of four lanes. */
@inline export function sumLanes(v: v128): f32 {
  return (f32x4.extract_lane(v, 0) + f32x4.extract_lane(v, 1)) + (f32x4.extract_lane(v, 2) + f32x4.extract_lane(v, 3));
}

/** The sum of the four i32 lanes (exact in any order: integers). */
@inline export function laneTotal(v: v128): i32 {
  return i32x4.extract_lane(v, 0) + i32x4.extract_lane(v, 1) + i32x4.extract_lane(v, 2) + i32x4.extract_lane(v, 3);
}

/** Sum of all 16 int8 lanes as i32 (exact). */
@inline function sumI8(v: v128): i32 {
  return laneTotal(i32x4.extadd_pairwise_i16x8_s(i16x8.extadd_pairwise_i8x16_s(v)));
}

/** Bytes of activation scratch one token of `cols` values needs (xq, xd and xs together, 32-value blocks). */
export function actBytesPerToken(cols: i32): i32 {
  return cols + (cols >> 5) * 4 + (cols >> 4) * 4;
}

/**
 * Quantize x[T][cols] (f32) to int8 blocks of `block` (32 or 256) values: d = max|x| / 127,
 * q = nearest(x / d) (a block of zeros gets d = 0 and q = 0). Writes xq, xd and xs as above.
 */
export function quantizeActQ8(xq: usize, xd: usize, xs: usize, x: usize, T: i32, cols: i32, block: i32): void {
  const nb = cols / block;
  for (let t = 0; t < T; t++) {
    for (let b = 0; b < nb; b++) {
      const src = x + (<usize>(t * cols + b * block) << 2);
      let m = f32x4.abs(v128.load(src));
      for (let i = 4; i < block; i += 4) m = f32x4.max(m, f32x4.abs(v128.load(src + (<usize>i << 2))));
      const amax = max(max(f32x4.extract_lane(m, 0), f32x4.extract_lane(m, 1)), max(f32x4.extract_lane(m, 2), f32x4.extract_lane(m, 3)));
      const d: f32 = amax / 127;
      const inv = f32x4.splat(d != 0 ? <f32>1 / d : 0);
      store<f32>(xd + (<usize>(t * nb + b) << 2), d);
      let blockSum = 0;
      for (let s = 0; s < block; s += 16) {
        const p = src + (<usize>s << 2);
        const q0 = i32x4.trunc_sat_f32x4_s(f32x4.nearest(f32x4.mul(v128.load(p), inv)));
        const q1 = i32x4.trunc_sat_f32x4_s(f32x4.nearest(f32x4.mul(v128.load(p, 16), inv)));
        const q2 = i32x4.trunc_sat_f32x4_s(f32x4.nearest(f32x4.mul(v128.load(p, 32), inv)));
        const q3 = i32x4.trunc_sat_f32x4_s(f32x4.nearest(f32x4.mul(v128.load(p, 48), inv)));
        const q = i8x16.narrow_i16x8_s(i16x8.narrow_i32x4_s(q0, q1), i16x8.narrow_i32x4_s(q2, q3));
        const at = t * cols + b * block + s;
        v128.store(xq + <usize>at, q);
        if (block == 32) blockSum += sumI8(q);
        else store<i32>(xs + (<usize>(at >> 4) << 2), sumI8(q));
      }
      if (block == 32) store<i32>(xs + (<usize>(t * nb + b) << 2), blockSum);
    }
  }
}
