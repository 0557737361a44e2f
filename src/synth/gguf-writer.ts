/**
 * GGUF v3 writer: metadata of every value type, tensor infos, `general.alignment` padding, and
 * tensor data streamed to disk tensor by tensor, and within a tensor chunk by chunk, so writing a
 * 2 GB model never holds more than one chunk of it (plus a 1 MiB write buffer).
 *
 * Values use the reader's types (gguf.ts), so metadata read from one file is written to another
 * byte for byte: string arrays (vocabularies) are copied as raw bytes, never decoded and
 * re-encoded, so a token that is not valid UTF-8 survives.
 *
 * Layout written: "GGUF", u32 3, u64 tensor_count, u64 kv_count, the key/values in the map's
 * order, the tensor infos in the list's order (offsets relative to the data section, each a
 * multiple of the alignment), zero padding to the alignment, then each tensor's bytes followed by
 * zero padding to the alignment.
 */
import { closeSync, openSync, writeSync } from "node:fs";
import { InputError } from "../errors.ts";
import { GGML_TYPES, GGUF_VALUE_TYPE, GGUFStringArray, type GGUFArray, type GGUFValue } from "../model/gguf.ts";

// ----------------------------------------------------------------------------
// Tensors to write

/**
 * A tensor's bytes: given whole, or made when the writer reaches the tensor (one array, or a
 * sequence of chunks whose lengths add up to the tensor's size, e.g. a few rows at a time).
 */
export type TensorData = Uint8Array | (() => Uint8Array | Iterable<Uint8Array>);

/** One tensor to write: ggml dims (dims[0] innermost, the row length), ggml type code, its bytes. */
export interface TensorToWrite {
  name: string;
  dims: readonly number[];
  /** ggml type code, a key of GGML_TYPES. */
  type: number;
  data: TensorData;
}

const DEFAULT_ALIGNMENT = 32;
const GGUF_VERSION = 3;
/** GGML_MAX_DIMS. */
const MAX_TENSOR_DIMS = 4;
const WRITE_BUFFER_BYTES = 1 << 20;

/** Bytes a tensor of `type` with ggml `dims` takes; throws when a row is not whole blocks. */
export function tensorBytes(type: number, dims: readonly number[], name = "tensor"): number {
  const info = GGML_TYPES.get(type);
  if (info === undefined) throw new InputError(`${name}: unknown ggml type ${type}`);
  if (dims.length === 0 || dims.length > MAX_TENSOR_DIMS || dims.some((d) => !Number.isSafeInteger(d) || d < 1)) {
    throw new InputError(`${name}: bad dims [${dims.join(", ")}] (1 to ${MAX_TENSOR_DIMS} positive integers)`);
  }
  const n = dims.reduce((a, b) => a * b, 1);
  if (!Number.isSafeInteger(n)) throw new InputError(`${name}: dims [${dims.join(", ")}] overflow`);
  if (dims[0]! % info.blockSize !== 0) {
    throw new InputError(`${name}: ${info.name} rows are whole blocks of ${info.blockSize} values; the row length ${dims[0]} is not`);
  }
  return (n / info.blockSize) * info.typeSize;
}

// ----------------------------------------------------------------------------
// Byte sink

/** Little-endian byte sink over a file descriptor, flushed in large writes; counts what it wrote. */
class Sink {
  private readonly buf = new Uint8Array(WRITE_BUFFER_BYTES);
  private readonly view = new DataView(this.buf.buffer);
  private used = 0;
  /** Bytes written so far, buffered ones included: the file offset of the next byte. */
  written = 0;

  constructor(private readonly fd: number) {}

  private room(n: number): number {
    if (this.used + n > this.buf.length) this.flush();
    const at = this.used;
    this.used += n;
    this.written += n;
    return at;
  }

  flush(): void {
    let done = 0;
    while (done < this.used) done += writeSync(this.fd, this.buf, done, this.used - done);
    this.used = 0;
  }

  u8(v: number): void { this.view.setUint8(this.room(1), v); }
  i8(v: number): void { this.view.setInt8(this.room(1), v); }
  u16(v: number): void { this.view.setUint16(this.room(2), v, true); }
  i16(v: number): void { this.view.setInt16(this.room(2), v, true); }
  u32(v: number): void { this.view.setUint32(this.room(4), v, true); }
  i32(v: number): void { this.view.setInt32(this.room(4), v, true); }
  f32(v: number): void { this.view.setFloat32(this.room(4), v, true); }
  f64(v: number): void { this.view.setFloat64(this.room(8), v, true); }
  u64(v: bigint | number): void { this.view.setBigUint64(this.room(8), BigInt(v), true); }
  i64(v: bigint): void { this.view.setBigInt64(this.room(8), v, true); }

  bytes(b: Uint8Array): void {
    if (b.length > this.buf.length / 2) {
      // Large blocks (tensor chunks) go straight to the file instead of through the buffer.
      this.flush();
      let done = 0;
      while (done < b.length) done += writeSync(this.fd, b, done, b.length - done);
      this.written += b.length;
      return;
    }
    this.buf.set(b, this.room(b.length));
  }

  /** A GGUF string: u64 byte length, then the bytes. */
  string(b: Uint8Array): void {
    this.u64(b.length);
    this.bytes(b);
  }

  /** Zeros up to the next multiple of `alignment`. */
  pad(alignment: number): void {
    const n = (alignment - (this.written % alignment)) % alignment;
    if (n > 0) this.bytes(new Uint8Array(n));
  }
}

const utf8 = new TextEncoder();

// ----------------------------------------------------------------------------
// Metadata values

function writeScalar(out: Sink, v: Exclude<GGUFValue, { type: "array" }>): void {
  switch (v.type) {
    case "u8": return out.u8(v.value);
    case "i8": return out.i8(v.value);
    case "u16": return out.u16(v.value);
    case "i16": return out.i16(v.value);
    case "u32": return out.u32(v.value);
    case "i32": return out.i32(v.value);
    case "f32": return out.f32(v.value);
    case "f64": return out.f64(v.value);
    case "u64": return out.u64(v.value);
    case "i64": return out.i64(v.value);
    case "bool": return out.u8(v.value ? 1 : 0);
    case "string": return out.string(utf8.encode(v.value));
  }
}

function writeArray(out: Sink, a: GGUFArray): void {
  out.u32(GGUF_VALUE_TYPE[a.itemType]);
  out.u64(a.items.length);
  const n = a.items.length;
  switch (a.itemType) {
    case "string":
      for (let i = 0; i < n; i++) out.string(a.items.bytes(i));
      return;
    case "u8": case "bool": out.bytes(a.items); return;
    case "i8": out.bytes(new Uint8Array(a.items.buffer, a.items.byteOffset, n)); return;
    case "u16": for (let i = 0; i < n; i++) out.u16(a.items[i]!); return;
    case "i16": for (let i = 0; i < n; i++) out.i16(a.items[i]!); return;
    case "u32": for (let i = 0; i < n; i++) out.u32(a.items[i]!); return;
    case "i32": for (let i = 0; i < n; i++) out.i32(a.items[i]!); return;
    case "f32": for (let i = 0; i < n; i++) out.f32(a.items[i]!); return;
    case "f64": for (let i = 0; i < n; i++) out.f64(a.items[i]!); return;
    case "u64": for (let i = 0; i < n; i++) out.u64(a.items[i]!); return;
    case "i64": for (let i = 0; i < n; i++) out.i64(a.items[i]!); return;
  }
}

/** The alignment a metadata map asks for: `general.alignment`, a u32 power of two, else 32. */
export function metadataAlignment(metadata: ReadonlyMap<string, GGUFValue>): number {
  const value = metadata.get("general.alignment");
  if (value === undefined) return DEFAULT_ALIGNMENT;
  if (value.type !== "u32" || value.value === 0 || (value.value & (value.value - 1)) !== 0) {
    throw new InputError(`general.alignment must be a u32 power of two, got ${value.type} ${String(value.value)}`);
  }
  return value.value;
}

// ----------------------------------------------------------------------------
// The file

/** The chunks of a tensor's data, made now. */
export function chunksOf(data: TensorData): Iterable<Uint8Array> {
  if (data instanceof Uint8Array) return [data];
  const made = data();
  return made instanceof Uint8Array ? [made] : made;
}

/**
 * Write a GGUF v3 file at `path`. Metadata goes in the map's order, tensors in the list's order;
 * `general.alignment` (u32) sets the data alignment (default 32). Every tensor's size is checked
 * before the file is opened and its data against that size as it is written; on an error the file
 * is left incomplete, so write to a temporary name and rename.
 */
export function writeGGUF(path: string, metadata: ReadonlyMap<string, GGUFValue>, tensors: readonly TensorToWrite[]): void {
  const alignment = metadataAlignment(metadata);
  const sizes = tensors.map((t) => tensorBytes(t.type, t.dims, `tensor ${t.name}`));
  const names = new Set<string>();
  for (const t of tensors) {
    if (names.has(t.name)) throw new InputError(`duplicate tensor name ${t.name}`);
    names.add(t.name);
  }
  const fd = openSync(path, "w");
  try {
    const out = new Sink(fd);
    out.bytes(utf8.encode("GGUF"));
    out.u32(GGUF_VERSION);
    out.u64(tensors.length);
    out.u64(metadata.size);
    for (const [key, value] of metadata) {
      out.string(utf8.encode(key));
      out.u32(GGUF_VALUE_TYPE[value.type]);
      if (value.type === "array") writeArray(out, value.value);
      else writeScalar(out, value);
    }
    let offset = 0;
    tensors.forEach((t, i) => {
      out.string(utf8.encode(t.name));
      out.u32(t.dims.length);
      for (const d of t.dims) out.u64(d);
      out.u32(t.type);
      out.u64(offset);
      offset += Math.ceil(sizes[i]! / alignment) * alignment;
    });
    out.pad(alignment);
    tensors.forEach((t, i) => {
      let given = 0;
      for (const chunk of chunksOf(t.data)) {
        given += chunk.length;
        if (given > sizes[i]!) break;
        out.bytes(chunk);
      }
      if (given !== sizes[i]) {
        throw new InputError(`tensor ${t.name}: ${given > sizes[i]! ? "more than " : ""}${given} bytes given, its type and shape take ${sizes[i]}`);
      }
      out.pad(alignment);
    });
    out.flush();
  } finally {
    closeSync(fd);
  }
}

// ----------------------------------------------------------------------------
// Metadata shorthands

/** A string array value from JS strings (UTF-8) or raw byte strings. */
function stringArray(items: readonly (string | Uint8Array)[]): GGUFValue {
  const parts = items.map((s) => (typeof s === "string" ? utf8.encode(s) : s));
  const offsets = new Uint32Array(parts.length + 1);
  const data = new Uint8Array(parts.reduce((a, p) => a + p.length, 0));
  parts.forEach((p, i) => {
    data.set(p, offsets[i]!);
    offsets[i + 1] = offsets[i]! + p.length;
  });
  return { type: "array", value: { itemType: "string", items: new GGUFStringArray(data, offsets) } };
}

/** Shorthands for metadata values of every type. */
export const gguf = {
  u8: (value: number): GGUFValue => ({ type: "u8", value }),
  i8: (value: number): GGUFValue => ({ type: "i8", value }),
  u16: (value: number): GGUFValue => ({ type: "u16", value }),
  i16: (value: number): GGUFValue => ({ type: "i16", value }),
  u32: (value: number): GGUFValue => ({ type: "u32", value }),
  i32: (value: number): GGUFValue => ({ type: "i32", value }),
  u64: (value: bigint): GGUFValue => ({ type: "u64", value }),
  i64: (value: bigint): GGUFValue => ({ type: "i64", value }),
  f32: (value: number): GGUFValue => ({ type: "f32", value }),
  f64: (value: number): GGUFValue => ({ type: "f64", value }),
  bool: (value: boolean): GGUFValue => ({ type: "bool", value }),
  str: (value: string): GGUFValue => ({ type: "string", value }),
  strings: stringArray,
  u8s: (items: ArrayLike<number>): GGUFValue => ({ type: "array", value: { itemType: "u8", items: Uint8Array.from(items) } }),
  i8s: (items: ArrayLike<number>): GGUFValue => ({ type: "array", value: { itemType: "i8", items: Int8Array.from(items) } }),
  u16s: (items: ArrayLike<number>): GGUFValue => ({ type: "array", value: { itemType: "u16", items: Uint16Array.from(items) } }),
  i16s: (items: ArrayLike<number>): GGUFValue => ({ type: "array", value: { itemType: "i16", items: Int16Array.from(items) } }),
  u32s: (items: ArrayLike<number>): GGUFValue => ({ type: "array", value: { itemType: "u32", items: Uint32Array.from(items) } }),
  i32s: (items: ArrayLike<number>): GGUFValue => ({ type: "array", value: { itemType: "i32", items: Int32Array.from(items) } }),
  u64s: (items: ArrayLike<bigint>): GGUFValue => ({ type: "array", value: { itemType: "u64", items: BigUint64Array.from(items) } }),
  i64s: (items: ArrayLike<bigint>): GGUFValue => ({ type: "array", value: { itemType: "i64", items: BigInt64Array.from(items) } }),
  f32s: (items: ArrayLike<number>): GGUFValue => ({ type: "array", value: { itemType: "f32", items: Float32Array.from(items) } }),
  f64s: (items: ArrayLike<number>): GGUFValue => ({ type: "array", value: { itemType: "f64", items: Float64Array.from(items) } }),
  bools: (items: readonly boolean[]): GGUFValue => ({ type: "array", value: { itemType: "bool", items: Uint8Array.from(items, (b) => (b ? 1 : 0)) } }),
};
