/**
 * GGUF reader: the metadata key/values and tensor infos of a GGUF v2 or v3 file (little-endian).
 *
 * Only the header region is read (synchronously, through a window that grows as needed), never the tensor
 * data, so opening a multi-GB model costs about as much as its header. Every malformed input, truncated,
 * foreign, or absurd, becomes a ModelFormatError naming the file; no RangeError escapes.
 *
 * Layout: magic "GGUF", u32 version, u64 tensor_count, u64 kv_count, kv_count × (string key, u32 value type,
 * value), tensor_count × (string name, u32 n_dims, u64 dims[n_dims], u32 ggml type, u64 offset), padding to
 * `general.alignment` (default 32), tensor data. A string is a u64 byte length followed by UTF-8 bytes.
 */
import { closeSync, fstatSync, openSync, readSync } from "node:fs";
import { ModelFormatError } from "../errors.ts";
import { quoteFileText } from "../util/file-text.ts";

/** Value type codes as stored in the file. */
export const GGUF_VALUE_TYPE = {
  u8: 0,
  i8: 1,
  u16: 2,
  i16: 3,
  u32: 4,
  i32: 5,
  f32: 6,
  bool: 7,
  string: 8,
  array: 9,
  u64: 10,
  i64: 11,
  f64: 12,
} as const;

export type GGUFTypeName = keyof typeof GGUF_VALUE_TYPE;
type GGUFSmallNumberType = "u8" | "i8" | "u16" | "i16" | "u32" | "i32" | "f32" | "f64";

/** One metadata value. 64-bit integers stay bigint so no precision is lost silently. */
export type GGUFValue =
  | { readonly type: GGUFSmallNumberType; readonly value: number }
  | { readonly type: "u64" | "i64"; readonly value: bigint }
  | { readonly type: "bool"; readonly value: boolean }
  | { readonly type: "string"; readonly value: string }
  | { readonly type: "array"; readonly value: GGUFArray };

/** A metadata array, stored compactly: numbers in typed arrays, strings in one byte table. */
export type GGUFArray =
  | { readonly itemType: "u8"; readonly items: Uint8Array }
  | { readonly itemType: "i8"; readonly items: Int8Array }
  | { readonly itemType: "u16"; readonly items: Uint16Array }
  | { readonly itemType: "i16"; readonly items: Int16Array }
  | { readonly itemType: "u32"; readonly items: Uint32Array }
  | { readonly itemType: "i32"; readonly items: Int32Array }
  | { readonly itemType: "f32"; readonly items: Float32Array }
  | { readonly itemType: "f64"; readonly items: Float64Array }
  | { readonly itemType: "u64"; readonly items: BigUint64Array }
  | { readonly itemType: "i64"; readonly items: BigInt64Array }
  /** Booleans as 0/1 bytes. */
  | { readonly itemType: "bool"; readonly items: Uint8Array }
  | { readonly itemType: "string"; readonly items: GGUFStringArray };

/**
 * An array of strings kept as one byte buffer plus offsets (a 150k-token vocabulary is a few MB, not 150k
 * JS strings). Invariant: offsets has length + 1 entries, non-decreasing, offsets[length] === data.length.
 */
export class GGUFStringArray {
  private static readonly utf8 = new TextDecoder("utf-8", { ignoreBOM: true });
  constructor(
    private readonly data: Uint8Array,
    private readonly offsets: Uint32Array,
  ) {}

  get length(): number {
    return this.offsets.length - 1;
  }

  /** The raw bytes of item i (a view, do not modify). */
  bytes(i: number): Uint8Array {
    return this.data.subarray(this.offsets[i], this.offsets[i + 1]);
  }

  /** Item i decoded as UTF-8 (invalid bytes become U+FFFD). */
  get(i: number): string {
    return GGUFStringArray.utf8.decode(this.bytes(i));
  }
}

/** Element layout of a ggml tensor type: blockSize elements take typeSize bytes. */
export interface GGMLTypeInfo {
  readonly name: string;
  readonly blockSize: number;
  readonly typeSize: number;
}

/** ggml tensor types by code (ggml.h). Codes of removed types (4, 5, 31–33, 36–38) are absent. */
export const GGML_TYPES: ReadonlyMap<number, GGMLTypeInfo> = new Map(
  (
    [
      [0, "F32", 1, 4],
      [1, "F16", 1, 2],
      [2, "Q4_0", 32, 18],
      [3, "Q4_1", 32, 20],
      [6, "Q5_0", 32, 22],
      [7, "Q5_1", 32, 24],
      [8, "Q8_0", 32, 34],
      [9, "Q8_1", 32, 36],
      [10, "Q2_K", 256, 84],
      [11, "Q3_K", 256, 110],
      [12, "Q4_K", 256, 144],
      [13, "Q5_K", 256, 176],
      [14, "Q6_K", 256, 210],
      [15, "Q8_K", 256, 292],
      [16, "IQ2_XXS", 256, 66],
      [17, "IQ2_XS", 256, 74],
      [18, "IQ3_XXS", 256, 98],
      [19, "IQ1_S", 256, 50],
      [20, "IQ4_NL", 32, 18],
      [21, "IQ3_S", 256, 110],
      [22, "IQ2_S", 256, 82],
      [23, "IQ4_XS", 256, 136],
      [24, "I8", 1, 1],
      [25, "I16", 1, 2],
      [26, "I32", 1, 4],
      [27, "I64", 1, 8],
      [28, "F64", 1, 8],
      [29, "IQ1_M", 256, 56],
      [30, "BF16", 1, 2],
      [34, "TQ1_0", 256, 54],
      [35, "TQ2_0", 256, 66],
      [39, "MXFP4", 32, 17],
    ] as const
  ).map(([code, name, blockSize, typeSize]) => [code, { name, blockSize, typeSize }]),
);

/** One tensor's description. Offsets are in bytes; dims are ggml order (dims[0] is the innermost). */
export interface GGUFTensorInfo {
  readonly name: string;
  readonly dims: readonly number[];
  /** ggml type code, a key of GGML_TYPES. */
  readonly type: number;
  readonly typeName: string;
  readonly nElements: number;
  readonly byteSize: number;
  /** Offset relative to the start of the data section (a multiple of the alignment). */
  readonly offset: number;
  /** Offset from the start of the file: dataOffset + offset. */
  readonly fileOffset: number;
}

/** GGML_MAX_DIMS in ggml. */
const MAX_TENSOR_DIMS = 4;
const DEFAULT_ALIGNMENT = 32;
const GGUF_MAGIC = "GGUF";
/** Smallest possible encodings, used to reject counts the remaining bytes cannot hold. */
const MIN_KV_BYTES = 8 + 4 + 1;
const MIN_TENSOR_INFO_BYTES = 8 + 4 + 4 + 8;

/** Header reads grow the window in chunks of this many bytes. */
const READ_CHUNK_BYTES = 1 << 20;

/**
 * Sequential little-endian reader over a file that reads only what is asked for, through a window of the
 * file that is refilled as the cursor moves. Reads past the end throw ModelFormatError, never RangeError.
 */
class HeaderReader {
  /** Absolute file offset of the next byte to read. */
  pos = 0;
  private window = new Uint8Array(0);
  private view = new DataView(this.window.buffer);
  /** File offset of window[0]. */
  private windowStart = 0;

  constructor(
    private readonly fd: number,
    readonly fileSize: number,
    readonly file: string,
  ) {}

  get remaining(): number {
    return this.fileSize - this.pos;
  }

  fail(problem: string): never {
    throw new ModelFormatError(this.file, problem);
  }

  /** Make bytes [pos, pos + n) available in the window, or throw a truncation error naming `what`. */
  private ensure(n: number, what: string): number {
    if (n > this.remaining) this.fail(`truncated at byte ${this.fileSize} while reading ${what}`);
    const at = this.pos - this.windowStart;
    if (at >= 0 && at + n <= this.window.length) return at;
    const length = Math.min(Math.max(n, READ_CHUNK_BYTES), this.remaining);
    const window = new Uint8Array(length);
    let filled = 0;
    while (filled < length) {
      const got = readSync(this.fd, window, filled, length - filled, this.pos + filled);
      if (got === 0) this.fail(`truncated at byte ${this.pos + filled} while reading ${what}`);
      filled += got;
    }
    this.window = window;
    this.view = new DataView(window.buffer);
    this.windowStart = this.pos;
    return 0;
  }

  u8(what: string): number {
    const at = this.ensure(1, what);
    this.pos += 1;
    return this.view.getUint8(at);
  }
  i8(what: string): number {
    const at = this.ensure(1, what);
    this.pos += 1;
    return this.view.getInt8(at);
  }
  u16(what: string): number {
    const at = this.ensure(2, what);
    this.pos += 2;
    return this.view.getUint16(at, true);
  }
  i16(what: string): number {
    const at = this.ensure(2, what);
    this.pos += 2;
    return this.view.getInt16(at, true);
  }
  u32(what: string): number {
    const at = this.ensure(4, what);
    this.pos += 4;
    return this.view.getUint32(at, true);
  }
  i32(what: string): number {
    const at = this.ensure(4, what);
    this.pos += 4;
    return this.view.getInt32(at, true);
  }
  f32(what: string): number {
    const at = this.ensure(4, what);
    this.pos += 4;
    return this.view.getFloat32(at, true);
  }
  f64(what: string): number {
    const at = this.ensure(8, what);
    this.pos += 8;
    return this.view.getFloat64(at, true);
  }
  u64(what: string): bigint {
    const at = this.ensure(8, what);
    this.pos += 8;
    return this.view.getBigUint64(at, true);
  }
  i64(what: string): bigint {
    const at = this.ensure(8, what);
    this.pos += 8;
    return this.view.getBigInt64(at, true);
  }

  /** A u64 that must fit a JS number. */
  u64Number(what: string): number {
    const value = this.u64(what);
    if (value > BigInt(Number.MAX_SAFE_INTEGER)) this.fail(`${what} is absurd (${value})`);
    return Number(value);
  }

  /** A u64 count of items of at least minItemBytes each, checked against the bytes left. */
  count(what: string, minItemBytes: number): number {
    const at = this.pos;
    const value = this.u64(what);
    if (value * BigInt(minItemBytes) > BigInt(this.remaining)) {
      const needed = value * BigInt(minItemBytes);
      this.fail(`${what} ${value} at byte ${at} is absurd: needs at least ${needed} bytes, only ${this.remaining} follow (truncated or corrupt)`);
    }
    return Number(value);
  }

  /** n raw bytes (a view into the window, valid until the next read). */
  bytes(n: number, what: string): Uint8Array {
    const at = this.ensure(n, what);
    this.pos += n;
    return this.window.subarray(at, at + n);
  }

  /** A GGUF string's byte length, checked against the bytes left. */
  stringLength(what: string): number {
    const at = this.pos;
    const length = this.u64(`length of ${what}`);
    if (length > BigInt(this.remaining)) {
      this.fail(`length ${length} of ${what} at byte ${at} is absurd: only ${this.remaining} bytes follow (truncated or corrupt)`);
    }
    return Number(length);
  }

  string(what: string): string {
    const length = this.stringLength(what);
    return utf8.decode(this.bytes(length, what));
  }

  skipTo(pos: number): void {
    if (pos > this.fileSize) this.fail(`truncated at byte ${this.fileSize} while reading padding before tensor data`);
    this.pos = pos;
  }
}

// ignoreBOM keeps a leading U+FEFF in a string instead of silently dropping it.
const utf8 = new TextDecoder("utf-8", { ignoreBOM: true });

const TYPE_NAMES: readonly GGUFTypeName[] = Object.keys(GGUF_VALUE_TYPE) as GGUFTypeName[];

function typeNameOf(code: number, reader: HeaderReader, what: string): GGUFTypeName {
  const name = TYPE_NAMES.find((n) => GGUF_VALUE_TYPE[n] === code);
  if (name === undefined) reader.fail(`unknown value type ${code} for ${what}`);
  return name;
}

function readScalar(reader: HeaderReader, type: Exclude<GGUFTypeName, "array">, what: string): GGUFValue {
  switch (type) {
    case "u8":
      return { type, value: reader.u8(what) };
    case "i8":
      return { type, value: reader.i8(what) };
    case "u16":
      return { type, value: reader.u16(what) };
    case "i16":
      return { type, value: reader.i16(what) };
    case "u32":
      return { type, value: reader.u32(what) };
    case "i32":
      return { type, value: reader.i32(what) };
    case "f32":
      return { type, value: reader.f32(what) };
    case "f64":
      return { type, value: reader.f64(what) };
    case "u64":
      return { type, value: reader.u64(what) };
    case "i64":
      return { type, value: reader.i64(what) };
    case "bool": {
      const byte = reader.u8(what);
      if (byte > 1) reader.fail(`${what} is a bool with byte value ${byte}`);
      return { type, value: byte === 1 };
    }
    case "string":
      return { type, value: reader.string(what) };
  }
}

/** Fixed item sizes of numeric array element types. */
const ITEM_BYTES: Readonly<Record<Exclude<GGUFTypeName, "array" | "string">, number>> = {
  u8: 1,
  i8: 1,
  bool: 1,
  u16: 2,
  i16: 2,
  u32: 4,
  i32: 4,
  f32: 4,
  u64: 8,
  i64: 8,
  f64: 8,
};

function readStringArray(reader: HeaderReader, count: number, what: string): GGUFStringArray {
  const offsets = new Uint32Array(count + 1);
  let data = new Uint8Array(Math.max(16, count * 8));
  let used = 0;
  for (let i = 0; i < count; i++) {
    const length = reader.stringLength(what);
    const bytes = reader.bytes(length, what);
    if (used + length > data.length) {
      const grown = new Uint8Array(Math.max(data.length * 2, used + length));
      grown.set(data.subarray(0, used));
      data = grown;
    }
    data.set(bytes, used);
    used += length;
    if (used > 0xffffffff) reader.fail(`${what} holds more than 4 GiB of strings`);
    offsets[i + 1] = used;
  }
  return new GGUFStringArray(data.slice(0, used), offsets);
}

function readArray(reader: HeaderReader, what: string): GGUFArray {
  const itemType = typeNameOf(reader.u32(`item type of ${what}`), reader, `items of ${what}`);
  if (itemType === "array") reader.fail(`${what} is an array of arrays, which GGUF readers do not support`);
  const items = `items of ${what}`;
  if (itemType === "string") {
    const count = reader.count(`item count of ${what}`, 8);
    return { itemType, items: readStringArray(reader, count, items) };
  }
  const count = reader.count(`item count of ${what}`, ITEM_BYTES[itemType]);
  const raw = reader.bytes(count * ITEM_BYTES[itemType], items);
  // DataView reads keep this correct on any host byte order and any alignment of `raw`.
  const view = new DataView(raw.buffer, raw.byteOffset, raw.byteLength);
  const fill = <T extends { [i: number]: V }, V>(out: T, get: (at: number) => V, size: number): T => {
    for (let i = 0; i < count; i++) out[i] = get(i * size);
    return out;
  };
  switch (itemType) {
    case "u8":
    case "bool":
      return { itemType, items: raw.slice() };
    case "i8":
      return { itemType, items: new Int8Array(raw.slice().buffer) };
    case "u16":
      return { itemType, items: fill(new Uint16Array(count), (at) => view.getUint16(at, true), 2) };
    case "i16":
      return { itemType, items: fill(new Int16Array(count), (at) => view.getInt16(at, true), 2) };
    case "u32":
      return { itemType, items: fill(new Uint32Array(count), (at) => view.getUint32(at, true), 4) };
    case "i32":
      return { itemType, items: fill(new Int32Array(count), (at) => view.getInt32(at, true), 4) };
    case "f32":
      return { itemType, items: fill(new Float32Array(count), (at) => view.getFloat32(at, true), 4) };
    case "f64":
      return { itemType, items: fill(new Float64Array(count), (at) => view.getFloat64(at, true), 8) };
    case "u64":
      return { itemType, items: fill(new BigUint64Array(count), (at) => view.getBigUint64(at, true), 8) };
    case "i64":
      return { itemType, items: fill(new BigInt64Array(count), (at) => view.getBigInt64(at, true), 8) };
  }
}

function readValue(reader: HeaderReader, key: string): GGUFValue {
  const what = `value of key ${quoteFileText(key)}`;
  const type = typeNameOf(reader.u32(`value type of key ${quoteFileText(key)}`), reader, what);
  if (type === "array") return { type, value: readArray(reader, what) };
  return readScalar(reader, type, what);
}

function readHeaderStart(reader: HeaderReader): { version: number; tensorCount: number; kvCount: number } {
  const magic = reader.bytes(4, "magic");
  if (String.fromCharCode(...magic) !== GGUF_MAGIC) {
    const shown = Array.from(magic, (b) => b.toString(16).padStart(2, "0")).join(" ");
    reader.fail(`not a GGUF file (magic bytes ${shown}, expected "GGUF")`);
  }
  const version = reader.u32("version");
  if (version !== 2 && version !== 3) {
    const hint = version === 0x02000000 || version === 0x03000000 ? " (a big-endian file?)" : "";
    reader.fail(`unsupported GGUF version ${version}${hint}; only versions 2 and 3 are supported`);
  }
  const tensorCount = reader.count("tensor_count", MIN_TENSOR_INFO_BYTES);
  const kvCount = reader.count("kv_count", MIN_KV_BYTES);
  return { version, tensorCount, kvCount };
}

function readMetadata(reader: HeaderReader, kvCount: number): Map<string, GGUFValue> {
  const metadata = new Map<string, GGUFValue>();
  for (let i = 0; i < kvCount; i++) {
    const key = reader.string(`key of metadata entry ${i}`);
    if (metadata.has(key)) reader.fail(`duplicate metadata key ${quoteFileText(key)}`);
    metadata.set(key, readValue(reader, key));
  }
  return metadata;
}

function readAlignment(reader: HeaderReader, metadata: ReadonlyMap<string, GGUFValue>): number {
  const value = metadata.get("general.alignment");
  if (value === undefined) return DEFAULT_ALIGNMENT;
  if (value.type !== "u32") reader.fail(`metadata key "general.alignment" has type ${value.type}, expected u32`);
  const alignment = value.value;
  if (alignment === 0 || (alignment & (alignment - 1)) !== 0) {
    reader.fail(`general.alignment ${alignment} is not a power of two`);
  }
  return alignment;
}

interface RawTensorInfo {
  name: string;
  dims: number[];
  type: number;
  offset: number;
}

function readTensorInfo(reader: HeaderReader, index: number): RawTensorInfo {
  const name = reader.string(`name of tensor ${index}`);
  const what = `tensor ${quoteFileText(name)}`;
  const nDims = reader.u32(`dimension count of ${what}`);
  if (nDims > MAX_TENSOR_DIMS) reader.fail(`${what} has ${nDims} dimensions (at most ${MAX_TENSOR_DIMS})`);
  const dims: number[] = [];
  for (let d = 0; d < nDims; d++) dims.push(reader.u64Number(`dimension ${d} of ${what}`));
  const type = reader.u32(`type of ${what}`);
  const offset = reader.u64Number(`data offset of ${what}`);
  return { name, dims, type, offset };
}

function completeTensorInfo(
  reader: HeaderReader,
  raw: RawTensorInfo,
  dataOffset: number,
  alignment: number,
): GGUFTensorInfo {
  const what = `tensor ${quoteFileText(raw.name)}`;
  const info = GGML_TYPES.get(raw.type);
  if (info === undefined) reader.fail(`${what} has unknown ggml type ${raw.type}`);
  let nElements = 1;
  for (const dim of raw.dims) {
    nElements *= dim;
    if (nElements > Number.MAX_SAFE_INTEGER) reader.fail(`${what} has absurd dimensions [${raw.dims.join(", ")}]`);
  }
  const innermost = raw.dims[0] ?? 1;
  if (innermost % info.blockSize !== 0) {
    reader.fail(`${what} of type ${info.name} has row length ${innermost}, not a multiple of ${info.blockSize}`);
  }
  if (raw.offset % alignment !== 0) reader.fail(`${what} data offset ${raw.offset} is not a multiple of ${alignment}`);
  const byteSize = (nElements / info.blockSize) * info.typeSize;
  const fileOffset = dataOffset + raw.offset;
  if (fileOffset + byteSize > reader.fileSize) {
    reader.fail(`${what} data ends at byte ${fileOffset + byteSize}, past the end of the file (${reader.fileSize} bytes)`);
  }
  return { ...raw, typeName: info.name, nElements, byteSize, fileOffset };
}

function readTensorInfos(reader: HeaderReader, tensorCount: number, alignment: number): {
  tensors: GGUFTensorInfo[];
  dataOffset: number;
} {
  const raws: RawTensorInfo[] = [];
  const names = new Set<string>();
  for (let i = 0; i < tensorCount; i++) {
    const raw = readTensorInfo(reader, i);
    if (names.has(raw.name)) reader.fail(`duplicate tensor name ${quoteFileText(raw.name)}`);
    names.add(raw.name);
    raws.push(raw);
  }
  const dataOffset = Math.ceil(reader.pos / alignment) * alignment;
  if (tensorCount > 0) reader.skipTo(dataOffset);
  const tensors = raws.map((raw) => completeTensorInfo(reader, raw, dataOffset, alignment));
  return { tensors, dataOffset };
}

/** Read the header of the GGUF file at `path`. Throws ModelFormatError for anything malformed. */
export function readGGUF(path: string): GGUFFile {
  let fd: number;
  try {
    fd = openSync(path, "r");
  } catch (error) {
    throw new ModelFormatError(path, `cannot open: ${error instanceof Error ? error.message : String(error)}`);
  }
  try {
    const reader = new HeaderReader(fd, fstatSync(fd).size, path);
    const { version, tensorCount, kvCount } = readHeaderStart(reader);
    const metadata = readMetadata(reader, kvCount);
    const alignment = readAlignment(reader, metadata);
    const { tensors, dataOffset } = readTensorInfos(reader, tensorCount, alignment);
    return new GGUFFile(path, version, metadata, tensors, alignment, dataOffset, reader.fileSize);
  } finally {
    closeSync(fd);
  }
}

/** The value of an integer-typed entry; undefined for any other type. */
function integerValue(value: GGUFValue): number | bigint | undefined {
  switch (value.type) {
    case "u8":
    case "i8":
    case "u16":
    case "i16":
    case "u32":
    case "i32":
    case "u64":
    case "i64":
      return value.value;
    default:
      return undefined;
  }
}

/** A parsed GGUF header with typed metadata getters that throw ModelFormatError naming the file and key. */
export class GGUFFile {
  private readonly tensorsByName: ReadonlyMap<string, GGUFTensorInfo>;

  constructor(
    readonly path: string,
    readonly version: number,
    readonly metadata: ReadonlyMap<string, GGUFValue>,
    readonly tensors: readonly GGUFTensorInfo[],
    /** Alignment of the data section and of every tensor offset. */
    readonly alignment: number,
    /** File offset of the tensor data section. */
    readonly dataOffset: number,
    readonly fileSize: number,
  ) {
    this.tensorsByName = new Map(tensors.map((t) => [t.name, t]));
  }

  has(key: string): boolean {
    return this.metadata.has(key);
  }

  tensor(name: string): GGUFTensorInfo | undefined {
    return this.tensorsByName.get(name);
  }

  private fail(key: string, problem: string): never {
    throw new ModelFormatError(this.path, `metadata key ${quoteFileText(key)} ${problem}`);
  }

  /** The value of `key`; throws when it is missing. */
  get(key: string): GGUFValue {
    const value = this.metadata.get(key);
    if (value === undefined) this.fail(key, "is missing");
    return value;
  }

  private wrongType(key: string, value: GGUFValue, expected: string): never {
    const actual = value.type === "array" ? `array of ${value.value.itemType}` : value.type;
    this.fail(key, `has type ${actual}, expected ${expected}`);
  }

  getString(key: string, fallback?: string): string {
    if (fallback !== undefined && !this.has(key)) return fallback;
    const value = this.get(key);
    if (value.type !== "string") this.wrongType(key, value, "string");
    return value.value;
  }

  getBool(key: string, fallback?: boolean): boolean {
    if (fallback !== undefined && !this.has(key)) return fallback;
    const value = this.get(key);
    if (value.type !== "bool") this.wrongType(key, value, "bool");
    return value.value;
  }

  /** Any integer type whose value lies in [min, max]; writers disagree on widths (u32 vs i32 vs u64). */
  private getInteger(key: string, min: number, max: number, expected: string, fallback?: number): number {
    if (fallback !== undefined && !this.has(key)) return fallback;
    const value = this.get(key);
    const integer = integerValue(value);
    if (integer === undefined) this.wrongType(key, value, expected);
    const number = Number(integer);
    if (number < min || number > max) this.fail(key, `is ${integer}, outside the range of ${expected}`);
    return number;
  }

  getU32(key: string, fallback?: number): number {
    return this.getInteger(key, 0, 0xffffffff, "u32", fallback);
  }

  getI32(key: string, fallback?: number): number {
    return this.getInteger(key, -0x80000000, 0x7fffffff, "i32", fallback);
  }

  /** A u64 as a number; throws when it exceeds Number.MAX_SAFE_INTEGER. */
  getU64(key: string, fallback?: number): number {
    return this.getInteger(key, 0, Number.MAX_SAFE_INTEGER, "u64", fallback);
  }

  /** f32 or f64. */
  getF32(key: string, fallback?: number): number {
    if (fallback !== undefined && !this.has(key)) return fallback;
    const value = this.get(key);
    if (value.type !== "f32" && value.type !== "f64") this.wrongType(key, value, "f32");
    return value.value;
  }

  getArray(key: string): GGUFArray {
    const value = this.get(key);
    if (value.type !== "array") this.wrongType(key, value, "array");
    return value.value;
  }

  getStringArray(key: string): GGUFStringArray {
    const array = this.getArray(key);
    if (array.itemType !== "string") this.fail(key, `is an array of ${array.itemType}, expected array of string`);
    return array.items;
  }

  getF32Array(key: string): Float32Array {
    const array = this.getArray(key);
    if (array.itemType === "f32") return array.items;
    if (array.itemType === "f64") return Float32Array.from(array.items);
    this.fail(key, `is an array of ${array.itemType}, expected array of f32`);
  }

  /** An array of any integer type whose items all fit in i32. */
  getI32Array(key: string): Int32Array {
    const array = this.getArray(key);
    if (array.itemType === "i32") return array.items;
    if (array.itemType === "string" || array.itemType === "f32" || array.itemType === "f64" || array.itemType === "bool") {
      this.fail(key, `is an array of ${array.itemType}, expected array of i32`);
    }
    const out = new Int32Array(array.items.length);
    for (let i = 0; i < out.length; i++) {
      const item = Number(array.items[i]);
      if (item < -0x80000000 || item > 0x7fffffff) this.fail(key, `item ${i} (${item}) does not fit in i32`);
      out[i] = item;
    }
    return out;
  }
}
