/**
 * Reader for llama2.c checkpoints, in all three of its formats:
 *
 *   legacy  (run.c)   7 x i32 header; vocab_size < 0 means the classifier is not shared. f32 tensors:
 *                     token_embd, attn_norm[L], wq[L], wk[L], wv[L], wo[L], ffn_norm[L], w1[L], w2[L],
 *                     w3[L], output_norm, freq_cis_real, freq_cis_imag (unused), [output].
 *   v1 ("ak42", 1)    256-byte header: magic, version, 7 x i32, u8 shared_classifier. f32 tensors:
 *                     attn_norm[L], ffn_norm[L], output_norm, token_embd, wq[L], wk[L], wv[L], wo[L],
 *                     w1[L], w2[L], w3[L], [output].
 *   v2 ("ak42", 2)    as v1 plus i32 group_size after the flag. f32 norms as v1, then each matrix as
 *                     int8 values + f32 group scales: token_embd, wq[L], ..., w3[L], [output] (runq.c).
 *
 * The reader checks every header field for sanity and the file size exactly, so a truncated or
 * foreign file gets a ModelFormatError that names the file and the problem.
 */
import { closeSync, fstatSync, openSync, readSync } from "node:fs";
import { ModelFormatError } from "../errors.ts";
import { makeConfig, type ModelConfig } from "./config.ts";
import { TensorName, type Checkpoint, type TensorEncoding, type TensorInfo } from "./checkpoint.ts";

const MAGIC_AK42 = 0x616b3432;
const GGUF_MAGIC = 0x46554747;
const V_HEADER_BYTES = 256;
const LEGACY_HEADER_BYTES = 28;

export interface Llama2cHeader {
  format: "legacy" | "v1" | "v2";
  dim: number;
  hiddenDim: number;
  nLayers: number;
  nHeads: number;
  nKvHeads: number;
  vocabSize: number;
  seqLen: number;
  sharedClassifier: boolean;
  groupSize: number;
  headerBytes: number;
  /** The file's first four bytes in hex, for the message that says it is no model. */
  firstBytes: string;
}

/**
 * What a file without a GGUF or "ak42" magic is called when its bytes are no legacy llama2.c
 * header either: the legacy format has no magic, so an implausible header is the only sign that
 * a file (random bytes, a PNG, a safetensors file) is no model pagellm reads.
 */
export const NOT_A_MODEL = "not a GGUF or llama2.c model file";

/** Read and validate a llama2.c checkpoint's header and tensor layout (no weight bytes are read). */
export function readLlama2cCheckpoint(file: string): Checkpoint {
  const { header, config, size } = readLlama2cHeader(file);
  const { tensors, end } = layoutTensors(header, config);
  if (size < end) {
    throw new ModelFormatError(file, `truncated: a ${describe(header)} checkpoint needs ${end} bytes, the file has ${size}`);
  }
  if (size > end) {
    throw new ModelFormatError(
      file,
      `${size - end} unexpected bytes after the last tensor of a ${describe(header)} checkpoint (wrong format or shape?)`,
    );
  }
  return { file, format: `llama2.c ${header.format}`, config, tensors, extraStopTokenIds: [1] };
}

/**
 * The header of a llama2.c checkpoint, checked field by field (not the file size): cheap enough to
 * tell a llama2.c checkpoint from a foreign file before anything else is opened.
 */
export function readLlama2cHeader(file: string): { header: Llama2cHeader; config: ModelConfig; size: number } {
  const { head, size } = readHead(file);
  const header = parseHeader(file, head, size);
  return { header, config: configFromHeader(file, header), size };
}

function readHead(file: string): { head: DataView; size: number } {
  let fd: number;
  try {
    fd = openSync(file, "r");
  } catch (e) {
    throw new ModelFormatError(file, `cannot open: ${(e as Error).message.split("\n")[0]}`);
  }
  try {
    const size = fstatSync(fd).size;
    const buf = new Uint8Array(Math.min(size, V_HEADER_BYTES));
    readSync(fd, buf, 0, buf.length, 0);
    return { head: new DataView(buf.buffer), size };
  } finally {
    closeSync(fd);
  }
}

function parseHeader(file: string, h: DataView, size: number): Llama2cHeader {
  const magic = size >= 4 ? h.getUint32(0, true) : null;
  if (magic === GGUF_MAGIC) throw new ModelFormatError(file, "is a GGUF file, not a llama2.c checkpoint");
  if (size < LEGACY_HEADER_BYTES) {
    throw new ModelFormatError(file, magic === MAGIC_AK42 ? `truncated: ${size} bytes is shorter than a llama2.c header` : `${NOT_A_MODEL} (${size} bytes, shorter than any header)`);
  }
  const ints = (start: number) => Array.from({ length: 7 }, (_, i) => h.getInt32(start + 4 * i, true));
  if (magic === MAGIC_AK42) {
    if (size < V_HEADER_BYTES) throw new ModelFormatError(file, `truncated: header needs ${V_HEADER_BYTES} bytes, file has ${size}`);
    const version = h.getInt32(4, true);
    if (version !== 1 && version !== 2) throw new ModelFormatError(file, `unsupported llama2.c checkpoint version ${version}`);
    const [dim, hiddenDim, nLayers, nHeads, nKvHeads, vocabSize, seqLen] = ints(8);
    const shared = h.getUint8(36);
    if (shared > 1) throw new ModelFormatError(file, `shared_classifier flag is ${shared}, expected 0 or 1`);
    const groupSize = version === 2 ? h.getInt32(37, true) : 0;
    return {
      format: version === 1 ? "v1" : "v2", dim, hiddenDim, nLayers, nHeads, nKvHeads, vocabSize, seqLen,
      sharedClassifier: shared === 1, groupSize, headerBytes: V_HEADER_BYTES, firstBytes: "",
    };
  }
  const [dim, hiddenDim, nLayers, nHeads, nKvHeads, signedVocab, seqLen] = ints(0);
  return {
    format: "legacy", dim, hiddenDim, nLayers, nHeads, nKvHeads, vocabSize: Math.abs(signedVocab), seqLen,
    sharedClassifier: signedVocab > 0, groupSize: 0, headerBytes: LEGACY_HEADER_BYTES,
    firstBytes: Array.from({ length: 4 }, (_, i) => h.getUint8(i).toString(16).padStart(2, "0")).join(" "),
  };
}

/** Bounds wide enough for any real llama, tight enough that random bytes fail them. */
type SizeField = "dim" | "hiddenDim" | "nLayers" | "nHeads" | "nKvHeads" | "vocabSize" | "seqLen";
const LIMITS: Record<SizeField, [number, number]> = {
  dim: [1, 1 << 16], hiddenDim: [1, 1 << 18], nLayers: [1, 1024], nHeads: [1, 1024],
  nKvHeads: [1, 1024], vocabSize: [1, 1 << 21], seqLen: [1, 1 << 21],
};

function configFromHeader(file: string, h: Llama2cHeader): ModelConfig {
  const fields = Object.keys(LIMITS) as SizeField[];
  const plausible = (field: SizeField): boolean => {
    const [lo, hi] = LIMITS[field];
    return Number.isInteger(h[field]) && h[field] >= lo && h[field] <= hi;
  };
  // Without a magic, a header most of whose fields are nonsense is no llama2.c file at all (random
  // bytes pass a field's bounds about once in 65536): say so, with the bytes a reader recognizes (a
  // corrupted "GGUF", "PK", "\x89PNG"). One or two bad fields are a damaged checkpoint, named below.
  if (h.format === "legacy" && fields.filter(plausible).length < 4) {
    throw new ModelFormatError(file, `${NOT_A_MODEL} (it starts with the bytes ${h.firstBytes})`);
  }
  const foreign = h.format === "legacy" ? " (not a llama2.c checkpoint?)" : "";
  const fail = (problem: string): never => {
    throw new ModelFormatError(file, `${problem}${foreign}`);
  };
  for (const field of fields) if (!plausible(field)) fail(`implausible header field ${field}=${h[field]}`);
  if (h.dim % h.nHeads !== 0) fail(`dim ${h.dim} is not a multiple of n_heads ${h.nHeads}`);
  if (h.nHeads % h.nKvHeads !== 0) fail(`n_heads ${h.nHeads} is not a multiple of n_kv_heads ${h.nKvHeads}`);
  if ((h.dim / h.nHeads) % 2 !== 0) throw new ModelFormatError(file, `head size ${h.dim / h.nHeads} is odd; RoPE needs pairs`);
  if (h.format === "v2" && (h.groupSize < 1 || h.dim % h.groupSize !== 0)) {
    throw new ModelFormatError(file, `int8 group size ${h.groupSize} does not divide dim ${h.dim}`);
  }
  return makeConfig({
    dim: h.dim, hiddenDim: h.hiddenDim, nLayers: h.nLayers, nHeads: h.nHeads, nKvHeads: h.nKvHeads,
    vocabSize: h.vocabSize, seqLen: h.seqLen, sharedClassifier: h.sharedClassifier,
    // int8 checkpoints are runq.c's: reproduce its arithmetic so greedy output matches it exactly.
    ...(h.format === "v2" ? { numerics: "runq" as const } : {}),
  });
}

/** Lays tensors out in file order; `cursor` advances over every byte, skipped ones included. */
function layoutTensors(h: Llama2cHeader, c: ModelConfig): { tensors: Map<string, TensorInfo>; end: number } {
  const tensors = new Map<string, TensorInfo>();
  let cursor = h.headerBytes;
  const L = c.nLayers;
  const kvDim = c.nKvHeads * c.headDim;
  const f32: TensorEncoding = { kind: "f32" };
  const matrixEncoding: TensorEncoding = h.format === "v2" ? { kind: "q8-llama2c", groupSize: h.groupSize } : f32;

  const bytesOf = (shape: number[], enc: TensorEncoding): number => {
    const n = shape.reduce((a, b) => a * b, 1);
    return enc.kind === "q8-llama2c" ? n + 4 * Math.floor(n / enc.groupSize) : 4 * n;
  };
  const add = (name: string, shape: number[], enc: TensorEncoding) => {
    const byteLength = bytesOf(shape, enc);
    tensors.set(name, { name, shape, encoding: enc, offset: cursor, byteLength });
    cursor += byteLength;
  };
  const perLayer = (name: (l: number) => string, shape: number[], enc: TensorEncoding) => {
    for (let l = 0; l < L; l++) add(name(l), shape, enc);
  };
  const norms = () => {
    perLayer(TensorName.attnNorm, [c.dim], f32);
    perLayer(TensorName.ffnNorm, [c.dim], f32);
    add(TensorName.outputNorm, [c.dim], f32);
  };
  const matrices = (enc: TensorEncoding) => {
    perLayer(TensorName.attnQ, [c.dim, c.dim], enc);
    perLayer(TensorName.attnK, [kvDim, c.dim], enc);
    perLayer(TensorName.attnV, [kvDim, c.dim], enc);
    perLayer(TensorName.attnOutput, [c.dim, c.dim], enc);
    perLayer(TensorName.ffnGate, [c.hiddenDim, c.dim], enc);
    perLayer(TensorName.ffnDown, [c.dim, c.hiddenDim], enc);
    perLayer(TensorName.ffnUp, [c.hiddenDim, c.dim], enc);
  };

  if (h.format === "legacy") {
    add(TensorName.tokenEmbedding, [c.vocabSize, c.dim], f32);
    perLayer(TensorName.attnNorm, [c.dim], f32);
    perLayer(TensorName.attnQ, [c.dim, c.dim], f32);
    perLayer(TensorName.attnK, [kvDim, c.dim], f32);
    perLayer(TensorName.attnV, [kvDim, c.dim], f32);
    perLayer(TensorName.attnOutput, [c.dim, c.dim], f32);
    perLayer(TensorName.ffnNorm, [c.dim], f32);
    perLayer(TensorName.ffnGate, [c.hiddenDim, c.dim], f32);
    perLayer(TensorName.ffnDown, [c.dim, c.hiddenDim], f32);
    perLayer(TensorName.ffnUp, [c.hiddenDim, c.dim], f32);
    add(TensorName.outputNorm, [c.dim], f32);
    cursor += 2 * 4 * c.seqLen * (c.headDim / 2); // freq_cis_real and freq_cis_imag: RoPE is recomputed
  } else {
    norms();
    add(TensorName.tokenEmbedding, [c.vocabSize, c.dim], matrixEncoding);
    matrices(matrixEncoding);
  }
  if (!c.sharedClassifier) add(TensorName.output, [c.vocabSize, c.dim], matrixEncoding);
  return { tensors, end: cursor };
}

function describe(h: Llama2cHeader): string {
  return `${h.format} dim=${h.dim} hidden=${h.hiddenDim} layers=${h.nLayers} heads=${h.nHeads}/${h.nKvHeads} ` +
    `vocab=${h.vocabSize} seq_len=${h.seqLen}${h.format === "v2" ? ` group=${h.groupSize}` : ""}`;
}
