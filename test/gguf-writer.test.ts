/**
 * The GGUF writer and the model writer: every metadata value type and every tensor type round-trip
 * through the reader (readGGUF), with the alignment asked for and tensor data given whole or in
 * chunks; each quantization mix chooses tensor types as llama-quantize did for the shared files and
 * as llama.cpp's rules give for shapes whose rows are not whole K-quant blocks; written models of
 * each architecture carry the metadata llama.cpp reads and a real vocabulary; broken or hostile
 * model files are refused with one-line errors naming the file and the problem.
 */
import { afterAll, describe, expect, test } from "bun:test";
import { mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { LLM } from "../src/llm/llm.ts";
import { InputError } from "../src/errors.ts";
import { makeConfig, type ModelConfig } from "../src/model/config.ts";
import { GGML_TYPES, GGUFStringArray, readGGUF, type GGUFFile, type GGUFValue } from "../src/model/gguf.ts";
import { readGGUFCheckpoint } from "../src/model/gguf-checkpoint.ts";
import { MODEL_MIXES, writeModelGGUF, type Arch, type ModelMix } from "../src/synth/gguf-model-writer.ts";
import { tensorRole, tensorType, useMoreBits } from "../src/synth/gguf-quant-mix.ts";
import { gguf, tensorBytes, writeGGUF, type TensorToWrite } from "../src/synth/gguf-writer.ts";
import { padVocabulary, tokenizerMetadata, vocabularySize } from "../src/synth/gguf-tokenizer-metadata.ts";
import { dequantize, GGML_TYPE, quantize, quantTypeName } from "../src/synth/quant/index.ts";
import { expectModelFormatError } from "./helpers/errors.ts";
import { describeShared } from "./helpers/shared.ts";

const dir = mkdtempSync(join(tmpdir(), "pagellm-gguf-writer-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** The items of an array value as plain JS values (strings as their raw bytes). */
function arrayItems(v: GGUFValue): unknown[] {
  if (v.type !== "array") throw new Error("not an array");
  const items = v.value.items;
  if (items instanceof GGUFStringArray) return Array.from({ length: items.length }, (_, i) => Array.from(items.bytes(i)));
  return Array.from(items as ArrayLike<unknown>);
}

function expectSameValue(got: GGUFValue, want: GGUFValue, key: string): void {
  if (want.type === "array") {
    expect(got.type, key).toBe("array");
    if (got.type === "array") expect(got.value.itemType, key).toBe(want.value.itemType);
    expect(arrayItems(got), key).toEqual(arrayItems(want));
  } else {
    expect(got, key).toEqual(want);
  }
}

/** The bytes of tensor `name` as the file holds them. */
function tensorData(f: GGUFFile, name: string): Uint8Array {
  const t = f.tensor(name)!;
  return new Uint8Array(readFileSync(f.path).subarray(t.fileOffset, t.fileOffset + t.byteSize));
}

describe("writeGGUF", () => {
  test("every metadata value type round-trips, strings byte for byte", () => {
    const notUtf8 = Uint8Array.from([0xe2, 0x82, 0x20, 0xff]);
    const metadata = new Map<string, GGUFValue>([
      ["a.u8", gguf.u8(200)], ["a.i8", gguf.i8(-5)], ["a.u16", gguf.u16(60000)], ["a.i16", gguf.i16(-30000)],
      ["a.u32", gguf.u32(4000000000)], ["a.i32", gguf.i32(-2000000000)], ["a.f32", gguf.f32(1.5)], ["a.f64", gguf.f64(Math.PI)],
      ["a.u64", gguf.u64(2n ** 60n)], ["a.i64", gguf.i64(-(2n ** 60n))], ["a.bool", gguf.bool(true)], ["a.false", gguf.bool(false)],
      ["a.str", gguf.str("héllo ✓ \u{1F600}")], ["a.empty", gguf.str("")],
      ["a.strings", gguf.strings(["", "x", "<|im_end|>", notUtf8, "\u0120the"])],
      ["a.u8s", gguf.u8s([1, 255])], ["a.i8s", gguf.i8s([-128, 127])], ["a.u16s", gguf.u16s([0, 65535])], ["a.i16s", gguf.i16s([-32768, 7])],
      ["a.u32s", gguf.u32s([0, 4294967295])], ["a.i32s", gguf.i32s([1, -2, 3])], ["a.u64s", gguf.u64s([5n, 2n ** 63n])],
      ["a.i64s", gguf.i64s([-(2n ** 63n), 9n])], ["a.f32s", gguf.f32s([0.5, -1, Infinity])], ["a.f64s", gguf.f64s([Math.E, -0])],
      ["a.bools", gguf.bools([true, false, true])], ["a.no-items", gguf.i32s([])],
    ]);
    const path = join(dir, "values.gguf");
    writeGGUF(path, metadata, []);
    const f = readGGUF(path);
    expect(f.version).toBe(3);
    expect(f.tensors.length).toBe(0);
    expect([...f.metadata.keys()]).toEqual([...metadata.keys()]);
    for (const [key, value] of metadata) expectSameValue(f.get(key), value, key);
    const strings = f.getStringArray("a.strings");
    expect(Array.from(strings.bytes(3))).toEqual(Array.from(notUtf8));
  });

  test("a vocabulary copied from a file is written back byte for byte", () => {
    const meta = new Map<string, GGUFValue>([["tokenizer.ggml.tokens", gguf.strings([Uint8Array.from([0x80]), "a", Uint8Array.from([0xc3])])]]);
    const first = join(dir, "vocab-1.gguf");
    const second = join(dir, "vocab-2.gguf");
    writeGGUF(first, meta, []);
    writeGGUF(second, tokenizerMetadata(first), []);
    expect(new Uint8Array(readFileSync(second))).toEqual(new Uint8Array(readFileSync(first)));
  });

  for (const alignment of [32, 64, 1, 4096]) {
    test(`every tensor type at alignment ${alignment}: offsets aligned, bytes as given`, () => {
      const tensors: TensorToWrite[] = [...GGML_TYPES.entries()].map(([type, info], i) => {
        const dims = [info.blockSize * (1 + (i % 3)), 1 + (i % 4)];
        const bytes = Uint8Array.from({ length: tensorBytes(type, dims) }, (_, j) => (j * 31 + i * 7) & 255);
        return { name: `t.${info.name}`, dims, type, data: bytes };
      });
      tensors.push({ name: "vector", dims: [3], type: 0, data: () => new Uint8Array(12).fill(9) });
      tensors.push({ name: "cube", dims: [2, 3, 4, 5], type: 0, data: () => new Uint8Array(4 * 120).fill(1) });
      const path = join(dir, `types-${alignment}.gguf`);
      writeGGUF(path, new Map([["general.alignment", gguf.u32(alignment)]]), tensors);
      const f = readGGUF(path);
      expect(f.alignment).toBe(alignment);
      expect(f.dataOffset % alignment).toBe(0);
      expect(f.tensors.map((t) => t.name)).toEqual(tensors.map((t) => t.name));
      for (const t of tensors) {
        const info = f.tensor(t.name)!;
        expect(info.type).toBe(t.type);
        expect(info.dims).toEqual([...t.dims]);
        expect(info.offset % alignment).toBe(0);
        const want = t.data instanceof Uint8Array ? t.data : (t.data() as Uint8Array);
        expect(tensorData(f, t.name)).toEqual(want);
      }
      const last = f.tensors[f.tensors.length - 1]!;
      expect(statSync(path).size).toBe(f.dataOffset + Math.ceil((last.offset + last.byteSize) / alignment) * alignment);
    });
  }

  test("tensor data given in chunks is the same file as given whole", () => {
    const whole = Uint8Array.from({ length: 34 * 12 }, (_, i) => (i * 13) & 255);
    const chunks = function* () {
      for (let at = 0; at < whole.length; at += 34 * 5) yield whole.subarray(at, Math.min(whole.length, at + 34 * 5));
    };
    writeGGUF(join(dir, "whole.gguf"), new Map(), [{ name: "q", dims: [64, 6], type: 8, data: whole }]);
    writeGGUF(join(dir, "chunks.gguf"), new Map(), [{ name: "q", dims: [64, 6], type: 8, data: chunks }]);
    expect(new Uint8Array(readFileSync(join(dir, "chunks.gguf")))).toEqual(new Uint8Array(readFileSync(join(dir, "whole.gguf"))));
  });

  test("bad input is refused with an InputError naming the problem", () => {
    const write = (meta: Map<string, GGUFValue>, tensors: TensorToWrite[]) => () => writeGGUF(join(dir, "bad.gguf"), meta, tensors);
    const none = new Map<string, GGUFValue>();
    expect(write(none, [{ name: "t", dims: [32], type: 8, data: new Uint8Array(33) }])).toThrow("tensor t: 33 bytes given, its type and shape take 34");
    expect(write(none, [{ name: "t", dims: [32], type: 8, data: () => [new Uint8Array(34), new Uint8Array(1)] }])).toThrow(
      "tensor t: more than 35 bytes given, its type and shape take 34",
    );
    expect(write(none, [{ name: "t", dims: [48], type: 8, data: new Uint8Array(0) }])).toThrow("tensor t: Q8_0 rows are whole blocks of 32 values; the row length 48 is not");
    expect(write(none, [{ name: "t", dims: [4], type: 4, data: new Uint8Array(0) }])).toThrow("tensor t: unknown ggml type 4");
    expect(write(none, [{ name: "t", dims: [1, 1, 1, 1, 1], type: 0, data: new Uint8Array(4) }])).toThrow("bad dims");
    const twice: TensorToWrite = { name: "t", dims: [1], type: 0, data: new Uint8Array(4) };
    expect(write(none, [twice, twice])).toThrow("duplicate tensor name t");
    expect(write(new Map([["general.alignment", gguf.u32(48)]]), [])).toThrow("general.alignment must be a u32 power of two");
    expect(write(new Map([["general.alignment", gguf.i32(32)]]), [])).toThrow(InputError);
  });
});

// ----------------------------------------------------------------------------
// Mixes

/** A mix by llama.cpp's general.file_type. */
function mixOfFileType(fileType: number): ModelMix {
  const mix = (Object.keys(MODEL_MIXES) as ModelMix[]).find((m) => MODEL_MIXES[m] === fileType);
  if (mix === undefined) throw new Error(`no mix has file type ${fileType}`);
  return mix;
}

/** Every 2-D weight's type in `file` as the mix rules give it, "name: TYPE" (the role's running index as llama-quantize counts it). */
function expectedTypes(f: GGUFFile, mix: ModelMix): string[] {
  const arch = f.getString("general.architecture");
  const heads = f.getU32(`${arch}.attention.head_count`);
  const ctx = {
    nLayers: f.getU32(`${arch}.block_count`), tied: f.tensor("output.weight") === undefined, gqa: heads / f.getU32(`${arch}.attention.head_count_kv`, heads),
    experts: f.getU32(`${arch}.expert_count`, 0),
  };
  const seen = new Map<string, number>();
  return f.tensors.flatMap((t) => {
    const role = tensorRole(t.name, t.dims.length);
    if (role === null) return [`${t.name}: F32`];
    const index = seen.get(role) ?? 0;
    seen.set(role, index + 1);
    return [`${t.name}: ${tensorType(mix, role, index, t.dims[0]!, ctx, false, t.dims.length === 3)}`];
  });
}

const SHARED_QUANTIZED = [
  "rnd-llama-Q4_K_M", "rnd-llama-Q2_K", "rnd-qwen2-Q5_K_M", "stories260K-Q4_0", "stories260K-Q4_1", "stories260K-Q5_0", "stories260K-Q5_1",
  "stories260K-Q8_0", "stories260K-F16", "stories260K-BF16", "stories260K", "rnd-qwen3moe-Q4_K_M", "rnd-gptoss-MXFP4_MOE",
];
describeShared("mixes choose every tensor's type as llama-quantize did for the shared files", SHARED_QUANTIZED.map((n) => `models/gguf/${n}.gguf`), (files) => {
  files.forEach((file, i) => {
    test(SHARED_QUANTIZED[i]!, () => {
      const f = readGGUF(file);
      const mix = mixOfFileType(f.getU32("general.file_type", 0));
      expect(expectedTypes(f, mix)).toEqual(f.tensors.map((t) => `${t.name}: ${t.typeName}`));
    });
  });
});

describe("tensorType", () => {
  test("use_more_bits picks llama.cpp's layers", () => {
    const picked = (n: number) => Array.from({ length: n }, (_, l) => l).filter((l) => useMoreBits(l, n));
    expect(picked(3)).toEqual([2]);
    expect(picked(8)).toEqual([0, 3, 6, 7]);
    expect(picked(30)).toEqual([0, 1, 2, 5, 8, 11, 14, 17, 20, 23, 26, 27, 28, 29]);
  });

  test("Q4_K_M on SmolLM2-135M's 576-wide rows falls back as llama.cpp does", () => {
    const ctx = { nLayers: 30, tied: true, gqa: 3, experts: 0 };
    expect(tensorType("Q4_K_M", "token_embd", 0, 576, ctx)).toBe("Q8_0");
    expect(tensorType("Q4_K_M", "other", 4, 576, ctx)).toBe("Q5_0");
    expect(tensorType("Q4_K_M", "attn_v", 4, 576, ctx)).toBe("Q5_0");
    expect(tensorType("Q4_K_M", "attn_v", 5, 576, ctx)).toBe("Q8_0");
    expect(tensorType("Q4_K_M", "ffn_down", 4, 1536, ctx)).toBe("Q4_K");
    expect(tensorType("Q4_K_M", "ffn_down", 5, 1536, ctx)).toBe("Q6_K");
  });

  test("the other mixes' steps and fallbacks", () => {
    const ctx = { nLayers: 16, tied: false, gqa: 4, experts: 0 };
    expect(tensorType("Q3_K_M", "attn_v", 1, 512, ctx)).toBe("Q5_K");
    expect(tensorType("Q3_K_M", "attn_v", 2, 512, ctx)).toBe("Q4_K");
    expect(tensorType("Q3_K_M", "ffn_down", 0, 512, ctx)).toBe("Q5_K");
    expect(tensorType("Q3_K_M", "ffn_down", 1, 512, ctx)).toBe("Q4_K");
    expect(tensorType("Q3_K_M", "attn_output", 1, 512, ctx)).toBe("Q4_K");
    expect(tensorType("Q3_K_S", "attn_v", 1, 512, ctx)).toBe("Q3_K");
    expect(tensorType("Q4_K_S", "attn_v", 3, 512, ctx)).toBe("Q5_K");
    expect(tensorType("Q4_K_S", "attn_v", 4, 512, ctx)).toBe("Q4_K");
    expect(tensorType("Q2_K", "attn_v", 4, 512, ctx)).toBe("Q4_K");
    expect(tensorType("Q2_K", "attn_v", 4, 96, ctx)).toBe("Q5_0");
    expect(tensorType("Q2_K", "ffn_down", 4, 96, ctx)).toBe("Q4_0");
    expect(tensorType("Q2_K", "output", 0, 512, ctx)).toBe("Q6_K");
    expect(tensorType("Q2_K", "token_embd", 0, 512, ctx)).toBe("Q2_K");
    expect(tensorType("Q5_K_S", "other", 0, 96, ctx)).toBe("Q5_1");
    expect(tensorType("Q8_0", "output", 0, 512, ctx)).toBe("Q8_0");
    expect(tensorType("Q4_0", "output", 0, 64, ctx)).toBe("Q8_0");
    expect(tensorType("Q4_0", "other", 0, 48, ctx)).toBe("F16");
    expect(tensorType("F16", "output", 0, 48, ctx)).toBe("F16");
    expect(tensorType("Q4_K_M", "output", 0, 512, ctx, true)).toBe("Q4_K");
  });
});

// ----------------------------------------------------------------------------
// Models

/** A small shape of `arch`, every optional part on; dim 96 is not whole K-quant blocks, hidden 256 is. */
function smallShape(arch: Arch, vocabSize: number): ModelConfig {
  const base = { dim: 96, hiddenDim: 256, nLayers: 8, nHeads: 6, nKvHeads: 2, vocabSize, seqLen: 512, normEps: 1e-6 };
  if (arch === "llama") return makeConfig({ ...base, sharedClassifier: false, ropeTheta: 500000, ropeFreqFactors: [1, 1, 1, 1, 2, 4, 6, 8] });
  if (arch === "qwen2") return makeConfig({ ...base, sharedClassifier: true, ropeTheta: 1e6, ropeStyle: "neox", qkvBias: true });
  // qwen3: 8 heads of 32, so q is 256 wide for a 96-wide model.
  return makeConfig({ ...base, nHeads: 8, headDim: 32, sharedClassifier: true, ropeTheta: 1e6, ropeStyle: "neox", qkNorm: true });
}

describeShared("written models", ["vocab/ggml-vocab-smollm.gguf", "models/gguf/stories260K.gguf"], ([smollm, stories]) => {
  const vocab = tokenizerMetadata(smollm!);

  for (const arch of ["llama", "qwen2", "qwen3"] as const) {
    test(`${arch} Q4_K_M: llama.cpp's metadata, every tensor, and Q4_K_M's types with the fallbacks`, () => {
      const config = smallShape(arch, vocabularySize(vocab));
      const path = join(dir, `${arch}-Q4_K_M.gguf`);
      writeModelGGUF(path, { arch, name: `small-${arch}`, config, mix: "Q4_K_M", tokenizer: vocab, seed: 3 });
      const f = readGGUF(path);
      expect(f.getString("general.architecture")).toBe(arch);
      expect(f.getU32("general.file_type")).toBe(15);
      for (const [key, want] of [["block_count", 8], ["embedding_length", 96], ["feed_forward_length", 256], ["attention.head_count_kv", 2], ["context_length", 512], ["vocab_size", 49152]] as const) {
        expect(f.getU32(`${arch}.${key}`), key).toBe(want);
      }
      expect(f.getU32(`${arch}.attention.head_count`)).toBe(config.nHeads);
      expect(f.getU32(`${arch}.attention.key_length`)).toBe(config.headDim);
      expect(f.getF32(`${arch}.attention.layer_norm_rms_epsilon`)).toBeCloseTo(1e-6, 12);
      for (const [key, value] of vocab) expectSameValue(f.get(key), value, key);
      const qDim = config.nHeads * config.headDim;
      const types = new Map(f.tensors.map((t) => [t.name, t.typeName]));
      const shapes = new Map(f.tensors.map((t) => [t.name, t.dims.join("x")]));
      // Rows of 96 take no K-quant: Q4_K -> Q5_0, Q6_K -> Q8_0; rows of 256 (ffn_down) keep Q4_K / Q6_K.
      const moreBits = [0, 3, 6, 7];
      for (let l = 0; l < 8; l++) {
        expect(types.get(`blk.${l}.attn_q.weight`)).toBe("Q5_0");
        expect(shapes.get(`blk.${l}.attn_q.weight`)).toBe(`96x${qDim}`);
        expect(types.get(`blk.${l}.attn_v.weight`)).toBe(moreBits.includes(l) ? "Q8_0" : "Q5_0");
        // attn_output's rows are q's width: 96 (Q4_K -> Q5_0), but 256 in qwen3 (Q4_K).
        expect(types.get(`blk.${l}.attn_output.weight`)).toBe(arch === "qwen3" ? "Q4_K" : "Q5_0");
        expect(types.get(`blk.${l}.ffn_down.weight`)).toBe(moreBits.includes(l) ? "Q6_K" : "Q4_K");
        expect(types.get(`blk.${l}.attn_norm.weight`)).toBe("F32");
        expect(types.has(`blk.${l}.attn_q.bias`)).toBe(arch === "qwen2");
        expect(types.has(`blk.${l}.attn_q_norm.weight`)).toBe(arch === "qwen3");
      }
      expect(types.get("token_embd.weight")).toBe(arch === "llama" ? "Q5_0" : "Q8_0");
      expect(types.get("output.weight")).toBe(arch === "llama" ? "Q8_0" : undefined);
      expect(types.get("rope_freqs.weight")).toBe(arch === "llama" ? "F32" : undefined);
    });
  }

  test("qwen3moe Q4_K_M: llama-quantize's types for 8 experts (attn_k and attn_v Q8_0, attn_output Q5_K); decisive routing by construction", () => {
    // Experts of 32 (ffn_down_exps falls back to Q5_0), everything else in rows of 256 (K-quants).
    const config = makeConfig({
      dim: 256, hiddenDim: 512, nLayers: 2, nHeads: 4, nKvHeads: 2, headDim: 64, vocabSize: 512, seqLen: 256, sharedClassifier: false,
      ropeStyle: "neox", qkNorm: true,
      experts: { count: 8, used: 2, hiddenDim: 32, gating: "softmax", normalizeWeights: true, biases: false, activation: "swiglu" },
    });
    const model = { arch: "qwen3moe" as const, name: "routed", config, tokenizer: tokenizerMetadata(stories!), seed: 7, decisiveRouting: true };
    const paths = { F32: join(dir, "routed-F32.gguf"), Q4_K_M: join(dir, "routed-Q4_K_M.gguf") };
    writeModelGGUF(paths.F32, { ...model, mix: "F32" });
    writeModelGGUF(paths.Q4_K_M, { ...model, mix: "Q4_K_M" });
    const q = readGGUF(paths.Q4_K_M);
    expect(q.tensors.map((t) => `${t.name}: ${t.typeName}`)).toEqual(expectedTypes(q, "Q4_K_M"));
    const types = new Map(q.tensors.map((t) => [t.name, t.typeName]));
    expect([types.get("blk.0.attn_k.weight"), types.get("blk.0.attn_v.weight"), types.get("blk.0.attn_output.weight")]).toEqual(["Q8_0", "Q8_0", "Q5_K"]);

    const values = (f: GGUFFile, name: string): Float32Array => {
      const t = f.tensor(name)!;
      return dequantize(t.typeName as Parameters<typeof dequantize>[0], tensorData(f, name), t.dims.reduce((a, b) => a * b, 1));
    };
    const { dim, nLayers } = config;
    const routing = (l: number, e: number) => dim - nLayers * 8 + l * 8 + e;
    for (const [mix, path] of Object.entries(paths)) {
      const f = readGGUF(path);
      for (let l = 0; l < nLayers; l++) {
        // Nothing writes to the routing dimensions: their rows are zero, quantized too.
        const out = values(f, `blk.${l}.attn_output.weight`);
        const down = values(f, `blk.${l}.ffn_down_exps.weight`);
        for (let d = routing(0, 0); d < dim; d++) {
          expect(out.subarray(d * 256, (d + 1) * 256).every((v) => v === 0), `${mix} attn_output row ${d}`).toBe(true);
          for (let e = 0; e < 8; e++) expect(down.subarray((e * dim + d) * 32, (e * dim + d + 1) * 32).every((v) => v === 0), `${mix} expert ${e} row ${d}`).toBe(true);
        }
        expect(out.subarray(0, routing(0, 0) * 256).some((v) => v !== 0)).toBe(true);
        // The router reads its layer's entries only, through the FFN norm: weight x norm is the same for every expert.
        const router = values(f, `blk.${l}.ffn_gate_inp.weight`);
        const norm = values(f, `blk.${l}.ffn_norm.weight`);
        for (let e = 0; e < 8; e++) {
          const row = router.subarray(e * dim, (e + 1) * dim);
          expect(Array.from(row).flatMap((v, d) => (v === 0 ? [] : [d]))).toEqual([routing(l, e)]);
          expect(row[routing(l, e)]! * norm[routing(l, e)]!).toBeCloseTo(2 * Math.sqrt(dim), 3);
        }
      }
      // Each token's two largest routing entries of each layer lead the third by half the embedding's std (1/16),
      // and by something still once quantized.
      const embedding = values(f, "token_embd.weight");
      let least = Infinity;
      for (let t = 0; t < 512; t++) {
        for (let l = 0; l < nLayers; l++) {
          const block = Array.from({ length: 8 }, (_, e) => embedding[t * dim + routing(l, e)]!).sort((a, b) => b - a);
          least = Math.min(least, block[1]! - block[2]!);
        }
      }
      if (mix === "F32") expect(least).toBeGreaterThanOrEqual(0.5 / 16 - 1e-6);
      else expect(least).toBeGreaterThan(0);
    }
    expect(() => writeModelGGUF(join(dir, "x.gguf"), { ...model, mix: "F32", config: { ...config, nLayers: 32 } })).toThrow(
      "decisive routing needs 32 x 8 routing dimensions, fewer than dim 256",
    );
    expect(() => writeModelGGUF(join(dir, "x.gguf"), { ...model, arch: "qwen3", mix: "F32", config: { ...config, experts: undefined } })).toThrow(
      "decisive routing needs experts",
    );
  });

  test("Q8_0, F16 and F32 models of each architecture load and run", async () => {
    for (const arch of ["llama", "qwen2", "qwen3"] as const) {
      for (const mix of ["F32", "F16", "Q8_0"] as const) {
        const path = join(dir, `${arch}-${mix}.gguf`);
        writeModelGGUF(path, { arch, name: "run", config: { ...smallShape(arch, 512), nLayers: 2 }, mix, tokenizer: tokenizerMetadata(stories!), seed: 4 });
        const llm = LLM.load({ model: path, tokenizer: path, engine: { threads: 1 } });
        try {
          expect(llm.checkpoint.format).toBe(`GGUF v3 ${arch} ${mix}`);
          const logits = (await llm.client.score({ tokens: [1, 20, 30], logits: true })).logits!;
          expect(logits.length).toBeGreaterThan(0);
          for (const row of logits) expect(row.every(Number.isFinite)).toBe(true);
        } finally {
          llm.close();
        }
      }
    }
  });

  test("the same seed writes the same file; the vocabulary must fit the model", () => {
    const config = { ...smallShape("llama", 512), nLayers: 1 };
    const model = { arch: "llama" as const, name: "same", config, mix: "Q4_K_M" as const, tokenizer: tokenizerMetadata(stories!), seed: 9 };
    writeModelGGUF(join(dir, "same-1.gguf"), model);
    writeModelGGUF(join(dir, "same-2.gguf"), model);
    expect(new Uint8Array(readFileSync(join(dir, "same-2.gguf")))).toEqual(new Uint8Array(readFileSync(join(dir, "same-1.gguf"))));
    expect(() => writeModelGGUF(join(dir, "x.gguf"), { ...model, config: { ...config, vocabSize: 600 } })).toThrow("the tokenizer has 512 tokens, the model's vocabulary 600");
    expect(() => writeModelGGUF(join(dir, "x.gguf"), { ...model, arch: "qwen2" })).toThrow("q/k/v biases are required by qwen2");
  });

  test("a quantized model holds its F32 twin's weights quantized, as llama-quantize would make it from the F32 file", () => {
    const config = { ...smallShape("qwen2", 512), nLayers: 2 };
    const model = { arch: "qwen2" as const, name: "twin", config, tokenizer: tokenizerMetadata(stories!), seed: 11 };
    writeModelGGUF(join(dir, "twin-F32.gguf"), { ...model, mix: "F32" });
    writeModelGGUF(join(dir, "twin-Q4_K_M.gguf"), { ...model, mix: "Q4_K_M" });
    const f32 = readGGUF(join(dir, "twin-F32.gguf"));
    const q = readGGUF(join(dir, "twin-Q4_K_M.gguf"));
    expect(q.tensors.map((t) => t.name)).toEqual(f32.tensors.map((t) => t.name));
    for (const t of q.tensors) {
      const source = tensorData(f32, t.name);
      const values = new Float32Array(source.buffer, source.byteOffset, source.byteLength / 4);
      expect(tensorData(q, t.name), t.name).toEqual(quantize(quantTypeName(t.type)!, values));
    }
  });

  test("a vocabulary padded as convert_hf_to_gguf pads one: [PAD<id>] tokens of type UNUSED", () => {
    const padded = padVocabulary(vocab, 49160);
    expect(vocabularySize(padded)).toBe(49160);
    const tokens = (padded.get("tokenizer.ggml.tokens")!.value as { items: GGUFStringArray }).items;
    expect(tokens.get(49152)).toBe("[PAD49152]");
    expect(tokens.get(100)).toBe((vocab.get("tokenizer.ggml.tokens")!.value as { items: GGUFStringArray }).items.get(100));
    const types = padded.get("tokenizer.ggml.token_type")!;
    expect(arrayItems(types).slice(49150)).toEqual([...arrayItems(vocab.get("tokenizer.ggml.token_type")!).slice(49150), 5, 5, 5, 5, 5, 5, 5, 5]);
    expect(() => padVocabulary(vocab, 100)).toThrow("cannot be padded down");
    expect(GGML_TYPE.Q4_K).toBe(12);
    expect(quantTypeName(12)).toBe("Q4_K");
  });
});

describeShared("broken and hostile model files", ["models/gguf/stories260K.gguf"], ([vocab]) => {
  const config = makeConfig({ dim: 64, hiddenDim: 96, nLayers: 1, nHeads: 4, nKvHeads: 4, vocabSize: 512, seqLen: 128, sharedClassifier: true });
  const good = join(dir, "good.gguf");
  writeModelGGUF(good, { arch: "llama", name: "t", config, mix: "Q8_0", tokenizer: tokenizerMetadata(vocab!), seed: 1 });
  const bytes = readFileSync(good);

  /** A copy of the good file with `edit` applied to its bytes. */
  function variant(name: string, edit: (b: Buffer) => void): string {
    const b = Buffer.from(bytes);
    edit(b);
    const path = join(dir, name);
    writeFileSync(path, b);
    return path;
  }
  /** Byte position of a tensor info's field after its name: 0 = n_dims, then dims, type, offset. */
  function infoField(b: Buffer, tensor: string, field: "type" | "offset" | "dim0"): number {
    const name = Buffer.from(tensor);
    const at = b.indexOf(name) + name.length;
    const nDims = b.readUInt32LE(at);
    return field === "dim0" ? at + 4 : field === "type" ? at + 4 + 8 * nDims : at + 8 + 8 * nDims;
  }

  test("the good file loads", () => {
    const llm = LLM.load({ model: good, tokenizer: good, engine: { threads: 1 } });
    expect(llm.checkpoint.format).toBe("GGUF v3 llama Q8_0");
    llm.close();
  });

  test("overlapping tensors", () => {
    const path = variant("overlap.gguf", (b) => {
      const first = infoField(b, "blk.0.attn_q.weight", "offset");
      const second = infoField(b, "blk.0.attn_k.weight", "offset");
      b.writeBigUInt64LE(b.readBigUInt64LE(first), second);
    });
    expectModelFormatError(() => readGGUFCheckpoint(path), path, /tensors "blk\.0\.attn_(q|k)\.weight" and "blk\.0\.attn_(q|k)\.weight" overlap/);
  });

  test("an unknown architecture", () => {
    const path = variant("arch.gguf", (b) => b.write("qwen9", b.indexOf("llama"), "latin1"));
    expectModelFormatError(() => readGGUFCheckpoint(path), path, /architecture "qwen9" is not supported \(supported: llama, qwen2, qwen3, qwen3moe, gemma3, phi3, smollm3, gpt-oss\)/);
  });

  test("a tensor type without kernels (IQ4_NL)", () => {
    const path = variant("type.gguf", (b) => b.writeUInt32LE(20, infoField(b, "blk.0.ffn_up.weight", "type")));
    expectModelFormatError(() => readGGUFCheckpoint(path), path, /tensor blk\.0\.ffn_up\.weight has type IQ4_NL, which is not supported/);
  });

  test("a missing tensor", () => {
    const path = variant("missing.gguf", (b) => b.write("X", b.indexOf("blk.0.ffn_gate.weight"), "latin1"));
    expectModelFormatError(() => readGGUFCheckpoint(path), path, /missing tensor blk\.0\.ffn_gate\.weight/);
  });

  test("a tensor whose shape the hyper-parameters do not give", () => {
    const path = variant("shape.gguf", (b) => {
      // 96 rows of 64 become 64 rows of 96: the same bytes, the wrong shape.
      const at = infoField(b, "blk.0.ffn_up.weight", "dim0");
      b.writeBigUInt64LE(96n, at);
      b.writeBigUInt64LE(64n, at + 8);
    });
    expectModelFormatError(() => readGGUFCheckpoint(path), path, /tensor blk\.0\.ffn_up\.weight has shape \[64, 96\], expected \[96, 64\]/);
  });

  test("dimensions whose product overflows", () => {
    const path = variant("overflow.gguf", (b) => b.writeBigUInt64LE(2n ** 52n, infoField(b, "blk.0.ffn_up.weight", "dim0") + 8));
    expect(() => readGGUFCheckpoint(path)).toThrow(path);
  });

  test("a model larger than the machine's memory is refused before loading, with the sizes", () => {
    // Models past 4 GiB are spread over several WebAssembly memories; what no memory split can
    // help is a need beyond the machine's: here 50 million KV blocks (kvCacheMb alone is capped
    // at what the context and maxNumSeqs can use).
    expectModelFormatError(
      () => LLM.load({ model: good, tokenizer: good, engine: { threads: 1, numBlocks: 50_000_000 } }),
      good,
      /needs [\d.]+ GiB \(weights [\d.]+ GiB, KV cache [\d.]+ GiB, buffers [\d.]+ GiB\), more than the [\d.]+ GiB this machine has available/,
    );
  });
});
