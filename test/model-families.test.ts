/**
 * The dense architectures gemma3, phi3 and smollm3 as the readers describe them (src/model/arch/): gemma3's
 * sliding-window layers (llama.cpp's pattern rule, a per-layer array, no window), its scaled
 * embedding, attention scale and GeGLU; phi3's fused matrices and LongRoPE (long factors past
 * the original context, short ones below, the attn_factor in the tables); smollm3's layers
 * without RoPE; the row ranges a fused matrix is read as; and what is refused in one line.
 */
import { afterAll, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { attentionScale } from "../src/model/attention.ts";
import { ModelFormatError } from "../src/errors.ts";
import { withContext } from "../src/engine/engine-options.ts";
import { ARCHITECTURES } from "../src/model/arch/index.ts";
import { layerWindow, makeConfig } from "../src/model/config.ts";
import { GGUFFile, type GGUFTensorInfo, type GGUFValue } from "../src/model/gguf.ts";
import { readGGUFCheckpoint } from "../src/model/gguf-checkpoint.ts";
import { gguf } from "../src/synth/gguf-writer.ts";
import { writeModelGGUF } from "../src/synth/gguf-model-writer.ts";
import { tokenizerMetadata } from "../src/synth/gguf-tokenizer-metadata.ts";
import { layerRopes, ropeTable } from "../src/model/rope.ts";
import { matrixRows, type WeightMatrix } from "../src/backend/wasm/weights.ts";
import { describeShared, sharedPath } from "./helpers/shared.ts";
import { runPagellm } from "./helpers/cli.ts";
import { PROCESS_TEST_MS } from "./helpers/limits.ts";

const dir = mkdtempSync(join(tmpdir(), "pagellm-families-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** A header in memory: `keys` under `arch.`, with enough (empty) tensors for its layers. */
function header(arch: string, nLayers: number, keys: Record<string, GGUFValue> = {}): GGUFFile {
  const metadata = new Map<string, GGUFValue>([
    ["general.architecture", gguf.str(arch)],
    [`${arch}.embedding_length`, gguf.u32(1152)],
    [`${arch}.block_count`, gguf.u32(nLayers)],
    [`${arch}.feed_forward_length`, gguf.u32(6912)],
    [`${arch}.attention.head_count`, gguf.u32(4)],
    [`${arch}.attention.head_count_kv`, gguf.u32(1)],
    [`${arch}.attention.key_length`, gguf.u32(256)],
    [`${arch}.context_length`, gguf.u32(32768)],
    ...Object.entries(keys).map(([k, v]): [string, GGUFValue] => [`${arch}.${k}`, v]),
  ]);
  const tensors: GGUFTensorInfo[] = Array.from({ length: 16 * nLayers }, (_, i) => ({
    name: `t${i}`, dims: [1], type: 0, typeName: "F32", nElements: 1, byteSize: 4, offset: 0, fileOffset: 0,
  }));
  return new GGUFFile("mem.gguf", 3, metadata, tensors, 32, 0, 0);
}

const configOf = (file: GGUFFile) => ARCHITECTURES.get(file.getString("general.architecture"))!.config(file, { vocabSize: 100, sharedClassifier: true });
const locals = (c: ReturnType<typeof configOf>) => Array.from({ length: c.nLayers }, (_, l) => layerWindow(c, l) > 0);

describe("gemma3's layers", () => {
  test("llama.cpp's default pattern of 6 (Gemma 3 1B: 26 layers, global 5, 11, 17, 23), the local RoPE base, the scaled embedding, GeGLU", () => {
    const c = configOf(header("gemma3", 26, { "attention.sliding_window": gguf.u32(512), "rope.freq_base": gguf.f32(1e6) }));
    const globals = locals(c).flatMap((local, l) => (local ? [] : [l]));
    expect(globals).toEqual([5, 11, 17, 23]);
    expect(layerWindow(c, 0)).toBe(512);
    expect(c.slidingWindow!.rope).toEqual({ theta: 10000, freqScale: 1 });
    expect(c.embedScale).toBe(Math.fround(Math.sqrt(1152)));
    expect(c.attnScale).toBe(attentionScale(256));
    expect([c.ffnActivation, c.postNorms, c.qkNorm, c.ropeStyle]).toEqual(["gelu", true, true, "neox"]);
    // Two RoPEs: local layers use the second table, global ones the first.
    const ropes = layerRopes(c);
    expect(ropes.sets.map((s) => s.theta)).toEqual([1e6, 10000]);
    expect(ropes.ofLayer.slice(0, 7)).toEqual([1, 1, 1, 1, 1, 0, 1]);
  });

  test("a pattern key, a per-layer array of booleans, pattern 0 (all local), and no window at all", () => {
    expect(locals(configOf(header("gemma3", 4, { "attention.sliding_window": gguf.u32(32), "attention.sliding_window_pattern": gguf.u32(3) }))))
      .toEqual([true, true, false, true]);
    expect(locals(configOf(header("gemma3", 3, { "attention.sliding_window": gguf.u32(32), "attention.sliding_window_pattern": gguf.bools([false, true, true]) }))))
      .toEqual([false, true, true]);
    expect(locals(configOf(header("gemma3", 3, { "attention.sliding_window": gguf.u32(32), "attention.sliding_window_pattern": gguf.u32(0) }))))
      .toEqual([true, true, true]);
    const none = configOf(header("gemma3", 3));
    expect(none.slidingWindow).toBeUndefined();
    expect(layerRopes(none).sets).toHaveLength(1);
  });

  test("the 62-layer 27B scales queries by 1/sqrt(dim / heads); soft-capping and a short pattern array are refused in one line", () => {
    expect(configOf(header("gemma3", 62)).attnScale).toBe(attentionScale(1152 / 4));
    expect(() => configOf(header("gemma3", 2, { final_logit_softcapping: gguf.f32(30) }))).toThrow(ModelFormatError);
    expect(() => configOf(header("gemma3", 2, { final_logit_softcapping: gguf.f32(30) }))).toThrow("final logit soft-capping (30) is not supported");
    expect(() => configOf(header("gemma3", 3, { "attention.sliding_window": gguf.u32(8), "attention.sliding_window_pattern": gguf.bools([true]) })))
      .toThrow("gemma3.attention.sliding_window_pattern has 1 entries for 3 layers");
  });
});

describe("smollm3's layers", () => {
  test("every fourth layer has no RoPE (NoPE), as llama.cpp's fixed step of 4", () => {
    const c = configOf(header("smollm3", 8));
    expect(layerRopes(c).ofLayer).toEqual([0, 0, 0, null, 0, 0, 0, null]);
    expect(c.ropeStyle).toBe("interleaved");
  });
});

describe("phi3", () => {
  const path = join(dir, "phi3-F32.gguf");
  const config = makeConfig({
    dim: 64, hiddenDim: 96, nLayers: 2, nHeads: 4, nKvHeads: 2, headDim: 16, vocabSize: 512, seqLen: 8192, sharedClassifier: false,
    ropeStyle: "neox", fusedQkv: true, fusedGateUp: true, ropeAttnFactor: 1.19,
    longRope: { originalContext: 4096, long: [1, 2, 4, 8, 16, 24, 32, 40], short: [1, 1, 1.1, 1.1, 1.2, 1.3, 1.4, 1.5] },
  });
  const vocab = sharedPath("models/gguf/stories260K.gguf");

  test.skipIf(vocab === null)("fused matrices and LongRoPE read back; the long factors past the original context, the short ones up to it; attn_factor scales cos and sin", () => {
    writeModelGGUF(path, { arch: "phi3", name: "phi3", config, mix: "F32", tokenizer: tokenizerMetadata(vocab!), seed: 3 });
    const ckpt = readGGUFCheckpoint(path);
    const c = ckpt.config;
    expect([c.fusedQkv, c.fusedGateUp, c.ropeAttnFactor, c.longRope?.originalContext]).toEqual([true, true, Math.fround(1.19), 4096]);
    expect(ckpt.tensors.get("blk.0.attn_qkv.weight")!.shape).toEqual([64 + 2 * 32, 64]);
    expect(ckpt.tensors.get("blk.0.ffn_up.weight")!.shape).toEqual([2 * 96, 64]);
    expect(ckpt.tensors.has("blk.0.ffn_gate.weight")).toBe(false);
    const factorsAt = (ctx: number) => layerRopes(withContext(c, ctx)).sets[0]!.factors;
    expect(factorsAt(8192)).toEqual(config.longRope!.long.map(Math.fround));
    expect(factorsAt(4096)).toEqual(config.longRope!.short.map(Math.fround));
    const params = layerRopes(withContext(c, 4096)).sets[0]!;
    const scaled = ropeTable(params, 8, 16);
    const plain = ropeTable({ ...params, attnFactor: 1 }, 8, 16);
    for (let i = 0; i < plain.cos.length; i++) expect(scaled.cos[i]).toBe(Math.fround(plain.cos[i]! * Math.fround(1.19)));
  });

  test.skipIf(vocab === null)("an F32 fused matrix whose parts do not start on 4-row panels is refused in one line", () => {
    const odd = join(dir, "phi3-odd.gguf");
    const c = makeConfig({ dim: 8, hiddenDim: 8, nLayers: 1, nHeads: 2, nKvHeads: 1, headDim: 2, vocabSize: 512, seqLen: 64, sharedClassifier: false, ropeStyle: "neox", fusedQkv: true, fusedGateUp: true });
    writeModelGGUF(odd, { arch: "phi3", name: "odd", config: c, mix: "F32", tokenizer: tokenizerMetadata(vocab!), seed: 3 });
    expect(() => readGGUFCheckpoint(odd)).toThrow("F32 blk.0.attn_qkv.weight with q and k of 4 and 2 rows (not multiples of 4) is not supported");
  });
});

describe("row ranges of a fused matrix", () => {
  test("f32 parts start on 4-row panels; ggml parts at whole rows; int8 is never fused", () => {
    const f32: WeightMatrix = { kind: "f32", rows: 12, cols: 5, addr: 1000 };
    expect(matrixRows(f32, 4, 8)).toEqual({ kind: "f32", rows: 8, cols: 5, addr: 1000 + 4 * 4 * 5 });
    expect(() => matrixRows(f32, 2, 4)).toThrow("4-row panel");
    const q: WeightMatrix = { kind: "ggml", type: 8, rows: 6, cols: 32, addr: 64, rowBytes: 34 };
    expect(matrixRows(q, 2, 3)).toEqual({ ...q, rows: 3, addr: 64 + 2 * 34 });
    expect(() => matrixRows(q, 4, 3)).toThrow("rows 4..7 of 6");
  });
});

describeShared("the shared gemma3 file", ["models/gguf/rnd-gemma3-Q4_K_M.gguf"], ([model]) => {
  test("its window, local layers (pattern 3: 0, 1 and 3), two RoPEs and the global layer's linear scaling", () => {
    const c = readGGUFCheckpoint(model!).config;
    expect(c.slidingWindow!.size).toBe(32);
    expect(locals(c)).toEqual([true, true, false, true]);
    expect(layerRopes(c).sets.map((s) => [s.theta, s.freqScale])).toEqual([[1e6, 1 / 8], [10000, 1]]);
    expect(c.embedScale).toBe(16);
  });
});

describeShared("pagellm info on the shared gemma3 and phi3 files", ["models/gguf/rnd-gemma3-Q4_K_M.gguf", "models/gguf/rnd-phi3-Q4_K_M.gguf"], ([gemma, phi]) => {
  test("the window, its local layers and their RoPE; the KV cache at 32768 counts a local layer at the window", () => {
    const text = runPagellm(["info", gemma!, "--ctx-size", "32768"]);
    expect(text.exitCode).toBe(0);
    expect(text.stdout).toContain("sliding window    32 tokens on 3 of 4 layers (global: 2)");
    expect(text.stdout).toContain("local layers  base 10000, no scaling");
    const json = JSON.parse(runPagellm(["info", gemma!, "--ctx-size", "32768", "--json"]).stdout) as {
      slidingWindow: { size: number; localLayers: number[] }; memory: { kvCacheBytes: number; kvCacheAllGlobalBytes: number };
    };
    expect(json.slidingWindow).toEqual({ size: 32, localLayers: [0, 1, 3] });
    // One KV head of 128 values in f16, K and V: 512 bytes a position and layer.
    expect(json.memory.kvCacheAllGlobalBytes).toBe(4 * 32768 * 512);
    expect(json.memory.kvCacheBytes).toBe((32768 + 3 * 32) * 512);
    const phi3 = runPagellm(["info", phi!]);
    expect(phi3.exitCode).toBe(0);
    expect(phi3.stdout).not.toContain("sliding window");
  }, PROCESS_TEST_MS);
});
