/**
 * The KV cache's element types in WGSL (src/kv/kv-layout.ts has the layout, assembly/kv-types.ts
 * the WebAssembly side): readers that widen one value of a cached row to f32, and the writer of a
 * whole row. An f16 or q8_0 arena is an array<u32> addressed in bytes: a row starts at a multiple
 * of 4 (the layout pads rows), a half sits in one word, a q8_0 block's scale at an even byte.
 *
 *   f16   rounded to nearest even with integer operations (toHalf), the bits ggml's fp32->fp16
 *         gives, so an arena written here holds the bits the WebAssembly writer stores
 *   q8_0  ggml's quantize_row_q8_0_ref: d = amax / 127, q = roundf(x / d); WGSL's division is
 *         not correctly rounded (2.5 ulp), so a q may differ from the WebAssembly cache's by one
 *         where x / d lies within an ulp of a half-integer
 *
 * One invocation writes a whole row (a word never has two writers).
 */
import type { KVType } from "../../kv/kv-layout.ts";

/** Words of the longest row the writer assembles: 256 halves. */
const MAX_ROW_WORDS = 128;

/** `fn NAME(base: u32, c: u32) -> f32`: value c of the row at `base` of `arena` (element index for f32, byte offset otherwise). */
export function kvReaderWgsl(name: string, arena: string, type: KVType): string {
  if (type === "f32") return /* wgsl */ `fn ${name}(base: u32, c: u32) -> f32 { return ${arena}[base + c]; }`;
  if (type === "f16") return /* wgsl */ `fn ${name}(base: u32, c: u32) -> f32 { return unpack2x16float(${arena}[(base >> 2u) + (c >> 1u)])[c & 1u]; }`;
  return /* wgsl */ `fn ${name}(base: u32, c: u32) -> f32 {
  let blk = base + (c / 32u) * 34u;
  let d = unpack2x16float(${arena}[blk >> 2u])[(blk >> 1u) & 1u];
  let o = blk + 2u + c % 32u;
  let q = bitcast<i32>(${arena}[o >> 2u] << (24u - 8u * (o & 3u))) >> 24u;
  return f32(q) * d;
}`;
}

/** The WGSL element type of an arena of `type`. */
export function kvArenaElement(type: KVType): string {
  return type === "f32" ? "f32" : "u32";
}

/**
 * `toHalf(f32) -> u32` (IEEE half bits, nearest even, NaN -> 0x7e00, from 65520 up infinity) and
 * `storeKVRow(arena, wordStart, src, t)`: row `src(t, e)` for e < headDim written at word
 * wordStart of kArena or vArena, in `type`.
 */
export function kvRowWriterWgsl(type: Exclude<KVType, "f32">): string {
  const toHalf = /* wgsl */ `
fn toHalf(f: f32) -> u32 {
  let w = bitcast<u32>(f);
  let sign = (w >> 16u) & 0x8000u;
  let a = w & 0x7fffffffu;
  if (a > 0x7f800000u) { return sign | 0x7e00u; }
  if (a >= 0x477ff000u) { return sign | 0x7c00u; }
  if (a >= 0x38800000u) { return sign | ((a + 0x0fffu + ((a >> 13u) & 1u) - 0x38000000u) >> 13u); }
  if (a < 0x33000000u) { return sign; }
  // A subnormal half: the value in units of 2^-24, the significand shifted right, ties to even.
  let shift = 126u - (a >> 23u);
  let mant = (a & 0x7fffffu) | 0x800000u;
  let m = mant >> shift;
  let rem = mant & ((1u << shift) - 1u);
  let halfway = 1u << (shift - 1u);
  return sign | (m + select(0u, 1u, rem > halfway || (rem == halfway && (m & 1u) == 1u)));
}`;
  const body = type === "f16"
    ? /* wgsl */ `for (var e = 0u; e < p.headDim; e++) { words[e >> 1u] = words[e >> 1u] | (toHalf(value(src, row, t, e)) << (16u * (e & 1u))); }`
    : /* wgsl */ `for (var b = 0u; b < p.headDim / 32u; b++) {
    var x: array<f32, 32>;
    var amax = 0.0;
    for (var j = 0u; j < 32u; j++) { x[j] = value(src, row, t, b * 32u + j); amax = max(amax, abs(x[j])); }
    let d = amax / 127.0;
    let id = select(0.0, 1.0 / d, d != 0.0);
    let at = b * 34u;
    words[at >> 2u] = words[at >> 2u] | (toHalf(d) << (8u * (at & 3u)));
    for (var j = 0u; j < 32u; j++) {
      // C's roundf: halves away from zero (WGSL's round() breaks ties to even).
      let v = x[j] * id;
      let tr = trunc(v);
      let r = tr + select(select(0.0, -1.0, v - tr <= -0.5), 1.0, v - tr >= 0.5);
      let o = at + 2u + j;
      words[o >> 2u] = words[o >> 2u] | ((bitcast<u32>(i32(r)) & 0xffu) << (8u * (o & 3u)));
    }
  }`;
  return /* wgsl */ `${toHalf}
fn storeKVRow(toV: bool, wordStart: u32, src: u32, row: u32, t: u32) {
  var words: array<u32, ${MAX_ROW_WORDS}>;
  for (var w = 0u; w < ${MAX_ROW_WORDS}u; w++) { words[w] = 0u; }
  ${body}
  for (var w = 0u; w < p.rowWords; w++) {
    if (toV) { vArena[wordStart + w] = words[w]; } else { kArena[wordStart + w] = words[w]; }
  }
}`;
}
