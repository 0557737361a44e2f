/**
 * Places a checkpoint's tensors in linear memory, once: vectors are read straight to their final
 * address, f32 matrices are streamed through a small staging buffer and packed into 4-row panels
 * (see assembly/matmul.ts), int8 matrices are read as they are, ggml blocks as they are, except
 * Q5_0 which may be rewritten as Q8_0 of the same values (WeightStorage).
 */
import { closeSync, openSync, readSync } from "node:fs";
import { ModelFormatError } from "../errors.ts";
import type { Kernels } from "../backend/kernels.ts";
import type { LinearMemory } from "../backend/wasm.ts";
import { TensorName, type Checkpoint, type TensorInfo } from "./checkpoint.ts";

/** A weight matrix W[rows][cols] in linear memory; a product computes one output per row. */
export type WeightMatrix =
  /** f32, packed in 4-row panels. */
  | { kind: "f32"; rows: number; cols: number; addr: number }
  /** int8 values q[rows*cols] with one f32 scale per groupSize values of the flattened tensor. */
  | { kind: "q8"; rows: number; cols: number; q: number; s: number; groupSize: number }
  /** ggml blocks as the GGUF file has them, row after row (`rowBytes` each); `type` is the ggml type code. */
  | { kind: "ggml"; type: number; rows: number; cols: number; addr: number; rowBytes: number };

export interface LayerWeights {
  attnNorm: number; // f32 [dim]
  wq: WeightMatrix; // [qDim][dim], qDim = nHeads * headDim
  wk: WeightMatrix; // [kvDim][dim]
  wv: WeightMatrix; // [kvDim][dim]
  /** Biases of q, k, v (qwen2): f32 [qDim], [kvDim], [kvDim]. */
  qkvBias: { q: number; k: number; v: number } | null;
  /** Per-head RMSNorm weights of q and k (qwen3): f32 [headDim] each. */
  qkNorm: { q: number; k: number } | null;
  wo: WeightMatrix; // [dim][qDim]
  ffnNorm: number; // f32 [dim]
  ffnGate: WeightMatrix; // w1 [hidden][dim]
  ffnDown: WeightMatrix; // w2 [dim][hidden]
  ffnUp: WeightMatrix; // w3 [hidden][dim]
}

export interface ModelWeights {
  tokenEmbedding: WeightMatrix; // [vocab][dim]
  layers: LayerWeights[];
  outputNorm: number; // f32 [dim]
  /** The classifier [vocab][dim]; the same object as tokenEmbedding when shared. */
  output: WeightMatrix;
  /** Bytes of weights a decode step streams (every matrix once, the embedding row aside). */
  bytesPerToken: number;
}

/**
 * How the ggml tensors are stored: as the file has them, or with Q5_0 rewritten as Q8_0
 * (`q5_0AsQ8_0`). Both hold the same values, d * (q - 16); Q8_0 takes 34 bytes per 32 of them
 * instead of 22, and its product runs ~1.4x faster on one thread (2048x768: Q5_0 ~12 GMAC/s,
 * Q8_0 ~16), because unpacking 5-bit values costs more vector operations than the dot itself.
 * SmolLM2-135M and Qwen2.5-0.5B Q4_K_M files hold mostly Q5_0 (their rows are not whole 256-value
 * super-blocks, so llama-quantize falls back from Q4_K). The engine uses it when the model still
 * fits the 4 GiB memory (engine.ts).
 */
export interface WeightStorage {
  q5_0AsQ8_0: boolean;
}
export const FILE_STORAGE: WeightStorage = { q5_0AsQ8_0: false };
export const FAST_STORAGE: WeightStorage = { q5_0AsQ8_0: true };

const GGML_Q5_0 = 6;
const GGML_Q8_0 = 8;
const Q5_0_BLOCK_BYTES = 22;
const Q8_0_BLOCK_BYTES = 34;

/** Whether `info` is a Q5_0 tensor that `storage` keeps as Q8_0. */
function asQ8_0(info: TensorInfo, storage: WeightStorage): boolean {
  return storage.q5_0AsQ8_0 && info.encoding.kind === "ggml" && info.encoding.type === GGML_Q5_0;
}

/** Bytes a GGUF tensor of ggml type `type` and `fileBytes` in the file takes in memory, stored as `storage` says. */
export function storedGGMLBytes(type: number, fileBytes: number, storage: WeightStorage = FAST_STORAGE): number {
  return storage.q5_0AsQ8_0 && type === GGML_Q5_0 ? (fileBytes / Q5_0_BLOCK_BYTES) * Q8_0_BLOCK_BYTES : fileBytes;
}

/** Bytes the tensor takes in linear memory (f32 packed, ggml blocks as stored, the rest verbatim). */
function storedBytes(info: TensorInfo, storage: WeightStorage): number {
  return asQ8_0(info, storage) ? storedGGMLBytes(GGML_Q5_0, info.byteLength, storage) : info.byteLength;
}

/**
 * Parameters and bytes of the matrices one decode token streams, from the checkpoint's tensor
 * list alone: every layer matrix and the classifier (the embedding table when shared; otherwise
 * only one row of the embedding is read per token), as `storage` keeps them.
 */
export function weightTraffic(ckpt: Checkpoint, storage: WeightStorage = FAST_STORAGE): { matmulParams: number; bytesPerToken: number } {
  let params = 0;
  let bytes = 0;
  for (const t of ckpt.tensors.values()) {
    if (t.shape.length !== 2) continue;
    if (t.name === TensorName.tokenEmbedding && !ckpt.config.sharedClassifier) continue;
    params += t.shape[0]! * t.shape[1]!;
    bytes += storedBytes(t, storage);
  }
  return { matmulParams: params, bytesPerToken: bytes };
}

const STAGING_BYTES = 8 << 20;

/** Bytes the checkpoint's tensors take in linear memory, stored as `storage` says. */
export function weightBytes(ckpt: Checkpoint, storage: WeightStorage = FAST_STORAGE): number {
  let bytes = 0;
  for (const t of ckpt.tensors.values()) bytes += storedBytes(t, storage);
  return bytes;
}

/** Called as tensors are read: bytes read so far of the total. */
export type LoadProgress = (doneBytes: number, totalBytes: number) => void;

/** Load every tensor of the checkpoint into `mem`, stored as `storage` says. */
export function loadWeights(
  ckpt: Checkpoint, mem: LinearMemory, kernels: Kernels, onProgress?: LoadProgress, storage: WeightStorage = FAST_STORAGE,
): ModelWeights {
  const plan = planAllocations(ckpt, mem, storage);
  const fd = openSync(ckpt.file, "r");
  const staging = mem.mark();
  const total = plan.placements.reduce((a, p) => a + p.info.byteLength, 0);
  let done = 0;
  try {
    const stagingAddr = mem.alloc(STAGING_BYTES);
    for (const { info, target } of plan.placements) {
      onProgress?.(done, total);
      done += info.byteLength;
      if (target.kind === "vector") readInto(ckpt.file, fd, mem, target.addr, info.offset, info.byteLength);
      else if (target.matrix.kind === "q8") readQ8(ckpt.file, fd, mem, target.matrix, info);
      else if (target.matrix.kind === "ggml" && asQ8_0(info, storage)) transcodeQ5_0(ckpt.file, fd, mem, kernels, target.matrix.addr, info, stagingAddr);
      else if (target.matrix.kind === "ggml") readInto(ckpt.file, fd, mem, target.matrix.addr, info.offset, info.byteLength);
      else packF32(ckpt.file, fd, mem, kernels, target.matrix.addr, info, stagingAddr);
    }
    onProgress?.(total, total);
  } finally {
    closeSync(fd);
    mem.release(staging);
  }
  return plan.weights;
}

type Target = { kind: "vector"; addr: number } | { kind: "matrix"; matrix: WeightMatrix };

/** Decide every tensor's address before reading, so the staging buffer can sit on top and be released. */
function planAllocations(ckpt: Checkpoint, mem: LinearMemory, storage: WeightStorage) {
  const c = ckpt.config;
  const placements: { info: TensorInfo; target: Target }[] = [];
  const tensor = (name: string): TensorInfo => {
    const info = ckpt.tensors.get(name);
    if (!info) throw new ModelFormatError(ckpt.file, `missing tensor ${name}`);
    return info;
  };
  const vector = (name: string): number => {
    const info = tensor(name);
    const addr = mem.alloc(info.byteLength);
    placements.push({ info, target: { kind: "vector", addr } });
    return addr;
  };
  const matrix = (name: string): WeightMatrix => {
    const info = tensor(name);
    const [rows, cols] = info.shape as [number, number];
    let m: WeightMatrix;
    if (info.encoding.kind === "f32") {
      m = { kind: "f32", rows, cols, addr: mem.alloc(4 * rows * cols) };
    } else if (info.encoding.kind === "ggml") {
      const bytes = storedBytes(info, storage);
      const type = asQ8_0(info, storage) ? GGML_Q8_0 : info.encoding.type;
      m = { kind: "ggml", type, rows, cols, addr: mem.alloc(bytes), rowBytes: bytes / rows };
    } else {
      const q = mem.alloc(rows * cols);
      const s = mem.alloc(4 * Math.floor((rows * cols) / info.encoding.groupSize));
      m = { kind: "q8", rows, cols, q, s, groupSize: info.encoding.groupSize };
    }
    placements.push({ info, target: { kind: "matrix", matrix: m } });
    return m;
  };

  const tokenEmbedding = matrix(TensorName.tokenEmbedding);
  const layers: LayerWeights[] = [];
  for (let l = 0; l < c.nLayers; l++) {
    layers.push({
      attnNorm: vector(TensorName.attnNorm(l)),
      wq: matrix(TensorName.attnQ(l)),
      wk: matrix(TensorName.attnK(l)),
      wv: matrix(TensorName.attnV(l)),
      qkvBias: c.qkvBias ? { q: vector(TensorName.attnQBias(l)), k: vector(TensorName.attnKBias(l)), v: vector(TensorName.attnVBias(l)) } : null,
      qkNorm: c.qkNorm ? { q: vector(TensorName.attnQNorm(l)), k: vector(TensorName.attnKNorm(l)) } : null,
      wo: matrix(TensorName.attnOutput(l)),
      ffnNorm: vector(TensorName.ffnNorm(l)),
      ffnGate: matrix(TensorName.ffnGate(l)),
      ffnDown: matrix(TensorName.ffnDown(l)),
      ffnUp: matrix(TensorName.ffnUp(l)),
    });
  }
  const outputNorm = vector(TensorName.outputNorm);
  const output = c.sharedClassifier ? tokenEmbedding : matrix(TensorName.output);
  // Read in file order: sequential I/O.
  placements.sort((a, b) => a.info.offset - b.info.offset);
  const { bytesPerToken } = weightTraffic(ckpt, storage);
  return { placements, weights: { tokenEmbedding, layers, outputNorm, output, bytesPerToken } };
}

function readInto(file: string, fd: number, mem: LinearMemory, addr: number, offset: number, length: number): void {
  let done = 0;
  while (done < length) {
    const n = readSync(fd, mem.u8, addr + done, length - done, offset + done);
    if (n <= 0) throw new ModelFormatError(file, `truncated while reading ${length} bytes at offset ${offset}`);
    done += n;
  }
}

function readQ8(file: string, fd: number, mem: LinearMemory, m: Extract<WeightMatrix, { kind: "q8" }>, info: TensorInfo): void {
  const n = m.rows * m.cols;
  readInto(file, fd, mem, m.q, info.offset, n);
  readInto(file, fd, mem, m.s, info.offset + n, info.byteLength - n);
}

/** Stream a Q5_0 tensor through the staging buffer, writing its blocks as Q8_0 at dst. */
function transcodeQ5_0(file: string, fd: number, mem: LinearMemory, kernels: Kernels, dst: number, info: TensorInfo, staging: number): void {
  const blocks = info.byteLength / Q5_0_BLOCK_BYTES;
  const chunk = Math.floor(STAGING_BYTES / Q5_0_BLOCK_BYTES);
  for (let b = 0; b < blocks; b += chunk) {
    const n = Math.min(chunk, blocks - b);
    readInto(file, fd, mem, staging, info.offset + b * Q5_0_BLOCK_BYTES, n * Q5_0_BLOCK_BYTES);
    kernels.transcodeQ5_0ToQ8_0(dst + b * Q8_0_BLOCK_BYTES, staging, n);
  }
}

/** Stream a row-major f32 matrix through the staging buffer, packing whole panels at a time. */
function packF32(file: string, fd: number, mem: LinearMemory, kernels: Kernels, dst: number, info: TensorInfo, staging: number): void {
  const [rows, cols] = info.shape as [number, number];
  const rowBytes = 4 * cols;
  const chunkRows = Math.max(4, Math.floor(STAGING_BYTES / rowBytes) & ~3);
  if (chunkRows * rowBytes > STAGING_BYTES) {
    throw new ModelFormatError(file, `rows of ${info.name} are too wide (${cols}) for the staging buffer`);
  }
  for (let r = 0; r < rows; r += chunkRows) {
    const n = Math.min(chunkRows, rows - r);
    readInto(file, fd, mem, staging, info.offset + r * rowBytes, n * rowBytes);
    // Chunks start on panel boundaries, so packing a chunk is packing its slice of the matrix.
    kernels.packF32(dst + r * rowBytes, staging, n, cols);
  }
}
