/**
 * The embedding and rerank routes over HTTP, against servers the test starts on the random-weight
 * encoders (BERT, nomic-bert, a BERT reranker), with the clients as they are used: the `openai`
 * package's `embeddings.create` with its default (base64, decoded by the package) and with
 * `float`, the AI SDK's `embedMany`, LangChain's `OpenAIEmbeddings`. Every value equals
 * LLM.embed's bit for bit, in input order. Every bad input is a 400 naming the field; a model
 * asked for what it cannot do is a 400 saying what it does.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { embedMany } from "ai";
import { createOpenAICompatible } from "@ai-sdk/openai-compatible";
import { OpenAIEmbeddings } from "@langchain/openai";
import type { EmbedInput, EmbedOptions } from "../src/embed/embed-types.ts";
import { LLM } from "../src/llm/llm.ts";
import { float32Base64 } from "../src/server/embeddings.ts";
import { PagellmServer } from "../src/server/server.ts";
import { openaiClient, serveForSuite, type TestServer } from "./helpers/serve.ts";
import { testThreads } from "./helpers/threads.ts";
import { describeShared } from "./helpers/shared.ts";

const BERT = "models/gguf/rnd-bert-Q8_0.gguf";
const NOMIC = "models/gguf/rnd-nomic-bert-Q8_0.gguf";
const RERANKER = "models/gguf/rnd-bert-rerank-Q8_0.gguf";
const STORIES = "models/gguf/stories260K.gguf";
const QWEN3_EMBED = "models/gguf/rnd-qwen3-embed-Q4_K_M.gguf";
/** A model load and short encoder runs on a busy 2-core machine. */
const LIMIT_MS = 120_000;
const NAME = "test-model";

const TEXTS = [
  "The cat sat on the mat.",
  "A quick brown fox jumps over the lazy dog.",
  "Embeddings map text to vectors.",
  "Paged attention keeps the KV cache in blocks.",
  "Café au lait, naïve résumé.",
  "one",
  "Bun runs TypeScript without a build step, and this sentence is somewhat longer than the others.",
];

/** LLM.embed's vectors for `inputs`, each as a plain array of its float32 values. */
async function reference(s: TestServer, inputs: EmbedInput[], options: EmbedOptions = {}): Promise<number[][]> {
  const result = await s.llm.embed(inputs, options);
  return result.embeddings.map((e) => Array.from(e.values));
}

/** The float32 bits of a vector: equal arrays mean equal bits (NaN and -0 included). */
function bits(values: ArrayLike<number>): number[] {
  return Array.from(new Uint32Array(Float32Array.from(values).buffer));
}

async function post(s: TestServer, path: string, body: unknown): Promise<Response> {
  return fetch(`${s.url}${path}`, { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) });
}

/** A request that must be a 400 naming `param`; returns the message. */
async function refused(s: TestServer, path: string, body: unknown, param: string | null): Promise<string> {
  const res = await post(s, path, body);
  const json = (await res.json()) as { error: { message: string; param: string | null; type: string } };
  expect({ status: res.status, param: json.error.param, type: json.error.type }).toEqual({ status: 400, param, type: "invalid_request_error" });
  return json.error.message;
}

describeShared("serve: /v1/embeddings on a BERT encoder", [BERT], ([model]) => {
  let s: TestServer;
  serveForSuite((started) => (s = started), LIMIT_MS, model!, { modelName: NAME });

  test("openai embeddings.create by default (base64, decoded by the package): LLM.embed's bits, in order, with usage", async () => {
    const expected = await s.llm.embed(TEXTS, {});
    const res = await s.client.embeddings.create({ model: NAME, input: TEXTS });
    expect(res.object).toBe("list");
    expect(res.model).toBe(NAME);
    expect(res.data.map((d) => d.index)).toEqual(TEXTS.map((_, i) => i));
    expect(res.data.map((d) => bits(d.embedding))).toEqual(expected.embeddings.map((e) => bits(e.values)));
    expect(res.usage).toEqual({ prompt_tokens: expected.promptTokens, total_tokens: expected.promptTokens });
  }, LIMIT_MS);

  test("encoding_format float: JSON numbers that are float32 values, equal to LLM.embed's; base64 on the wire is their little-endian bytes", async () => {
    const expected = await reference(s, TEXTS);
    const res = await s.client.embeddings.create({ model: NAME, input: TEXTS, encoding_format: "float" });
    for (const d of res.data) for (const x of d.embedding) expect(Math.fround(x)).toBe(x);
    expect(res.data.map((d) => bits(d.embedding))).toEqual(expected.map(bits));
    const raw = (await (await post(s, "/v1/embeddings", { input: TEXTS.slice(0, 2), encoding_format: "base64" })).json()) as { data: { embedding: string }[] };
    expect(raw.data.map((d) => d.embedding)).toEqual(expected.slice(0, 2).map((v) => float32Base64(Float32Array.from(v))));
    const bytes = Buffer.from(raw.data[0]!.embedding, "base64");
    expect(bytes.readFloatLE(0)).toBe(expected[0]![0]!);
  }, LIMIT_MS);

  test("a single string, token ids and arrays of token ids are embedded as LLM.embed embeds them", async () => {
    const one = await s.client.embeddings.create({ input: TEXTS[1]!, model: NAME, encoding_format: "float" });
    expect(one.data.map((d) => bits(d.embedding))).toEqual((await reference(s, [TEXTS[1]!])).map(bits));
    const tokens = [5, 6, 7, 8, 9];
    const flat = await s.client.embeddings.create({ input: tokens, model: NAME, encoding_format: "float" });
    expect(flat.data.map((d) => bits(d.embedding))).toEqual((await reference(s, [tokens])).map(bits));
    const nested = await s.client.embeddings.create({ input: [tokens, tokens.slice(0, 3)], model: NAME, encoding_format: "float" });
    expect(nested.data.map((d) => bits(d.embedding))).toEqual((await reference(s, [tokens, tokens.slice(0, 3)])).map(bits));
  }, LIMIT_MS);

  test("dimensions keeps the first N values normalized again, as LLM.embed does; embd_normalize as llama.cpp's", async () => {
    const res = await s.client.embeddings.create({ input: TEXTS, model: NAME, dimensions: 8, encoding_format: "float" });
    expect(res.data.every((d) => d.embedding.length === 8)).toBe(true);
    expect(res.data.map((d) => bits(d.embedding))).toEqual((await reference(s, TEXTS, { dimensions: 8 })).map(bits));
    const raw = (await (await post(s, "/v1/embeddings", { input: TEXTS, embd_normalize: -1 })).json()) as { data: { embedding: number[] }[] };
    expect(raw.data.map((d) => bits(d.embedding))).toEqual((await reference(s, TEXTS, { normalize: -1 })).map(bits));
  }, LIMIT_MS);

  test("the AI SDK's embedMany, over several parallel calls, keeps the order", async () => {
    const provider = createOpenAICompatible({ name: "pagellm", baseURL: `${s.url}/v1`, apiKey: "none" });
    const values = [...TEXTS, ...TEXTS.map((t) => t.toUpperCase())];
    const { embeddings } = await embedMany({ model: provider.embeddingModel(NAME), values, maxParallelCalls: 4, maxRetries: 0 });
    expect(embeddings.map(bits)).toEqual((await reference(s, values)).map(bits));
  }, LIMIT_MS);

  test("LangChain's OpenAIEmbeddings: embedDocuments in batches and embedQuery", async () => {
    const lc = new OpenAIEmbeddings({ model: NAME, apiKey: "none", configuration: { baseURL: `${s.url}/v1` }, batchSize: 3, maxRetries: 0, stripNewLines: false });
    const documents = await lc.embedDocuments(TEXTS);
    expect(documents.map(bits)).toEqual((await reference(s, TEXTS)).map(bits));
    expect(bits(await lc.embedQuery(TEXTS[3]!))).toEqual(bits((await reference(s, [TEXTS[3]!]))[0]!));
  }, LIMIT_MS);

  test("requests arriving together are all served, each with its own inputs' vectors", async () => {
    const expected = await reference(s, TEXTS);
    const answers = await Promise.all(TEXTS.map((t) => s.client.embeddings.create({ input: [t, TEXTS[0]!], model: NAME })));
    expect(answers.map((a) => bits(a.data[0]!.embedding))).toEqual(expected.map(bits));
    expect(answers.every((a) => bits(a.data[1]!.embedding).join() === bits(expected[0]!).join())).toBe(true);
  }, LIMIT_MS);

  test("bad input: a 400 naming the field", async () => {
    const width = s.llm.capabilities.embeddingWidth;
    const vocab = s.llm.tokenizer.vocabSize;
    expect(await refused(s, "/v1/embeddings", { model: NAME }, "input")).toContain("required");
    expect(await refused(s, "/v1/embeddings", { input: "" }, "input")).toContain("empty");
    expect(await refused(s, "/v1/embeddings", { input: [] }, "input")).toContain("empty");
    expect(await refused(s, "/v1/embeddings", { input: ["a", ""] }, "input[1]")).toContain("empty");
    expect(await refused(s, "/v1/embeddings", { input: [[1, 2], []] }, "input[1]")).toContain("empty");
    expect(await refused(s, "/v1/embeddings", { input: ["a", [1]] }, "input[1]")).toContain("one kind");
    expect(await refused(s, "/v1/embeddings", { input: [1, -2] }, "input[1]")).toContain("token id");
    expect(await refused(s, "/v1/embeddings", { input: [1, vocab] }, "input")).toContain(`holds ${vocab} at 1`);
    expect(await refused(s, "/v1/embeddings", { input: [[1], [2, vocab + 5]] }, "input[1]")).toContain(`holds ${vocab + 5} at 1`);
    expect(await refused(s, "/v1/embeddings", { input: "a", encoding_format: "int8" }, "encoding_format")).toContain("'float' or 'base64'");
    expect(await refused(s, "/v1/embeddings", { input: "a", dimensions: 0 }, "dimensions")).toContain("at least 1");
    expect(await refused(s, "/v1/embeddings", { input: "a", dimensions: -3 }, "dimensions")).toContain("at least 1");
    expect(await refused(s, "/v1/embeddings", { input: "a", dimensions: width + 1 }, "dimensions")).toContain(`width ${width}`);
    expect(await refused(s, "/v1/embeddings", { input: "a", dimensions: 2.5 }, "dimensions")).toContain("integer");
    expect(await refused(s, "/v1/embeddings", { input: "a", pooling: "mean" }, "pooling")).toContain("not supported");
    expect(await refused(s, "/v1/embeddings", { input: "a", embd_normalize: -2 }, "embd_normalize")).toContain("at least -1");
    expect((await post(s, "/v1/embeddings", { input: "a", model: "other" })).status).toBe(404);
  }, LIMIT_MS);

  test("an embedding model asked to generate or rerank: a 400 saying what it does", async () => {
    const chat = await refused(s, "/v1/chat/completions", { model: NAME, messages: [{ role: "user", content: "hi" }] }, "model");
    expect(chat).toContain("embedding model");
    expect(await refused(s, "/v1/completions", { model: NAME, prompt: "hi" }, "model")).toContain("/v1/embeddings");
    expect(await refused(s, "/v1/rerank", { query: "q", documents: ["d"] }, "model")).toContain("embedding model");
  }, LIMIT_MS);

  test("/v1/models says what the model can do", async () => {
    const caps = s.llm.capabilities;
    const list = (await (await fetch(`${s.url}/v1/models`)).json()) as { data: Record<string, unknown>[] };
    expect(list.data[0]).toMatchObject({ id: NAME, capabilities: ["embedding"], pooling: caps.pooling, embedding_dimensions: caps.embeddingWidth });
    const one = (await (await fetch(`${s.url}/v1/models/${NAME}`)).json()) as Record<string, unknown>;
    expect(one.capabilities).toEqual(["embedding"]);
  }, LIMIT_MS);

  test("llama-server's /embedding: one pooled row per input, normalized as embd_normalize says", async () => {
    const res = (await (await post(s, "/embedding", { content: TEXTS.slice(0, 3) })).json()) as { index: number; embedding: number[][] }[];
    expect(res.map((r) => r.index)).toEqual([0, 1, 2]);
    expect(res.map((r) => bits(r.embedding[0]!))).toEqual((await reference(s, TEXTS.slice(0, 3))).map(bits));
    expect(res.every((r) => r.embedding.length === 1)).toBe(true);
    const raw = (await (await post(s, "/embedding", { content: TEXTS[0], embd_normalize: -1 })).json()) as { embedding: number[][] }[];
    expect(bits(raw[0]!.embedding[0]!)).toEqual(bits((await reference(s, [TEXTS[0]!], { normalize: -1 }))[0]!));
    expect(await refused(s, "/embedding", { content: "" }, "content")).toContain("empty");
  }, LIMIT_MS);

  test("/tokenize with add_special shows the sequence the model embeds (CLS first, SEP last)", async () => {
    const expected = await s.llm.embed([TEXTS[0]!], {});
    const res = (await (await post(s, "/tokenize", { content: TEXTS[0], add_special: true })).json()) as { tokens: number[] };
    expect(res.tokens.length).toBe(expected.embeddings[0]!.tokenCount);
    const plain = (await (await post(s, "/tokenize", { content: TEXTS[0] })).json()) as { tokens: number[] };
    expect(res.tokens.slice(1, -1)).toEqual(plain.tokens);
    // The ids shown embed as the text does.
    expect(bits((await reference(s, [res.tokens]))[0]!)).toEqual(bits(Array.from(expected.embeddings[0]!.values)));
  }, LIMIT_MS);
});

describeShared("serve: a BERT encoder under pooling none", [BERT], ([model]) => {
  let s: TestServer;
  beforeAll(() => {
    const llm = LLM.load({ model: model!, pooling: "none", engine: { threads: testThreads() } });
    const server = new PagellmServer({ host: "127.0.0.1", port: 0, apiKey: null, maxBodyBytes: 1 << 20, maxQueue: 16, logRequests: false, modelName: NAME, log: () => {} });
    server.ready(llm);
    s = { llm, server, url: server.url, client: openaiClient(server.url, "none"), close: async () => { await server.close(); llm.close(); } };
  }, LIMIT_MS);
  afterAll(async () => await s?.close());

  test("/embedding gives every token's vector, not normalized; /v1/embeddings is a 400 saying why and where to go", async () => {
    const expected = (await s.llm.embed([TEXTS[0]!, TEXTS[5]!], { normalize: -1 })).embeddings;
    const width = s.llm.capabilities.embeddingWidth;
    const res = (await (await post(s, "/embedding", { content: [TEXTS[0], TEXTS[5]] })).json()) as { index: number; embedding: number[][] }[];
    expect(res.map((r) => r.embedding.length)).toEqual(expected.map((e) => e.tokenCount));
    expect(res.map((r) => bits(r.embedding.flat()))).toEqual(expected.map((e) => bits(e.values)));
    expect(res.every((r) => r.embedding.every((row) => row.length === width))).toBe(true);
    const why = await refused(s, "/v1/embeddings", { input: "a" }, "model");
    expect(why).toContain("pooling 'none'");
    expect(why).toContain("/embedding");
  }, LIMIT_MS);
});

describeShared("serve: /v1/embeddings on a nomic-bert encoder", [NOMIC], ([model]) => {
  let s: TestServer;
  serveForSuite((started) => (s = started), LIMIT_MS, model!, { modelName: NAME });

  test("the openai client's default and float answers equal LLM.embed's", async () => {
    const expected = (await reference(s, TEXTS)).map(bits);
    expect((await s.client.embeddings.create({ model: NAME, input: TEXTS })).data.map((d) => bits(d.embedding))).toEqual(expected);
    expect((await s.client.embeddings.create({ model: NAME, input: TEXTS, encoding_format: "float" })).data.map((d) => bits(d.embedding))).toEqual(expected);
  }, LIMIT_MS);
});

describeShared("serve: /v1/rerank and /rerank on a BERT reranker", [RERANKER], ([model]) => {
  let s: TestServer;
  serveForSuite((started) => (s = started), LIMIT_MS, model!, { modelName: NAME });
  const QUERY = "What is a panda?";
  const DOCS = ["hi", "The giant panda is a bear native to China.", "Paris is the capital of France.", "Pandas eat bamboo."];

  interface RerankBody {
    model: string;
    results: { index: number; relevance_score: number; document?: { text: string } }[];
    usage: { prompt_tokens: number; total_tokens: number };
  }

  for (const path of ["/v1/rerank", "/rerank"]) {
    test(`${path}: every document, best first, relevance_score the sigmoid of LLM.rerank's logit, documents returned`, async () => {
      const expected = await s.llm.rerank(QUERY, DOCS, {});
      const body = (await (await post(s, path, { model: NAME, query: QUERY, documents: DOCS })).json()) as RerankBody;
      expect(body.results.map((r) => r.index)).toEqual(expected.results.map((r) => r.index));
      expect(body.results.map((r) => r.relevance_score)).toEqual(expected.results.map((r) => r.relevanceScore));
      expect(body.results.map((r) => r.document?.text)).toEqual(expected.results.map((r) => DOCS[r.index]));
      const scores = body.results.map((r) => r.relevance_score);
      expect([...scores].sort((a, b) => b - a)).toEqual(scores);
      expect(scores.every((x) => x >= 0 && x <= 1)).toBe(true);
      expect(body.usage).toEqual({ prompt_tokens: expected.promptTokens, total_tokens: expected.promptTokens });
    }, LIMIT_MS);
  }

  test("top_n, documents as {text}, return_documents false, raw_scores (llama-server's logits)", async () => {
    const expected = await s.llm.rerank(QUERY, DOCS, {});
    const body = (await (await post(s, "/v1/rerank", {
      query: QUERY, documents: DOCS.map((text) => ({ text })), top_n: 2, return_documents: false, raw_scores: true,
    })).json()) as RerankBody;
    expect(body.results).toEqual(expected.results.slice(0, 2).map((r) => ({ index: r.index, relevance_score: r.score })));
    for (const r of expected.results) expect(r.relevanceScore).toBeCloseTo(1 / (1 + Math.exp(-r.score)), 6);
  }, LIMIT_MS);

  test("bad input: a 400 naming the field", async () => {
    expect(await refused(s, "/v1/rerank", { query: QUERY }, "documents")).toContain("required");
    expect(await refused(s, "/v1/rerank", { query: QUERY, documents: [] }, "documents")).toContain("empty");
    expect(await refused(s, "/v1/rerank", { query: QUERY, documents: ["a", 3] }, "documents[1]")).toContain("string");
    expect(await refused(s, "/v1/rerank", { query: "", documents: DOCS }, "query")).toContain("empty");
    expect(await refused(s, "/v1/rerank", { documents: DOCS }, "query")).toContain("required");
    expect(await refused(s, "/rerank", { query: QUERY, documents: DOCS, top_n: 0 }, "top_n")).toContain("at least 1");
  }, LIMIT_MS);

  test("a reranker asked to embed or generate: a 400 saying it reranks", async () => {
    expect(await refused(s, "/v1/embeddings", { input: "a" }, "model")).toContain("/v1/rerank");
    expect(await refused(s, "/v1/chat/completions", { messages: [{ role: "user", content: "hi" }] }, "model")).toContain("reranker");
    const list = (await (await fetch(`${s.url}/v1/models`)).json()) as { data: { capabilities: string[] }[] };
    expect(list.data[0]!.capabilities).toEqual(["rerank"]);
  }, LIMIT_MS);
});

describeShared("serve: a text generation model asked to embed", [STORIES], ([model]) => {
  let s: TestServer;
  serveForSuite((started) => (s = started), LIMIT_MS, model!, { modelName: NAME });

  test("a 400 saying it generates and how to embed with it; generation is still served, embeddings and a completion together", async () => {
    const [embed, completion] = await Promise.all([
      refused(s, "/v1/embeddings", { input: "a" }, "model"),
      s.client.completions.create({ model: NAME, prompt: "Once upon a time", max_tokens: 4, temperature: 0 }),
    ]);
    expect(embed).toContain("--pooling");
    expect(completion.choices[0]!.text.length).toBeGreaterThan(0);
    const list = (await (await fetch(`${s.url}/v1/models`)).json()) as { data: { capabilities: string[] }[] };
    expect(list.data[0]!.capabilities).toEqual(["completion"]);
  }, LIMIT_MS);
});

describeShared("serve: a decoder embedder (Qwen3-Embedding's layout) embeds and generates", [QWEN3_EMBED], ([model]) => {
  let s: TestServer;
  serveForSuite((started) => (s = started), LIMIT_MS, model!, { modelName: NAME });

  test("embeddings through the engine equal LLM.embed's bits while a completion runs beside them; /v1/models lists both", async () => {
    const instruction = "Instruct: find passages about animals\nQuery: ";
    const inputs = TEXTS.map((text) => instruction + text);
    const [embedded, completion] = await Promise.all([
      s.client.embeddings.create({ model: NAME, input: inputs, encoding_format: "float" }),
      s.client.completions.create({ model: NAME, prompt: "Once upon a time", max_tokens: 4, temperature: 0 }),
    ]);
    const expected = await reference(s, inputs);
    expect(embedded.data.map((d) => bits(d.embedding))).toEqual(expected.map(bits));
    expect(embedded.data.map((d) => d.index)).toEqual(inputs.map((_, i) => i));
    expect(completion.choices[0]!.finish_reason).toBe("length");
    const list = (await (await fetch(`${s.url}/v1/models`)).json()) as { data: { capabilities: string[] }[] };
    expect(list.data[0]!.capabilities).toEqual(["completion", "embedding"]);
  }, LIMIT_MS);

  test("/tokenize with add_special shows the sequence embedded, the file's EOS last; without it the text's tokens alone", async () => {
    const text = "The cat sat on the mat.";
    const withSpecial = (await (await post(s, "/tokenize", { content: text, add_special: true })).json()) as { tokens: number[] };
    const plain = (await (await post(s, "/tokenize", { content: text })).json()) as { tokens: number[] };
    expect(withSpecial.tokens).toEqual(s.llm.embedTokenIds(text));
    expect(withSpecial.tokens.at(-1)).toBe(2);
    expect(withSpecial.tokens.slice(0, plain.tokens.length)).toEqual(plain.tokens);
    expect((await s.llm.embed([text])).embeddings[0]!.tokenCount).toBe(withSpecial.tokens.length);
  }, LIMIT_MS);
});

describe("float32Base64", () => {
  test("little-endian float32 bytes, whatever the values", () => {
    const values = Float32Array.from([1, -0, 0.1, -3.5e-20, 65504]);
    const bytes = Buffer.from(float32Base64(values), "base64");
    expect(bytes.length).toBe(20);
    expect(Array.from({ length: 5 }, (_, i) => bytes.readFloatLE(i * 4))).toEqual(Array.from(values));
    expect(bytes.readUInt32LE(4)).toBe(0x80000000);
  });
});
