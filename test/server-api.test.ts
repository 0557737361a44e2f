/**
 * The smaller parts of the API surface clients asked for (issue 29), against a server the test
 * starts: `GET /v1/models/{id}` through the openai client's `models.retrieve` (and HEAD, and the
 * 404 for another id in OpenAI's shape); a model without a chat template chats in ChatML.
 */
import { expect, test } from "bun:test";
import OpenAI, { BadRequestError, NotFoundError } from "openai";
import { openedLLMs } from "./helpers/llm.ts";
import { runPagellm } from "./helpers/cli.ts";
import { PROCESS_TEST_MS } from "./helpers/limits.ts";
import { rawExchange, rawRequest } from "./helpers/raw-http.ts";
import { serveForSuite, type TestServer } from "./helpers/serve.ts";
import { describeShared } from "./helpers/shared.ts";

const STORIES = "models/gguf/stories260K.gguf";
/** Per-test limit: short generations over HTTP on a busy 2-core machine. */
const LIMIT_MS = 120_000;
/** A served name with a slash and a colon, as an hf: spec gives one. */
const NAME = "owner/repo:Q8_0";

describeShared("serve: GET /v1/models/{id}", [STORIES], ([model]) => {
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
