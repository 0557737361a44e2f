/**
 * The gemma3 image encoder's forward pass (clip-file.ts) on the WebAssembly kernels, read top to
 * bottom like llama.cpp's build_siglip: the patches times the patch embedding plus its bias, plus
 * the learned positions; per block x += out · attention(LN1(x)) with q, k, v and output biases
 * and every patch attending to every patch (the encoders' bidirectional attention kernel, one
 * sequence), then x += down · gelu(up · LN2(x)); then post LN, the grid average-pooled by the
 * scale factor, the RMS norm times soft_emb_norm and the input projection. Every kernel computes
 * a row from that row alone or, in attention, from the image's own rows, so an image's output
 * is the same bits at any thread count.
 */
import { closeSync, openSync, readSync } from "node:fs";
import { CpuBackend } from "../backend/wasm/cpu.ts";
import { readsRoundedActivations } from "../backend/wasm/ggml-kernels.ts";
import { FAST_STORAGE, loadF32Rows, loadTensorMatrix, type WeightMatrix } from "../backend/wasm/weights.ts";
import { attentionScale } from "../model/attention.ts";
import type { TensorInfo } from "../model/checkpoint.ts";
import { ModelFormatError } from "../errors.ts";
import { halfToF32 } from "../util/half.ts";
import { ClipTensor, type ClipCheckpoint, type ClipConfig } from "./clip-file.ts";
import { patchRows, preprocessImage } from "./preprocess.ts";
import type { RgbImage } from "./image-decode.ts";

interface Norm {
  w: number;
  b: number;
}

interface Affine {
  m: WeightMatrix;
  bias: number;
}

interface ClipLayer {
  ln1: Norm;
  q: Affine;
  k: Affine;
  v: Affine;
  out: Affine;
  ln2: Norm;
  up: Affine;
  down: Affine;
}

interface ClipWeights {
  patch: Affine; // [dim][3 p p]
  positions: number; // f32 [patches][dim]
  layers: ClipLayer[];
  postLn: Norm;
  softEmbNorm: number; // f32 [dim]
  projection: WeightMatrix; // [text][dim]
}

export class VisionEncoder {
  private readonly buf: {
    patches: number; x: number; xb: number; q: number; k: number; v: number; att: number; hb: number; ones: number;
    pooled: number; out: number; seqStarts: number; scores: number;
  };
  private readonly nPatches: number;

  private constructor(readonly config: ClipConfig, private readonly weights: ClipWeights, private readonly backend: CpuBackend) {
    const c = config;
    const N = c.gridSide * c.gridSide;
    this.nPatches = N;
    const mem = backend.mem;
    const f32s = (n: number) => mem.allocZeroed(4 * n);
    const patchCols = 3 * c.patchSize * c.patchSize;
    this.buf = {
      patches: f32s(N * patchCols), x: f32s(N * c.dim), xb: f32s(N * c.dim), q: f32s(N * c.dim), k: f32s(N * c.dim), v: f32s(N * c.dim),
      att: f32s(N * c.dim), hb: f32s(N * c.hiddenDim), ones: f32s(N * c.hiddenDim),
      pooled: f32s(c.tokensPerImage * c.dim), out: f32s(c.tokensPerImage * c.projectionDim), seqStarts: f32s(2),
      scores: mem.alloc(4 * N * backend.threads),
    };
    mem.f32.fill(1, this.buf.ones >>> 2, (this.buf.ones >>> 2) + N * c.hiddenDim);
    mem.i32[(this.buf.seqStarts >>> 2) + 1] = N;
    const w = weights;
    const matrices = [w.patch.m, w.projection, ...w.layers.flatMap((L) => [L.q.m, L.k.m, L.v.m, L.out.m, L.up.m, L.down.m])];
    const rounded = matrices.some((m) => m.kind === "ggml" && readsRoundedActivations(m.type));
    backend.reserveScratch(N, Math.max(c.dim, c.hiddenDim, patchCols, c.projectionDim), 1, c.headDim, 0, rounded, N);
  }

  /** The encoder's weights on a backend of `threads` threads. */
  static load(ckpt: ClipCheckpoint, threads = 1): VisionEncoder {
    const backend = new CpuBackend(threads);
    try {
      return new VisionEncoder(ckpt.config, loadClipWeights(ckpt, backend), backend);
    } catch (e) {
      backend.close();
      throw e;
    }
  }

  /** Rows one image becomes. */
  get tokensPerImage(): number {
    return this.config.tokensPerImage;
  }

  /** The image's rows for the language model, [tokensPerImage][projectionDim]: preprocessing, then encode. */
  encodeImage(img: RgbImage): Float32Array {
    return this.encode(preprocessImage(img, this.config));
  }

  /** The rows of a preprocessed image (channel-planar [3][S][S], S the encoder's image size). */
  encode(planar: Float32Array): Float32Array {
    const c = this.config;
    const ops = this.backend;
    const f32 = ops.mem.f32;
    const a = this.buf;
    const w = this.weights;
    const N = this.nPatches;
    if (planar.length !== 3 * c.imageSize * c.imageSize) throw new Error(`encode: ${planar.length} values for a ${c.imageSize}-pixel image`);
    f32.set(patchRows(planar, c.imageSize, c.patchSize), a.patches >>> 2);

    // ---- patch embedding + positions
    ops.matmul(a.x, a.patches, w.patch.m, N);
    ops.addRows(a.x, w.patch.bias, N, c.dim);
    ops.add(a.x, w.positions, N * c.dim);

    const affine = (out: number, x: number, p: Affine, width: number) => {
      ops.matmul(out, x, p.m, N);
      ops.addRows(out, p.bias, N, width);
    };
    for (const L of w.layers) {
      // ---- x += out · attention(LN1(x))
      ops.layerNorm(a.xb, a.x, L.ln1.w, L.ln1.b, N, c.dim, c.normEps);
      affine(a.q, a.xb, L.q, c.dim);
      affine(a.k, a.xb, L.k, c.dim);
      affine(a.v, a.xb, L.v, c.dim);
      ops.encoderAttention(a.att, a.q, a.k, a.v, a.seqStarts, 1, c.nHeads, c.headDim, attentionScale(c.headDim), a.scores, 4 * N, N * N);
      affine(a.xb, a.att, L.out, c.dim);
      ops.add(a.x, a.xb, N * c.dim);
      // ---- x += down · gelu(up · LN2(x))
      ops.layerNorm(a.xb, a.x, L.ln2.w, L.ln2.b, N, c.dim, c.normEps);
      affine(a.hb, a.xb, L.up, c.hiddenDim);
      ops.geglu(a.hb, a.ones, N, c.hiddenDim);
      affine(a.xb, a.hb, L.down, c.dim);
      ops.add(a.x, a.xb, N * c.dim);
    }
    ops.layerNorm(a.x, a.x, w.postLn.w, w.postLn.b, N, c.dim, c.normEps);

    // ---- average pooling, RMS norm times soft_emb_norm, projection
    f32.set(averagePool(f32.subarray(a.x >>> 2, (a.x >>> 2) + N * c.dim), c.gridSide, c.poolSide, c.dim), a.pooled >>> 2);
    const R = c.tokensPerImage;
    ops.rmsnorm(a.pooled, a.pooled, w.softEmbNorm, R, c.dim, c.normEps);
    ops.matmul(a.out, a.pooled, w.projection, R);
    return f32.slice(a.out >>> 2, (a.out >>> 2) + R * c.projectionDim);
  }

  close(): void {
    this.backend.close();
  }
}

/**
 * ggml_pool_2d (average, kernel = stride = k) over a g x g grid of rows of `dim`: output row
 * (oy, ox) is the f32 sum over the kernel's rows then columns, divided by k k.
 */
export function averagePool(x: Float32Array, g: number, k: number, dim: number): Float32Array {
  const side = g / k;
  const out = new Float32Array(side * side * dim);
  const f = Math.fround;
  for (let oy = 0; oy < side; oy++) {
    for (let ox = 0; ox < side; ox++) {
      const o = (oy * side + ox) * dim;
      for (let d = 0; d < dim; d++) {
        let sum = 0;
        for (let ky = 0; ky < k; ky++) {
          for (let kx = 0; kx < k; kx++) sum = f(sum + x[((oy * k + ky) * g + ox * k + kx) * dim + d]!);
        }
        out[o + d] = f(sum / (k * k));
      }
    }
  }
  return out;
}

function loadClipWeights(ckpt: ClipCheckpoint, backend: CpuBackend): ClipWeights {
  const target = { mem: backend.mem, kernels: backend.kernels };
  const info = (name: string): TensorInfo => {
    const t = ckpt.tensors.get(name);
    if (t === undefined) throw new ModelFormatError(ckpt.file, `missing tensor ${name}`);
    return t;
  };
  const rows = (name: string) => loadF32Rows(ckpt.file, info(name), backend.mem);
  const matrix = (name: string) => loadTensorMatrix(ckpt.file, info(name), target, FAST_STORAGE);
  const affine = (w: string, b: string): Affine => ({ m: matrix(w), bias: rows(b) });
  const norm = (w: string, b: string): Norm => ({ w: rows(w), b: rows(b) });
  const T = ClipTensor;
  return {
    patch: affine(T.patchEmbd, T.patchBias),
    positions: rows(T.positions),
    layers: Array.from({ length: ckpt.config.nLayers }, (_, l) => ({
      ln1: norm(T.ln1(l), T.ln1Bias(l)),
      q: affine(T.q(l), T.qBias(l)),
      k: affine(T.k(l), T.kBias(l)),
      v: affine(T.v(l), T.vBias(l)),
      out: affine(T.out(l), T.outBias(l)),
      ln2: norm(T.ln2(l), T.ln2Bias(l)),
      up: affine(T.up(l), T.upBias(l)),
      down: affine(T.down(l), T.downBias(l)),
    })),
    postLn: norm(T.postLn, T.postLnBias),
    softEmbNorm: rows(T.softEmbNorm),
    projection: transposedMatrix(ckpt.file, info(T.inputProjection), backend),
  };
}

/**
 * A [rows][cols] F32 or F16 tensor of the file as the f32 matrix of its transpose, [cols][rows]
 * (Gemma 3's input projection, stored with the text width first): read, transposed in a staging
 * area on top of the memory, packed, and the staging area released.
 */
function transposedMatrix(file: string, info: TensorInfo, backend: CpuBackend): WeightMatrix {
  const [rows, cols] = info.shape as [number, number];
  const values = readFloats(file, info, rows * cols);
  const mem = backend.mem;
  const addr = mem.alloc(4 * rows * cols);
  const mark = mem.mark();
  try {
    const staging = mem.alloc(4 * rows * cols);
    const f32 = mem.f32;
    const base = staging >>> 2;
    for (let r = 0; r < rows; r++) for (let c = 0; c < cols; c++) f32[base + c * rows + r] = values[r * cols + c]!;
    backend.kernels.packF32(addr, staging, cols, rows);
  } finally {
    mem.release(mark);
  }
  return { kind: "f32", rows: cols, cols: rows, addr };
}

/** The values of an F32 or F16 tensor. */
function readFloats(file: string, info: TensorInfo, n: number): Float32Array {
  const f16 = info.encoding.kind === "ggml" && info.encoding.type === 1;
  if (info.encoding.kind !== "f32" && !f16) throw new ModelFormatError(file, `tensor ${info.name} must be F32 or F16`);
  const bytes = new Uint8Array(info.byteLength);
  const fd = openSync(file, "r");
  try {
    if (readSync(fd, bytes, 0, bytes.length, info.offset) !== bytes.length) throw new ModelFormatError(file, `truncated in ${info.name}`);
  } finally {
    closeSync(fd);
  }
  if (!f16) return new Float32Array(bytes.buffer, 0, n);
  const halves = new Uint16Array(bytes.buffer, 0, n);
  return Float32Array.from(halves, halfToF32);
}

