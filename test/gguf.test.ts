import { afterAll, describe, expect, test } from "bun:test";
import { closeSync, mkdtempSync, openSync, readFileSync, rmSync, statSync, writeFileSync, writeSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { GGUF_VALUE_TYPE, readGGUF } from "../src/model/gguf.ts";
import { describeShared } from "./helpers/shared.ts";
import { workOf } from "./helpers/work.ts";
import { expectModelFormatError } from "./helpers/errors.ts";

const SPM_VOCAB = "vocab/ggml-vocab-llama-spm.gguf";
const STORIES_GGUF = "models/gguf/stories260K.gguf";

const tempDir = mkdtempSync(join(tmpdir(), "pagellm-gguf-"));
afterAll(() => rmSync(tempDir, { recursive: true, force: true }));

let tempCount = 0;
function writeTemp(data: Uint8Array, name = `file-${tempCount++}.gguf`): string {
  const path = join(tempDir, name);
  writeFileSync(path, data);
  return path;
}


// Little-endian encoders for hand-built GGUF files.
const u32 = (n: number): Uint8Array => {
  const out = new Uint8Array(4);
  new DataView(out.buffer).setUint32(0, n, true);
  return out;
};
const u64 = (n: number | bigint): Uint8Array => {
  const out = new Uint8Array(8);
  new DataView(out.buffer).setBigUint64(0, BigInt(n), true);
  return out;
};
const f32 = (n: number): Uint8Array => {
  const out = new Uint8Array(4);
  new DataView(out.buffer).setFloat32(0, n, true);
  return out;
};
const str = (s: string): Uint8Array => {
  const bytes = new TextEncoder().encode(s);
  return concat(u64(bytes.length), bytes);
};
function concat(...parts: Uint8Array[]): Uint8Array {
  const out = new Uint8Array(parts.reduce((sum, part) => sum + part.length, 0));
  let at = 0;
  for (const part of parts) {
    out.set(part, at);
    at += part.length;
  }
  return out;
}

/** A key/value entry: key, value type code, encoded value. */
const kv = (key: string, type: number, value: Uint8Array): Uint8Array => concat(str(key), u32(type), value);
/** A tensor info entry. */
const tensorInfo = (name: string, dims: number[], type: number, offset: number): Uint8Array =>
  concat(str(name), u32(dims.length), ...dims.map((d) => u64(d)), u32(type), u64(offset));

interface SyntheticGGUF {
  magic?: string;
  version?: number;
  kvs?: Uint8Array[];
  tensors?: Uint8Array[];
  /** Override the stored counts to lie about the entries that follow. */
  kvCount?: bigint;
  tensorCount?: bigint;
  /** Bytes appended after the tensor infos (padding and data). */
  tail?: Uint8Array;
}

function buildGGUF(spec: SyntheticGGUF): Uint8Array {
  const kvs = spec.kvs ?? [];
  const tensors = spec.tensors ?? [];
  return concat(
    new TextEncoder().encode(spec.magic ?? "GGUF"),
    u32(spec.version ?? 3),
    u64(spec.tensorCount ?? BigInt(tensors.length)),
    u64(spec.kvCount ?? BigInt(kvs.length)),
    ...kvs,
    ...tensors,
    spec.tail ?? new Uint8Array(0),
  );
}

const T = GGUF_VALUE_TYPE;

describeShared("readGGUF on llama.cpp's llama-spm vocabulary", [SPM_VOCAB], ([path]) => {
  const gguf = readGGUF(path!);

  test("reads the header and metadata", () => {
    expect(gguf.version).toBe(3);
    expect(gguf.tensors).toHaveLength(0);
    expect(gguf.alignment).toBe(32);
    expect(gguf.dataOffset % 32).toBe(0);
    expect(gguf.getString("general.architecture")).toBe("llama");
    expect(gguf.getString("tokenizer.ggml.model")).toBe("llama");
    expect(gguf.getU32("llama.vocab_size")).toBe(32000);
    expect(gguf.getU32("tokenizer.ggml.bos_token_id")).toBe(1);
    expect(gguf.getBool("tokenizer.ggml.add_bos_token")).toBe(true);
  });

  test("keeps the token arrays compact and typed", () => {
    const tokens = gguf.getStringArray("tokenizer.ggml.tokens");
    expect(tokens.length).toBe(32000);
    expect(tokens.get(1)).toBe("<s>");
    expect(tokens.get(15043)).toBe("\u2581Hello");
    expect(Array.from(tokens.bytes(13))).toEqual(Array.from(new TextEncoder().encode("<0x0A>")));
    expect(gguf.getF32Array("tokenizer.ggml.scores")).toBeInstanceOf(Float32Array);
    expect(gguf.getF32Array("tokenizer.ggml.scores")).toHaveLength(32000);
    expect(gguf.getI32Array("tokenizer.ggml.token_type")[1]).toBe(3);
  });

  test("getters name the file and key when a key is missing or has another type", () => {
    expectModelFormatError(() => gguf.getString("no.such.key"), path!, /"no\.such\.key" is missing/);
    expectModelFormatError(() => gguf.getU32("general.architecture"), path!, /"general\.architecture" has type string, expected u32/);
    expectModelFormatError(() => gguf.getString("tokenizer.ggml.tokens"), path!, /has type array of string, expected string/);
    expectModelFormatError(() => gguf.getStringArray("tokenizer.ggml.scores"), path!, /array of f32, expected array of string/);
    expect(gguf.getU32("no.such.key", 7)).toBe(7);
    expect(gguf.getBool("tokenizer.ggml.add_space_prefix", true)).toBe(true);
  });

  test("truncated copies are ModelFormatErrors naming the file and the byte", () => {
    const bytes = readFileSync(path!);
    for (const length of [0, 3, 10, 30, 100, 1000, Math.floor(bytes.length / 2), bytes.length - 1]) {
      const copy = writeTemp(bytes.subarray(0, length), `truncated-${length}.gguf`);
      // Either a read runs off the end, or a count or length announces more bytes than are left.
      expectModelFormatError(() => readGGUF(copy), copy, /truncated/);
    }
  });

  test("a foreign magic is rejected", () => {
    const bytes = Uint8Array.from(readFileSync(path!));
    bytes.set(new TextEncoder().encode("GGML"), 0);
    const copy = writeTemp(bytes, "foreign.gguf");
    expectModelFormatError(() => readGGUF(copy), copy, /not a GGUF file/);
  });

  test("an absurd kv_count or tensor_count is rejected", () => {
    const bytes = Uint8Array.from(readFileSync(path!));
    const view = new DataView(bytes.buffer);
    view.setBigUint64(16, 1n << 60n, true);
    const kvCopy = writeTemp(bytes, "absurd-kv-count.gguf");
    expectModelFormatError(() => readGGUF(kvCopy), kvCopy, /kv_count \d+ at byte 16 is absurd/);
    view.setBigUint64(16, BigInt(gguf.metadata.size), true);
    view.setBigUint64(8, 1n << 40n, true);
    const tensorCopy = writeTemp(bytes, "absurd-tensor-count.gguf");
    expectModelFormatError(() => readGGUF(tensorCopy), tensorCopy, /tensor_count \d+ at byte 8 is absurd/);
  });
});

describeShared("readGGUF on a model file", [STORIES_GGUF], ([path]) => {
  test("reads tensor infos inside the file", () => {
    const gguf = readGGUF(path!);
    expect(gguf.tensors).toHaveLength(48);
    const embedding = gguf.tensor("token_embd.weight");
    expect(embedding).toMatchObject({ dims: [64, 512], typeName: "F32", nElements: 64 * 512, byteSize: 64 * 512 * 4 });
    expect(embedding!.fileOffset).toBe(gguf.dataOffset + embedding!.offset);
    for (const tensor of gguf.tensors) {
      expect(tensor.offset % gguf.alignment).toBe(0);
      expect(tensor.fileOffset + tensor.byteSize).toBeLessThanOrEqual(gguf.fileSize);
    }
    expect(gguf.getU32("llama.context_length")).toBeGreaterThan(0);
  });
});

describe("readGGUF on hand-built files", () => {
  const vocabKvs = [
    kv("general.architecture", T.string, str("llama")),
    kv("tokenizer.ggml.tokens", T.array, concat(u32(T.string), u64(2), str("a"), str("b"))),
    kv("tokenizer.ggml.scores", T.array, concat(u32(T.f32), u64(2), f32(-1), f32(-2))),
    kv("test.u64", T.u64, u64(1n << 40n)),
    kv("test.i8s", T.array, concat(u32(T.i8), u64(3), Uint8Array.of(0xff, 0, 1))),
  ];

  test("reads version 2 and 3 headers alike", () => {
    for (const version of [2, 3]) {
      const path = writeTemp(buildGGUF({ version, kvs: vocabKvs }));
      const gguf = readGGUF(path);
      expect(gguf.version).toBe(version);
      expect(gguf.getStringArray("tokenizer.ggml.tokens").get(1)).toBe("b");
      expect(Array.from(gguf.getF32Array("tokenizer.ggml.scores"))).toEqual([-1, -2]);
      expect(gguf.getU64("test.u64")).toBe(2 ** 40);
      expect(Array.from(gguf.getI32Array("test.i8s"))).toEqual([-1, 0, 1]);
      expectModelFormatError(() => gguf.getU32("test.u64"), path, /outside the range of u32/);
    }
  });

  test("honours general.alignment and checks tensor data against the file size", () => {
    const alignment = kv("general.alignment", T.u32, u32(64));
    const infos = [tensorInfo("a", [8, 2], 0, 0), tensorInfo("b", [32], 8, 64)];
    const headerLength = buildGGUF({ kvs: [alignment], tensors: infos }).length;
    const dataOffset = Math.ceil(headerLength / 64) * 64;
    const complete = buildGGUF({ kvs: [alignment], tensors: infos, tail: new Uint8Array(dataOffset - headerLength + 64 + 34) });
    const gguf = readGGUF(writeTemp(complete));
    expect(gguf.dataOffset).toBe(dataOffset);
    expect(gguf.tensor("b")).toMatchObject({ typeName: "Q8_0", byteSize: 34, fileOffset: dataOffset + 64 });
    const short = writeTemp(complete.subarray(0, complete.length - 1));
    expectModelFormatError(() => readGGUF(short), short, /tensor "b" data ends at byte \d+, past the end of the file/);
  });

  test("reads a multi-GB model's header without reading its data", async () => {
    const infos = [tensorInfo("huge", [1 << 20, 1 << 10], 0, 0)]; // 4 GiB of f32
    const header = buildGGUF({ kvs: vocabKvs, tensors: infos });
    const path = join(tempDir, "sparse.gguf");
    const fd = openSync(path, "w");
    writeSync(fd, header);
    writeSync(fd, Uint8Array.of(0), 0, 1, Math.ceil(header.length / 32) * 32 + 4 * 2 ** 30 - 1);
    closeSync(fd);
    expect(statSync(path).size).toBeGreaterThan(4 * 2 ** 30);
    const { result: gguf, bytesRead } = await workOf(() => readGGUF(path));
    expect(gguf.tensor("huge")!.byteSize).toBe(4 * 2 ** 30);
    // The header, through one read-ahead window (1 MiB): nothing of the 4 GiB of data.
    expect(bytesRead).toBeLessThan(2 * 2 ** 20);
  });

  const malformed: readonly [name: string, spec: SyntheticGGUF, problem: RegExp][] = [
    ["foreign magic", { magic: "GGJT" }, /not a GGUF file \(magic bytes 47 47 4a 54/],
    ["version 1", { version: 1 }, /unsupported GGUF version 1/],
    ["big-endian", { version: 0x03000000 }, /big-endian/],
    ["kv_count beyond the file", { kvCount: 1000n }, /kv_count 1000 at byte 16 is absurd/],
    ["unknown value type", { kvs: [kv("k", 13, u32(0))] }, /unknown value type 13 for value of key "k"/],
    ["string longer than the file", { kvs: [kv("k", T.string, u64(1n << 50n))] }, /length \d+ of value of key "k" at byte \d+ is absurd/],
    ["key longer than the file", { kvs: [concat(u64(99999), new Uint8Array(8))] }, /length 99999 of key of metadata entry 0 .* is absurd/],
    [
      "array count beyond the file",
      { kvs: [kv("k", T.array, concat(u32(T.u32), u64(1n << 40n)))] },
      /item count of value of key "k" \d+ at byte \d+ is absurd/,
    ],
    ["array of arrays", { kvs: [kv("k", T.array, concat(u32(T.array), u64(0)))] }, /array of arrays/],
    ["bool that is not 0 or 1", { kvs: [kv("k", T.bool, Uint8Array.of(2))] }, /bool with byte value 2/],
    ["duplicate key", { kvs: [kv("k", T.u8, Uint8Array.of(1)), kv("k", T.u8, Uint8Array.of(2))] }, /duplicate metadata key "k"/],
    ["bad alignment", { kvs: [kv("general.alignment", T.u32, u32(24))] }, /general.alignment 24 is not a power of two/],
    ["too many dimensions", { tensors: [tensorInfo("t", [1, 1, 1, 1, 1], 0, 0)] }, /tensor "t" has 5 dimensions/],
    ["unknown ggml type", { tensors: [tensorInfo("t", [4], 4, 0)], tail: new Uint8Array(64) }, /unknown ggml type 4/],
    ["misaligned tensor", { tensors: [tensorInfo("t", [4], 0, 4)], tail: new Uint8Array(64) }, /offset 4 is not a multiple of 32/],
    ["row not a block multiple", { tensors: [tensorInfo("t", [16], 8, 0)], tail: new Uint8Array(64) }, /row length 16, not a multiple of 32/],
    [
      "duplicate tensor",
      { tensors: [tensorInfo("t", [4], 0, 0), tensorInfo("t", [4], 0, 32)], tail: new Uint8Array(128) },
      /duplicate tensor name "t"/,
    ],
    ["truncated value", { kvs: [kv("k", T.u64, u32(1))] }, /truncated at byte \d+ while reading value of key "k"/],
  ];

  for (const [name, spec, problem] of malformed) {
    test(`rejects ${name}`, () => {
      const path = writeTemp(buildGGUF(spec));
      expectModelFormatError(() => readGGUF(path), path, problem);
    });
  }

  test("a missing file is a ModelFormatError naming it", () => {
    const path = join(tempDir, "missing.gguf");
    expectModelFormatError(() => readGGUF(path), path, /cannot open/);
  });
});
