/**
 * Writes llama2.c checkpoints (the `.bin` files of karpathy/llama2.c) in all three layouts its tools use:
 *
 * - "legacy" (version 0, read by run.c): a 28-byte header of 7 int32, then fp32 tensors, then the unused
 *   RoPE tables, then the classifier when it is not shared (signalled by a negative vocab_size).
 * - "v1" (export.py `version1_export`): a 256-byte "ak42" header, then fp32 tensors, norms first.
 * - "v2" (export.py `version2_export`, read by runq.c): a 256-byte "ak42" header with a group size, the
 *   fp32 norms, then every matrix as Q8_0: int8 values followed by one fp32 scale per group.
 *
 * Files are streamed tensor by tensor straight from the weight arrays, so writing a 440 MB model never
 * holds a second full copy of it (v2 holds one quantized tensor at a time).
 */
import { closeSync, openSync, writeSync } from "node:fs";
import { InputError } from "../errors.ts";
import type { ModelConfig } from "../model/config.ts";

// ----------------------------------------------------------------------------
// Weights

/**
 * All weights of a llama2.c model, each a flat row-major fp32 array. `L` = nLayers,
 * `kvDim` = nKvHeads * headDim, `hidden` = hiddenDim; matrices are [out][in] as llama2.c stores them.
 */
export interface Llama2cWeights {
  /** [vocab][dim] */
  tokenEmbedding: Float32Array;
  /** [L][dim] attention RMSNorm gains. */
  rmsAtt: Float32Array;
  /** [L][dim][dim] query projection. */
  wq: Float32Array;
  /** [L][kvDim][dim] key projection. */
  wk: Float32Array;
  /** [L][kvDim][dim] value projection. */
  wv: Float32Array;
  /** [L][dim][dim] attention output projection. */
  wo: Float32Array;
  /** [L][dim] feed-forward RMSNorm gains. */
  rmsFfn: Float32Array;
  /** [L][hidden][dim] SwiGLU gate projection. */
  w1: Float32Array;
  /** [L][dim][hidden] SwiGLU down projection. */
  w2: Float32Array;
  /** [L][hidden][dim] SwiGLU up projection. */
  w3: Float32Array;
  /** [dim] final RMSNorm gains. */
  rmsFinal: Float32Array;
  /** [vocab][dim] output classifier; null = shared with tokenEmbedding. */
  wcls: Float32Array | null;
}

/** The three on-disk layouts; see the file comment. */
export type Llama2cFormat = "legacy" | "v1" | "v2";

/** Names of the matrix (non-norm) tensors that are stacked over layers. */
export type Llama2cLayerMatrix = "wq" | "wk" | "wv" | "wo" | "w1" | "w2" | "w3";

/** Per-layer element count of one tensor of each kind (whole-model counts are these times nLayers). */
export interface Llama2cTensorSizes {
  tokenEmbedding: number;
  /** One layer's norm gains (rmsAtt and rmsFfn). */
  norm: number;
  wq: number;
  wk: number;
  wv: number;
  wo: number;
  w1: number;
  w2: number;
  w3: number;
  rmsFinal: number;
  wcls: number;
  /** One of the two legacy RoPE tables, [seqLen][headDim/2]. */
  ropeTable: number;
}

/** "ak42" in ASCII, read as a little-endian uint32: the magic of v1 and v2 files. */
export const LLAMA2C_MAGIC = 0x616b3432;
/** Bytes of the v1/v2 header (padded with zeros). */
export const LLAMA2C_HEADER_BYTES = 256;
/** Bytes of the legacy header: 7 int32. */
export const LLAMA2C_LEGACY_HEADER_BYTES = 28;
/** export.py's default (starting) Q8_0 group size. */
export const DEFAULT_Q80_GROUP_SIZE = 64;

/** Throws unless `config` is a shape llama2.c can represent. */
export function checkLlama2cConfig(config: ModelConfig): void {
  const { dim, hiddenDim, nLayers, nHeads, nKvHeads, vocabSize, seqLen, headDim } = config;
  for (const [name, value] of Object.entries({ dim, hiddenDim, nLayers, nHeads, nKvHeads, vocabSize, seqLen })) {
    if (!Number.isInteger(value) || value <= 0 || value > 0x7fffffff) {
      throw new InputError(`llama2.c config: ${name} must be a positive int32, got ${value}`);
    }
  }
  // llama2.c derives head_size = dim / n_heads and never stores it, so the shape must agree.
  if (dim % nHeads !== 0 || headDim !== dim / nHeads) {
    throw new InputError(`llama2.c config: headDim ${headDim} must equal dim ${dim} / nHeads ${nHeads}`);
  }
  if (headDim % 2 !== 0) throw new InputError(`llama2.c config: headDim ${headDim} must be even for RoPE`);
  if (nHeads % nKvHeads !== 0) {
    throw new InputError(`llama2.c config: nHeads ${nHeads} must be a multiple of nKvHeads ${nKvHeads}`);
  }
}

/** Per-layer element counts of every tensor, following run.c's memory_map_weights. */
export function llama2cTensorSizes(config: ModelConfig): Llama2cTensorSizes {
  const { dim, hiddenDim, vocabSize, seqLen, headDim, nKvHeads } = config;
  const kvDim = nKvHeads * headDim;
  return {
    tokenEmbedding: vocabSize * dim,
    norm: dim,
    wq: dim * dim,
    wk: kvDim * dim,
    wv: kvDim * dim,
    wo: dim * dim,
    w1: hiddenDim * dim,
    w2: dim * hiddenDim,
    w3: hiddenDim * dim,
    rmsFinal: dim,
    wcls: vocabSize * dim,
    ropeTable: seqLen * (headDim / 2),
  };
}

/** The matrices in the order every format stores them (after the embedding). */
const LAYER_MATRICES: readonly Llama2cLayerMatrix[] = ["wq", "wk", "wv", "wo", "w1", "w2", "w3"];

/** Throws unless every weight array has exactly the length `config` implies. */
export function checkLlama2cWeights(config: ModelConfig, weights: Llama2cWeights): void {
  const sizes = llama2cTensorSizes(config);
  const L = config.nLayers;
  const expected: [string, Float32Array | null, number][] = [
    ["tokenEmbedding", weights.tokenEmbedding, sizes.tokenEmbedding],
    ["rmsAtt", weights.rmsAtt, L * sizes.norm],
    ["rmsFfn", weights.rmsFfn, L * sizes.norm],
    ["rmsFinal", weights.rmsFinal, sizes.rmsFinal],
    ...LAYER_MATRICES.map((name): [string, Float32Array, number] => [name, weights[name], L * sizes[name]]),
  ];
  if (weights.wcls !== null) expected.push(["wcls", weights.wcls, sizes.wcls]);
  for (const [name, array, length] of expected) {
    if (array === null || array.length !== length) {
      throw new InputError(`llama2.c weights: ${name} has ${array?.length} elements, config needs ${length}`);
    }
  }
}

// ----------------------------------------------------------------------------
// Q8_0 quantization (export.py quantize_q80)

/** Round half to even, as torch.round does (C's round() would send halves away from zero). */
function roundHalfEven(x: number): number {
  const r = Math.round(x); // rounds halves up
  return r - x === 0.5 && r % 2 !== 0 ? r - 1 : r;
}

/**
 * Symmetric int8 quantization in groups of `groupSize` consecutive elements, bit-for-bit as export.py's
 * quantize_q80 computes it in float32: scale = max|w| / 127, q = round(w / scale), range [-127, 127].
 * An all-zero group gets scale 0 and q 0 (torch would produce NaN there).
 */
export function quantizeQ80(w: Float32Array, groupSize: number): { q: Int8Array; s: Float32Array } {
  if (!Number.isInteger(groupSize) || groupSize <= 0 || w.length % groupSize !== 0) {
    throw new InputError(`quantizeQ80: ${w.length} elements are not whole groups of ${groupSize}`);
  }
  const nGroups = w.length / groupSize;
  const q = new Int8Array(w.length);
  const s = new Float32Array(nGroups);
  for (let g = 0; g < nGroups; g++) {
    const start = g * groupSize;
    const end = start + groupSize;
    let wmax = 0;
    for (let i = start; i < end; i++) {
      const a = Math.abs(w[i]!);
      if (a > wmax) wmax = a;
    }
    // fround after each operation reproduces float32 arithmetic exactly (f64 has > 2*24+2 bits).
    const scale = Math.fround(wmax / 127);
    s[g] = scale;
    if (scale === 0) continue;
    for (let i = start; i < end; i++) {
      const v = roundHalfEven(Math.fround(w[i]! / scale));
      q[i] = v > 127 ? 127 : v < -127 ? -127 : v;
    }
  }
  return { q, s };
}

/**
 * The Q8_0 group size to write a v2 file with.
 *
 * Explicit `requested`: used as is; it must divide dim, which is export.py's requirement (every tensor's
 * element count is a multiple of dim, so its per-tensor assertion then holds). Groups may then straddle
 * matrix rows when it does not divide hiddenDim, as in stories260K_q80.bin (group 32, hidden 172).
 *
 * Default: export.py starts at 64 and halves until the size divides dim; this also halves until it divides
 * hiddenDim, so every matrix row is a whole number of groups (runq.c's matmul assumes that). Both rules
 * agree on stories15M (32), stories110M (64) and SmolLM2-135M (64).
 */
export function v2GroupSize(config: ModelConfig, requested?: number): number {
  if (requested !== undefined) {
    if (!Number.isInteger(requested) || requested <= 0 || config.dim % requested !== 0) {
      throw new InputError(`llama2.c v2: group size ${requested} must divide dim ${config.dim}`);
    }
    return requested;
  }
  let groupSize = DEFAULT_Q80_GROUP_SIZE;
  while (config.dim % groupSize !== 0 || config.hiddenDim % groupSize !== 0) groupSize /= 2;
  return groupSize;
}

// ----------------------------------------------------------------------------
// Layout

/** Exact file size in bytes of a llama2.c checkpoint of this shape and format. */
export function llama2cFileSize(
  config: ModelConfig,
  format: Llama2cFormat,
  sharedClassifier: boolean,
  groupSize?: number,
): number {
  const t = llama2cTensorSizes(config);
  const L = config.nLayers;
  const normFloats = 2 * L * t.norm + t.rmsFinal;
  const matrixElements =
    t.tokenEmbedding + L * (t.wq + t.wk + t.wv + t.wo + t.w1 + t.w2 + t.w3) + (sharedClassifier ? 0 : t.wcls);
  switch (format) {
    case "legacy":
      return LLAMA2C_LEGACY_HEADER_BYTES + 4 * (normFloats + matrixElements + 2 * t.ropeTable);
    case "v1":
      return LLAMA2C_HEADER_BYTES + 4 * (normFloats + matrixElements);
    case "v2": {
      const gs = v2GroupSize(config, groupSize);
      return LLAMA2C_HEADER_BYTES + 4 * normFloats + matrixElements + 4 * (matrixElements / gs);
    }
  }
}

/**
 * The legacy file's RoPE tables ([seqLen][headDim/2] cos, then sin), computed in float32 like model.py's
 * precompute_freqs_cis. run.c skips them; they exist only so legacy files have the right layout.
 */
export function legacyRopeTables(config: ModelConfig): { cos: Float32Array; sin: Float32Array } {
  const half = config.headDim / 2;
  const cos = new Float32Array(config.seqLen * half);
  const sin = new Float32Array(config.seqLen * half);
  const f = Math.fround;
  for (let i = 0; i < half; i++) {
    const freq = f(1 / f(f(config.ropeTheta) ** f((2 * i) / config.headDim)));
    for (let pos = 0; pos < config.seqLen; pos++) {
      const angle = f(pos * freq);
      cos[pos * half + i] = Math.cos(angle);
      sin[pos * half + i] = Math.sin(angle);
    }
  }
  return { cos, sin };
}

// ----------------------------------------------------------------------------
// Streaming output

/** Largest slice handed to one write call; the data itself is never copied. */
const WRITE_SLICE_BYTES = 64 << 20;

/** Writes whole byte ranges to a file descriptor, looping over short writes. */
class BinaryFileSink {
  bytesWritten = 0;
  constructor(private readonly fd: number) {}

  bytes(data: Uint8Array): void {
    for (let off = 0; off < data.length; off += WRITE_SLICE_BYTES) {
      let slice = data.subarray(off, Math.min(off + WRITE_SLICE_BYTES, data.length));
      while (slice.length > 0) {
        const n = writeSync(this.fd, slice);
        slice = slice.subarray(n);
        this.bytesWritten += n;
      }
    }
  }

  /** fp32 values in little-endian order: a view of the array's own memory. */
  f32(data: Float32Array): void {
    this.bytes(new Uint8Array(data.buffer, data.byteOffset, data.byteLength));
  }

  i8(data: Int8Array): void {
    this.bytes(new Uint8Array(data.buffer, data.byteOffset, data.byteLength));
  }
}

function isLittleEndian(): boolean {
  return new Uint8Array(new Uint32Array([1]).buffer)[0] === 1;
}

/** The 7 int32 of llama2.c's Config struct, in order. */
function configInts(config: ModelConfig, vocabField: number): number[] {
  const { dim, hiddenDim, nLayers, nHeads, nKvHeads, seqLen } = config;
  return [dim, hiddenDim, nLayers, nHeads, nKvHeads, vocabField, seqLen];
}

function legacyHeader(config: ModelConfig, sharedClassifier: boolean): Uint8Array {
  const header = new DataView(new ArrayBuffer(LLAMA2C_LEGACY_HEADER_BYTES));
  // A negative vocab_size is how the legacy format says "the classifier is not shared".
  const ints = configInts(config, sharedClassifier ? config.vocabSize : -config.vocabSize);
  ints.forEach((v, i) => header.setInt32(4 * i, v, true));
  return new Uint8Array(header.buffer);
}

/** v1/v2 header: magic, version, 7 ints, shared byte, (v2) int32 group size right after it, zeros. */
function akHeader(config: ModelConfig, version: 1 | 2, sharedClassifier: boolean, groupSize: number): Uint8Array {
  const header = new DataView(new ArrayBuffer(LLAMA2C_HEADER_BYTES));
  header.setUint32(0, LLAMA2C_MAGIC, true);
  header.setInt32(4, version, true);
  configInts(config, config.vocabSize).forEach((v, i) => header.setInt32(8 + 4 * i, v, true));
  header.setUint8(36, sharedClassifier ? 1 : 0);
  // struct.pack('i') in its own call is unaligned: the group size sits at byte 37.
  if (version === 2) header.setInt32(37, groupSize, true);
  return new Uint8Array(header.buffer);
}

/** Splits a layer-stacked tensor into its per-layer views. */
function perLayer(stacked: Float32Array, nLayers: number): Float32Array[] {
  const size = stacked.length / nLayers;
  return Array.from({ length: nLayers }, (_, l) => stacked.subarray(l * size, (l + 1) * size));
}

// ----------------------------------------------------------------------------
// Writer

/**
 * Writes `weights` to `path` as a llama2.c checkpoint. The classifier is shared exactly when
 * `weights.wcls` is null (config.sharedClassifier is not consulted). For "v2", `opts.groupSize`
 * follows v2GroupSize's rules.
 */
export function writeLlama2c(
  path: string,
  config: ModelConfig,
  weights: Llama2cWeights,
  format: Llama2cFormat,
  opts: { groupSize?: number } = {},
): void {
  checkLlama2cConfig(config);
  checkLlama2cWeights(config, weights);
  if (!isLittleEndian()) throw new InputError("writeLlama2c: llama2.c files are little-endian; this host is not");
  const shared = weights.wcls === null;
  const groupSize = format === "v2" ? v2GroupSize(config, opts.groupSize) : 0;
  const fd = openSync(path, "w");
  try {
    const out = new BinaryFileSink(fd);
    switch (format) {
      case "legacy": writeLegacyBody(out, config, weights, shared); break;
      case "v1": writeV1Body(out, config, weights, shared); break;
      case "v2": writeV2Body(out, config, weights, shared, groupSize); break;
    }
    const expected = llama2cFileSize(config, format, shared, format === "v2" ? groupSize : undefined);
    if (out.bytesWritten !== expected) {
      throw new Error(`writeLlama2c: wrote ${out.bytesWritten} bytes, layout says ${expected}`);
    }
  } finally {
    closeSync(fd);
  }
}

/** export.py legacy_export / run.c memory_map_weights order. */
function writeLegacyBody(out: BinaryFileSink, config: ModelConfig, w: Llama2cWeights, shared: boolean): void {
  out.bytes(legacyHeader(config, shared));
  out.f32(w.tokenEmbedding);
  out.f32(w.rmsAtt);
  out.f32(w.wq);
  out.f32(w.wk);
  out.f32(w.wv);
  out.f32(w.wo);
  out.f32(w.rmsFfn);
  out.f32(w.w1);
  out.f32(w.w2);
  out.f32(w.w3);
  out.f32(w.rmsFinal);
  const rope = legacyRopeTables(config);
  out.f32(rope.cos);
  out.f32(rope.sin);
  if (w.wcls !== null) out.f32(w.wcls);
}

/** export.py version1_export order: all norms, then the embedding, then the matrices. */
function writeV1Body(out: BinaryFileSink, config: ModelConfig, w: Llama2cWeights, shared: boolean): void {
  out.bytes(akHeader(config, 1, shared, 0));
  out.f32(w.rmsAtt);
  out.f32(w.rmsFfn);
  out.f32(w.rmsFinal);
  out.f32(w.tokenEmbedding);
  for (const name of LAYER_MATRICES) out.f32(w[name]);
  if (w.wcls !== null) out.f32(w.wcls);
}

/**
 * export.py version2_export order: fp32 norms, then each tensor (the embedding, each layer's wq, ..., w3,
 * the classifier when not shared) as its int8 values followed by its scales. Scales belong to one layer's
 * tensor, so layers are quantized one at a time.
 */
function writeV2Body(
  out: BinaryFileSink,
  config: ModelConfig,
  w: Llama2cWeights,
  shared: boolean,
  groupSize: number,
): void {
  out.bytes(akHeader(config, 2, shared, groupSize));
  out.f32(w.rmsAtt);
  out.f32(w.rmsFfn);
  out.f32(w.rmsFinal);
  const writeQuantized = (tensor: Float32Array): void => {
    const { q, s } = quantizeQ80(tensor, groupSize);
    out.i8(q);
    out.f32(s);
  };
  writeQuantized(w.tokenEmbedding);
  for (const name of LAYER_MATRICES) {
    for (const layer of perLayer(w[name], config.nLayers)) writeQuantized(layer);
  }
  if (w.wcls !== null) writeQuantized(w.wcls);
}
