/**
 * Q5_0 matrices stored as Q8_0 (src/backend/wasm/weights.ts, WeightStorage): the loader rewrites them
 * block for block, every weight keeps its value, and the sizes the engine checks against the
 * 4 GiB memory count the larger blocks.
 */
import { afterAll, expect, test } from "bun:test";
import { CpuBackend } from "../src/backend/wasm/cpu.ts";
import { openCheckpoint } from "../src/model/load.ts";
import { FAST_STORAGE, FILE_STORAGE, loadWeights, weightBytes, type ModelWeights, type WeightMatrix } from "../src/backend/wasm/weights.ts";
import { summarizeModel } from "../src/hub/summary.ts";
import { GGML_TYPE } from "../src/synth/quant/index.ts";
import { describeShared } from "./helpers/shared.ts";

const backends: CpuBackend[] = [];
afterAll(() => backends.forEach((b) => b.close()));

function load(path: string, storage: typeof FAST_STORAGE): { b: CpuBackend; w: ModelWeights } {
  const b = new CpuBackend(1);
  backends.push(b);
  return { b, w: loadWeights(openCheckpoint(path), b.mem, b.kernels, undefined, storage) };
}

/** Every row of m as f32, through the embedding kernel of its stored type. */
function rows(b: CpuBackend, m: WeightMatrix): Float32Array {
  const tokens = b.mem.alloc(4 * m.rows);
  b.mem.i32.set(Array.from({ length: m.rows }, (_, i) => i), tokens >> 2);
  const out = b.mem.alloc(4 * m.rows * m.cols);
  b.embed(out, m, tokens, m.rows);
  return b.mem.f32.slice(out >> 2, (out >> 2) + m.rows * m.cols);
}

describeShared("Q5_0 stored as Q8_0", ["models/gguf/stories260K-Q5_0.gguf"], ([path]) => {
  test("every Q5_0 matrix becomes Q8_0 of the same values, the others keep their type, sizes follow", () => {
    const file = load(path!, FILE_STORAGE);
    const fast = load(path!, FAST_STORAGE);
    const pairs: [WeightMatrix, WeightMatrix][] = file.w.layers.flatMap((l, i) => {
      const f = fast.w.layers[i]!;
      if (l.ffn.kind !== "dense" || f.ffn.kind !== "dense") throw new Error("a dense model");
      return [[l.wq, f.wq], [l.wk, f.wk], [l.wv, f.wv], [l.wo, f.wo], [l.ffn.gate, f.ffn.gate], [l.ffn.up, f.ffn.up], [l.ffn.down, f.ffn.down]] as [WeightMatrix, WeightMatrix][];
    });
    pairs.push([file.w.tokenEmbedding, fast.w.tokenEmbedding]);
    let rewritten = 0;
    for (const [a, c] of pairs) {
      if (a.kind !== "ggml" || c.kind !== "ggml") throw new Error("expected ggml matrices");
      if (a.type === GGML_TYPE.Q5_0) {
        expect(c.type).toBe(GGML_TYPE.Q8_0);
        expect(c.rowBytes).toBe((a.rowBytes / 22) * 34);
        rewritten++;
      } else {
        expect(c.type).toBe(a.type);
      }
      expect(Array.from(rows(fast.b, c))).toEqual(Array.from(rows(file.b, a)));
    }
    expect(rewritten).toBeGreaterThan(0);
    const ckpt = openCheckpoint(path!);
    const q5Bytes = [...ckpt.tensors.values()].filter((t) => t.encoding.kind === "ggml" && t.encoding.type === GGML_TYPE.Q5_0)
      .reduce((n, t) => n + t.byteLength, 0);
    expect(weightBytes(ckpt, FAST_STORAGE) - weightBytes(ckpt, FILE_STORAGE)).toBe((q5Bytes / 22) * 12);
    // `pagellm info`'s memory estimate counts the weights as they are stored.
    expect(summarizeModel(path!).weightBytes).toBe(weightBytes(ckpt, FAST_STORAGE));
  });
});
