/**
 * The disk KV cache on WebGPU: blocks are copied out of and into the GPU arena. A restart on
 * WebGPU reads what WebGPU wrote and gives the cold WebGPU run's outputs bit for bit; blocks the
 * WebAssembly backend wrote are not read by WebGPU (their K and V bits differ: each backend's
 * blocks live under its own fingerprint).
 */
import { afterAll, expect, test } from "bun:test";
import { rmSync } from "node:fs";
import { LLM, type GenerateRequest, type LoadOptions } from "../src/engine/llm.ts";
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
