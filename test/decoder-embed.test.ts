/**
 * Decoder embeddings (Qwen3-Embedding's layout: qwen3, last-token pooling, EOS appended) through
 * the paged engine: token ids and vectors against llama.cpp's llama-embedding on the same file,
 * and every vector the same bits whatever the prefix cache held, the batch, the chunking and the
 * thread count.
 */
import { describe, expect, test } from "bun:test";
import { EmbeddingFailedError, InputError, RequestTooLongError } from "../src/errors.ts";
import { decoderEmbedder, decoderPooling, embeddingRequest } from "../src/embed/decoder-embedder.ts";
import { filePooling } from "../src/model/pooling-type.ts";
import type { EngineOptions } from "../src/engine/engine-options.ts";
import type { EngineOutput } from "../src/engine/engine-output.ts";
import type { LLM } from "../src/llm/llm.ts";
import { readGGUF } from "../src/model/gguf.ts";
import { loadTokenizer } from "../src/tokenizer/load.ts";
import { cosine, readEmbedRef } from "./helpers/embed-refs.ts";
import { openedLLMs } from "./helpers/llm.ts";
import { describeShared, sharedPath } from "./helpers/shared.ts";
import { describeGpu } from "./helpers/webgpu.ts";

const MODEL = "models/gguf/rnd-qwen3-embed-Q4_K_M.gguf";
const REF_Q4 = "golden/llama-cpp/refs/rnd-qwen3-embed-Q4_K_M.embed.embed-sentences.json";
const REF_F32 = "golden/llama-cpp/refs/rnd-qwen3-embed-F32.embed.embed-sentences.json";

const llms = openedLLMs();

/** A vector's bits, for exact comparison (-0 and NaN payloads included). */
function bits(v: Float32Array): number[] {
  return Array.from(new Uint32Array(v.buffer, v.byteOffset, v.length));
}

/** Small pools: the model is 256 wide with 3 layers. */
function load(model: string, engine: Partial<EngineOptions> = {}): LLM {
  return llms.load({ model, engine: { kvCacheMb: 16, ...engine } });
}

async function embedAll(llm: LLM, sequences: readonly (readonly number[])[]): Promise<Float32Array[]> {
  return decoderEmbedder(llm.client, llm.config.dim).embed(sequences);
}

describeShared("Qwen3-Embedding's layout against llama.cpp", [MODEL, REF_Q4, REF_F32], ([model, refQ4, refF32]) => {
  const q4 = readEmbedRef(refQ4!);
  const f32 = readEmbedRef(refF32!);

  test("the file declares last-token pooling and an EOS after every input; the token ids are llama.cpp's", () => {
    expect(filePooling(readGGUF(model!), "qwen3")).toBe("last");
    const { tokenizer, addBos, addEos } = loadTokenizer(model!, {});
    expect(addEos).toBe(true);
    const ids = q4.inputs.map((text) => tokenizer.encode(text, { addBos, addEos }));
    expect(ids).toEqual(q4.tokens);
    for (const seq of ids) expect(seq[seq.length - 1]).toBe(2);
  });

  test("through the front door: LLM.open finds the file's pooling, LLM.embed tokenizes as llama.cpp (EOS last) and gives the embedder's bits", async () => {
    const llm = load(model!);
    expect(llm.capabilities).toEqual({ generate: true, embed: true, rerank: false, pooling: "last", embeddingWidth: 256 });
    const result = await llm.embed(q4.inputs, { normalize: -1 });
    expect(result.embeddings.map((e) => e.tokenCount)).toEqual(q4.tokens.map((t) => t.length));
    expect(result.promptTokens).toBe(q4.tokens.flat().length);
    const direct = await embedAll(llm, q4.tokens);
    expect(result.embeddings.map((e) => bits(e.values))).toEqual(direct.map(bits));
    expect(() => llms.load({ model: model!, pooling: "mean" })).toThrow(InputError);
  });

  test("every vector within 1.15x llama.cpp's own error on the Q4_K_M file (+0.0001), against its F32 embedding", async () => {
    const llm = load(model!);
    const ours = await embedAll(llm, q4.tokens);
    expect(ours.length).toBe(q4.inputs.length);
    ours.forEach((e, i) => {
      expect(e.length).toBe(256);
      const err = 1 - cosine(e, f32.embeddings[i]!);
      const llamaErr = 1 - cosine(q4.embeddings[i]!, f32.embeddings[i]!);
      expect(err).toBeLessThanOrEqual(1.15 * llamaErr + 1e-4);
    });
  });
});

describeShared("decoder embeddings are the same bits however they run", [MODEL], ([model]) => {
  const { tokenizer, addBos, addEos } = loadTokenizer(model!, {});
  // Qwen3-Embedding's query layout: one instruction (at least two KV blocks of 16) before every query.
  const instruction =
    "Instruct: Given a web search query, retrieve relevant passages from the encyclopedia that answer the query, preferring short and precise passages written in plain English, with their sources named and their dates given\nQuery: ";
  const queries = ["What is the capital of France?", "how do vaccines work", "tallest mountain on earth", "a recipe for bread without yeast", "Who wrote Hamlet?"];
  const inputs = queries.map((q) => tokenizer.encode(instruction + q, { addBos, addEos }));
  const prefix = tokenizer.encode(instruction, { addBos, addEos: false });

  test("the shared instruction fills at least two KV blocks", () => {
    expect(prefix.length).toBeGreaterThanOrEqual(32);
    for (const seq of inputs) expect(seq.slice(0, 32)).toEqual(prefix.slice(0, 32));
  });

  /** Each input alone, prefix cache off, one thread, the whole prompt in one step: the reference. */
  async function alone(): Promise<number[][]> {
    const llm = load(model!, { enablePrefixCaching: false, threads: 1 });
    const out: number[][] = [];
    for (const seq of inputs) out.push(bits((await embedAll(llm, [seq]))[0]!));
    llm.close();
    return out;
  }

  test("a cache hit (the second input reuses the first's instruction) gives the bits a recompute gives", async () => {
    const reference = await alone();
    const llm = load(model!);
    const outputs: EngineOutput[] = [];
    for (const [i, seq] of inputs.slice(0, 2).entries()) outputs.push(...(await collect(llm, `hit-${i}`, seq)));
    const [first, second] = outputs;
    expect(first!.usage.cachedTokens).toBe(0);
    expect(second!.usage.cachedTokens).toBeGreaterThanOrEqual(32);
    expect(bits(first!.embedding!)).toEqual(reference[0]!);
    expect(bits(second!.embedding!)).toEqual(reference[1]!);
    expect(second!.tokenIds).toEqual([]);
    expect(second!.finishReason).toBe("stop");
  });

  for (const [name, engine] of [
    ["all together, prefix cache on", {}],
    ["all together, prefix cache off", { enablePrefixCaching: false }],
    ["chunked prefill (8 tokens a step)", { maxNumBatchedTokens: 8 }],
    ["chunked prefill (5 tokens a step), cache off", { maxNumBatchedTokens: 5, enablePrefixCaching: false }],
    ["two at a time", { maxNumSeqs: 2 }],
    ["two threads", { threads: 2 }],
    ["the model over several memories (the norm in the classifier's)", { wasmMemoryMb: 1 }],
  ] as const) {
    test(`${name}: each vector the bits it has alone`, async () => {
      const reference = await alone();
      const llm = load(model!, engine);
      if ("wasmMemoryMb" in engine) expect(llm.info.numMemories).toBeGreaterThan(1);
      const before = llm.stats().prefixHits;
      // Twice: the second pass hits every instruction block the first cached.
      for (let pass = 0; pass < 2; pass++) expect((await embedAll(llm, inputs)).map(bits)).toEqual(reference);
      if (!("enablePrefixCaching" in engine)) expect(llm.stats().prefixHits - before).toBeGreaterThan(0);
    });
  }

  test("in reverse order, results still in input order", async () => {
    const reference = await alone();
    const llm = load(model!);
    const reversed = await embedAll(llm, [...inputs].reverse());
    expect(reversed.map(bits).reverse()).toEqual(reference);
  });

  test("an embedding and a generation submitted together are both served, the embedding the same bits", async () => {
    const reference = await alone();
    const llm = load(model!);
    const generation = llm.generate([{ prompt: "Once upon a time", maxTokens: 4, temperature: 0 }]);
    const [vector] = await embedAll(llm, [inputs[0]!]);
    const [result] = await generation;
    expect(bits(vector!)).toEqual(reference[0]!);
    expect(result!.finish_reason).toBe("length");
  });

  test("an empty input and one longer than the context are refused, naming the input; nothing is queued", async () => {
    const llm = load(model!, { ctxSize: 64 });
    const embedder = decoderEmbedder(llm.client, llm.config.dim);
    expect(embedder.maxTokens).toBe(64);
    await expect(embedder.embed([inputs[0]!, []])).rejects.toThrow(new InputError("input 1 has no tokens"));
    const long = Array.from({ length: 65 }, () => 2);
    await expect(embedder.embed([long])).rejects.toBeInstanceOf(RequestTooLongError);
    await expect(embedder.embed([inputs[0]!, long])).rejects.toThrow(/input 1 has 65 tokens/);
    expect(llm.stats().numRequests).toBe(0);
  });

  test("embeddings still running when the model closes reject with EmbeddingFailedError naming an input", async () => {
    const llm = load(model!, { maxNumBatchedTokens: 5 });
    const pending = embedAll(llm, inputs);
    llm.close();
    await expect(pending).rejects.toBeInstanceOf(EmbeddingFailedError);
    await expect(pending).rejects.toThrow(/^input \d+ ended \(abort\) without its embedding/);
  });

  test("an embedding request with a sample count other than 1 is refused by the engine", () => {
    const llm = load(model!);
    const request = embeddingRequest("two", inputs[0]!);
    expect(() => llm.client.submitEngineRequests([{ ...request, samples: [request.samples[0]!, request.samples[0]!] }])).toThrow(/must be 1 for an embedding/);
    expect(llm.stats().numRequests).toBe(0);
  });
});

await describeGpu("decoder embeddings on WebGPU", (gpu) => {
  const model = sharedPath(MODEL);
  const refQ4 = sharedPath(REF_Q4);
  const refF32 = sharedPath(REF_F32);
  test.skipIf(model === null || refQ4 === null || refF32 === null)("within llama.cpp's rule, and the same bits alone, batched, on a cache hit and beside a generation", async () => {
    const q4 = readEmbedRef(refQ4!);
    const f32 = readEmbedRef(refF32!);
    const open = (engine: Partial<EngineOptions>) => llms.load({ model: model!, engine: { threads: 1, kvCacheMb: 16, ...engine }, gpu });
    const cold = open({ enablePrefixCaching: false });
    const alone: number[][] = [];
    for (const seq of q4.tokens) alone.push(bits((await embedAll(cold, [seq]))[0]!));
    const story = { prompt: "Once upon a time", maxTokens: 4, temperature: 0, logprobs: 2 };
    const [storyAlone] = await cold.generate([story]);
    cold.close();
    const llm = open({});
    expect(llm.info.device).toBe("webgpu");
    // Its logit rows share the classifier's product with the hidden rows: the same tokens and logprobs as alone.
    const generation = llm.generate([story]);
    const batched = await embedAll(llm, q4.tokens);
    const [storyBeside] = await generation;
    expect(storyBeside!.token_ids).toEqual(storyAlone!.token_ids);
    expect(storyBeside!.logprobs).toEqual(storyAlone!.logprobs!);
    expect(batched.map(bits)).toEqual(alone);
    // The second pass hits the first's blocks (the long input fills several).
    const before = llm.stats().prefixHits;
    expect((await embedAll(llm, q4.tokens)).map(bits)).toEqual(alone);
    expect(llm.stats().prefixHits - before).toBeGreaterThan(0);
    batched.forEach((e, i) => {
      const err = 1 - cosine(e, f32.embeddings[i]!);
      expect(err).toBeLessThanOrEqual(1.15 * (1 - cosine(q4.embeddings[i]!, f32.embeddings[i]!)) + 1e-4);
    });
  }, 120_000);
});

describe("decoder pooling", () => {
  test("the option wins over the file; a decoder without either has none; only last, and rank with a rank head, run on a decoder", () => {
    expect(decoderPooling("last", null, false)).toBe("last");
    expect(decoderPooling(null, "last", false)).toBe("last");
    expect(decoderPooling(null, null, false)).toBeNull();
    expect(decoderPooling("rank", null, true)).toBe("rank");
    expect(decoderPooling("rank", "last", true)).toBe("last");
    expect(() => decoderPooling("rank", null, false)).toThrow(/needs a reranker's head/);
    for (const p of ["mean", "cls", "none"] as const) {
      expect(() => decoderPooling(null, p, true)).toThrow(InputError);
      expect(() => decoderPooling(p, null, false)).toThrow(/not supported on a decoder/);
    }
  });
});

/** One embedding request's outputs, through the front door's engine-request queue. */
async function collect(llm: LLM, id: string, tokens: readonly number[]): Promise<EngineOutput[]> {
  const outputs: EngineOutput[] = [];
  for await (const out of llm.client.submitEngineRequests([embeddingRequest(id, tokens)])) outputs.push(out);
  return outputs;
}
