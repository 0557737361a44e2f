/**
 * `pagellm serve` through the official `openai` client: chat and text completions, streamed and
 * not, `n` (samples forked after one prefill give what separate requests with seeds s, s+1, …
 * give), logprobs, models.list, usage with cached_tokens, and the client's typed errors for 400,
 * 401, 404, 413 and 429. The chat model is the random qwen2 model with a ChatML template; text
 * completions run on stories260K.
 */
import { expect, test } from "bun:test";
import OpenAI, { APIError, BadRequestError, NotFoundError, RateLimitError } from "openai";
import { join } from "node:path";
import { describeShared } from "./helpers/shared.ts";
import { complete, metric, openaiClient, serveForSuite, type ServerExtensions, type TestServer } from "./helpers/serve.ts";
import { PagellmServer } from "../src/server/server.ts";

const CHAT_MODEL = "models/gguf/rnd-qwen2-Q5_K_M.gguf";
const STORIES = "models/gguf/stories260K.gguf";
/** Per-test limit: whole generations over HTTP on a busy 2-core machine. */
const LIMIT_MS = 120_000;

describeShared("serve: chat completions (openai client)", [CHAT_MODEL], ([model]) => {
  let s!: TestServer;
  serveForSuite((started) => (s = started), LIMIT_MS, model!);

  test("models.list names the served model", async () => {
    const models = [];
    for await (const m of s.client.models.list()) models.push(m.id);
    expect(models).toEqual(["test-model"]);
  }, LIMIT_MS);

  test("a chat completion, then the same streamed: same text, role first, finish_reason last, usage last", async () => {
    const messages = [{ role: "system" as const, content: "Be brief." }, { role: "user" as const, content: "Say hello." }];
    const whole = await s.client.chat.completions.create({ model: "test-model", messages, max_tokens: 12, temperature: 0 });
    expect(whole.object).toBe("chat.completion");
    const choice = whole.choices[0]!;
    expect(choice.message.role).toBe("assistant");
    expect(["stop", "length"]).toContain(choice.finish_reason);
    expect(whole.usage!.completion_tokens).toBeGreaterThan(0);
    expect(whole.usage!.total_tokens).toBe(whole.usage!.prompt_tokens + whole.usage!.completion_tokens);
    expect(whole.usage!.prompt_tokens_details!.cached_tokens).toBe(0);

    const stream = await s.client.chat.completions.create({
      model: "test-model", messages, max_tokens: 12, temperature: 0, stream: true, stream_options: { include_usage: true },
    });
    const chunks = [];
    for await (const chunk of stream) chunks.push(chunk);
    expect(chunks[0]!.choices[0]!.delta.role).toBe("assistant");
    const withChoices = chunks.filter((c) => c.choices.length > 0);
    expect(withChoices.at(-1)!.choices[0]!.finish_reason).toBe(choice.finish_reason!);
    for (const c of withChoices.slice(0, -1)) expect(c.choices[0]!.finish_reason).toBeNull();
    expect(withChoices.map((c) => c.choices[0]!.delta.content ?? "").join("")).toBe(choice.message.content!);
    const last = chunks.at(-1)!;
    expect(last.choices).toEqual([]);
    expect(last.usage!.completion_tokens).toBe(whole.usage!.completion_tokens);
    // The same prompt again: its full blocks come from the prefix cache.
    const blocks = Math.floor((whole.usage!.prompt_tokens - 1) / 16) * 16;
    expect(last.usage!.prompt_tokens_details!.cached_tokens).toBe(blocks);
  }, LIMIT_MS);

  test("n samples share one prefill and match separate requests seeded s, s+1, ...", async () => {
    const messages = [{ role: "user" as const, content: "Tell me a story about a cat and a dog." }];
    const queriesBefore = await metric(s.url, "prefix_cache_queries_total");
    const both = await s.client.chat.completions.create({ model: "test-model", messages, max_tokens: 10, temperature: 1, seed: 41, n: 3 });
    const queriesAfter = await metric(s.url, "prefix_cache_queries_total");
    expect(both.choices.map((c) => c.index)).toEqual([0, 1, 2]);
    // One prompt looked up (the samples were forked from it, not admitted on their own).
    expect(queriesAfter - queriesBefore).toBe(both.usage!.prompt_tokens);
    for (let i = 0; i < 3; i++) {
      const one = await s.client.chat.completions.create({ model: "test-model", messages, max_tokens: 10, temperature: 1, seed: 41 + i });
      expect(one.choices[0]!.message.content).toBe(both.choices[i]!.message.content);
    }
  }, LIMIT_MS);

  test("messages of other shapes (two system messages, two user messages in a row) are rendered whole by the template", async () => {
    const ask = (messages: OpenAI.ChatCompletionMessageParam[]) => s.client.chat.completions.create({ model: "test-model", messages, max_tokens: 3, temperature: 0 });
    const usual = await ask([{ role: "system", content: "Be brief." }, { role: "user", content: "Hi." }]);
    const twoSystems = await ask([{ role: "system", content: "Be brief." }, { role: "system", content: "Be kind." }, { role: "user", content: "Hi." }]);
    const twoUsers = await ask([{ role: "system", content: "Be brief." }, { role: "user", content: "Hello." }, { role: "user", content: "Hi." }]);
    // ChatML: each message adds <|im_start|>role\n ... <|im_end|>\n around its text.
    const extra = s.llm.encode("Be kind.").length + s.llm.encode("system").length + 4;
    expect(twoSystems.usage!.prompt_tokens).toBe(usual.usage!.prompt_tokens + extra);
    expect(twoUsers.usage!.prompt_tokens).toBeGreaterThan(usual.usage!.prompt_tokens);
    try {
      // The last message is the user's, or an assistant's reply to continue (test/chat-prefill.test.ts): not a system message.
      await ask([{ role: "user", content: "Hi." }, { role: "system", content: "Hello" }]);
      throw new Error("expected a 400");
    } catch (e) {
      expect(e).toBeInstanceOf(BadRequestError);
      expect((e as BadRequestError).param).toBe("messages[1].role");
    }
  }, LIMIT_MS);

  test("logprobs with top_logprobs: one entry per token, the sampled token's among the top when greedy", async () => {
    const r = await s.client.chat.completions.create({
      model: "test-model", messages: [{ role: "user", content: "Count." }], max_tokens: 6, temperature: 0, logprobs: true, top_logprobs: 3,
    });
    const content = r.choices[0]!.logprobs!.content!;
    expect(content.length).toBe(r.usage!.completion_tokens);
    expect(content.map((t) => t.token).join("")).toBe(r.choices[0]!.message.content!);
    for (const t of content) {
      expect(t.top_logprobs.length).toBe(3);
      expect(t.top_logprobs[0]!.token).toBe(t.token);
      expect(t.logprob).toBeLessThanOrEqual(0);
      expect(t.bytes).toEqual([...new TextEncoder().encode(t.token)]);
    }
  }, LIMIT_MS);

  test("typed errors: 400 naming the field, 404 for an unknown model", async () => {
    const messages = [{ role: "user" as const, content: "hi" }];
    const bad = async (body: Record<string, unknown>) => {
      try {
        await s.client.chat.completions.create({ model: "test-model", messages, ...body } as OpenAI.ChatCompletionCreateParamsNonStreaming);
      } catch (e) {
        return e;
      }
      throw new Error("expected an error");
    };
    const tools = await bad({ tools: [{ type: "function", function: { name: "no spaces", parameters: {} } }] });
    expect(tools).toBeInstanceOf(OpenAI.BadRequestError);
    expect((tools as BadRequestError).param).toBe("tools[0].function.name");
    const format = (await bad({ response_format: { type: "yaml" } })) as BadRequestError;
    expect(format).toBeInstanceOf(OpenAI.BadRequestError);
    expect(format.param).toBe("response_format.type");
    const bias = (await bad({ logit_bias: { "5": 1000 } })) as BadRequestError;
    expect(bias.param).toBe("logit_bias.5");
    expect(bias.message).toContain("-100 to 100");
    const image = (await bad({ messages: [{ role: "user", content: [{ type: "image_url", image_url: { url: "data:," } }] }] })) as BadRequestError;
    expect(image).toBeInstanceOf(OpenAI.BadRequestError);
    expect(image.param).toBe("messages[0].content[0].type");
    const typed = (await bad({ temperature: "hot" })) as BadRequestError;
    expect(typed.param).toBe("temperature");
    const tooLong = (await bad({ max_tokens: 100_000 })) as BadRequestError;
    expect(tooLong).toBeInstanceOf(OpenAI.BadRequestError);
    expect(tooLong.message).toContain("100000");
    expect(tooLong.message).toContain("4096");
    const unknown = (await bad({ model: "gpt-4o" })) as NotFoundError;
    expect(unknown).toBeInstanceOf(OpenAI.NotFoundError);
    expect(unknown.code).toBe("model_not_found");
  }, LIMIT_MS);

  test("malformed JSON is a 400 in OpenAI's error shape; unknown routes 404", async () => {
    const r = await fetch(`${s.url}/v1/chat/completions`, { method: "POST", body: "{not json", headers: { "Content-Type": "application/json" } });
    expect(r.status).toBe(400);
    const body = (await r.json()) as { error: { message: string; type: string; param: string | null; code: string | null } };
    expect(body.error.type).toBe("invalid_request_error");
    expect(body.error.code).toBe("invalid_json");
    expect((await fetch(`${s.url}/v1/nothing`)).status).toBe(404);
    expect((await fetch(`${s.url}/health`)).status).toBe(200);
  }, LIMIT_MS);
});

describeShared("serve: chat_template_kwargs (Qwen3's template on the random qwen2 model)", [CHAT_MODEL], ([model]) => {
  let s!: TestServer;
  serveForSuite((started) => (s = started), LIMIT_MS, model!, {}, {}, join(import.meta.dir, "fixtures", "chat-templates", "qwen3.jinja"));

  test("enable_thinking: false reaches the template (its empty think block lengthens the prompt); a non-object is a 400", async () => {
    const messages = [{ role: "user" as const, content: "Hi." }];
    const plain = await s.client.chat.completions.create({ model: "test-model", messages, max_tokens: 1 });
    const body = { model: "test-model", messages, max_tokens: 1, chat_template_kwargs: { enable_thinking: false } };
    const noThinking = await s.client.chat.completions.create(body as OpenAI.ChatCompletionCreateParamsNonStreaming);
    const think = s.llm.encode("<think>\n\n</think>\n\n").length;
    expect(noThinking.usage!.prompt_tokens).toBe(plain.usage!.prompt_tokens + think);
    try {
      await s.client.chat.completions.create({ ...body, chat_template_kwargs: "no" } as OpenAI.ChatCompletionCreateParamsNonStreaming);
      throw new Error("expected a 400");
    } catch (e) {
      expect((e as BadRequestError).param).toBe("chat_template_kwargs");
    }
  }, LIMIT_MS);
});

describeShared("serve: text completions (openai client)", [STORIES], ([model]) => {
  let s!: TestServer;
  serveForSuite((started) => (s = started), LIMIT_MS, model!);

  test("a string, an array of strings, token ids: choices in prompt order, n per prompt, echo", async () => {
    const ids = s.llm.encode("Once upon a time");
    const one = await s.client.completions.create({ model: "test-model", prompt: "Once upon a time", max_tokens: 8, temperature: 0 });
    expect(one.object).toBe("text_completion");
    expect(one.usage!.prompt_tokens).toBe(ids.length);
    const byIds = await s.client.completions.create({ model: "test-model", prompt: ids, max_tokens: 8, temperature: 0 });
    expect(byIds.choices[0]!.text).toBe(one.choices[0]!.text);
    const many = await s.client.completions.create({ model: "test-model", prompt: ["The dog", "Once upon a time"], max_tokens: 8, temperature: 0, n: 2 });
    expect(many.choices.map((c) => c.index)).toEqual([0, 1, 2, 3]);
    expect(many.choices[2]!.text).toBe(one.choices[0]!.text);
    expect(many.choices[3]!.text).toBe(one.choices[0]!.text);
    const echoed = await s.client.completions.create({ model: "test-model", prompt: "Once upon a time", max_tokens: 8, temperature: 0, echo: true });
    expect(echoed.choices[0]!.text).toBe("Once upon a time" + one.choices[0]!.text);
    const nested = await s.client.completions.create({ model: "test-model", prompt: [ids, ids.slice(0, 3)], max_tokens: 4, temperature: 0 });
    expect(nested.choices.length).toBe(2);
  }, LIMIT_MS);

  test("llama.cpp's repeat_penalty and repeat_last_n are honoured: a penalty over the last 0 tokens changes nothing", async () => {
    const ask = (extra: ServerExtensions) =>
      complete(s.client, { model: "test-model", prompt: "The cat sat", max_tokens: 30, temperature: 0, ignore_eos: true, ...extra });
    const plain = (await ask({})).choices[0]!.text;
    expect((await ask({ repeat_penalty: 1.5, repeat_last_n: 0 })).choices[0]!.text).toBe(plain);
    const penalised = (await ask({ repeat_penalty: 1.5 })).choices[0]!.text;
    expect(penalised).not.toBe(plain);
    expect((await ask({ repetition_penalty: 1.5, repeat_last_n: -1 })).choices[0]!.text).toBe(penalised);
  }, LIMIT_MS);

  test("streamed completion: the text of the whole one, finish_reason last; logprobs with offsets", async () => {
    const params = { model: "test-model", prompt: "Lily and Ben", max_tokens: 20, temperature: 0.7, seed: 5, top_k: 20, min_p: 0.02, repetition_penalty: 1.1 };
    const whole = await s.client.completions.create({ ...params, logprobs: 2 } as OpenAI.CompletionCreateParamsNonStreaming);
    const stream = await s.client.completions.create({ ...params, stream: true } as OpenAI.CompletionCreateParamsStreaming);
    let text = "";
    let finish: string | null = null;
    for await (const chunk of stream) {
      text += chunk.choices[0]?.text ?? "";
      finish = chunk.choices[0]?.finish_reason ?? finish;
    }
    const c = whole.choices[0]!;
    expect(text).toBe(c.text);
    expect(finish).toBe(c.finish_reason);
    const lp = c.logprobs!;
    expect(lp.tokens!.length).toBe(whole.usage!.completion_tokens);
    expect(lp.text_offset![0]).toBe(0);
    for (let i = 1; i < lp.tokens!.length; i++) expect(lp.text_offset![i]).toBe(lp.text_offset![i - 1]! + lp.tokens![i - 1]!.length);
    for (const top of lp.top_logprobs!) expect(Object.keys(top).length).toBeGreaterThanOrEqual(1);
  }, LIMIT_MS);

  test("echo with logprobs: the prompt's tokens scored as the engine scores them (first none); max_tokens 0 scores only", async () => {
    const text = "Once upon a time, there was a little girl named Lily.";
    const ids = s.llm.encode(text);
    // A long stream runs meanwhile: scoring happens between its steps.
    const busy = complete(s.client, { model: "test-model", prompt: "The dog", max_tokens: 200, temperature: 0, ignore_eos: true });
    const scored = await s.client.completions.create({ model: "test-model", prompt: text, max_tokens: 0, echo: true, logprobs: 1 });
    const reference = await s.llm.score(ids);
    const lp = scored.choices[0]!.logprobs!;
    expect(scored.choices[0]!.text).toBe(text);
    expect(scored.usage!.completion_tokens).toBe(0);
    expect(lp.tokens!.length).toBe(ids.length);
    // The first prompt token has no log-probability: null (the client's type says number).
    expect(lp.token_logprobs as (number | null)[]).toEqual([null, ...reference.token_logprobs]);
    expect(lp.top_logprobs![0]).toBeNull();
    expect(lp.tokens!.join("")).toBe(s.llm.tokenizer.decode(ids));
    const continued = await s.client.completions.create({ model: "test-model", prompt: text, max_tokens: 5, temperature: 0, echo: true, logprobs: 1 });
    const c = continued.choices[0]!;
    expect(c.logprobs!.token_logprobs!.slice(0, ids.length)).toEqual(lp.token_logprobs!);
    expect(c.logprobs!.tokens!.length).toBe(ids.length + continued.usage!.completion_tokens);
    expect(c.text.startsWith(text)).toBe(true);
    await busy;
  }, LIMIT_MS);

  test("a bad token id, an out-of-range n and a stray field are 400s naming the field", async () => {
    const bad = async (body: Record<string, unknown>) => {
      try {
        await s.client.completions.create({ model: "test-model", prompt: "x", ...body } as OpenAI.CompletionCreateParamsNonStreaming);
      } catch (e) {
        expect(e).toBeInstanceOf(OpenAI.BadRequestError);
        return (e as BadRequestError).param;
      }
      throw new Error("expected a 400");
    };
    expect(await bad({ prompt: [1, 2, 1_000_000] })).toBe("prompt");
    expect(await bad({ n: 9 })).toBe("n");
    expect(await bad({ frobnicate: true })).toBe("frobnicate");
    expect(await bad({ max_tokens: 0 })).toBe("max_tokens");
    expect(await bad({ max_tokens: 0, echo: false })).toBe("max_tokens");
    expect(await bad({ repetition_penalty: 1.1, repeat_penalty: 1.1 })).toBe("repeat_penalty");
    expect(await bad({ repeat_last_n: -2 })).toBe("repeat_last_n");
  }, LIMIT_MS);
});

describeShared("serve: 401, 413 and 429", [STORIES], ([model]) => {
  let s!: TestServer;
    // One sequence at a time and one waiting: the third concurrent request finds the queue full.
  serveForSuite((started) => (s = started), LIMIT_MS, model!, { apiKey: "sesame", maxBodyBytes: 4096, maxQueue: 1 }, { maxNumSeqs: 1 });

  test("no key or a wrong key: AuthenticationError; /health stays open", async () => {
    for (const key of ["wrong", "sesame2", "sesam"]) {
      let error: unknown = null;
      try {
        await openaiClient(s.url, key).models.list();
      } catch (e) {
        error = e;
      }
      expect(error).toBeInstanceOf(OpenAI.AuthenticationError);
    }
    const bare = await fetch(`${s.url}/v1/models`);
    expect(bare.status).toBe(401);
    // Anthropic's clients send x-api-key; the Messages API's errors have Anthropic's shape.
    expect((await fetch(`${s.url}/v1/models`, { headers: { "x-api-key": "sesame" } })).status).toBe(200);
    // /tokenize and /detokenize are outside /v1, as llama-server's and vLLM's, and need the key too.
    expect((await fetch(`${s.url}/tokenize`, { method: "POST", body: JSON.stringify({ content: "x" }) })).status).toBe(401);
    const wrong = await fetch(`${s.url}/v1/messages`, { method: "POST", headers: { "x-api-key": "sesam" }, body: "{}" });
    expect([wrong.status, await wrong.json()]).toEqual([401, { type: "error", error: { type: "authentication_error", message: "invalid API key" } }]);
    expect((await fetch(`${s.url}/health`)).status).toBe(200);
    const ok = [];
    for await (const m of s.client.models.list()) ok.push(m.id);
    expect(ok).toEqual(["test-model"]);
  }, LIMIT_MS);

  test("n beyond --max-num-seqs: a 400 naming n", async () => {
    try {
      await s.client.completions.create({ model: "test-model", prompt: "x", max_tokens: 1, n: 2 });
      throw new Error("expected a 400");
    } catch (e) {
      expect(e).toBeInstanceOf(BadRequestError);
      expect((e as BadRequestError).param).toBe("n");
    }
  }, LIMIT_MS);

  test("a body over --max-body-mb: 413", async () => {
    try {
      await s.client.completions.create({ model: "test-model", prompt: "x".repeat(10_000), max_tokens: 1 });
      throw new Error("expected a 413");
    } catch (e) {
      expect(e).toBeInstanceOf(OpenAI.APIError);
      expect((e as APIError).status).toBe(413);
    }
  }, LIMIT_MS);

  test("a full queue: RateLimitError with Retry-After, and the others finish", async () => {
    const long = s.client.completions.create({ model: "test-model", prompt: "Once", max_tokens: 200, temperature: 0 });
    const waitFor = async (name: string, value: number) => {
      while ((await metric(s.url, name)) < value) await Bun.sleep(5);
    };
    await waitFor("num_requests_running", 1);
    const queued = s.client.completions.create({ model: "test-model", prompt: "The dog", max_tokens: 5, temperature: 0 });
    await waitFor("num_requests_waiting", 1);
    try {
      await s.client.completions.create({ model: "test-model", prompt: "A cat", max_tokens: 5 });
      throw new Error("expected a 429");
    } catch (e) {
      expect(e).toBeInstanceOf(OpenAI.RateLimitError);
      expect((e as RateLimitError).headers.get("retry-after")).toBe("1");
    }
    expect((await long).choices[0]!.finish_reason).toBe("length");
    expect((await queued).usage!.completion_tokens).toBeGreaterThan(0);
  }, LIMIT_MS);
});


test("while the model loads: /health and /v1/* answer 503 with Retry-After", async () => {
  const server = new PagellmServer({
    host: "127.0.0.1", port: 0, apiKey: null, maxBodyBytes: 1 << 20, maxQueue: 4, logRequests: false, modelName: "m", log: () => {},
  });
  try {
    const health = await fetch(`${server.url}/health`);
    expect(health.status).toBe(503);
    expect(await health.json()).toEqual({ status: "loading" });
    const models = await fetch(`${server.url}/v1/models`);
    expect(models.status).toBe(503);
    expect(models.headers.get("retry-after")).toBe("1");
    expect(((await models.json()) as { error: { code: string } }).error.code).toBe("model_loading");
  } finally {
    await server.close();
  }
}, LIMIT_MS);
