/**
 * Places a checkpoint's tensors in linear memory, once: vectors are read straight to their final
 * address, f32 matrices are streamed through a small staging buffer and packed into 4-row panels
 * (see assembly/matmul.ts), int8 matrices are read as they are.
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
 * Parameters and bytes of the matrices one decode token streams, from the checkpoint's tensor
 * list alone: every layer matrix and the classifier (the embedding table when shared; otherwise
 * only one row of the embedding is read per token).
 */
export function weightTraffic(ckpt: Checkpoint): { matmulParams: number; bytesPerToken: number } {
  let params = 0;
  let bytes = 0;
  for (const t of ckpt.tensors.values()) {
    if (t.shape.length !== 2) continue;
    if (t.name === TensorName.tokenEmbedding && !ckpt.config.sharedClassifier) continue;
    params += t.shape[0]! * t.shape[1]!;
    bytes += t.byteLength;
  }
  return { matmulParams: params, bytesPerToken: bytes };
}

const STAGING_BYTES = 8 << 20;

/** Bytes the checkpoint's tensors take in linear memory (as in the file: f32 packed, the rest verbatim). */
export function weightBytes(ckpt: Checkpoint): number {
  let bytes = 0;
  for (const t of ckpt.tensors.values()) bytes += t.byteLength;
  return bytes;
}

/** Called as tensors are read: bytes read so far of the total. */
export type LoadProgress = (doneBytes: number, totalBytes: number) => void;

/** Load every tensor of the checkpoint into `mem`. */
export function loadWeights(ckpt: Checkpoint, mem: LinearMemory, kernels: Kernels, onProgress?: LoadProgress): ModelWeights {
  const plan = planAllocations(ckpt, mem);
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
function planAllocations(ckpt: Checkpoint, mem: LinearMemory) {
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
      m = { kind: "ggml", type: info.encoding.type, rows, cols, addr: mem.alloc(info.byteLength), rowBytes: info.byteLength / rows };
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
  const { bytesPerToken } = weightTraffic(ckpt);
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
