/**
 * The kernels across worker threads: the same bits at 1 and 2 threads (a random model's logits; each
 * newer architecture's file through the engine), generation that completes
 * while the machine is oversubscribed and the main thread is kept busy, and clear errors (never a
 * hang) when a worker dies or its kernel throws.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { CpuBackend } from "../src/backend/wasm/cpu.ts";
import { attentionScratchBytes } from "../src/backend/wasm/kernels.ts";
import { attentionScale } from "../src/model/attention.ts";
import { SEQ_INFO_INTS } from "../src/model/batch.ts";
import { guidedChunk } from "../src/backend/wasm/thread-protocol.ts";
import { WorkerPoolError } from "../src/errors.ts";
import { LLM } from "../src/llm/llm.ts";
import { buildEngine } from "../src/engine/engine-builder.ts";
import { EngineClient } from "../src/llm/engine-client.ts";
import { DEFAULT_ENGINE_OPTIONS } from "../src/engine/engine-options.ts";
import type { EngineOutput } from "../src/engine/engine-output.ts";
import { loadTokenizer } from "../src/tokenizer/load.ts";
import { KVArena } from "../src/backend/wasm/kv-arena.ts";
import { KV_TYPES, type KVType } from "../src/kv/kv-layout.ts";
import { StepBatch } from "../src/model/batch.ts";
import { makeConfig } from "../src/model/config.ts";
import { LlamaModel } from "../src/backend/wasm/llama.ts";
import { writeLlama2c } from "../src/synth/llama2c-writer.ts";
import { openCheckpoint } from "../src/model/load.ts";
import { randomWeights } from "../src/synth/random-weights.ts";
import { loadWeights } from "../src/backend/wasm/weights.ts";
import { comparable } from "./helpers/llm.ts";
import { describeShared, sharedPath } from "./helpers/shared.ts";

// Big enough that matrix products, the classifier and long-context attention are split across threads.
const config = makeConfig({ dim: 256, hiddenDim: 688, nLayers: 2, nHeads: 4, nKvHeads: 2, vocabSize: 32000, seqLen: 640, sharedClassifier: false });
const tokenizer = sharedPath("models/llama2c/llama2_tokenizer.bin");
let dir = "";
let modelPath = "";

beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), "pagellm-threads-"));
  modelPath = join(dir, "model.bin");
  writeLlama2c(modelPath, config, randomWeights(config, 7, { sharedClassifier: false }), "legacy");
});

afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** Logits of every position of a 600-token prompt prefilled in chunks, at `threads` threads, over a KV cache of `kvType`. */
function allLogits(threads: number, kvType: KVType): Float32Array {
  const backend = new CpuBackend(threads);
  try {
    const ckpt = openCheckpoint(modelPath);
    const weights = loadWeights(ckpt, backend.mem, backend.kernels);
    const T = 200;
    const blockSize = 16;
    const model = new LlamaModel(config, weights, backend, T, T);
    const arena = new KVArena(backend.mem, config, 40, blockSize, kvType);
    const batch = new StepBatch(backend.mem, T, 1, 40, blockSize, T);
    const table = Array.from({ length: 40 }, (_, i) => (i * 7) % 40);
    const tokens = Array.from({ length: 600 }, (_, i) => (i * 7919) % config.vocabSize);
    const out = new Float32Array(600 * config.vocabSize);
    for (let start = 0; start < 600; start += T) {
      batch.reset();
      const row = batch.addSequence(tokens.slice(start, start + T), start, [table], "all");
      model.forward(batch, arena);
      const at = model.logitsAddr(row) >> 2;
      out.set(backend.mem.f32.subarray(at, at + T * config.vocabSize), start * config.vocabSize);
    }
    return out;
  } finally {
    backend.close();
  }
}

describe("worker threads", () => {
  for (const kvType of KV_TYPES) {
    test(`logits are the same bits at 1 and 2 threads (${kvType} KV cache)`, () => {
      const one = allLogits(1, kvType);
      const two = allLogits(2, kvType);
      expect(Buffer.from(two.buffer).equals(Buffer.from(one.buffer))).toBe(true);
    }, 60_000);
  }

  test.skipIf(tokenizer === null)("a 2-thread generation completes, token-exact, while the main thread is kept busy", async () => {
    const requests = [0, 1, 2].map((i) => ({ id: `r${i}`, prompt: `Story number ${i}:`, maxTokens: 40, temperature: 0 }));
    const alone = LLM.load({ model: modelPath, tokenizer: tokenizer!, engine: { threads: 1 } });
    const expected = (await alone.generate(requests)).map((r) => r.token_ids);
    alone.close();

    // Oversubscribe: a worker spinning on a core of its own, and the main thread busy 30 ms of every 40.
    const hog = new Worker(URL.createObjectURL(new Blob(["for (;;) {}"], { type: "application/javascript" })));
    const busy = setInterval(() => {
      const until = performance.now() + 30;
      while (performance.now() < until) {}
    }, 40);
    const llm = LLM.load({ model: modelPath, tokenizer: tokenizer!, engine: { threads: 2 } });
    try {
      const results = await llm.generate(requests);
      expect(results.map((r) => r.token_ids)).toEqual(expected);
    } finally {
      clearInterval(busy);
      hog.terminate();
      llm.close();
    }
  });

  test.skipIf(tokenizer === null)("a worker that dies ends the run with a WorkerPoolError, not a hang", async () => {
    // The engine built here, so that the test holds its worker pool; driven through the front door.
    const tok = loadTokenizer(tokenizer!, { modelVocabSize: config.vocabSize }).tokenizer;
    const engine = buildEngine(openCheckpoint(modelPath), tok, { ...DEFAULT_ENGINE_OPTIONS, threads: 2 });
    const prompts = {
      encode: (text: string) => tok.encode(text, { addBos: true }), encodeWritten: (text: string) => tok.encode(text),
      decodeWritten: (ids: readonly number[]) => tok.decode(ids), piece: (id: number) => tok.decode([id]), messages: () => ({ ids: [], reply: null, shownTokenIds: [] }),
    };
    const client = new EngineClient(engine, { prompts, constraints: null, reasoning: null });
    const outputs: EngineOutput[] = [];
    let killed = false;
    const stream = client.submit({ prompt: "Once upon a time", maxTokens: 400, temperature: 0 });
    try {
      for await (const output of stream) {
        outputs.push(output);
        if (output.tokenIds.length > 0 && !killed) {
          killed = true;
          void engine.memories.pool!.workers[0]!.terminate();
        }
      }
    } finally {
      await client.close();
      engine.close();
    }
    expect(killed).toBe(true);
    // The request ended with the error; the stream carries the error itself (LLM.stream throws it).
    expect(outputs.at(-1)!.finishReason).toBe("error");
    expect(outputs.at(-1)!.error).toMatch(/worker/);
    expect(stream.error).toBeInstanceOf(WorkerPoolError);
  });

  test("a kernel that throws in a worker is reported, and the pool keeps working", () => {
    const backend = new CpuBackend(2);
    try {
      const pool = backend.pool!;
      const mem = backend.mem;
      const hd = 8, blockSize = 4, nKv = 1, seqs = 64;
      // 64 one-token sequences. With a bad block table address their loads trap: the caller traps
      // on its first chunk and claims no more, so the worker takes (and traps on) the rest.
      const kv = mem.allocZeroed(4 * 8 * nKv * blockSize * hd);
      const q = mem.allocZeroed(4 * seqs * hd);
      const out = mem.allocZeroed(4 * seqs * hd);
      const table = mem.allocZeroed(16);
      const scratch = mem.alloc(attentionScratchBytes(1, hd) * 2);
      const info = mem.alloc(4 * seqs * SEQ_INFO_INTS);
      const call = (bad: boolean) => {
        for (let i = 0; i < seqs; i++) mem.i32.set([i, 1, 1, bad ? 0x7ffffff0 : table], (info >> 2) + i * SEQ_INFO_INTS);
        pool.run({
          kernel: "pagedAttention",
          args: [out, q, kv, kv, info, 1, nKv, hd, blockSize, 8, hd, 0, 4 * hd, attentionScale(hd), 0, 0, scratch, 0, seqs],
          total: seqs,
          granularity: 1,
          scratch: { arg: 16, stride: attentionScratchBytes(1, hd) },
        });
      };
      expect(() => call(true)).toThrow(WorkerPoolError);
      expect(() => call(true)).toThrow(/worker 1: pagedAttention failed/);
      expect(() => call(false)).not.toThrow();
    } finally {
      backend.close();
    }
  });
});

/**
 * Each architecture's own kernels at 1 and 2 threads through the engine: the experts' segment
 * products and routing (qwen3moe, gpt-oss's MXFP4), sliding windows and sinks (gemma3, gpt-oss),
 * fused matrices (phi3), biases (qwen2). Batched, greedy and seeded, with log-probabilities, so a
 * last-bit difference anywhere shows. (This stands in for running the llama.cpp comparisons twice.)
 */
const ARCH_FILES = [
  "models/gguf/rnd-qwen3moe-Q4_K_M.gguf", "models/gguf/rnd-gptoss-MXFP4_MOE.gguf", "models/gguf/rnd-gemma3-Q4_K_M.gguf",
  "models/gguf/rnd-phi3-Q4_K_M.gguf", "models/gguf/rnd-qwen2-Q5_K_M.gguf",
];
describeShared("architectures at 1 and 2 threads", ARCH_FILES, (paths) => {
  for (const path of paths) {
    test(`${path.split("/").at(-1)}: the same tokens and log-probabilities`, async () => {
      const requests = [0, 1, 2].map((i) => ({
        id: `r${i}`, prompt: `Once upon a time number ${i} there was`, maxTokens: 10, logprobs: 2,
        ...(i === 1 ? { temperature: 0.8, seed: 42 } : { temperature: 0 }),
      }));
      const run = async (threads: number) => {
        const llm = LLM.load({ model: path, engine: { threads, maxNumBatchedTokens: 16 } });
        try {
          return (await llm.generate(requests)).map(comparable);
        } finally {
          llm.close();
        }
      };
      expect(await run(2)).toEqual(await run(1));
    }, 120_000);
  }
});

describe("guided chunks", () => {
  /** The chunk sizes one thread after another would claim. */
  function chunkSizes(units: number, threads: number, minChunk?: number): number[] {
    const sizes: number[] = [];
    for (let done = 0; done < units; ) {
      const size = guidedChunk(done, units, threads, minChunk);
      sizes.push(size);
      done += size;
    }
    return sizes;
  }

  test("chunks shrink to the call's minimum: 12 attention items split 3,3,2,1,1,1,1 between 2 threads", () => {
    expect(chunkSizes(12, 2, 1)).toEqual([3, 3, 2, 1, 1, 1, 1]);
    // With the matrix default of 4 units, one thread would take 8 of the 12 heads.
    expect(chunkSizes(12, 2)).toEqual([4, 4, 4]);
    expect(chunkSizes(192, 2)).toEqual([48, 36, 27, 21, 15, 12, 9, 6, 5, 4, 4, 4, 1]);
  });

  test("every unit is handed out exactly once, for any size, thread count and minimum", () => {
    for (let units = 1; units <= 300; units += 7) {
      for (const threads of [1, 2, 3, 8]) {
        for (const minChunk of [1, 2, 4, 9]) {
          const sizes = chunkSizes(units, threads, minChunk);
          expect(sizes.reduce((a, b) => a + b, 0)).toBe(units);
          expect(sizes.every((s, i) => s >= 1 && (s >= minChunk || i === sizes.length - 1))).toBe(true);
        }
      }
    }
  });
});
