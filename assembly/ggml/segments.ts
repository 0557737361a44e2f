// ============================================================================================
// Products over several matrices in one call: a mixture of experts' chosen experts
// ============================================================================================
//
// A segment is one product of the usual kind (one ggml matrix times T token rows of activations,
// quantized as its type reads them), described by SEGMENT_INTS i32 in a table:
//
//   type       ggml type code of the matrix (its kernels: ggml-kernels.ts)
//   w          address of the matrix, rows x rowBytes
//   rows       its rows
//   T          its tokens
//   xq xd xs   its first token's activation blocks (common.ts layout: the tokens follow, cols apart)
//   out        its output [T][rows]
//   first      its first row in the call's row space: segments are laid end to end
//
// matmulSegments computes rows [rowStart, rowEnd) of that row space: for every segment that
// overlaps them, the segment's own kernel over its local rows. A thread pool splits the row space
// like any one product's, so one dispatch covers every expert a step uses (a decode step's eight
// experts' gate and up, say) instead of one per matrix. Each output element is computed by the
// segment's kernel exactly as a call for that matrix alone computes it: the same bits.

import { matmulMXFP4, matmulQ4_0, matmulQ4_1, matmulQ5_0, matmulQ5_1, matmulQ8_0 } from "./legacy";
import { matmulQ2_K, matmulQ3_K, matmulQ4_K, matmulQ5_K, matmulQ6_K } from "./kquants";

export const SEGMENT_INTS: i32 = 9;

/** The i32 field `f` of segment s. */
@inline function field(table: usize, s: i32, f: i32): i32 {
  return load<i32>(table + (<usize>(s * SEGMENT_INTS + f) << 2));
}

/** Rows [lo, hi) of one segment through its type's kernel (`scratch`: the K-quants' per-thread scratch). */
function segmentRows(type: i32, out: usize, xq: usize, xd: usize, xs: usize, w: usize, T: i32, cols: i32, rows: i32, scratch: usize, lo: i32, hi: i32): void {
  switch (type) {
    case 8: matmulQ8_0(out, xq, xd, xs, w, T, cols, rows, lo, hi); break;
    case 2: matmulQ4_0(out, xq, xd, xs, w, T, cols, rows, lo, hi); break;
    case 3: matmulQ4_1(out, xq, xd, xs, w, T, cols, rows, lo, hi); break;
    case 6: matmulQ5_0(out, xq, xd, xs, w, T, cols, rows, lo, hi); break;
    case 7: matmulQ5_1(out, xq, xd, xs, w, T, cols, rows, lo, hi); break;
    case 39: matmulMXFP4(out, xq, xd, xs, w, T, cols, rows, lo, hi); break;
    case 10: matmulQ2_K(out, xq, xd, xs, w, T, cols, rows, scratch, lo, hi); break;
    case 11: matmulQ3_K(out, xq, xd, xs, w, T, cols, rows, scratch, lo, hi); break;
    case 12: matmulQ4_K(out, xq, xd, xs, w, T, cols, rows, scratch, lo, hi); break;
    case 13: matmulQ5_K(out, xq, xd, xs, w, T, cols, rows, scratch, lo, hi); break;
    case 14: matmulQ6_K(out, xq, xd, xs, w, T, cols, rows, scratch, lo, hi); break;
    default: unreachable();
  }
}

/** Rows [rowStart, rowEnd) of the row space of `count` segments (table above), every matrix `cols` wide. */
export function matmulSegments(table: usize, count: i32, cols: i32, scratch: usize, rowStart: i32, rowEnd: i32): void {
  for (let s = 0; s < count; s++) {
    const first = field(table, s, 8);
    const rows = field(table, s, 2);
    const lo = max(rowStart, first), hi = min(rowEnd, first + rows);
    if (lo >= hi) continue;
    segmentRows(
      field(table, s, 0), <usize>field(table, s, 7), <usize>field(table, s, 4), <usize>field(table, s, 5), <usize>field(table, s, 6),
      <usize>field(table, s, 1), field(table, s, 3), cols, rows, scratch, lo - first, hi - first,
    );
  }
}
