/**
 * The typed face of the WebAssembly kernels (assembly/index.ts). Every argument named like a
 * buffer is a byte address in the shared linear memory; counts are in elements.
 */
export interface Kernels {
  heapBase(): number;
  // matmul.ts
  packF32(dst: number, src: number, n: number, d: number): void;
  unpackRowF32(out: number, w: number, n: number, d: number, r: number): void;
  embedF32(out: number, w: number, tokens: number, T: number, n: number, d: number): void;
  matmulF32(
    out: number, x: number, w: number, T: number, n: number, d: number, outStride: number, acc: number,
    rowStart: number, rowEnd: number,
  ): void;
  matmulF32Multi(table: number, count: number, x: number, T: number, d: number, acc: number, rowStart: number, rowEnd: number): void;
  /** Bytes of the per-thread `acc` scratch matmulF32 and matmulF32Multi take. */
  matmulScratchBytes(): number;
  matvecScalarF32(out: number, x: number, w: number, n: number, d: number): void;
  streamSumF32(out: number, x: number, start: number, end: number): void;
  // quant.ts
  quantizeQ8(xq: number, xs: number, x: number, T: number, d: number, gs: number): void;
  matmulQ8(
    out: number, xq: number, xs: number, wq: number, ws: number,
    T: number, d: number, gs: number, outStride: number, rowStart: number, rowEnd: number,
  ): void;
  embedQ8(out: number, wq: number, ws: number, tokens: number, T: number, d: number, gs: number): void;
  // norm.ts
  rmsnorm(out: number, x: number, w: number, T: number, n: number, eps: number): void;
  // encoder.ts
  /** out[t] = ((x[t] - mean) / sqrt(variance + eps)) * w + b, T rows of n (ggml_norm's sums in f64); out may alias x. */
  layerNorm(out: number, x: number, w: number, b: number, T: number, n: number, eps: number): void;
  /** layerNorm's scalar reference (the same bits). */
  layerNormRef(out: number, x: number, w: number, b: number, T: number, n: number, eps: number): void;
  /** Attention in both directions within each sequence (seqStarts: i32 token offsets, numSeqs + 1), items (sequence, head) [itemStart, itemEnd). */
  encoderAttention(
    out: number, q: number, k: number, v: number, seqStarts: number,
    nHeads: number, nKvHeads: number, headDim: number, qStride: number, kvStride: number, scale: number,
    scores: number, itemStart: number, itemEnd: number,
  ): void;
  // rope.ts
  ropeInterleaved(
    vec: number, positions: number, T: number, nHeads: number, headDim: number, ropeDim: number, rowStride: number, cosTab: number, sinTab: number,
  ): void;
  ropeNeox(
    vec: number, positions: number, T: number, nHeads: number, headDim: number, ropeDim: number, rowStride: number, cosTab: number, sinTab: number,
  ): void;
  // activation.ts
  swiglu(a: number, b: number, n: number): void;
  /** a[i] = gpt-oss's clamped SwiGLU of a[i] (gate) and b[i] (up), n elements. */
  swigluOai(a: number, b: number, n: number): void;
  /** a[i] = gelu(a[i]) * b[i], tanh GELU (gemma3's GeGLU). */
  geglu(a: number, b: number, n: number): void;
  scaleInPlace(x: number, s: number, n: number): void;
  addInPlace(x: number, y: number, n: number): void;
  addRows(x: number, bias: number, T: number, n: number): void;
  softmax(x: number, n: number): void;
  gatherRows(out: number, src: number, rows: number, R: number, n: number): void;
  /** out[t] = sum over r < k, in order, of weights[t*k+r] * src[rows[t*k+r]]: rows of n floats (experts' outputs mixed). */
  weightedRowSum(out: number, src: number, rows: number, weights: number, T: number, k: number, n: number): void;
  // math.ts
  expF32(out: number, x: number, n: number): void;
  // attention.ts
  /** kvType: src/kv/kv-layout.ts KV_TYPE_CODE; rowBytes: the layout's bytes of one head's row. */
  writeKV(
    kLayer: number, vLayer: number, k: number, v: number, slots: number,
    T: number, nKvHeads: number, headDim: number, blockSize: number, numBlocks: number, kvType: number, rowBytes: number,
  ): void;
  pagedAttention(
    out: number, q: number, kLayer: number, vLayer: number, seqInfo: number,
    nHeads: number, nKvHeads: number, headDim: number, blockSize: number, numBlocks: number, qStride: number,
    kvType: number, rowBytes: number, scale: number, window: number, sinks: number, scratch: number, itemStart: number, itemEnd: number,
  ): void;
  // kv-types.ts: the KV cache's element types
  /** IEEE half bits of x, nearest even (ggml_compute_fp32_to_fp16). */
  f32ToHalf(x: number): number;
  /** n values (whole 32-value blocks) as ggml block_q8_0, as quantize_row_q8_0_ref. */
  quantizeRowQ8_0(dst: number, src: number, n: number): void;
  storeKVRow(dst: number, src: number, n: number, kvType: number): void;
  /** A cache row of n values as f32: SIMD, and its scalar reference. */
  kvRowToF32(dst: number, src: number, n: number, kvType: number): void;
  kvRowToF32Ref(dst: number, src: number, n: number, kvType: number): void;
  /** An f16 row of n values as f32 times 2^-112 (attention's fast f16 widening): SIMD, and its scalar reference. */
  halfRowScaled(dst: number, src: number, n: number): void;
  halfRowScaledRef(dst: number, src: number, n: number): void;
  // runq.ts: llama2.c runq.c's arithmetic, bit for bit (numerics "runq")
  rmsnormRunq(out: number, x: number, w: number, T: number, n: number, eps: number, final: number): void;
  quantizeQ8Runq(xq: number, xs: number, x: number, T: number, d: number, gs: number): void;
  matmulQ8Runq(
    out: number, xq: number, xs: number, wq: number, ws: number,
    T: number, d: number, gs: number, outStride: number, rowStart: number, rowEnd: number,
  ): void;
  swigluRunq(a: number, b: number, T: number, n: number): void;
  ropeTablesRunq(cosTab: number, sinTab: number, seqLen: number, headDim: number, lnTheta: number): void;
  pagedAttentionRunq(
    out: number, q: number, kLayer: number, vLayer: number, seqInfo: number,
    nHeads: number, nKvHeads: number, headDim: number, blockSize: number, numBlocks: number, qStride: number,
    scores: number, itemStart: number, itemEnd: number,
  ): void;
  /** Test probe: 0 glibc expf, 1 libmvec expf, 2 sinf, 3 cosf (glibc sincosf), 4 vrcp14ps, 5 rcpps, 6 rsqrtss, 7 rsqrt+Newton. */
  runqMath(which: number, x: number): number;
  /** Test probe: f32 fused multiply-add under flush-to-zero. */
  runqFma(a: number, b: number, c: number): number;
  // ggml/: block types as GGUF files store them (see src/backend/wasm/ggml-kernels.ts)
  quantizeActQ8(xq: number, xd: number, xs: number, x: number, T: number, cols: number, block: number): void;
  /** Fill the table of every half as f32 the block kernels read their scales from (once per memory). */
  buildHalfTable(): void;
  halfTableAddress(): number;
  actBytesPerToken(cols: number): number;
  matmulF16: HalfMatmul;
  matmulBF16: HalfMatmul;
  /** Per-thread scratch bytes of matmulF16 and matmulBF16 for rows of `cols` values (one row widened to f32). */
  halfRowScratchBytes(cols: number): number;
  /** dst[i] = x[i] rounded to bfloat16 (bf16 = 1) or IEEE half (0), nearest even, as f32; n values. */
  roundActivations(dst: number, x: number, n: number, bf16: number): void;
  matmulQ8_0: BlockMatmul;
  matmulQ4_0: BlockMatmul;
  matmulQ4_1: BlockMatmul;
  matmulQ5_0: BlockMatmul;
  matmulQ5_1: BlockMatmul;
  matmulMXFP4: BlockMatmul;
  matmulQ2_K: SuperBlockMatmul;
  matmulQ3_K: SuperBlockMatmul;
  matmulQ4_K: SuperBlockMatmul;
  matmulQ5_K: SuperBlockMatmul;
  matmulQ6_K: SuperBlockMatmul;
  /** Scratch bytes a K-quant product unpacks one row of `cols` values into (after its 64-byte minimum slot). */
  unpackedRowBytes(cols: number): number;
  embedF16: BlockEmbed;
  embedBF16: BlockEmbed;
  embedQ8_0: BlockEmbed;
  embedQ4_0: BlockEmbed;
  embedQ4_1: BlockEmbed;
  embedQ5_0: BlockEmbed;
  embedQ5_1: BlockEmbed;
  embedMXFP4: BlockEmbed;
  embedQ2_K: BlockEmbed;
  embedQ3_K: BlockEmbed;
  embedQ4_K: BlockEmbed;
  embedQ5_K: BlockEmbed;
  embedQ6_K: BlockEmbed;
  /**
   * Rows [rowStart, rowEnd) of the row space of `count` products laid end to end (a table of
   * SEGMENT_INTS i32 each: type, w, rows, T, xq, xd, xs, out, first row; assembly/ggml/segments.ts).
   */
  matmulSegments(table: number, count: number, cols: number, scratch: number, rowStart: number, rowEnd: number): void;
  /** Q5_0 blocks at src rewritten as Q8_0 blocks of the same values at dst. */
  transcodeQ5_0ToQ8_0(dst: number, src: number, blocks: number): void;
}

/**
 * out[t][r] = row r of the 16-bit float matrix w dotted with f32 x[t], rows [rowStart, rowEnd);
 * scratch: this thread's halfRowScratchBytes(cols).
 */
export type HalfMatmul = (
  out: number, x: number, w: number, T: number, cols: number, outStride: number, scratch: number, rowStart: number, rowEnd: number,
) => void;

/**
 * out[t][r] = row r of the block-type matrix w dotted with token t's int8 activations (xq, xd, xs
 * from quantizeActQ8), rows [rowStart, rowEnd).
 */
export type BlockMatmul = (
  out: number, xq: number, xd: number, xs: number, w: number, T: number, cols: number, outStride: number, rowStart: number, rowEnd: number,
) => void;

/** A K-quant product: as BlockMatmul, with per-thread scratch (CpuBackend.superBlockScratchBytes) before the range. */
export type SuperBlockMatmul = (
  out: number, xq: number, xd: number, xs: number, w: number, T: number, cols: number, outStride: number, scratch: number,
  rowStart: number, rowEnd: number,
) => void;

/** out[t] = row tokens[t] of w as f32 (cols values). */
export type BlockEmbed = (out: number, w: number, tokens: number, T: number, cols: number) => void;

export type KernelName = keyof Kernels;

/** i32 fields per segment of matmulF32Multi's table: weight, out, rows, out stride, first row. */
export const MULTI_SEGMENT_INTS = 5;
/** i32 per product of matmulSegments' table (assembly/ggml/segments.ts): type, w, rows, T, xq, xd, xs, out, first row. */
export const GGML_SEGMENT_INTS = 9;

/** Positions per online-softmax step of pagedAttention (assembly/attention.ts ATTN_TILE). */
export const ATTN_TILE = 16;

/** Query heads pagedAttention computes together over one tile (assembly/attention-tile.ts HEAD_BATCH). */
export const ATTN_HEAD_BATCH = 4;

/**
 * Bytes of pagedAttention scratch one thread needs for `queryRows` (query, head) rows of one item
 * and heads of `headDim`: a batch of heads' scores and rescale factors, three row-address arrays,
 * the widened K and V tile, the states.
 */
export function attentionScratchBytes(queryRows: number, headDim: number): number {
  return 4 * (ATTN_HEAD_BATCH * (ATTN_TILE + 1) + 3 * ATTN_TILE + 2 * ATTN_TILE * headDim + 2 * queryRows);
}
