/**
 * The disk KV cache on WebGPU: blocks are copied out of and into the GPU arena. A restart on
 * WebGPU reads what WebGPU wrote and gives the cold WebGPU run's outputs bit for bit; blocks the
 * WebAssembly backend wrote are not read by WebGPU (their K and V bits differ: each backend's
 * blocks live under its own fingerprint).
 */
import { afterAll, expect, test } from "bun:test";
import { rmSync } from "node:fs";
import { expertTypes } from "../src/backend/device-choice.ts";
import { LLM, type GenerateRequest, type LoadOptions } from "../src/llm/llm.ts";
import { openCheckpoint } from "../src/model/load.ts";
import { describeGpu } from "./helpers/webgpu.ts";
import { sharedPath } from "./helpers/shared.ts";
import { TEXTS } from "./helpers/prefix.ts";
import { outputsOf, runWithTier, scratchDir } from "./helpers/kv-disk.ts";

const LIMIT_MS = 240_000;
const dir = scratchDir("webgpu");
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const model = sharedPath("models/gguf/stories260K.gguf");

await describeGpu("disk KV cache on WebGPU", (backend) => {
  test.skipIf(model === null)("a restart on WebGPU reads WebGPU's blocks; WebAssembly's are not read", async () => {
    const blockSize = 16;
    const opts = (gpu: boolean): LoadOptions => ({
      model: model!, engine: { threads: 1, blockSize }, kvCacheDir: dir, ...(gpu ? { gpu: backend } : {}),
    });
    const ids = (() => {
      const llm = LLM.load({ model: model!, engine: { threads: 1 } });
      try {
        return llm.encode(`${TEXTS[0]} ${TEXTS[1]}`);
      } finally {
        llm.close();
      }
    })();
    const requests: GenerateRequest[] = [{ id: "g", promptTokenIds: ids, maxTokens: 8, temperature: 0, logprobs: 2 }];
    const cold = (() => {
      const llm = LLM.load({ ...opts(true), kvCacheDir: undefined });
      return llm.generate(requests).finally(() => llm.close());
    })();
    const expected = outputsOf(await cold);
    const full = Math.floor((ids.length - 1) / blockSize) * blockSize;

    const wasm = await runWithTier(opts(false), requests); // WebAssembly's blocks, in their own folder
    expect(wasm.tier.blocksWritten).toBeGreaterThan(0);
    const first = await runWithTier(opts(true), requests);
    expect(first.results[0]!.cached_tokens_disk).toBe(0);
    expect(first.tier.blocksWritten).toBeGreaterThan(0);
    expect(outputsOf(first.results)).toEqual(expected);
    const restart = await runWithTier(opts(true), requests);
    expect(restart.results[0]!.cached_tokens_disk).toBe(full);
    expect(outputsOf(restart.results)).toEqual(expected);
    expect(restart.tier.blocksRejected).toBe(0);
  }, LIMIT_MS);
});

const gptoss = sharedPath("models/gguf/rnd-gptoss-MXFP4_MOE.gguf");

await describeGpu("disk KV cache on WebGPU, a model with sliding-window layers", (backend) => {
  // rnd-gptoss: layers 1 and 3 global, 0 and 2 windowed (32 positions): two KV cache groups of two
  // layers, each group's blocks read out of and written into its slots of the GPU arena.
  test.skipIf(gptoss === null)("rnd-gptoss: a restart on WebGPU reads the global blocks and the window's local ones; outputs are the cold run's", async () => {
    const root = scratchDir("webgpu-swa");
    try {
      const opts = (kvCacheDir?: string): LoadOptions => ({
        model: gptoss!, tokenizer: gptoss!, engine: { threads: 1, blockSize: 4, maxNumBatchedTokens: 64 }, gpu: backend, kvCacheDir,
      });
      await backend.prepareExperts(expertTypes(openCheckpoint(gptoss!)));
      const wasm = LLM.load({ model: gptoss!, tokenizer: gptoss!, engine: { threads: 1 } });
      const ids = (() => {
        try {
          return wasm.encode(`${TEXTS[0]} ${TEXTS[1]}`).slice(0, 50);
        } finally {
          wasm.close();
        }
      })();
      const requests: GenerateRequest[] = [{ id: "w", promptTokenIds: ids, maxTokens: 2, temperature: 0.8, seed: 5, logprobs: 2 }];
      // The first run finds an empty folder: it is the cold run, and writes every group's 12 full blocks.
      const first = await runWithTier(opts(root), requests);
      expect(first.results[0]!.cached_tokens).toBe(0);
      expect(first.tier.blocksWritten).toBe(2 * 12);
      const restart = await runWithTier(opts(root), requests);
      expect(outputsOf(restart.results)).toEqual(outputsOf(first.results));
      expect(restart.results[0]!.cached_tokens_disk).toBe(48);
      // 12 global blocks and the local group's last 8 (a window of 32 in blocks of 4).
      expect([restart.tier.blocksRead, restart.tier.blocksRejected]).toEqual([12 + 8, 0]);
    } finally {
      rmSync(root, { recursive: true, force: true });
    }
  }, LIMIT_MS);
});
