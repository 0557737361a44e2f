/**
 * The smaller parts of the API surface clients asked for, against a server the test
 * starts: `GET /v1/models/{id}` through the openai client's `models.retrieve` (and HEAD, and the
 * 404 for another id in OpenAI's shape); `/tokenize` and `/detokenize` in llama-server's and vLLM's
 * shapes, with fetch, against the tokenizer and the library's prompts; a model without a chat
 * template chats in ChatML.
 */
import { afterAll, expect, test } from "bun:test";
import OpenAI, { BadRequestError, NotFoundError } from "openai";
import { openedLLMs } from "./helpers/llm.ts";
import { runPagellm } from "./helpers/cli.ts";
import { PROCESS_TEST_MS } from "./helpers/limits.ts";
import { rawExchange, rawRequest } from "./helpers/raw-http.ts";
import { complete, openaiClient, serveForSuite, type TestServer } from "./helpers/serve.ts";
import { PagellmServer } from "../src/server/server.ts";
import { describeShared } from "./helpers/shared.ts";

const STORIES = "models/gguf/stories260K.gguf";
/** Per-test limit: short generations over HTTP on a busy 2-core machine. */
const LIMIT_MS = 120_000;
/** A served name with a slash and a colon, as an hf: spec gives one. */
const NAME = "owner/repo:Q8_0";

describeShared("serve: GET /v1/models/{id}, /tokenize and /detokenize", [STORIES], ([model]) => {
  let s!: TestServer;
  serveForSuite((started) => (s = started), LIMIT_MS, model!, { modelName: NAME });

  test("models.retrieve returns the served model, as models.list lists it", async () => {
    const listed = [];
    for await (const m of s.client.models.list()) listed.push(m);
    const model = await s.client.models.retrieve(NAME);
    expect(model).toEqual(listed[0]!);
    expect(model.id).toBe(NAME);
    expect(model.object).toBe("model");
  }, LIMIT_MS);

  test("another id is a 404 in OpenAI's shape (model_not_found), raw slashes in the path are the id too", async () => {
    const error = await s.client.models.retrieve("gpt-4o").catch((e: unknown) => e);
    expect(error).toBeInstanceOf(NotFoundError);
    expect((error as NotFoundError).code).toBe("model_not_found");
    const raw = await fetch(`${s.url}/v1/models/owner/repo:Q8_0`);
    expect(raw.status).toBe(200);
    expect(((await raw.json()) as { id: string }).id).toBe(NAME);
    const other = await fetch(`${s.url}/v1/models/owner/other`);
    expect(other.status).toBe(404);
    expect(await other.json()).toEqual({
      error: { message: expect.stringContaining("'owner/other' does not exist"), type: "not_found_error", param: null, code: "model_not_found" },
    });
  }, LIMIT_MS);

  test("HEAD is answered like GET; another method is a 405 naming GET and HEAD", async () => {
    const path = `/v1/models/${encodeURIComponent(NAME)}`;
    const get = await fetch(`${s.url}${path}`);
    const head = await rawExchange(Number(new URL(s.url).port), [rawRequest("HEAD", path)], { responses: 1, head: true, deadlineMs: 30_000 });
    expect(head.responses[0]!.status).toBe(200);
    expect(head.responses[0]!.headers["content-type"]).toBe(get.headers.get("content-type")!);
    expect(head.responses[0]!.body).toBe("");
    const post = await fetch(`${s.url}${path}`, { method: "POST" });
    expect(post.status).toBe(405);
    expect(post.headers.get("allow")).toBe("GET, HEAD");
  }, LIMIT_MS);

  /** A JSON POST to the server (no client library: llama-server's and vLLM's routes have none). */
  const post = async (path: string, body: unknown) => {
    const r = await fetch(`${s.url}${path}`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
    return { status: r.status, body: (await r.json()) as Record<string, unknown> & { error?: { param: string | null } } };
  };

  test("/tokenize and /detokenize in llama-server's shape: the text as written, BOS with add_special, control tokens with parse_special, pieces", async () => {
    const tok = s.llm.tokenizer;
    const text = "Once upon a time";
    const plain = tok.encode(text);
    const bos = tok.bosId!;
    expect((await post("/tokenize", { content: text })).body).toEqual({ tokens: plain });
    expect((await post("/tokenize", { content: text, add_special: true })).body).toEqual({ tokens: [bos, ...plain] });
    const written = `${tok.tokenText(bos)}${text}`;
    expect(((await post("/tokenize", { content: written })).body.tokens as number[])[0]).toBe(bos);
    expect(((await post("/tokenize", { content: written, parse_special: false })).body.tokens as number[])).not.toContain(bos);
    const pieces = (await post("/tokenize", { content: text, with_pieces: true })).body.tokens as { id: number; piece: string }[];
    expect(pieces.map((p) => p.id)).toEqual(plain);
    expect(pieces.map((p) => p.piece).join("").trimStart()).toBe(text);
    expect((await post("/detokenize", { tokens: plain })).body).toEqual({ content: text, prompt: text });
    expect((await post("/detokenize", { tokens: [bos, ...plain] })).body.content).toBe(written);
    expect((await post("/detokenize", { tokens: [] })).body.content).toBe("");
  }, LIMIT_MS);

  test("/tokenize in vLLM's shape: the prompt a completion or chat completion runs, counted with the context; errors name the field", async () => {
    const text = "Once upon a time";
    const messages = [{ role: "system", content: "Be brief." }, { role: "user", content: "Hi" }];
    const ids = s.llm.encode(text);
    const maxModelLen = s.llm.client.info.maxPositions;
    expect((await post("/tokenize", { model: NAME, prompt: text })).body).toEqual({ count: ids.length, max_model_len: maxModelLen, tokens: ids });
    expect((await post("/tokenize", { prompt: text, add_special_tokens: false })).body.tokens).toEqual(s.llm.tokenizer.encode(text));
    const chat = s.llm.messagesPromptIds(messages);
    expect((await post("/tokenize", { messages, add_generation_prompt: true })).body).toEqual({ count: chat.length, max_model_len: maxModelLen, tokens: chat });
    const long = "once ".repeat(maxModelLen);
    expect(((await post("/tokenize", { prompt: long })).body.count as number)).toBeGreaterThan(maxModelLen);
    const refusals: [string, unknown, number, string | null][] = [
      ["/tokenize", {}, 400, "prompt"],
      ["/tokenize", { prompt: 5 }, 400, "prompt"],
      ["/tokenize", { content: "x", extra: 1 }, 400, "extra"],
      ["/tokenize", { messages, add_generation_prompt: false }, 400, "add_generation_prompt"],
      ["/tokenize", { messages: [{ role: "pirate", content: "x" }] }, 400, "messages[0].role"],
      ["/tokenize", { model: "other", prompt: "x" }, 404, "model"],
      ["/detokenize", { tokens: [1, -1] }, 400, "tokens[1]"],
      ["/detokenize", { tokens: "1" }, 400, "tokens"],
    ];
    for (const [path, body, status, param] of refusals) {
      const r = await post(path, body);
      expect({ path, body, status: r.status, param: r.body.error?.param }).toEqual({ path, body, status, param });
    }
    expect((await fetch(`${s.url}/tokenize`)).status).toBe(405);
  }, LIMIT_MS);
});

describeShared("serve: a model without a chat template chats in ChatML (llama-server's fallback)", [STORIES], ([model]) => {
  const llms = openedLLMs({ afterEach: false });
  let s!: TestServer;
  serveForSuite((started) => (s = started), LIMIT_MS, model!);
  const messages: OpenAI.ChatCompletionMessageParam[] = [
    { role: "system", content: "Be brief." }, { role: "user", content: "Hi" }, { role: "assistant", content: "Once" }, { role: "user", content: "More" },
  ];

  test("system messages and every role work; the prompt is what --chat-template chatml renders; the LLM says so in its note", async () => {
    const r = await s.client.chat.completions.create({ model: "test-model", messages, max_tokens: 2, temperature: 0 });
    const plain = messages.map((m) => ({ role: m.role, content: m.content as string }));
    const chatml = llms.load({ model: model!, chatTemplate: "chatml" });
    expect(r.usage!.prompt_tokens).toBe(chatml.messagesPromptIds(plain).length);
    expect(s.llm.messagesPromptIds(plain)).toEqual(chatml.messagesPromptIds(plain));
    // stories260K's vocabulary has no ChatML control tokens: their text is plain text here.
    expect(s.llm.tokenizer.decode(s.llm.messagesPromptIds(plain))).toBe(
      "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nOnce<|im_end|>\n<|im_start|>user\nMore<|im_end|>\n<|im_start|>assistant\n");
    expect(s.llm.chatFormatNote).toBe("the model has no chat template; chat messages are rendered in ChatML");
    expect(chatml.chatFormatNote).toBeNull();
    // chat_template_kwargs reach the stand-in template as any Jinja template's.
    const kw = await s.client.chat.completions.create({ model: "test-model", messages, max_tokens: 1, chat_template_kwargs: { x: 1 } } as OpenAI.ChatCompletionCreateParamsNonStreaming);
    expect(kw.usage!.prompt_tokens).toBe(r.usage!.prompt_tokens);
  }, LIMIT_MS);

  test("generate --chat renders ChatML with the note; chat keeps plain continuation with its own", () => {
    const generate = runPagellm(["generate", "--model", model!, "--chat", "--system", "Be brief.", "--prompt", "Hi", "--max-tokens", "1", "--json", "--threads", "1"]);
    expect(generate.exitCode).toBe(0);
    expect(generate.stderr).toContain("note: the model has no chat template; chat messages are rendered in ChatML; --template NAME|FILE chooses another\n");
    const chatml = llms.load({ model: model!, chatTemplate: "chatml" });
    const ids = chatml.messagesPromptIds([{ role: "system", content: "Be brief." }, { role: "user", content: "Hi" }]);
    expect((JSON.parse(generate.stdout) as { prompt_tokens: number }).prompt_tokens).toBe(ids.length);
    const chat = runPagellm(["chat", "--model", model!, "--threads", "1"], { stdin: "" });
    expect(chat.exitCode).toBe(0);
    expect(chat.stderr).toContain("note: the model has no chat template; the chat continues plain text (raw); --template NAME|FILE chooses another\n");
    expect(chat.stderr).toContain("template raw");
    // Without a template the text is not rendered in any chat format: no note.
    expect(runPagellm(["generate", "--model", model!, "--prompt", "Hi", "--max-tokens", "1", "--threads", "1"]).stderr).not.toContain("chat template");
  }, PROCESS_TEST_MS);

  test("untemplatedChatFormat raw keeps plain continuation (what pagellm chat uses), with its own note", () => {
    const raw = llms.load({ model: model!, untemplatedChatFormat: "raw" });
    expect(raw.chatFormat).toEqual({ kind: "builtin", name: "raw" });
    expect(raw.chatFormatNote).toBe("the model has no chat template; the chat continues plain text (raw)");
  });
});

describeShared("serve: a built-in format", [STORIES], ([model]) => {
  let s!: TestServer;
  serveForSuite((started) => (s = started), LIMIT_MS, model!, {}, {}, "llama2");

  test("chat_template_kwargs with a built-in format: a 400 naming it", async () => {
    const body = { model: "test-model", messages: [{ role: "user", content: "Hi" }], max_tokens: 1, chat_template_kwargs: { enable_thinking: false } };
    const error = await s.client.chat.completions.create(body as OpenAI.ChatCompletionCreateParamsNonStreaming).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(BadRequestError);
    expect((error as BadRequestError).param).toBe("chat_template_kwargs");
  }, LIMIT_MS);
});

describeShared("serve: server-wide request defaults (--temperature, --max-tokens, ...)", [STORIES], ([model]) => {
  let plain!: TestServer;
  let tuned!: OpenAI;
  const servers: PagellmServer[] = [];
  serveForSuite((started) => {
    plain = started;
    const server = new PagellmServer({
      host: "127.0.0.1", port: 0, apiKey: null, maxBodyBytes: 1 << 20, maxQueue: 64, logRequests: false, modelName: "test-model", log: () => {},
      requestDefaults: { temperature: 0, maxTokens: 5, seed: 42, topK: 3, repetitionPenalty: 1.3 },
    });
    server.ready(started.llm);
    servers.push(server);
    tuned = openaiClient(server.url);
  }, LIMIT_MS, model!);
  afterAll(async () => {
    for (const s of servers) await s.close();
  });

  const prompt = "Once upon a time";
  const text = async (client: OpenAI, body: Record<string, unknown>) => {
    const r = await complete(client, { model: "test-model", prompt, ignore_eos: true, ...body } as Parameters<typeof complete>[1]);
    return { text: r.choices.map((c) => c.text), tokens: r.usage!.completion_tokens };
  };

  test("a request that leaves a field out takes the server's default; its own value wins", async () => {
    // Left out: temperature 0, top-k 3, repetition penalty 1.3 and 5 tokens, as if the request said so.
    expect(await text(tuned, {})).toEqual(await text(plain.client, { temperature: 0, top_k: 3, repetition_penalty: 1.3, max_tokens: 5 }));
    // Given: the request's own values (the seed still the server's).
    expect(await text(tuned, { temperature: 1, top_k: 0, repetition_penalty: 1, max_tokens: 7 })).toEqual(
      await text(plain.client, { temperature: 1, top_k: 0, repetition_penalty: 1, max_tokens: 7, seed: 42 }));
    // top_k 0 and seed 9 given, the penalty and max_tokens the server's; n samples seeded 9 and 10.
    expect(await text(tuned, { temperature: 1, top_k: 0, seed: 9, n: 2 })).toEqual(
      await text(plain.client, { temperature: 1, top_k: 0, seed: 9, n: 2, repetition_penalty: 1.3, max_tokens: 5 }));
    // Without the server's defaults: OpenAI's (a text completion's 16 tokens).
    expect((await text(plain.client, {})).tokens).toBe(16);
  }, LIMIT_MS);

  test("chat completions take them too", async () => {
    const messages: OpenAI.ChatCompletionMessageParam[] = [{ role: "user", content: "Hi" }];
    const r = await tuned.chat.completions.create({ model: "test-model", messages, ignore_eos: true } as OpenAI.ChatCompletionCreateParamsNonStreaming);
    const same = await plain.client.chat.completions.create(
      { model: "test-model", messages, ignore_eos: true, temperature: 0, top_k: 3, repetition_penalty: 1.3, max_tokens: 5 } as OpenAI.ChatCompletionCreateParamsNonStreaming);
    expect(r.usage!.completion_tokens).toBe(5);
    expect(r.choices[0]!.message.content).toBe(same.choices[0]!.message.content);
  }, LIMIT_MS);

  test("pagellm serve checks them at start with the engine's request check, naming the option", () => {
    for (const [args, message] of [
      [["--top-p", "3"], "--top-p must be above 0 and at most 1, got 3"],
      [["--seed", "1.5"], "--seed must be an integer, got 1.5"],
      [["--max-tokens", "0"], "--max-tokens must be at least 1, got 0"],
      [["--presence-penalty", "-3"], "--presence-penalty must be at least -2 and at most 2, got -3"],
      [["--repeat-penalty", "0"], "--repeat-penalty must be above 0, got 0"],
    ] as const) {
      const r = runPagellm(["serve", "--model", model!, "--port", "0", ...args]);
      expect([args, r.exitCode, r.stderr]).toEqual([args, 2, `pagellm: error: ${message}\n`]);
    }
  }, PROCESS_TEST_MS);
});
