/**
 * Crafting hostile GGUF files from good ones: a file's metadata and tensor list rewritten through
 * the project's GGUF writer (any value, any length), or a tensor declared huge and placed at the
 * end of a sparse file (a few KB on disk, gigabytes declared).
 */
import { closeSync, ftruncateSync, openSync, readFileSync, writeSync } from "node:fs";
import { readGGUF, type GGUFValue } from "../../src/model/gguf.ts";
import { tensorBytes, writeGGUF, type TensorToWrite } from "../../src/synth/gguf-writer.ts";
import { mapHeader, tensorRecord } from "./gguf-patch.ts";

export interface Craft {
  /** Change the metadata (a copy of the source's, in file order). */
  metadata?: (metadata: Map<string, GGUFValue>) => void;
  /** Change the tensor list (the source's tensors with their bytes, in file order). */
  tensors?: (tensors: TensorToWrite[]) => void;
}

/** The tensors of the GGUF file at `src`, each with its bytes. */
export function tensorsOf(src: string): TensorToWrite[] {
  const file = readGGUF(src);
  const bytes = new Uint8Array(readFileSync(src));
  return file.tensors.map((t) => ({ name: t.name, dims: t.dims, type: t.type, data: bytes.subarray(t.fileOffset, t.fileOffset + t.byteSize) }));
}

/** Write `dst`: the GGUF file `src` with `craft` applied to its metadata and tensors. */
export function rewriteGGUF(src: string, dst: string, craft: Craft): string {
  const metadata = new Map(readGGUF(src).metadata);
  const tensors = tensorsOf(src);
  craft.metadata?.(metadata);
  craft.tensors?.(tensors);
  writeGGUF(dst, metadata, tensors);
  return dst;
}

/**
 * Declare tensor `name` of the file at `path` with ggml `dims` (and its type's bytes), its data
 * moved past every other tensor, and grow the file (sparse) to hold it: a header that passes every
 * bounds check, for a tensor no loader should read before checking its shape.
 */
export function declareHugeTensor(path: string, name: string, dims: readonly bigint[]): void {
  const file = readGGUF(path);
  const end = Math.max(...file.tensors.map((t) => t.offset + t.byteSize));
  const offset = Math.ceil(end / file.alignment) * file.alignment;
  const header = new Uint8Array(readFileSync(path).subarray(0, file.dataOffset));
  const record = tensorRecord(mapHeader(header), name);
  if (record.dims.length !== dims.length) throw new Error(`${name} has ${record.dims.length} dims, not ${dims.length}`);
  const view = new DataView(header.buffer);
  dims.forEach((d, i) => view.setBigUint64(record.dimsAt + 8 * i, d, true));
  view.setBigUint64(record.offsetAt, BigInt(offset), true);
  const bytes = tensorBytes(view.getUint32(record.typeAt, true), dims.map(Number), name);
  const fd = openSync(path, "r+");
  try {
    writeSync(fd, header, 0, header.length, 0);
    ftruncateSync(fd, file.dataOffset + offset + bytes);
  } finally {
    closeSync(fd);
  }
}
