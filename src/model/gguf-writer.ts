/**
 * GGUF v3 writer: metadata of every value type, tensor infos, `general.alignment` padding, and
 * tensor data streamed to disk one tensor at a time (a 2 GB model is never held in memory).
 * Values use the reader's types (gguf.ts), so metadata read from one file can be written to another.
 */
import { closeSync, openSync, writeSync } from "node:fs";
import { GGML_TYPES, GGUF_VALUE_TYPE, GGUFStringArray, type GGUFArray, type GGUFValue } from "./gguf.ts";

/** One tensor to write: ggml dims (dims[0] innermost), type code, and its bytes (made when written). */
export interface TensorToWrite {
  name: string;
  dims: readonly number[];
  type: number;
  data: () => Uint8Array;
}

const DEFAULT_ALIGNMENT = 32;

/** Little-endian byte sink, flushed to the file in large writes. */
class Sink {
  private buf = new Uint8Array(1 << 20);
  private view = new DataView(this.buf.buffer);
  private used = 0;
  written = 0;

  constructor(private readonly fd: number) {}

  private room(n: number): void {
    if (this.used + n <= this.buf.length) return;
    this.flush();
    if (n > this.buf.length) {
      this.buf = new Uint8Array(n);
      this.view = new DataView(this.buf.buffer);
    }
  }

  flush(): void {
    let done = 0;
    while (done < this.used) done += writeSync(this.fd, this.buf, done, this.used - done);
    this.used = 0;
  }

  u8(v: number): void { this.room(1); this.view.setUint8(this.used, v); this.used += 1; this.written += 1; }
  i8(v: number): void { this.room(1); this.view.setInt8(this.used, v); this.used += 1; this.written += 1; }
  u16(v: number): void { this.room(2); this.view.setUint16(this.used, v, true); this.used += 2; this.written += 2; }
  i16(v: number): void { this.room(2); this.view.setInt16(this.used, v, true); this.used += 2; this.written += 2; }
  u32(v: number): void { this.room(4); this.view.setUint32(this.used, v, true); this.used += 4; this.written += 4; }
  i32(v: number): void { this.room(4); this.view.setInt32(this.used, v, true); this.used += 4; this.written += 4; }
  f32(v: number): void { this.room(4); this.view.setFloat32(this.used, v, true); this.used += 4; this.written += 4; }
  f64(v: number): void { this.room(8); this.view.setFloat64(this.used, v, true); this.used += 8; this.written += 8; }
  u64(v: bigint): void { this.room(8); this.view.setBigUint64(this.used, v, true); this.used += 8; this.written += 8; }
  i64(v: bigint): void { this.room(8); this.view.setBigInt64(this.used, v, true); this.used += 8; this.written += 8; }

  bytes(b: Uint8Array): void {
    if (b.length > (1 << 20)) {
      this.flush();
      let done = 0;
      while (done < b.length) done += writeSync(this.fd, b, done, b.length - done);
      this.written += b.length;
      return;
    }
    this.room(b.length);
    this.buf.set(b, this.used);
    this.used += b.length;
    this.written += b.length;
  }

  string(s: string): void {
    const b = new TextEncoder().encode(s);
    this.u64(BigInt(b.length));
    this.bytes(b);
  }

  pad(alignment: number): void {
    while (this.written % alignment !== 0) this.u8(0);
  }
}

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
    case "string": return out.string(v.value);
  }
}

function writeArray(out: Sink, a: GGUFArray): void {
  out.u32(GGUF_VALUE_TYPE[a.itemType]);
  out.u64(BigInt(a.items.length));
  switch (a.itemType) {
    case "string":
      for (let i = 0; i < a.items.length; i++) out.string(a.items.get(i));
      return;
    case "u8": case "bool": a.items.forEach((x) => out.u8(x)); return;
    case "i8": a.items.forEach((x) => out.i8(x)); return;
    case "u16": a.items.forEach((x) => out.u16(x)); return;
    case "i16": a.items.forEach((x) => out.i16(x)); return;
    case "u32": a.items.forEach((x) => out.u32(x)); return;
    case "i32": a.items.forEach((x) => out.i32(x)); return;
    case "f32": a.items.forEach((x) => out.f32(x)); return;
    case "f64": a.items.forEach((x) => out.f64(x)); return;
    case "u64": a.items.forEach((x) => out.u64(x)); return;
    case "i64": a.items.forEach((x) => out.i64(x)); return;
  }
}

/** Bytes a tensor of `type` with ggml dims takes. */
export function tensorBytes(type: number, dims: readonly number[]): number {
  const info = GGML_TYPES.get(type);
  if (info === undefined) throw new RangeError(`unknown ggml type ${type}`);
  const n = dims.reduce((a, b) => a * b, 1);
  if ((dims[0] ?? 1) % info.blockSize !== 0) throw new RangeError(`${info.name} rows must be whole blocks of ${info.blockSize}`);
  return (n / info.blockSize) * info.typeSize;
}

/** Write a GGUF v3 file. Metadata is written in the map's order; `general.alignment` (u32) sets the data alignment. */
export function writeGGUF(path: string, metadata: ReadonlyMap<string, GGUFValue>, tensors: readonly TensorToWrite[]): void {
  const alignValue = metadata.get("general.alignment");
  const alignment = alignValue?.type === "u32" ? alignValue.value : DEFAULT_ALIGNMENT;
  const fd = openSync(path, "w");
  try {
    const out = new Sink(fd);
    out.bytes(new TextEncoder().encode("GGUF"));
    out.u32(3);
    out.u64(BigInt(tensors.length));
    out.u64(BigInt(metadata.size));
    for (const [key, value] of metadata) {
      out.string(key);
      out.u32(GGUF_VALUE_TYPE[value.type]);
      if (value.type === "array") writeArray(out, value.value);
      else writeScalar(out, value);
    }
    let offset = 0;
    const sizes = tensors.map((t) => tensorBytes(t.type, t.dims));
    tensors.forEach((t, i) => {
      out.string(t.name);
      out.u32(t.dims.length);
      for (const d of t.dims) out.u64(BigInt(d));
      out.u32(t.type);
      out.u64(BigInt(offset));
      offset += Math.ceil(sizes[i]! / alignment) * alignment;
    });
    out.pad(alignment);
    tensors.forEach((t, i) => {
      const data = t.data();
      if (data.length !== sizes[i]) throw new RangeError(`tensor ${t.name}: ${data.length} bytes given, its type and shape take ${sizes[i]}`);
      out.bytes(data);
      out.pad(alignment);
    });
    out.flush();
  } finally {
    closeSync(fd);
  }
}

/** Shorthands for metadata values. */
export const gguf = {
  u32: (value: number): GGUFValue => ({ type: "u32", value }),
  i32: (value: number): GGUFValue => ({ type: "i32", value }),
  f32: (value: number): GGUFValue => ({ type: "f32", value }),
  bool: (value: boolean): GGUFValue => ({ type: "bool", value }),
  str: (value: string): GGUFValue => ({ type: "string", value }),
  strings: (items: readonly string[]): GGUFValue => {
    const enc = new TextEncoder();
    const parts = items.map((s) => enc.encode(s));
    const offsets = new Uint32Array(parts.length + 1);
    const data = new Uint8Array(parts.reduce((a, p) => a + p.length, 0));
    parts.forEach((p, i) => {
      data.set(p, offsets[i]!);
      offsets[i + 1] = offsets[i]! + p.length;
    });
    return { type: "array", value: { itemType: "string", items: new GGUFStringArray(data, offsets) } };
  },
  i32s: (items: ArrayLike<number>): GGUFValue => ({ type: "array", value: { itemType: "i32", items: Int32Array.from(items) } }),
  f32s: (items: ArrayLike<number>): GGUFValue => ({ type: "array", value: { itemType: "f32", items: Float32Array.from(items) } }),
};
