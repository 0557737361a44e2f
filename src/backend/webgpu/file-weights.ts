/**
 * Weights for the GPU, read from the model file tensor by tensor: f32 matrices row-major as the
 * file has them (the GPU product reads rows), ggml blocks as they are, vectors as f32. Nothing of
 * them stays in WebAssembly memory: each tensor is read into a host array that lives until it is
 * uploaded. Only a ggml token embedding is placed in linear memory, for the WebAssembly lookup of
 * a step's rows (loadTokenEmbedding).
 */
import { closeSync, openSync, readSync } from "node:fs";
import { DeviceError, ModelFormatError } from "../../errors.ts";
import { TensorName, type Checkpoint, type TensorInfo } from "../../model/checkpoint.ts";
import { FILE_STORAGE, loadPlacedTensor, type LoadProgress, type WeightMatrix, type WeightTarget } from "../wasm/weights.ts";

/** A weight matrix as the GPU stores it: f32 rows, or ggml blocks as in the file. */
export type HostMatrix =
  | { kind: "f32"; rows: number; cols: number; values: Float32Array }
  | { kind: "ggml"; type: number; rows: number; cols: number; bytes: Uint8Array };

/** A model file's tensors, read one by one for the GPU (any model: a decoder's checkpoint, an encoder's). */
export class TensorFile {
  private readonly totalBytes: number;
  private doneBytes = 0;

  /** `onProgress` is told the bytes read so far of every tensor's, as tensors are read. */
  constructor(readonly source: { file: string; tensors: ReadonlyMap<string, TensorInfo> }, private readonly onProgress?: LoadProgress) {
    this.totalBytes = [...source.tensors.values()].reduce((a, t) => a + t.byteLength, 0);
  }

  has(name: string): boolean {
    return this.source.tensors.has(name);
  }

  matrix(name: string): HostMatrix {
    const info = this.info(name);
    // An expert stack [count][rows][cols] is count x rows rows.
    const cols = info.shape[info.shape.length - 1]!;
    const rows = info.shape.slice(0, -1).reduce((a, b) => a * b, 1);
    const e = info.encoding;
    if (e.kind === "q8-llama2c") throw new DeviceError(`webgpu: ${name}: llama2.c int8 (q8) weights run on WebAssembly only`);
    const bytes = this.read(info);
    if (e.kind === "f32") return { kind: "f32", rows, cols, values: new Float32Array(bytes.buffer, 0, rows * cols) };
    return { kind: "ggml", type: e.type, rows, cols, bytes };
  }

  vector(name: string): Float32Array {
    const info = this.info(name);
    if (info.encoding.kind !== "f32") throw new ModelFormatError(this.source.file, `vector ${name} is not f32`);
    return new Float32Array(this.read(info).buffer, 0, info.shape[0]!);
  }

  protected info(name: string): TensorInfo {
    const info = this.source.tensors.get(name);
    if (info === undefined) throw new ModelFormatError(this.source.file, `missing tensor ${name}`);
    return info;
  }

  private read(info: TensorInfo): Uint8Array {
    const out = new Uint8Array(info.byteLength);
    const fd = openSync(this.source.file, "r");
    try {
      let done = 0;
      while (done < out.length) {
        const n = readSync(fd, out, done, out.length - done, info.offset + done);
        if (n <= 0) throw new ModelFormatError(this.source.file, `truncated while reading ${info.name}`);
        done += n;
      }
    } finally {
      closeSync(fd);
    }
    this.doneBytes = Math.min(this.totalBytes, this.doneBytes + out.length);
    this.onProgress?.(this.doneBytes, this.totalBytes);
    return out;
  }
}

/** A decoder checkpoint's tensors: TensorFile plus where its embedding and classifier are. */
export class FileWeights extends TensorFile {
  constructor(readonly checkpoint: Checkpoint, onProgress?: LoadProgress) {
    super(checkpoint, onProgress);
  }

  /** Whether the token embedding is f32 (looked up on the GPU) rather than ggml blocks (looked up by WebAssembly). */
  get embeddingOnGpu(): boolean {
    return this.info(TensorName.tokenEmbedding).encoding.kind === "f32";
  }

  /** The classifier's tensor name: output.weight, or the embedding when they are shared. */
  get outputName(): string {
    return this.checkpoint.config.sharedClassifier ? TensorName.tokenEmbedding : TensorName.output;
  }

  /** An expert stack [count][rows][cols] as one matrix of count x rows rows. */
  experts(name: string): { host: HostMatrix; count: number; rows: number } {
    const [count, rows, cols] = this.info(name).shape as [number, number, number];
    const host = this.matrix(name);
    if (host.rows !== count * rows || host.cols !== cols) throw new ModelFormatError(this.checkpoint.file, `${name} is not a stack of ${count} [${rows}][${cols}] matrices`);
    return { host, count, rows };
  }

  /** The ggml token embedding in linear memory, as the WebAssembly embedding lookup reads it. */
  loadTokenEmbedding(target: WeightTarget): WeightMatrix {
    return loadPlacedTensor(this.checkpoint, TensorName.tokenEmbedding, target, FILE_STORAGE);
  }
}
