/**
 * Places a checkpoint's tensors in linear memory, once: vectors are read straight to their final
 * address, f32 matrices are streamed through a small staging buffer and packed into 4-row panels
 * (see assembly/matmul.ts), int8 matrices are read as they are, ggml blocks as they are, except
 * Q5_0 which may be rewritten as Q8_0 of the same values (WeightStorage).
 */
import { closeSync, openSync, readSync } from "node:fs";
import { ModelFormatError } from "../../errors.ts";
import type { Kernels } from "./kernels.ts";
import type { LinearMemory } from "./wasm.ts";
import { TensorName, type Checkpoint, type TensorInfo } from "../../model/checkpoint.ts";

/** A weight matrix W[rows][cols] in linear memory; a product computes one output per row. */
export type WeightMatrix =
  /** f32, packed in 4-row panels. */
  | { kind: "f32"; rows: number; cols: number; addr: number }
  /** int8 values q[rows*cols] with one f32 scale per groupSize values of the flattened tensor. */
  | { kind: "q8"; rows: number; cols: number; q: number; s: number; groupSize: number }
  /** ggml blocks as the GGUF file has them, row after row (`rowBytes` each); `type` is the ggml type code. */
  | { kind: "ggml"; type: number; rows: number; cols: number; addr: number; rowBytes: number };

/**
 * The matrices of `count` experts, [count][rows][cols], one after another in memory: expert e's
 * matrix is `expert` moved `stride` bytes e times (expertMatrix). F32 experts are packed like any
 * f32 matrix, each expert's rows whole panels (rows a multiple of 4).
 */
export interface ExpertStack {
  count: number;
  /** Expert 0's matrix. */
  expert: Extract<WeightMatrix, { kind: "f32" | "ggml" }>;
  stride: number;
}

/** Expert e of a stack, as a matrix of its own. */
export function expertMatrix(stack: ExpertStack, e: number): WeightMatrix {
  return { ...stack.expert, addr: stack.expert.addr + e * stack.stride };
}

/** A mixture-of-experts feed-forward (see ExpertsConfig). */
export interface ExpertWeights {
  router: WeightMatrix; // ffn_gate_inp [experts][dim]
  routerBias: number | null; // f32 [experts] (gpt-oss)
  gate: ExpertStack; // [experts][width][dim]
  up: ExpertStack; // [experts][width][dim]
  down: ExpertStack; // [experts][dim][width]
  /** Biases of every expert's gate, up and down (gpt-oss): f32 [experts][width], [experts][width], [experts][dim]. */
  biases: { gate: number; up: number; down: number } | null;
}

/** A layer's feed-forward: dense SwiGLU, or a mixture of experts. */
export type FeedForwardWeights =
  | { kind: "dense"; gate: WeightMatrix /* w1 [hidden][dim] */; up: WeightMatrix /* w3 [hidden][dim] */; down: WeightMatrix /* w2 [dim][hidden] */ }
  | ({ kind: "experts" } & ExpertWeights);

export interface LayerWeights {
  attnNorm: number; // f32 [dim]
  wq: WeightMatrix; // [qDim][dim], qDim = nHeads * headDim (phi3: rows of the fused attn_qkv, as wk and wv)
  wk: WeightMatrix; // [kvDim][dim]
  wv: WeightMatrix; // [kvDim][dim]
  /** Biases of q, k, v (qwen2): f32 [qDim], [kvDim], [kvDim]. */
  qkvBias: { q: number; k: number; v: number } | null;
  /** Per-head RMSNorm weights of q and k (qwen3): f32 [headDim] each. */
  qkNorm: { q: number; k: number } | null;
  wo: WeightMatrix; // [dim][qDim]
  /** Bias of the output projection (gpt-oss): f32 [dim]. */
  woBias: number | null;
  /** Each query head's sink logit (gpt-oss): f32 [nHeads]. */
  attnSinks: number | null;
  /** RMSNorm weights of the attention's and the feed-forward's outputs (gemma3): f32 [dim] each. */
  postNorms: { attn: number; ffn: number } | null;
  ffnNorm: number; // f32 [dim]
  ffn: FeedForwardWeights;
}

/**
 * Rows [first, first + rows) of a matrix, as a matrix of its own over the same memory: a fused
 * tensor's parts (phi3's attn_qkv and ffn_up). Rows are independent in every storage; f32 panels
 * hold 4 rows, so an f32 part starts on a multiple of 4 (gguf-checkpoint.ts checks the shapes).
 */
export function matrixRows(m: WeightMatrix, first: number, rows: number): WeightMatrix {
  if (first < 0 || rows < 1 || first + rows > m.rows) throw new Error(`matrixRows: rows ${first}..${first + rows} of ${m.rows}`);
  if (m.kind === "f32") {
    if (first % 4 !== 0) throw new Error(`matrixRows: an f32 part must start on a 4-row panel, not row ${first}`);
    return { ...m, rows, addr: m.addr + 4 * first * m.cols };
  }
  if (m.kind === "ggml") return { ...m, rows, addr: m.addr + first * m.rowBytes };
  throw new Error("matrixRows: llama2.c int8 matrices are never fused");
}

export interface ModelWeights {
  tokenEmbedding: WeightMatrix; // [vocab][dim]
  layers: LayerWeights[];
  outputNorm: number; // f32 [dim]
  /** The classifier [vocab][dim]; the same object as tokenEmbedding when shared. */
  output: WeightMatrix;
  /** Bytes of weights a decode step streams (every matrix once, the embedding row aside). */
  bytesPerToken: number;
  /** Which memory holds what: the addresses above are in those memories. */
  placement: WeightPlacement;
}

/**
 * Which memory each part of the model is in, as indices into the memories loadPlacedWeights was
 * given: the token embedding, each layer (its vectors and matrices), and the output norm with the
 * classifier (the embedding's memory when the classifier is the embedding).
 */
export interface WeightPlacement {
  embedding: number;
  layers: readonly number[];
  output: number;
}

/** Every part of an `nLayers` model in memory 0. */
export function onePlace(nLayers: number): WeightPlacement {
  return { embedding: 0, layers: new Array<number>(nLayers).fill(0), output: 0 };
}

/** A memory weights are placed in, with the calling thread's kernels over it (for packing and transcoding). */
export interface WeightTarget {
  mem: LinearMemory;
  kernels: Kernels;
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
  const experts = ckpt.config.experts;
  for (const t of ckpt.tensors.values()) {
    if (t.shape.length < 2) continue;
    if (t.name === TensorName.tokenEmbedding && !ckpt.config.sharedClassifier) continue;
    // A token reads the experts it uses, not the whole stack.
    const share = t.shape.length === 3 && experts !== undefined ? experts.used / experts.count : 1;
    params += share * t.shape.reduce((a, b) => a * b, 1);
    bytes += share * storedBytes(t, storage);
  }
  return { matmulParams: params, bytesPerToken: bytes };
}

const STAGING_BYTES = 8 << 20;
/** What each allocation may lose to alignment (LinearMemory.alloc aligns to 64 bytes). */
const ALIGN = 64;

/** Bytes the parts of the model take in linear memory (as placement.ts places them), stored as `storage` says. */
export interface PartBytes {
  embedding: number;
  layers: number[];
  /** The output norm and, unless the classifier is the embedding, the classifier. */
  output: number;
}

/** Bytes of each part of the checkpoint, with the alignment of every tensor, stored as `storage` says. */
export function partBytes(ckpt: Checkpoint, storage: WeightStorage = FAST_STORAGE): PartBytes {
  const bytes = (name: string): number => {
    const info = ckpt.tensors.get(name);
    if (!info) throw new ModelFormatError(ckpt.file, `missing tensor ${name}`);
    // int8 matrices are two allocations (values, scales).
    return storedBytes(info, storage) + (info.encoding.kind === "q8-llama2c" ? 2 : 1) * ALIGN;
  };
  const c = ckpt.config;
  const layers: number[] = [];
  for (let l = 0; l < c.nLayers; l++) {
    let sum = 0;
    for (const name of layerTensorNames(c, l)) sum += bytes(name);
    layers.push(sum);
  }
  const output = bytes(TensorName.outputNorm) + (c.sharedClassifier ? 0 : bytes(TensorName.output));
  return { embedding: bytes(TensorName.tokenEmbedding), layers, output };
}

/** Names of layer l's tensors. */
function layerTensorNames(c: Checkpoint["config"], l: number): string[] {
  const names = [
    TensorName.attnNorm(l), TensorName.attnOutput(l), TensorName.ffnNorm(l),
    ...(c.fusedQkv ? [TensorName.attnQkv(l)] : [TensorName.attnQ(l), TensorName.attnK(l), TensorName.attnV(l)]),
  ];
  if (c.experts === undefined) names.push(TensorName.ffnDown(l), TensorName.ffnUp(l), ...(c.fusedGateUp ? [] : [TensorName.ffnGate(l)]));
  else {
    names.push(TensorName.ffnRouter(l), TensorName.ffnGateExperts(l), TensorName.ffnUpExperts(l), TensorName.ffnDownExperts(l));
    if (c.experts.biases) {
      names.push(TensorName.ffnRouterBias(l), TensorName.ffnGateExpertsBias(l), TensorName.ffnUpExpertsBias(l), TensorName.ffnDownExpertsBias(l));
    }
  }
  if (c.qkvBias) names.push(TensorName.attnQBias(l), TensorName.attnKBias(l), TensorName.attnVBias(l));
  if (c.qkNorm) names.push(TensorName.attnQNorm(l), TensorName.attnKNorm(l));
  if (c.postNorms) names.push(TensorName.postAttnNorm(l), TensorName.postFfnNorm(l));
  if (c.attnOutputBias) names.push(TensorName.attnOutputBias(l));
  if (c.attnSinks) names.push(TensorName.attnSinks(l));
  return names;
}

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
  return loadPlacedWeights(ckpt, [{ mem, kernels }], onePlace(ckpt.config.nLayers), onProgress, storage);
}

/**
 * Load every tensor of the checkpoint into the memory `placement` says (indices into `targets`),
 * stored as `storage` says. Each tensor is read once, straight to its final place (f32 and
 * transcoded ones through a staging buffer on top of their memory, released at the end).
 */
export function loadPlacedWeights(
  ckpt: Checkpoint, targets: readonly WeightTarget[], placement: WeightPlacement, onProgress?: LoadProgress,
  storage: WeightStorage = FAST_STORAGE,
): ModelWeights {
  if (ckpt.config.sharedClassifier && placement.output !== placement.embedding) {
    throw new Error("loadPlacedWeights: a shared classifier is the embedding and must be placed with it");
  }
  const plan = planAllocations(ckpt, targets, placement, storage);
  const fd = openSync(ckpt.file, "r");
  const marks = targets.map((t) => t.mem.mark());
  const staging = new Map<number, number>();
  const stagingIn = (target: number): number => {
    let addr = staging.get(target);
    if (addr === undefined) {
      addr = targets[target]!.mem.alloc(STAGING_BYTES);
      staging.set(target, addr);
    }
    return addr;
  };
  const total = plan.placements.reduce((a, p) => a + p.info.byteLength, 0);
  let done = 0;
  try {
    for (const { info, target, memory } of plan.placements) {
      onProgress?.(done, total);
      done += info.byteLength;
      readTensor(ckpt.file, fd, targets[memory]!, info, target, storage, () => stagingIn(memory));
    }
    onProgress?.(total, total);
  } finally {
    closeSync(fd);
    targets.forEach((t, i) => t.mem.release(marks[i]!));
  }
  return plan.weights;
}

/** Load the one matrix `name` of the checkpoint into `target`, stored as `storage` says. */
export function loadPlacedTensor(ckpt: Checkpoint, name: string, target: WeightTarget, storage: WeightStorage): WeightMatrix {
  const info = ckpt.tensors.get(name);
  if (!info) throw new ModelFormatError(ckpt.file, `missing tensor ${name}`);
  return loadTensorMatrix(ckpt.file, info, target, storage);
}

/** Load the matrix `info` describes, from `file`, into `target`, stored as `storage` says. */
export function loadTensorMatrix(file: string, info: TensorInfo, target: WeightTarget, storage: WeightStorage): WeightMatrix {
  const m = allocMatrix(info, target.mem, storage);
  const fd = openSync(file, "r");
  const mark = target.mem.mark();
  try {
    readTensor(file, fd, target, info, { kind: "matrix", matrix: m }, storage, () => target.mem.alloc(STAGING_BYTES));
  } finally {
    closeSync(fd);
    target.mem.release(mark);
  }
  return m;
}

/** Load the F32 tensor `info` describes, from `file`, into `mem` as plain rows of floats: its address. */
export function loadF32Rows(file: string, info: TensorInfo, mem: LinearMemory): number {
  if (info.encoding.kind !== "f32") throw new ModelFormatError(file, `tensor ${info.name} must be F32`);
  const addr = mem.alloc(info.byteLength);
  const fd = openSync(file, "r");
  try {
    readInto(file, fd, mem, addr, info.offset, info.byteLength);
  } finally {
    closeSync(fd);
  }
  return addr;
}

/** Read one tensor from the file to its place; `staging` gives the staging buffer (made on first use). */
function readTensor(file: string, fd: number, t: WeightTarget, info: TensorInfo, target: Target, storage: WeightStorage, staging: () => number): void {
  const { mem, kernels } = t;
  if (target.kind === "vector") readInto(file, fd, mem, target.addr, info.offset, info.byteLength);
  else if (target.matrix.kind === "q8") readQ8(file, fd, mem, target.matrix, info);
  else if (target.matrix.kind === "ggml" && asQ8_0(info, storage)) transcodeQ5_0(file, fd, mem, kernels, target.matrix.addr, info, staging());
  else if (target.matrix.kind === "ggml") readInto(file, fd, mem, target.matrix.addr, info.offset, info.byteLength);
  else packF32(file, fd, mem, kernels, target.matrix.addr, info, staging());
}

/**
 * Allocate a matrix's place in `mem`: f32 packed, ggml blocks as stored (Q5_0 as Q8_0 when
 * `storage` says), int8 values and scales. An expert stack [experts][rows][cols] is placed as one
 * matrix of experts x rows rows (see ExpertStack).
 */
function allocMatrix(info: TensorInfo, mem: LinearMemory, storage: WeightStorage): WeightMatrix {
  const { rows, cols } = matrixShape(info);
  if (info.encoding.kind === "f32") return { kind: "f32", rows, cols, addr: mem.alloc(4 * rows * cols) };
  if (info.encoding.kind === "ggml") {
    const bytes = storedBytes(info, storage);
    const type = asQ8_0(info, storage) ? GGML_Q8_0 : info.encoding.type;
    return { kind: "ggml", type, rows, cols, addr: mem.alloc(bytes), rowBytes: bytes / rows };
  }
  const q = mem.alloc(rows * cols);
  const s = mem.alloc(4 * Math.floor((rows * cols) / info.encoding.groupSize));
  return { kind: "q8", rows, cols, q, s, groupSize: info.encoding.groupSize };
}

/** Rows and columns of a matrix, an expert stack's rows being every expert's. */
function matrixShape(info: TensorInfo): { rows: number; cols: number } {
  return { rows: info.shape.slice(0, -1).reduce((a, b) => a * b, 1), cols: info.shape[info.shape.length - 1]! };
}

type Target = { kind: "vector"; addr: number } | { kind: "matrix"; matrix: WeightMatrix };

/** Decide every tensor's address before reading, so the staging buffers can sit on top and be released. */
function planAllocations(ckpt: Checkpoint, targets: readonly WeightTarget[], placement: WeightPlacement, storage: WeightStorage) {
  const c = ckpt.config;
  const placements: { info: TensorInfo; target: Target; memory: number }[] = [];
  const tensor = (name: string): TensorInfo => {
    const info = ckpt.tensors.get(name);
    if (!info) throw new ModelFormatError(ckpt.file, `missing tensor ${name}`);
    return info;
  };
  const memoryOf = (memory: number): LinearMemory => {
    const target = targets[memory];
    if (target === undefined) throw new Error(`loadPlacedWeights: no memory ${memory}`);
    return target.mem;
  };
  const vector = (name: string, memory: number): number => {
    const info = tensor(name);
    const addr = memoryOf(memory).alloc(info.byteLength);
    placements.push({ info, target: { kind: "vector", addr }, memory });
    return addr;
  };
  const matrix = (name: string, memory: number): WeightMatrix => {
    const info = tensor(name);
    const m = allocMatrix(info, memoryOf(memory), storage);
    placements.push({ info, target: { kind: "matrix", matrix: m }, memory });
    return m;
  };
  const experts = (name: string, memory: number): ExpertStack => {
    const [count, rows, cols] = tensor(name).shape as [number, number, number];
    const all = matrix(name, memory);
    if (all.kind === "q8") throw new ModelFormatError(ckpt.file, `${name}: int8 experts are not supported`);
    const stride = (all.kind === "f32" ? 4 * cols : all.rowBytes) * rows;
    return { count, expert: { ...all, rows }, stride };
  };
  const feedForward = (l: number, at: number): FeedForwardWeights => {
    if (c.experts === undefined) {
      const [gate, up] = gateUp(l, at);
      return { kind: "dense", gate, up, down: matrix(TensorName.ffnDown(l), at) };
    }
    const biased = c.experts.biases;
    return {
      kind: "experts",
      router: matrix(TensorName.ffnRouter(l), at),
      routerBias: biased ? vector(TensorName.ffnRouterBias(l), at) : null,
      gate: experts(TensorName.ffnGateExperts(l), at),
      up: experts(TensorName.ffnUpExperts(l), at),
      down: experts(TensorName.ffnDownExperts(l), at),
      biases: biased
        ? { gate: vector(TensorName.ffnGateExpertsBias(l), at), up: vector(TensorName.ffnUpExpertsBias(l), at), down: vector(TensorName.ffnDownExpertsBias(l), at) }
        : null,
    };
  };

  const tokenEmbedding = matrix(TensorName.tokenEmbedding, placement.embedding);
  const kvDim = c.nKvHeads * c.headDim;
  const qDim = c.nHeads * c.headDim;
  // q, k, v: three tensors, or row ranges of one fused attn_qkv (phi3).
  const qkv = (l: number, at: number): [WeightMatrix, WeightMatrix, WeightMatrix] => {
    if (!c.fusedQkv) return [matrix(TensorName.attnQ(l), at), matrix(TensorName.attnK(l), at), matrix(TensorName.attnV(l), at)];
    const fused = matrix(TensorName.attnQkv(l), at);
    return [matrixRows(fused, 0, qDim), matrixRows(fused, qDim, kvDim), matrixRows(fused, qDim + kvDim, kvDim)];
  };
  // gate, up: two tensors, or the halves of one fused ffn_up (phi3: gate rows first).
  const gateUp = (l: number, at: number): [WeightMatrix, WeightMatrix] => {
    if (!c.fusedGateUp) return [matrix(TensorName.ffnGate(l), at), matrix(TensorName.ffnUp(l), at)];
    const fused = matrix(TensorName.ffnUp(l), at);
    return [matrixRows(fused, 0, c.hiddenDim), matrixRows(fused, c.hiddenDim, c.hiddenDim)];
  };
  const layers: LayerWeights[] = [];
  for (let l = 0; l < c.nLayers; l++) {
    const at = placement.layers[l];
    if (at === undefined) throw new Error(`loadPlacedWeights: layer ${l} is not placed`);
    const [wq, wk, wv] = qkv(l, at);
    layers.push({
      attnNorm: vector(TensorName.attnNorm(l), at),
      wq,
      wk,
      wv,
      qkvBias: c.qkvBias ? { q: vector(TensorName.attnQBias(l), at), k: vector(TensorName.attnKBias(l), at), v: vector(TensorName.attnVBias(l), at) } : null,
      qkNorm: c.qkNorm ? { q: vector(TensorName.attnQNorm(l), at), k: vector(TensorName.attnKNorm(l), at) } : null,
      wo: matrix(TensorName.attnOutput(l), at),
      woBias: c.attnOutputBias ? vector(TensorName.attnOutputBias(l), at) : null,
      attnSinks: c.attnSinks ? vector(TensorName.attnSinks(l), at) : null,
      postNorms: c.postNorms ? { attn: vector(TensorName.postAttnNorm(l), at), ffn: vector(TensorName.postFfnNorm(l), at) } : null,
      ffnNorm: vector(TensorName.ffnNorm(l), at),
      ffn: feedForward(l, at),
    });
  }
  const outputNorm = vector(TensorName.outputNorm, placement.output);
  const output = c.sharedClassifier ? tokenEmbedding : matrix(TensorName.output, placement.output);
  // Read in file order: sequential I/O.
  placements.sort((a, b) => a.info.offset - b.info.offset);
  const { bytesPerToken } = weightTraffic(ckpt, storage);
  return { placements, weights: { tokenEmbedding, layers, outputNorm, output, bytesPerToken, placement } };
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
  const { rows, cols } = matrixShape(info);
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
