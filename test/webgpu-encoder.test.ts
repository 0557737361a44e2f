/**
 * Encoders (bert, nomic-bert, a BERT reranker) on WebGPU: the LayerNorm and GELU kernels against
 * their WebAssembly twins; llama.cpp's accuracy rule on the Q8_0 files, with f32 and with f16
 * products (err(pagellm) <= 1.15 x err(llama.cpp) + 0.0001 against llama.cpp's F32 embedding, the
 * rerank order llama.cpp's); every embedding the same bits alone, together, reversed and cut
 * into steps; and --device choosing the GPU (webgpu) or not (auto on a software adapter). Inputs
 * are few and short: a software adapter (llvmpipe) is slow.
 */
import { afterAll, beforeAll, expect, test } from "bun:test";
import { CpuBackend } from "../src/backend/wasm/cpu.ts";
import type { WebGpuBackend } from "../src/backend/webgpu/backend.ts";
import { EncoderEmbedder } from "../src/embed/encoder-embedder.ts";
import { LLM } from "../src/llm/llm.ts";
import { readEncoderCheckpoint } from "../src/model/encoder.ts";
import { Xoshiro128 } from "../src/util/random.ts";
import { randomArray } from "./helpers/random-data.ts";
import { expectEmbeddingRule, readEmbedRef } from "./helpers/embed-refs.ts";
import { describeShared } from "./helpers/shared.ts";
import { describeGpu } from "./helpers/webgpu.ts";

const MODELS = "models/gguf";
const REFS = "golden/llama-cpp/refs";
/** Every element within tol of the largest magnitude of want. */
function expectClose(got: Float32Array, want: Float32Array, tol: number): void {
  const scale = want.reduce((m, v) => Math.max(m, Math.abs(v)), 1);
  for (let i = 0; i < want.length; i++) {
    if (!(Math.abs(got[i]! - want[i]!) <= tol * scale)) throw new Error(`element ${i}: got ${got[i]}, want ${want[i]}`);
  }
}

await describeGpu("encoder kernels on WebGPU against their WebAssembly twins", (gpu: WebGpuBackend) => {
  const cpu = new CpuBackend();
  afterAll(() => cpu.close());
  const wasm = (v: Float32Array) => {
    const addr = cpu.mem.alloc(4 * v.length);
    cpu.mem.f32.set(v, addr >>> 2);
    return addr;
  };
  const read = (addr: number, n: number) => cpu.mem.f32.slice(addr >>> 2, (addr >>> 2) + n);

  test("layerNorm and addLayerNorm match the WebAssembly layerNorm on odd widths; a row is the same bits at any T", async () => {
    const rng = new Xoshiro128(40);
    for (const [T, n] of [[1, 7], [3, 100], [2, 257]] as const) {
      const [x, y, w, b] = [randomArray(rng, T * n), randomArray(rng, T * n), randomArray(rng, n), randomArray(rng, n)];
      const sum = x.map((v, i) => v + y[i]!);
      const [xa, sa] = [wasm(x), wasm(sum)];
      const [wa, ba] = [wasm(w), wasm(b)];
      cpu.layerNorm(xa, xa, wa, ba, T, n, 1e-5);
      cpu.layerNorm(sa, sa, wa, ba, T, n, 1e-5);
      const [xg, yg, wg, bg] = [gpu.bufferFrom(x, "x"), gpu.bufferFrom(y, "y"), gpu.bufferFrom(w, "w"), gpu.bufferFrom(b, "b")];
      const sg = gpu.bufferFrom(x, "x2");
      gpu.layerNorm(xg, wg, bg, T, n, 1e-5);
      gpu.addLayerNorm(sg, yg, wg, bg, T, n, 1e-5);
      const normed = await gpu.runner.readF32(xg, T * n);
      expectClose(normed, read(xa, T * n), 2e-5);
      expectClose(await gpu.runner.readF32(sg, T * n), read(sa, T * n), 2e-5);
      // The last row alone: the same bits as in the batch.
      const last = gpu.bufferFrom(x.slice((T - 1) * n), "last");
      gpu.layerNorm(last, wg, bg, 1, n, 1e-5);
      expect(Array.from(await gpu.runner.readF32(last, n))).toEqual(Array.from(normed.slice((T - 1) * n)));
    }
  });

  test("gelu matches the WebAssembly geglu against ones", async () => {
    const rng = new Xoshiro128(41);
    const n = 333;
    const x = randomArray(rng, n).map((v) => 4 * v);
    const ones = new Float32Array(n).fill(1);
    const xa = wasm(x);
    cpu.geglu(xa, wasm(ones), 1, n);
    const xg = gpu.bufferFrom(x, "x");
    gpu.gelu(xg, 1, n);
    expectClose(await gpu.runner.readF32(xg, n), read(xa, n), 1e-6);
  });
});

/** llama.cpp's rule on one model's Q8_0 file, on `gpu`. */
function embeddingRule(name: string, getGpu: () => WebGpuBackend): void {
  describeShared(`${name} on WebGPU against llama.cpp`, [
    `${MODELS}/${name}-Q8_0.gguf`, `${REFS}/${name}-Q8_0.embed.embed-sentences.json`, `${REFS}/${name}-F32.embed.embed-sentences.json`,
  ], ([model, q8Path, f32Path]) => {
    const q8 = readEmbedRef(q8Path!);
    const f32 = readEmbedRef(f32Path!);
    let llm: LLM;
    beforeAll(() => {
      llm = LLM.load({ model: model!, gpu: getGpu(), engine: { threads: 1 } });
    });
    afterAll(() => llm.close());

    test("err(pagellm Q8_0) <= 1.15 x err(llama.cpp Q8_0) + 0.0001 for every input", async () => {
      expect(llm.device).toContain("webgpu");
      expectEmbeddingRule(await llm.embed(q8.inputs, { normalize: -1 }), q8, f32);
    });
  });
}

function rerankRule(getGpu: () => WebGpuBackend): void {
  describeShared("BERT reranker on WebGPU against llama.cpp", [
    `${MODELS}/rnd-bert-rerank-Q8_0.gguf`, `${REFS}/rnd-bert-rerank-Q8_0.embed.rerank-pairs.json`,
  ], ([model, q8Path]) => {
    const q8 = readEmbedRef(q8Path!);
    const pairs = q8.inputs.map((line, i) => ({ query: line.split("\t")[0]!, document: line.split("\t")[1]!, i }));
    let llm: LLM;
    beforeAll(() => {
      llm = LLM.load({ model: model!, gpu: getGpu(), engine: { threads: 1 } });
    });
    afterAll(() => llm.close());

    test("each query's documents in llama.cpp's Q8_0 order", async () => {
      for (const query of new Set(pairs.map((p) => p.query))) {
        const mine = pairs.filter((p) => p.query === query);
        const { results } = await llm.rerank(query, mine.map((p) => p.document));
        const theirOrder = mine.map((_, j) => j).sort((a, b) => q8.embeddings[mine[b]!.i]![0]! - q8.embeddings[mine[a]!.i]![0]!);
        expect(results.map((r) => r.index)).toEqual(theirOrder);
      }
    });
  });
}

await describeGpu("encoders on WebGPU, f32 products", (gpu: WebGpuBackend) => {
  for (const name of ["rnd-bert", "rnd-nomic-bert"]) embeddingRule(name, () => gpu);
  rerankRule(() => gpu);

  describeShared("encoder embeddings on WebGPU: the same bits in any batch", [`${MODELS}/rnd-nomic-bert-Q8_0.gguf`, `${MODELS}/rnd-bert-Q8_0.gguf`], (models) => {
    test("alone, together, reversed and cut into steps of 16 tokens", async () => {
      const rng = new Xoshiro128(42);
      const sequences = [5, 1, 17, 9, 3].map((n) => Array.from({ length: n }, () => 1000 + Math.floor(rng.nextFloat() * 20000)));
      for (const model of models) {
        const ckpt = readEncoderCheckpoint(model!);
        const whole = EncoderEmbedder.load(ckpt, { threads: 1, gpu });
        const cut = EncoderEmbedder.load(ckpt, { threads: 1, gpu, stepTokens: 16 });
        try {
          const together = (await whole.embed(sequences)).map((e) => Array.from(e));
          const reversed = (await whole.embed([...sequences].reverse())).reverse().map((e) => Array.from(e));
          const inSteps = (await cut.embed(sequences)).map((e) => Array.from(e));
          expect(reversed).toEqual(together);
          expect(inSteps).toEqual(together);
          for (const [i, s] of sequences.entries()) expect(Array.from((await whole.embed([s]))[0]!)).toEqual(together[i]!);
        } finally {
          whole.close();
          cut.close();
        }
      }
    });
  });
});

await describeGpu("encoders on WebGPU, f16 products", (gpu: WebGpuBackend) => {
  for (const name of ["rnd-bert", "rnd-nomic-bert"]) embeddingRule(name, () => gpu);
  rerankRule(() => gpu);
}, { half: true });

await describeGpu("--device for an encoder", () => {
  describeShared("--device for an encoder", [`${MODELS}/rnd-bert-Q8_0.gguf`], ([model]) => {
    test("webgpu runs it on the adapter; auto on a software adapter keeps WebAssembly", async () => {
      const onGpu = await LLM.open({ model: model!, device: "webgpu", engine: { threads: 1 } });
      try {
        expect(onGpu.device).toMatch(/^device: webgpu on /);
        expect((await onGpu.embed(["hello world"])).embeddings[0]!.values.length).toBe(256);
      } finally {
        onGpu.close();
      }
      const auto = await LLM.open({ model: model!, device: "auto", engine: { threads: 1 } });
      try {
        if (/software/.test(onGpu.device)) expect(auto.device).toMatch(/^device: wasm/);
      } finally {
        auto.close();
      }
    });
  });
});
