/**
 * A GGUF file as a model: its architecture's hyper-parameters and every tensor the forward pass
 * reads, each checked against the shape the hyper-parameters imply, before anything is
 * allocated. Matrices stay in the file's ggml type (F32 ones are packed like llama2.c's; the rest
 * are kept block for block, see weights.ts). The header itself is validated by gguf.ts.
 */
import { closeSync, openSync, readSync } from "node:fs";
import { ModelFormatError } from "../errors.ts";
import { ARCHITECTURES } from "./arch/index.ts";
import { TensorName, type Checkpoint, type TensorInfo } from "./checkpoint.ts";
import { queryDim, type LongRope, type ModelConfig } from "./config.ts";
import { quoteFileText } from "../util/file-text.ts";
import { GGML_TYPES, readGGUF, type GGUFFile, type GGUFTensorInfo } from "./gguf.ts";

/** The tensor types the kernels compute on (assembly/ggml, assembly/matmul.ts). */
export const SUPPORTED_TENSOR_TYPES: ReadonlySet<string> = new Set([
  "F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "MXFP4", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K",
]);

/** The model in the GGUF file at `path`; `file` is its header when the caller has read it already. */
export function readGGUFCheckpoint(path: string, file: GGUFFile = readGGUF(path)): Checkpoint {
  if (file.tensors.length === 0) {
    throw new ModelFormatError(path, "has no tensors: a vocabulary-only GGUF file, usable as --tokenizer but not as a model");
  }
  checkNoOverlap(file);
  const archName = file.getString("general.architecture");
  const arch = ARCHITECTURES.get(archName);
  if (arch === undefined) {
    throw new ModelFormatError(path, `architecture ${quoteFileText(archName)} is not supported (supported: ${[...ARCHITECTURES.keys()].join(", ")})`);
  }
  const embedding = requireTensor(file, TensorName.tokenEmbedding);
  if (embedding.dims.length !== 2) throw new ModelFormatError(path, `${TensorName.tokenEmbedding} has ${embedding.dims.length} dimensions, expected 2`);
  const shape = arch.config(file, {
    vocabSize: embedding.dims[1]!,
    sharedClassifier: file.tensor(TensorName.output) === undefined,
  });
  const config: ModelConfig = { ...shape };
  if (file.tensor(TensorName.ropeFreqs) !== undefined) config.ropeFreqFactors = readRopeFactors(file, TensorName.ropeFreqs, shape);
  if (arch.readsLongRope && file.tensor(TensorName.ropeFactorsLong) !== undefined) config.longRope = readLongRope(file, archName, shape);
  const tensors = new Map<string, TensorInfo>();
  for (const [name, shape] of expectedTensors(config)) tensors.set(name, tensorInfo(file, arch.fileTensorName?.(name) ?? name, shape));
  for (const [name, shape] of expertBiases(config)) tensors.set(name, stackedVectorInfo(file, name, shape));
  checkFusedParts(file, config, tensors);
  return { file: path, format: `GGUF v${file.version} ${archName} ${typeSummary(tensors)}`, config, tensors, extraStopTokenIds: [] };
}

/** Every tensor the forward pass reads, with its [rows, cols] (or [n]) shape. */
function expectedTensors(c: ModelConfig): [string, number[]][] {
  const kvDim = c.nKvHeads * c.headDim;
  const qDim = queryDim(c);
  const list: [string, number[]][] = [[TensorName.tokenEmbedding, [c.vocabSize, c.dim]]];
  for (let l = 0; l < c.nLayers; l++) {
    list.push([TensorName.attnNorm(l), [c.dim]]);
    if (c.fusedQkv) list.push([TensorName.attnQkv(l), [qDim + 2 * kvDim, c.dim]]);
    else list.push([TensorName.attnQ(l), [qDim, c.dim]], [TensorName.attnK(l), [kvDim, c.dim]], [TensorName.attnV(l), [kvDim, c.dim]]);
    list.push([TensorName.attnOutput(l), [c.dim, qDim]], [TensorName.ffnNorm(l), [c.dim]], ...feedForwardTensors(c, l));
    if (c.qkvBias) list.push([TensorName.attnQBias(l), [qDim]], [TensorName.attnKBias(l), [kvDim]], [TensorName.attnVBias(l), [kvDim]]);
    if (c.qkNorm) list.push([TensorName.attnQNorm(l), [c.headDim]], [TensorName.attnKNorm(l), [c.headDim]]);
    if (c.postNorms) list.push([TensorName.postAttnNorm(l), [c.dim]], [TensorName.postFfnNorm(l), [c.dim]]);
    if (c.attnOutputBias) list.push([TensorName.attnOutputBias(l), [c.dim]]);
    if (c.attnSinks) list.push([TensorName.attnSinks(l), [c.nHeads]]);
  }
  list.push([TensorName.outputNorm, [c.dim]]);
  if (!c.sharedClassifier) list.push([TensorName.output, [c.vocabSize, c.dim]]);
  return list;
}

/**
 * Layer l's feed-forward matrices: the dense gate, up and down, or the router [experts][dim] and
 * the experts' stacked gate, up [experts][width][dim] and down [experts][dim][width].
 */
function feedForwardTensors(c: ModelConfig, l: number): [string, number[]][] {
  const e = c.experts;
  if (e === undefined) {
    // phi3: gate and up in one ffn_up of 2 x hiddenDim rows.
    if (c.fusedGateUp) return [[TensorName.ffnUp(l), [2 * c.hiddenDim, c.dim]], [TensorName.ffnDown(l), [c.dim, c.hiddenDim]]];
    return [[TensorName.ffnGate(l), [c.hiddenDim, c.dim]], [TensorName.ffnUp(l), [c.hiddenDim, c.dim]], [TensorName.ffnDown(l), [c.dim, c.hiddenDim]]];
  }
  const list: [string, number[]][] = [
    [TensorName.ffnRouter(l), [e.count, c.dim]],
    [TensorName.ffnGateExperts(l), [e.count, e.hiddenDim, c.dim]],
    [TensorName.ffnUpExperts(l), [e.count, e.hiddenDim, c.dim]],
    [TensorName.ffnDownExperts(l), [e.count, c.dim, e.hiddenDim]],
  ];
  if (e.biases) list.push([TensorName.ffnRouterBias(l), [e.count]]);
  return list;
}

/** The experts' biases (gpt-oss), [experts][rows] in the file, vectors of experts x rows values to the model. */
function expertBiases(c: ModelConfig): [string, [number, number]][] {
  const e = c.experts;
  if (e === undefined || !e.biases) return [];
  return Array.from({ length: c.nLayers }, (_, l): [string, [number, number]][] => [
    [TensorName.ffnGateExpertsBias(l), [e.count, e.hiddenDim]],
    [TensorName.ffnUpExpertsBias(l), [e.count, e.hiddenDim]],
    [TensorName.ffnDownExpertsBias(l), [e.count, c.dim]],
  ]).flat();
}

/** A [rows][n] F32 tensor of vectors (the experts' biases), described as one vector of rows x n values. */
function stackedVectorInfo(file: GGUFFile, name: string, shape: [number, number]): TensorInfo {
  const info = tensorInfo(file, name, shape);
  if (info.encoding.kind !== "f32") throw new ModelFormatError(file.path, `vectors ${name} are not F32; vectors must be F32`);
  return { ...info, shape: [shape[0] * shape[1]] };
}

function requireTensor(file: GGUFFile, name: string): GGUFTensorInfo {
  const t = file.tensor(name);
  if (t === undefined) throw new ModelFormatError(file.path, `missing tensor ${name}`);
  return t;
}

/** The tensor's description, after checking its type and that its shape is `shape` ([rows, cols], ggml order reversed). */
export function tensorInfo(file: GGUFFile, name: string, shape: number[]): TensorInfo {
  const t = requireTensor(file, name);
  if (!SUPPORTED_TENSOR_TYPES.has(t.typeName)) {
    throw new ModelFormatError(file.path, `tensor ${name} has type ${t.typeName}, which is not supported (supported: ${[...SUPPORTED_TENSOR_TYPES].join(", ")})`);
  }
  const got = [...t.dims].reverse();
  while (got.length > shape.length && got[0] === 1) got.shift(); // ggml pads dims with 1s
  if (got.length !== shape.length || got.some((d, i) => d !== shape[i])) {
    throw new ModelFormatError(file.path, `tensor ${name} has shape [${got.join(", ")}], expected [${shape.join(", ")}] from the hyper-parameters`);
  }
  if (shape.length === 1 && t.typeName !== "F32") {
    throw new ModelFormatError(file.path, `vector ${name} has type ${t.typeName}; vectors must be F32`);
  }
  // Experts are products of their own: each expert's rows are whole panels (F32) and start a stack of them.
  if (shape.length === 3 && t.typeName === "F32" && shape[1]! % 4 !== 0) {
    throw new ModelFormatError(file.path, `F32 expert tensor ${name} has ${shape[1]} rows per expert, which is not a multiple of 4`);
  }
  return {
    name,
    shape,
    encoding: t.typeName === "F32" ? { kind: "f32" } : { kind: "ggml", type: t.type },
    offset: t.fileOffset,
    byteLength: t.byteSize,
  };
}

/** No two tensors may share bytes: a file whose tensors overlap is corrupt (or crafted). */
function checkNoOverlap(file: GGUFFile): void {
  const sorted = [...file.tensors].sort((a, b) => a.fileOffset - b.fileOffset);
  for (let i = 1; i < sorted.length; i++) {
    const prev = sorted[i - 1]!;
    const next = sorted[i]!;
    if (prev.fileOffset + prev.byteSize > next.fileOffset) {
      throw new ModelFormatError(file.path, `tensors ${quoteFileText(prev.name)} and ${quoteFileText(next.name)} overlap (bytes ${next.fileOffset}-${prev.fileOffset + prev.byteSize})`);
    }
  }
}

/**
 * A RoPE factor tensor (Llama 3.1's `rope_freqs.weight`, Phi-3's LongRoPE factors), one per rotated
 * pair. Read while the model is described, so its type and shape are checked against the
 * hyper-parameters first: a crafted file declaring billions of factors (a few KB on disk, sparse)
 * is refused before a byte of it is read.
 */
function readRopeFactors(file: GGUFFile, name: string, c: ModelConfig): number[] {
  const t = tensorInfo(file, name, [(c.ropeDim ?? c.headDim) / 2]);
  const bytes = new Uint8Array(t.byteLength);
  const fd = openSync(file.path, "r");
  try {
    if (readSync(fd, bytes, 0, t.byteLength, t.offset) !== t.byteLength) throw new ModelFormatError(file.path, `truncated in ${t.name}`);
  } finally {
    closeSync(fd);
  }
  const factors = Array.from(new Float32Array(bytes.buffer));
  const bad = factors.findIndex((f) => !(f > 0 && f < Infinity));
  if (bad >= 0) throw new ModelFormatError(file.path, `${name} holds ${factors[bad]} at ${bad}; RoPE factors must be positive and finite`);
  return factors;
}

/** Phi-3's LongRoPE: both factor tensors and the original context they switch at (the file's context when absent, as llama.cpp). */
function readLongRope(file: GGUFFile, arch: string, c: ModelConfig): LongRope {
  return {
    originalContext: file.getU32(`${arch}.rope.scaling.original_context_length`, c.seqLen),
    long: readRopeFactors(file, TensorName.ropeFactorsLong, c),
    short: readRopeFactors(file, TensorName.ropeFactorsShort, c),
  };
}

/**
 * The parts of a fused f32 matrix are read as row ranges of its 4-row panels (weights.ts
 * matrixRows), so each part must start on a panel: k and v at qDim and qDim + kvDim, up at hiddenDim.
 */
function checkFusedParts(file: GGUFFile, c: ModelConfig, tensors: ReadonlyMap<string, TensorInfo>): void {
  const isF32 = (name: string) => tensors.get(name)?.encoding.kind === "f32";
  const kvDim = c.nKvHeads * c.headDim;
  for (let l = 0; l < c.nLayers; l++) {
    if (c.fusedQkv && isF32(TensorName.attnQkv(l)) && (queryDim(c) % 4 !== 0 || kvDim % 4 !== 0)) {
      throw new ModelFormatError(file.path, `F32 ${TensorName.attnQkv(l)} with q and k of ${queryDim(c)} and ${kvDim} rows (not multiples of 4) is not supported`);
    }
    if (c.fusedGateUp && isF32(TensorName.ffnUp(l)) && c.hiddenDim % 4 !== 0) {
      throw new ModelFormatError(file.path, `F32 ${TensorName.ffnUp(l)} with a gate of ${c.hiddenDim} rows (not a multiple of 4) is not supported`);
    }
  }
}

/** "Q4_K+Q6_K+F32": the matrix types by the bytes they take, largest first. */
export function typeSummary(tensors: ReadonlyMap<string, TensorInfo>): string {
  const bytes = new Map<string, number>();
  for (const t of tensors.values()) {
    if (t.shape.length < 2) continue;
    const name = t.encoding.kind === "ggml" ? ggmlName(t.encoding.type) : "F32";
    bytes.set(name, (bytes.get(name) ?? 0) + t.byteLength);
  }
  return [...bytes].sort((a, b) => b[1] - a[1]).map(([n]) => n).join("+");
}

function ggmlName(code: number): string {
  return GGML_TYPES.get(code)?.name ?? `type ${code}`;
}
