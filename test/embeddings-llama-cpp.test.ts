/**
 * Encoder embeddings and reranking against llama.cpp's llama-embedding (refs made by
 * make_encoder_refs.py, unnormalized): token ids equal llama.cpp's; with err(E) = 1 - cos(E,
 * llama.cpp's F32 embedding), err(pagellm on Q8_0) <= 1.15 x err(llama.cpp on Q8_0) + 0.0001 for
 * every input; each query's documents in llama.cpp's Q8_0 order, every score as close to
 * llama.cpp's F32 one as 1.15 x llama.cpp's Q8_0 score + 0.005. Then every normalization and
 * `dimensions` value against its definition, the invariance of every embedding under the batch
 * (alone, together, reversed, cut into steps of any budget) and the thread count (1 and 2), every
 * bad input, and a file with a missing or mis-shaped encoder tensor.
 */
import { afterAll, beforeAll, expect, test } from "bun:test";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { LLM } from "../src/llm/llm.ts";
import { ModelCapabilityError, ModelFormatError, RequestFieldError } from "../src/errors.ts";
import { readEncoderCheckpoint } from "../src/model/encoder.ts";
import { EncoderEmbedder } from "../src/embed/encoder-embedder.ts";
import { embedSequences, rerankSequences, type SequenceText } from "../src/embed/embed-request.ts";
import { loadTokenizer } from "../src/tokenizer/load.ts";
import { expectEmbeddingRule, readEmbedRef } from "./helpers/embed-refs.ts";
import { describeShared } from "./helpers/shared.ts";
import { patched, tensorRecord } from "./helpers/gguf-patch.ts";

const MODELS = "models/gguf";
const REFS = "golden/llama-cpp/refs";

function sequenceText(model: string): SequenceText {
  const { tokenizer, addBos, addEos } = loadTokenizer(model);
  return { tokenizer, addBos, addEos };
}

const LIMITS = { vocabSize: 30522, maxTokens: 512, truncate: false };

for (const name of ["rnd-bert", "rnd-nomic-bert"]) {
  describeShared(`${name} embeddings against llama.cpp`, [
    `${MODELS}/${name}-Q8_0.gguf`, `${REFS}/${name}-Q8_0.embed.embed-sentences.json`, `${REFS}/${name}-F32.embed.embed-sentences.json`,
  ], ([model, q8Path, f32Path]) => {
    const q8 = readEmbedRef(q8Path!);
    const f32 = readEmbedRef(f32Path!);
    let llm: LLM;
    beforeAll(async () => {
      llm = await LLM.open({ model: model!, engine: { threads: 1 } });
    });
    afterAll(() => llm.close());

    test("token ids are llama.cpp's", () => {
      expect(embedSequences(q8.inputs, sequenceText(model!), LIMITS)).toEqual(q8.tokens);
    });

    test("err(pagellm Q8_0) <= 1.15 x err(llama.cpp Q8_0) + 0.0001 for every input", async () => {
      expectEmbeddingRule(await llm.embed(q8.inputs, { normalize: -1 }), q8, f32);
    });
  });
}

describeShared("BERT reranker against llama.cpp", [
  `${MODELS}/rnd-bert-rerank-Q8_0.gguf`, `${REFS}/rnd-bert-rerank-Q8_0.embed.rerank-pairs.json`, `${REFS}/rnd-bert-rerank-F32.embed.rerank-pairs.json`,
], ([model, q8Path, f32Path]) => {
  const q8 = readEmbedRef(q8Path!);
  const f32 = readEmbedRef(f32Path!);
  const pairs = q8.inputs.map((line, i) => ({ query: line.split("\t")[0]!, document: line.split("\t")[1]!, i }));
  const queries = [...new Set(pairs.map((p) => p.query))];
  let llm: LLM;
  beforeAll(async () => {
    llm = await LLM.open({ model: model!, engine: { threads: 1 } });
  });
  afterAll(() => llm.close());

  test("the pair layout is llama.cpp's [CLS] query [SEP] document [SEP]", () => {
    const text = sequenceText(model!);
    for (const p of pairs) expect(rerankSequences(p.query, [p.document], text, LIMITS)[0]).toEqual(q8.tokens[p.i]!);
  });

  test("each query's documents in llama.cpp's Q8_0 order; scores within 1.15 x llama.cpp's Q8_0 error + 0.005 of its F32", async () => {
    for (const query of queries) {
      const mine = pairs.filter((p) => p.query === query);
      const { results } = await llm.rerank(query, mine.map((p) => p.document));
      const theirOrder = mine.map((_, j) => j).sort((a, b) => q8.embeddings[mine[b]!.i]![0]! - q8.embeddings[mine[a]!.i]![0]!);
      expect(results.map((r) => r.index)).toEqual(theirOrder);
      for (const r of results) {
        const i = mine[r.index]!.i;
        const want = f32.embeddings[i]![0]!;
        expect(Math.abs(r.score - want)).toBeLessThanOrEqual(1.15 * Math.abs(q8.embeddings[i]![0]! - want) + 0.005);
        expect(r.relevanceScore).toBeCloseTo(1 / (1 + Math.exp(-r.score)), 12);
      }
    }
  });

  test("pagellm info shows the pooling, width and labels", () => {
    const run = Bun.spawnSync(["bun", join(import.meta.dir, "..", "bin", "pagellm"), "info", model!]);
    const text = run.stdout.toString();
    expect(run.exitCode).toBe(0);
    expect(text).toMatch(/pooling\s+rank \(a reranker\)/);
    expect(text).toMatch(/width\s+256/);
    expect(text).toMatch(/labels\s+score/);
  });

  test("topN keeps the best N; a reranker refuses to embed, an encoder to generate", async () => {
    const { results } = await llm.rerank(queries[0]!, ["hi", "it is a bear", "bears"], { topN: 2 });
    expect(results.length).toBe(2);
    expect(results[0]!.score).toBeGreaterThanOrEqual(results[1]!.score);
    await expect(llm.embed(["a"])).rejects.toBeInstanceOf(ModelCapabilityError);
    await expect(llm.generate([{ prompt: "a" }])).rejects.toThrow(/only reranks/);
    expect(llm.capabilities).toEqual({ generate: false, embed: false, rerank: true, pooling: "rank", embeddingWidth: 256 });
  });
});

describeShared("embedding options, invariance and bad input", [`${MODELS}/rnd-bert-Q8_0.gguf`, `${MODELS}/rnd-nomic-bert-Q8_0.gguf`], ([bert, nomic]) => {
  const texts = ["hello world", "what is panda?", "The giant panda is a bear species endemic to China.", "a", "Ünïcödé àccents stay", "x ".repeat(120)];
  let llm: LLM;
  beforeAll(async () => {
    llm = await LLM.open({ model: bert!, engine: { threads: 1 } });
  });
  afterAll(() => llm.close());

  test("every normalization and dimensions value is its definition on the raw vectors", async () => {
    const raw = (await llm.embed(texts, { normalize: -1 })).embeddings;
    for (const normalize of [-1, 0, 1, 2, 3, 6]) {
      for (const dimensions of [undefined, 1, 64, 255, 256]) {
        const { embeddings } = await llm.embed(texts, { normalize, dimensions });
        embeddings.forEach((e, i) => {
          const cut = Array.from(raw[i]!.values.subarray(0, dimensions ?? 256));
          const divisor = normalize === -1 ? 1
            : normalize === 0 ? Math.max(...cut.map(Math.abs)) / 32760
            : Math.pow(cut.reduce((s, v) => s + Math.abs(v) ** normalize, 0), 1 / normalize);
          expect(e.values.length).toBe(cut.length);
          cut.forEach((v, j) => expect(Math.abs(e.values[j]! - v / divisor)).toBeLessThanOrEqual(2e-6 * Math.max(1, Math.abs(v / divisor))));
        });
      }
    }
    // The default is Euclidean.
    const { embeddings } = await llm.embed(texts.slice(0, 1));
    expect(Math.hypot(...embeddings[0]!.values)).toBeCloseTo(1, 6);
  });

  test("every embedding is the same bits alone, together, reversed, in steps of any budget, at 1 and 2 threads", async () => {
    for (const model of [bert!, nomic!]) {
      const ckpt = readEncoderCheckpoint(model);
      const text = sequenceText(model);
      const sequences = embedSequences([...texts, [101, 7592, 102], [101, 102]], text, LIMITS);
      const alone: Float32Array[] = [];
      const one = EncoderEmbedder.load(ckpt, { threads: 1 });
      for (const s of sequences) alone.push(...(await one.embed([s])));
      const runs: Float32Array[][] = [await one.embed(sequences), (await one.embed([...sequences].reverse())).reverse()];
      one.close();
      for (const [threads, stepTokens] of [[2, 2048], [2, 1], [1, 7], [2, 130]] as const) {
        const embedder = EncoderEmbedder.load(ckpt, { threads, stepTokens });
        runs.push(await embedder.embed(sequences));
        embedder.close();
      }
      for (const run of runs) run.forEach((v, i) => expect(Buffer.from(v.buffer).equals(Buffer.from(alone[i]!.buffer))).toBe(true));
    }
  });

  const fieldError = async (run: () => Promise<unknown>, field: string, problem: RegExp) => {
    const caught = await run().then(() => null, (e: unknown) => e);
    expect(caught).toBeInstanceOf(RequestFieldError);
    expect((caught as RequestFieldError).field).toBe(field);
    expect((caught as RequestFieldError).message).toMatch(problem);
  };

  test("bad input is a RequestFieldError naming the field", async () => {
    await fieldError(() => llm.embed([]), "input", /non-empty/);
    await fieldError(() => llm.embed(["a", ""]), "input[1]", /empty string/);
    await fieldError(() => llm.embed([[]]), "input[0]", /empty array/);
    await fieldError(() => llm.embed(["a", "b", "c", [101, 30522]]), "input[3]", /30522 at 1, not a token id of the vocabulary \(0\.\.30521\)/);
    await fieldError(() => llm.embed([[101, -1]]), "input[0]", /-1 at 1/);
    await fieldError(() => llm.embed(["a"], { dimensions: 0 }), "dimensions", /from 1 to the model's width of 256, got 0/);
    await fieldError(() => llm.embed(["a"], { dimensions: 257 }), "dimensions", /got 257/);
    await fieldError(() => llm.embed(["a"], { dimensions: 1.5 }), "dimensions", /got 1.5/);
    await fieldError(() => llm.embed(["a"], { normalize: -2 }), "normalize", /got -2/);
    await fieldError(() => llm.embed(["a"], { normalize: 2.5 }), "normalize", /got 2.5/);
    const long = ["a", "b", "c", "word ".repeat(600)];
    await fieldError(() => llm.embed(long), "input[3]", /^input\[3\] has 602 tokens, over the model's context of 512$/);
    const cut = await llm.embed(long, { truncate: true });
    expect(cut.embeddings[3]!.tokenCount).toBe(512);
    await expect(llm.rerank("q", ["d"])).rejects.toBeInstanceOf(ModelCapabilityError);
    expect(llm.capabilities).toEqual({ generate: false, embed: true, rerank: false, pooling: "cls", embeddingWidth: 256 });
  });

  test("pooling overrides the file's; rank without a classifier head is refused", async () => {
    const byMean = await LLM.open({ model: bert!, pooling: "mean", engine: { threads: 1 } });
    const byCls = await llm.embed(["hello world"], { normalize: -1 });
    const { embeddings } = await byMean.embed(["hello world"], { normalize: -1 });
    byMean.close();
    expect(byMean.capabilities.pooling).toBe("mean");
    expect(embeddings[0]!.values).not.toEqual(byCls.embeddings[0]!.values);
    await expect(LLM.open({ model: bert!, pooling: "rank" })).rejects.toThrow(/pooling rank needs a classifier head/);
  });
});

describeShared("bad rerank input", [`${MODELS}/rnd-bert-rerank-Q8_0.gguf`], ([model]) => {
  test("names query, documents, documents[i] and topN", async () => {
    const llm = await LLM.open({ model: model! });
    try {
      for (const [run, field] of [
        [() => llm.rerank("", ["d"]), "query"],
        [() => llm.rerank("q", []), "documents"],
        [() => llm.rerank("q", ["d", ""]), "documents[1]"],
        [() => llm.rerank("q", ["d"], { topN: 0 }), "topN"],
      ] as const) {
        const caught = await run().then(() => null, (e: unknown) => e);
        expect(caught).toBeInstanceOf(RequestFieldError);
        expect((caught as RequestFieldError).field).toBe(field);
      }
    } finally {
      llm.close();
    }
  });
});

describeShared("a file with a missing or mis-shaped encoder tensor", [`${MODELS}/rnd-bert-Q8_0.gguf`], ([good]) => {
  const dir = mkdtempSync(join(tmpdir(), "pagellm-encoder-"));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));
  const original = new Uint8Array(readFileSync(good!));
  const refusal = async (edit: Parameters<typeof patched>[1], problem: RegExp) => {
    const path = join(dir, "bad.gguf");
    writeFileSync(path, patched(original, edit));
    const caught = await LLM.open({ model: path }).then(() => null, (e: unknown) => e);
    expect(caught).toBeInstanceOf(ModelFormatError);
    expect((caught as Error).message).toMatch(problem);
    expect((caught as Error).message).not.toContain("\n");
  };

  test("is refused in one line naming the tensor", async () => {
    await refusal((_v, m, b) => {
      const at = tensorRecord(m, "blk.1.ffn_up.weight").nDimsAt - "up.weight".length;
      b.set(new TextEncoder().encode("uq.weight"), at);
    }, /missing tensor blk\.1\.ffn_up\.weight/);
    await refusal((v, m) => {
      const t = tensorRecord(m, "blk.0.ffn_up.weight");
      v.setBigUint64(t.dimsAt, 1024n, true);
      v.setBigUint64(t.dimsAt + 8, 256n, true);
    }, /tensor blk\.0\.ffn_up\.weight has shape \[256, 1024\], expected \[1024, 256\]/);
    await refusal((v, m) => v.setBigUint64(tensorRecord(m, "token_embd_norm.bias").dimsAt, 128n, true), /token_embd_norm\.bias has shape \[128\], expected \[256\]/);
  });
});
