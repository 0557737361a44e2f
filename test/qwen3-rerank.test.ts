/**
 * Qwen3-Reranker's layout (qwen3, pooling rank, cls.output holding the "yes" and "no" rows, the
 * rerank template in the file) against llama.cpp on a random-weight file the project's writer
 * makes bit for bit (test/fixtures/qwen3-rerank/: the reference and the command that made it):
 * the same token ids, scores within 0.001 of llama-server's /rerank (the accuracy rule
 * for F32 files; measured: 4.8e-5 at most, from f32 sums taken in other orders through 3 layers;
 * the documents' scores are 0.04 or more apart) and each query's documents in its order; every score the same bits with the prefix cache on or off and batched or alone, the
 * template's prefix and the query computed once for all of a query's documents.
 */
import { afterAll, describe, expect, test } from "bun:test";
import { createHash } from "node:crypto";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { rerankSequences } from "../src/embed/embed-request.ts";
import { readGGUF } from "../src/model/gguf.ts";
import { readDecoderRankHead } from "../src/model/rank-head.ts";
import { filePooling } from "../src/model/pooling-type.ts";
import { QWEN3_RERANK_TEMPLATE } from "../src/synth/qwen3-reranker-writer.ts";
import { loadTokenizer } from "../src/tokenizer/load.ts";
import type { EngineOptions } from "../src/engine/engine-options.ts";
import type { LLM } from "../src/llm/llm.ts";
import { openedLLMs } from "./helpers/llm.ts";
import { RERANKER_VOCAB, writeReranker } from "./helpers/qwen3-reranker.ts";
import { describeShared } from "./helpers/shared.ts";

interface RerankRef {
  sha256: string;
  pairs: [string, string][];
  tokens: number[][];
  /** llama-server's /rerank relevance_score of each pair. */
  scores: number[];
}

const ref = JSON.parse(readFileSync(join(import.meta.dir, "fixtures/qwen3-rerank/rnd-qwen3-rerank-F32.rerank.json"), "utf8")) as RerankRef;
const queries = [...new Set(ref.pairs.map((p) => p[0]))];
const documentsOf = (query: string) => ref.pairs.flatMap((p, i) => (p[0] === query ? [{ index: i, text: p[1] }] : []));
const llms = openedLLMs();
const dir = mkdtempSync(join(tmpdir(), "pagellm-qwen3-rerank-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** A score's bits. */
const bits = (x: number) => new Uint32Array(Float32Array.of(x).buffer)[0]!;

describeShared("Qwen3-Reranker's layout against llama.cpp", [RERANKER_VOCAB], ([vocab]) => {
  const model = writeReranker(dir, vocab!);
  const load = (engine: Partial<EngineOptions> = {}): LLM => llms.load({ model, engine: { kvCacheMb: 16, ...engine } });

  /** Every pair's score, query by query (one LLM.rerank call each), in the reference's order. */
  async function scores(llm: LLM): Promise<number[]> {
    const out: number[] = new Array(ref.pairs.length);
    for (const query of queries) {
      const docs = documentsOf(query);
      const result = await llm.rerank(query, docs.map((d) => d.text));
      for (const r of result.results) out[docs[r.index]!.index] = r.score;
    }
    return out;
  }

  test("the writer makes the reference's file bit for bit: rank pooling, yes/no rows of the tied embedding, the converter's template", () => {
    expect(createHash("sha256").update(readFileSync(model)).digest("hex")).toBe(ref.sha256);
    const file = readGGUF(model);
    expect(filePooling(file, "qwen3")).toBe("rank");
    const head = readDecoderRankHead(file, "qwen3", 256)!;
    expect(head.labels).toEqual(["yes", "no"]);
    expect(head.template).toBe(QWEN3_RERANK_TEMPLATE);
    expect(head.bias).toBeNull();
  });

  test("each pair's tokens are llama.cpp's: the template filled in, its special tokens parsed, nothing added", () => {
    const { tokenizer, addBos, addEos } = loadTokenizer(model, {});
    const text = { tokenizer, addBos, addEos, rerankTemplate: QWEN3_RERANK_TEMPLATE };
    const ids = ref.pairs.map(([q, d]) => rerankSequences(q, [d], text, { vocabSize: 49152, maxTokens: 4096, truncate: false })[0]);
    expect(ids).toEqual(ref.tokens);
    expect(ids[0]![0]).toBe(1); // <|im_start|>, one token
  });

  test("through the front door: capabilities say rerank; scores within 0.001 of llama-server's, each query's documents in its order", async () => {
    const llm = load();
    expect(llm.capabilities).toEqual({ generate: true, embed: false, rerank: true, pooling: "rank", embeddingWidth: 256 });
    const ours = await scores(llm);
    ours.forEach((s, i) => expect(Math.abs(s - ref.scores[i]!)).toBeLessThanOrEqual(1e-3));
    for (const query of queries) {
      const result = await llm.rerank(query, documentsOf(query).map((d) => d.text));
      const expected = documentsOf(query).map((d, i) => ({ i, s: ref.scores[d.index]! })).sort((a, b) => b.s - a.s).map((x) => x.i);
      expect(result.results.map((r) => r.index)).toEqual(expected);
      // p("yes") is a probability already: the relevance score is the score itself.
      for (const r of result.results) expect(r.relevanceScore).toBe(r.score);
      expect(result.promptTokens).toBe(documentsOf(query).reduce((n, d) => n + ref.tokens[d.index]!.length, 0));
    }
  });

  test("the shared prefix is computed once per query; every score the same bits with the cache on or off, batched or alone", async () => {
    const alone = load({ enablePrefixCaching: false });
    const reference: number[] = [];
    for (const [i, [query, doc]] of ref.pairs.entries()) reference[i] = (await alone.rerank(query, [doc])).results[0]!.score;
    const cached = load();
    const before = cached.stats().prefixHits;
    expect((await scores(cached)).map(bits)).toEqual(reference.map(bits));
    // Two full KV blocks (the template's system turn and the query) at least, for each query's 2nd and 3rd documents.
    expect(cached.stats().prefixHits - before).toBeGreaterThanOrEqual(queries.length * 2 * 32);
    expect((await scores(load({ enablePrefixCaching: false }))).map(bits)).toEqual(reference.map(bits));
    expect((await scores(load({ maxNumSeqs: 1 }))).map(bits)).toEqual(reference.map(bits));
  });
});

describeShared("a Qwen3-Reranker whose head is stored as F16 or BF16 (as a converted model keeps it)", [RERANKER_VOCAB], ([vocab]) => {
  test("loads, and scores within the head's rounding of the F32 head's, in the same order", async () => {
    const f32 = await scoresOf(llms.load({ model: writeReranker(dir, vocab!), engine: { kvCacheMb: 16 } }));
    for (const type of ["F16", "BF16"] as const) {
      const narrow = await scoresOf(llms.load({ model: writeReranker(dir, vocab!, type), engine: { kvCacheMb: 16 } }));
      narrow.forEach((s, i) => expect(Math.abs(s - f32[i]!)).toBeLessThanOrEqual(type === "F16" ? 1e-3 : 1e-2));
      expect(order(narrow)).toEqual(order(f32));
    }
  });

  async function scoresOf(llm: LLM): Promise<number[]> {
    return (await llm.rerank(ref.pairs[0]![0], ref.pairs.filter((p) => p[0] === ref.pairs[0]![0]).map((p) => p[1]))).results
      .slice().sort((a, b) => a.index - b.index).map((r) => r.score);
  }
  const order = (scores: number[]) => scores.map((s, i) => ({ s, i })).sort((a, b) => b.s - a.s).map((x) => x.i);
});

describe("a rerank template's placeholders", () => {
  test("every {query}, then every {document}, replaced as written ($ patterns kept)", () => {
    const encoded: string[] = [];
    const tokenizer = { encode: (t: string) => (encoded.push(t), [0]) } as unknown as Parameters<typeof rerankSequences>[2]["tokenizer"];
    rerankSequences("q$&", ["d {query}"], { tokenizer, addBos: true, addEos: true, rerankTemplate: "<{query}|{document}|{query}>" }, { vocabSize: 1, maxTokens: 8, truncate: false });
    expect(encoded).toEqual(["<q$&|d {query}|q$&>"]);
  });
});
