/**
 * The GGUF writer and the model writer: metadata and tensors round-trip through the reader, each
 * mix chooses tensor types as llama-quantize does, and broken or hostile model files are refused
 * with one-line errors naming the file and the problem before anything is allocated.
 */
import { afterAll, describe, expect, test } from "bun:test";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { LLM } from "../src/engine/llm.ts";
import { makeConfig } from "../src/model/config.ts";
import { GGUFStringArray, readGGUF, type GGUFValue } from "../src/model/gguf.ts";
import { readGGUFCheckpoint } from "../src/model/gguf-checkpoint.ts";
import { tensorType, writeModelGGUF, type ModelMix } from "../src/model/gguf-model-writer.ts";
import { gguf, writeGGUF } from "../src/model/gguf-writer.ts";
import { tokenizerMetadata } from "../src/model/gguf-tokenizer-metadata.ts";
import { expectModelFormatError } from "./helpers/errors.ts";
import { describeShared } from "./helpers/shared.ts";

const dir = mkdtempSync(join(tmpdir(), "pagellm-gguf-writer-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe("writeGGUF", () => {
  test("every metadata value type and tensor data round-trip through readGGUF", () => {
    const metadata = new Map<string, GGUFValue>([
      ["general.alignment", gguf.u32(64)],
      ["a.u8", { type: "u8", value: 200 }], ["a.i8", { type: "i8", value: -5 }],
      ["a.u16", { type: "u16", value: 60000 }], ["a.i16", { type: "i16", value: -30000 }],
      ["a.u32", gguf.u32(4000000000)], ["a.i32", gguf.i32(-2000000000)],
      ["a.f32", gguf.f32(1.5)], ["a.f64", { type: "f64", value: Math.PI }],
      ["a.u64", { type: "u64", value: 2n ** 60n }], ["a.i64", { type: "i64", value: -(2n ** 60n) }],
      ["a.bool", gguf.bool(true)], ["a.str", gguf.str("héllo ✓")],
      ["a.strings", gguf.strings(["", "x", "<|im_end|>"])], ["a.i32s", gguf.i32s([1, -2, 3])], ["a.f32s", gguf.f32s([0.5, -1])],
      ["a.u8s", { type: "array", value: { itemType: "u8", items: Uint8Array.from([1, 2]) } }],
      ["a.u64s", { type: "array", value: { itemType: "u64", items: BigUint64Array.from([5n]) } }],
    ]);
    const t0 = Uint8Array.from({ length: 4 * 6 }, (_, i) => i);
    const t1 = Uint8Array.from({ length: 34 * 2 }, (_, i) => 255 - i);
    const path = join(dir, "roundtrip.gguf");
    writeGGUF(path, metadata, [
      { name: "t0", dims: [3, 2], type: 0, data: () => t0 },
      { name: "t1", dims: [32, 2], type: 8, data: () => t1 },
    ]);
    const f = readGGUF(path);
    expect(f.version).toBe(3);
    expect(f.alignment).toBe(64);
    for (const [key, value] of metadata) {
      const got = f.get(key);
      if (value.type === "array" && got.type === "array") {
        const items = (a: typeof value.value) => (a.items instanceof GGUFStringArray ? Array.from({ length: a.items.length }, (_, i) => (a.items as GGUFStringArray).get(i)) : Array.from(a.items as ArrayLike<unknown>));
        expect(got.value.itemType).toBe(value.value.itemType);
        expect(items(got.value)).toEqual(items(value.value));
      } else {
        expect(got).toEqual(value);
      }
    }
    const bytes = readFileSync(path);
    expect(f.dataOffset % 64).toBe(0);
    expect(new Uint8Array(bytes.subarray(f.tensor("t0")!.fileOffset, f.tensor("t0")!.fileOffset + t0.length))).toEqual(t0);
    expect(new Uint8Array(bytes.subarray(f.tensor("t1")!.fileOffset, f.tensor("t1")!.fileOffset + t1.length))).toEqual(t1);
    expect(f.tensor("t1")!.fileOffset % 64).toBe(0);
  });

  test("a tensor whose bytes do not match its type and shape is refused", () => {
    expect(() => writeGGUF(join(dir, "bad.gguf"), new Map(), [{ name: "t", dims: [32], type: 8, data: () => new Uint8Array(33) }])).toThrow(
      "tensor t: 33 bytes given, its type and shape take 34",
    );
  });
});

describeShared(
  "mixes choose tensor types as llama-quantize did for the shared files",
  ["models/gguf/rnd-llama-Q4_K_M.gguf", "models/gguf/rnd-llama-Q2_K.gguf", "models/gguf/rnd-qwen2-Q5_K_M.gguf", "models/gguf/stories260K-Q4_0.gguf", "models/gguf/stories260K-Q8_0.gguf"],
  (files) => {
    const mixes: ModelMix[] = ["Q4_K_M", "Q2_K", "Q5_K_M", "Q4_0", "Q8_0"];
    files.forEach((file, i) => {
      test(file.split("/").pop()!, () => {
        const ck = readGGUFCheckpoint(file);
        const c = ck.config;
        for (const t of readGGUF(file).tensors) {
          if (t.dims.length < 2) continue;
          const m = /^blk\.(\d+)\.(\w+)\.weight$/.exec(t.name);
          const layer = m ? Number(m[1]) : null;
          const part = m ? m[2]! : t.name.split(".")[0]!;
          const kind = (["token_embd", "output", "attn_v", "attn_output", "ffn_down"] as const).find((k) => k === part) ?? "other";
          const want = tensorType(mixes[i]!, kind, layer, c.nLayers, t.dims[0]!, c.sharedClassifier, c.nHeads / c.nKvHeads);
          expect(`${t.name}: ${want}`).toBe(`${t.name}: ${t.typeName}`);
        }
      });
    });
  },
);

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
    expectModelFormatError(() => readGGUFCheckpoint(path), path, /tensors blk\.0\.attn_(q|k)\.weight and blk\.0\.attn_(q|k)\.weight overlap/);
  });

  test("an unknown architecture", () => {
    const path = variant("arch.gguf", (b) => b.write("qwen9", b.indexOf("llama"), "latin1"));
    expectModelFormatError(() => readGGUFCheckpoint(path), path, /architecture "qwen9" is not supported \(supported: llama, qwen2, qwen3\)/);
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

  test("a model too large for the 4 GiB memory is refused before loading, with the sizes", () => {
    // 3 GiB of KV cache at this context: 2 x 1 layer x 4 heads x 16 x 4 bytes per token and block.
    expectModelFormatError(
      () => LLM.load({ model: good, tokenizer: good, engine: { threads: 1, kvCacheMb: 5000, maxNumSeqs: 100000 } }),
      good,
      /needs [\d.]+ GiB \(weights [\d.]+ GiB, KV cache [\d.]+ GiB, buffers [\d.]+ GiB\), more than the 4 GiB a WebAssembly memory holds/,
    );
  });
});
