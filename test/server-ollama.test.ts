/**
 * ollama's API on `pagellm serve`, through the official `ollama` npm package (and raw fetch where
 * the bytes matter): list, show and ps checked field by field against ollama's documented
 * responses; chat and generate, streamed and not, equal bit for bit to the OpenAI routes for the
 * same request (greedy, and sampled with every mapped option); `format` as a schema and as "json";
 * tools (rnd-qwen2 under the Qwen2.5 template, and a scripted model whose call is known); thinking;
 * embed and the older embeddings on rnd-bert and rnd-qwen3-embed, equal to /v1/embeddings; an
 * empty prompt loading; bad inputs answered as ollama answers them (`{"error"}` with 400 / 404).
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { Ollama, type Message, type Tool } from "ollama";
import { statSync } from "node:fs";
import { readGGUF } from "../src/model/gguf.ts";
import { summarizeModel } from "../src/hub/summary.ts";
import { humanNumber } from "../src/server/ollama/model-facts.ts";
import { THINKING_SCRIPT, WEATHER_SCRIPT, WEATHER_TOOL } from "./helpers/scripted-model.ts";
import { complete, serveScripted, startServer, type TestServer } from "./helpers/serve.ts";
import { sharedPath } from "./helpers/shared.ts";

const LIMIT_MS = 180_000;
const QWEN2 = sharedPath("models/gguf/rnd-qwen2-Q5_K_M.gguf");
const QWEN25_TEMPLATE = sharedPath("templates/Qwen-Qwen2.5-7B-Instruct.jinja");
const BERT = sharedPath("models/gguf/rnd-bert-Q8_0.gguf");
const QWEN3_EMBED = sharedPath("models/gguf/rnd-qwen3-embed-Q4_K_M.gguf");

const ASK: Message[] = [{ role: "user", content: "What is the weather in Paris?" }];
const GREEDY = { temperature: 0, num_predict: 12 };
// The client's Tool type knows fewer schema keywords than the server takes (maxLength).
const RANDOM_TOOLS = [{
  type: "function",
  function: { name: "get_weather", parameters: { type: "object", properties: { city: { type: "string", maxLength: 8 } }, required: ["city"] } },
}] as unknown as Tool[];

function ollamaClient(s: TestServer): Ollama {
  return new Ollama({ host: s.url });
}

async function post(s: TestServer, path: string, body: unknown): Promise<{ status: number; json: Record<string, unknown> }> {
  const r = await fetch(`${s.url}${path}`, { method: "POST", body: typeof body === "string" ? body : JSON.stringify(body) });
  return { status: r.status, json: (await r.json()) as Record<string, unknown> };
}

/** The status and `error` of a request ollama refuses (the body must be only `{"error": string}`). */
async function refused(s: TestServer, path: string, body: unknown): Promise<[number, string]> {
  const { status, json } = await post(s, path, body);
  expect(Object.keys(json)).toEqual(["error"]);
  expect(typeof json.error).toBe("string");
  return [status, json.error as string];
}

/** An NDJSON stream's lines, parsed. */
async function lines(s: TestServer, path: string, body: unknown): Promise<Record<string, unknown>[]> {
  const r = await fetch(`${s.url}${path}`, { method: "POST", body: JSON.stringify(body) });
  expect(r.headers.get("content-type")).toStartWith("application/x-ndjson");
  return (await r.text()).split("\n").filter((l) => l !== "").map((l) => JSON.parse(l) as Record<string, unknown>);
}

const DURATIONS = ["total_duration", "load_duration", "prompt_eval_duration", "eval_duration"] as const;

function expectDoneCounts(r: Record<string, unknown>, promptTokens: number, completionTokens: number): void {
  expect(r.done).toBe(true);
  expect(r.prompt_eval_count).toBe(promptTokens);
  expect(r.eval_count).toBe(completionTokens);
  for (const key of DURATIONS) {
    expect(Number.isInteger(r[key])).toBe(true);
    expect(r[key] as number).toBeGreaterThanOrEqual(0);
  }
  expect(r.total_duration as number).toBeGreaterThan(0);
}

describe.skipIf(QWEN2 === null || QWEN25_TEMPLATE === null)("ollama's API on rnd-qwen2 (Qwen2.5's template)", () => {
  let s: TestServer;
  let ollama: Ollama;
  beforeAll(async () => {
    s = await startServer(QWEN2!, {}, {}, QWEN25_TEMPLATE!);
    ollama = ollamaClient(s);
  }, LIMIT_MS);
  afterAll(async () => {
    await s?.close();
  });

  test("GET / and HEAD / answer 'Ollama is running'; /api/version is at least 0.6.4", async () => {
    const root = await fetch(`${s.url}/`);
    expect(root.status).toBe(200);
    expect(await root.text()).toBe("Ollama is running");
    expect((await fetch(`${s.url}/`, { method: "HEAD" })).status).toBe(200);
    const { version } = await ollama.version();
    const [major, minor, patch] = version.split(".").map(Number) as [number, number, number];
    expect(major * 1e6 + minor * 1e3 + patch).toBeGreaterThanOrEqual(6004);
  });

  test("/api/tags: ollama's documented fields, each from the file", async () => {
    const { models } = await ollama.list();
    expect(models.length).toBe(1);
    const m = models[0]!;
    const raw = (await (await fetch(`${s.url}/api/tags`)).json()) as { models: Record<string, unknown>[] };
    expect(Object.keys(raw.models[0]!).sort()).toEqual(["details", "digest", "model", "modified_at", "name", "size"]);
    expect(Object.keys(raw.models[0]!.details as object).sort()).toEqual(["families", "family", "format", "parameter_size", "parent_model", "quantization_level"]);
    const summary = summarizeModel(QWEN2!);
    expect(m.name).toBe("test-model:latest");
    expect(m.model).toBe("test-model:latest");
    expect(m.size).toBe(statSync(QWEN2!).size);
    expect(m.digest).toMatch(/^[0-9a-f]{64}$/);
    expect(new Date(m.modified_at).getTime()).toBe(statSync(QWEN2!).mtime.getTime());
    expect(m.details).toEqual({
      parent_model: "", format: "gguf", family: "qwen2", families: ["qwen2"], parameter_size: humanNumber(summary.parameters), quantization_level: "Q5_K_M",
    });
    expect(humanNumber(134_515_008)).toBe("134.52M");
    expect(humanNumber(7_615_616_512)).toBe("7.6B");
    expect(humanNumber(8_000_000_000)).toBe("8B");
    expect(humanNumber(260_000)).toBe("260K");
  });

  test("/api/show: model_info from the GGUF metadata (long arrays only with verbose), capabilities, template, parameters, details", async () => {
    const gguf = readGGUF(QWEN2!);
    const show = await ollama.show({ model: "test-model" });
    const info = show.model_info as unknown as Record<string, unknown>;
    expect(info["general.architecture"]).toBe("qwen2");
    for (const key of ["context_length", "embedding_length", "block_count", "attention.head_count", "attention.head_count_kv", "feed_forward_length"]) {
      expect(info[`qwen2.${key}`]).toBe(gguf.getU32(`qwen2.${key}`));
    }
    expect(info["general.file_type"]).toBe(17);
    expect(info["general.parameter_count"]).toBe(summarizeModel(QWEN2!).parameters);
    expect(info["tokenizer.ggml.tokens"]).toEqual([]);
    expect("general.name" in info).toBe(false);
    expect("tokenizer.chat_template" in info).toBe(false);
    expect(show.capabilities).toEqual(["completion", "tools"]);
    expect(show.template).toBe(await Bun.file(QWEN25_TEMPLATE!).text());
    expect(show.parameters).toBe(`${"num_ctx".padEnd(30)} ${s.llm.info.contextLength}`);
    expect(show.details.quantization_level).toBe("Q5_K_M");
    expect(show.modelfile).toContain("FROM test-model:latest");
    const verbose = (await post(s, "/api/show", { model: "test-model:latest", verbose: true })).json.model_info as Record<string, unknown[]>;
    expect(verbose["tokenizer.ggml.tokens"]!.length).toBe(gguf.getStringArray("tokenizer.ggml.tokens").length);
    // `name`, the older spelling.
    expect((await post(s, "/api/show", { name: "test-model" })).status).toBe(200);
  });

  test("/api/ps: the loaded model with its memory, context and an expiry that never comes", async () => {
    const { models } = await ollama.ps();
    expect(models.length).toBe(1);
    const m = models[0]!;
    expect(m.name).toBe("test-model:latest");
    expect(m.size).toBeGreaterThan(statSync(QWEN2!).size);
    expect(m.size_vram).toBe(0);
    expect(new Date(m.expires_at).getTime()).toBeGreaterThan(Date.now() + 100 * 365 * 86400_000);
    expect((m as unknown as { context_length: number }).context_length).toBe(s.llm.info.contextLength);
  });

  test("chat, greedy: the same text and counts as /v1/chat/completions, whole and streamed", async () => {
    const openai = await s.client.chat.completions.create({ model: "test-model", messages: ASK as never, temperature: 0, max_tokens: 12 });
    const whole = await ollama.chat({ model: "test-model", messages: ASK, stream: false, options: GREEDY });
    expect(whole.message).toEqual({ role: "assistant", content: openai.choices[0]!.message.content! });
    expect(whole.done_reason).toBe("length");
    expectDoneCounts(whole as unknown as Record<string, unknown>, openai.usage!.prompt_tokens, openai.usage!.completion_tokens);
    let text = "";
    let last: Record<string, unknown> | null = null;
    for await (const part of await ollama.chat({ model: "test-model", messages: ASK, stream: true, options: GREEDY })) {
      expect(part.model).toBe("test-model");
      if (part.done) last = part as unknown as Record<string, unknown>;
      else text += part.message.content;
    }
    expect(text).toBe(whole.message.content);
    expect(last!.message).toEqual({ role: "assistant", content: "" });
    expect(last!.done_reason).toBe("length");
    expectDoneCounts(last!, openai.usage!.prompt_tokens, 12);
  }, LIMIT_MS);

  test("every option maps onto the same request as the OpenAI route's fields: a sampled reply equal bit for bit", async () => {
    const options = { temperature: 1.3, top_k: 20, top_p: 0.9, min_p: 0.02, seed: 11, num_predict: 16, repeat_penalty: 1.2, repeat_last_n: 8, presence_penalty: 0.3, frequency_penalty: 0.2, stop: ["zz"], num_ctx: 64, num_thread: 1 };
    const whole = await ollama.chat({ model: "test-model", messages: ASK, stream: false, options });
    const openai = await s.client.chat.completions.create({
      model: "test-model", messages: ASK as never, temperature: 1.3, top_p: 0.9, seed: 11, max_tokens: 16, presence_penalty: 0.3, frequency_penalty: 0.2, stop: ["zz"],
      // @ts-expect-error: the server's extensions (vLLM's and llama.cpp's fields)
      top_k: 20, min_p: 0.02, repeat_penalty: 1.2, repeat_last_n: 8,
    });
    expect(whole.message.content).toBe(openai.choices[0]!.message.content!);
    expect(whole.eval_count).toBe(openai.usage!.completion_tokens);
  }, LIMIT_MS);

  test("generate: the prompt as the user's message (equal to chat), raw as /v1/completions; streamed the same", async () => {
    const chat = await ollama.chat({ model: "test-model", messages: [{ role: "system", content: "Be brief." }, { role: "user", content: "Hello" }], stream: false, options: GREEDY });
    const generated = await ollama.generate({ model: "test-model", system: "Be brief.", prompt: "Hello", stream: false, options: GREEDY });
    expect(generated.response).toBe(chat.message.content);
    expect(generated.prompt_eval_count).toBe(chat.prompt_eval_count);
    const rawPrompt = "Once upon a time";
    const raw = await ollama.generate({ model: "test-model", prompt: rawPrompt, raw: true, stream: false, options: GREEDY });
    const completion = await complete(s.client, { model: "test-model", prompt: rawPrompt, temperature: 0, max_tokens: 12 });
    expect(raw.response).toBe(completion.choices[0]!.text);
    expect(raw.prompt_eval_count).toBe(completion.usage!.prompt_tokens);
    const parts = await lines(s, "/api/generate", { model: "test-model", prompt: rawPrompt, raw: true, options: GREEDY });
    expect(parts.slice(0, -1).map((p) => p.response).join("")).toBe(raw.response!);
    expect(parts.slice(0, -1).every((p) => p.done === false)).toBe(true);
    expect(parts.at(-1)).toMatchObject({ model: "test-model", response: "", done: true, done_reason: "length", eval_count: 12 });
  }, LIMIT_MS);

  test("format: a JSON Schema and \"json\" hold the reply as response_format does, bit for bit", async () => {
    const schema = { type: "object", properties: { age: { type: "integer" }, available: { type: "boolean" } }, required: ["age", "available"] };
    const options = { temperature: 1, seed: 5, num_predict: 48 };
    const ask: Message[] = [{ role: "user", content: "Return JSON." }];
    const held = await ollama.chat({ model: "test-model", messages: ask, format: schema, stream: false, options });
    const openai = await s.client.chat.completions.create({
      model: "test-model", messages: ask as never, temperature: 1, seed: 5, max_tokens: 48, response_format: { type: "json_schema", json_schema: { name: "x", schema } },
      // @ts-expect-error: ollama's defaults, sent explicitly on the OpenAI route
      top_k: 40, top_p: 0.9, repeat_last_n: 64,
    });
    expect(held.message.content).toBe(openai.choices[0]!.message.content!);
    if (held.done_reason === "stop") expect(Object.keys(JSON.parse(held.message.content)).sort()).toEqual(["age", "available"]);
    const json = await ollama.generate({ model: "test-model", prompt: "JSON please", format: "json", stream: false, options });
    const asObject = await s.client.chat.completions.create({
      model: "test-model", messages: [{ role: "user", content: "JSON please" }], temperature: 1, seed: 5, max_tokens: 48, response_format: { type: "json_object" },
      // @ts-expect-error: as above
      top_k: 40, top_p: 0.9, repeat_last_n: 64,
    });
    expect(json.response).toBe(asObject.choices[0]!.message.content!);
  }, LIMIT_MS);

  test("tools: the prompt and reply as /v1/chat/completions with the same tools (a random model may not call: its text is the same)", async () => {
    const whole = await ollama.chat({ model: "test-model", messages: ASK, tools: RANDOM_TOOLS, stream: false, options: GREEDY });
    const openai = await s.client.chat.completions.create({ model: "test-model", messages: ASK as never, tools: RANDOM_TOOLS as never, temperature: 0, max_tokens: 12 });
    expect(whole.prompt_eval_count).toBe(openai.usage!.prompt_tokens);
    expect(whole.message.content).toBe(openai.choices[0]!.message.content ?? "");
    expect(whole.message.tool_calls?.length ?? 0).toBe(openai.choices[0]!.message.tool_calls?.length ?? 0);
  }, LIMIT_MS);

  test("an empty prompt or no messages loads the model (done_reason load); keep_alive 0 is accepted and unloads nothing", async () => {
    const chat = await ollama.chat({ model: "test-model", messages: [] });
    expect(chat).toMatchObject({ model: "test-model", message: { role: "assistant", content: "" }, done: true, done_reason: "load" });
    const generate = await post(s, "/api/generate", { model: "test-model:latest", keep_alive: 0 });
    expect(generate.json).toMatchObject({ model: "test-model:latest", response: "", done: true, done_reason: "load" });
    for (const keep_alive of ["5m", "1h30m", -1, "-1s", 300]) expect((await post(s, "/api/generate", { model: "test-model", keep_alive })).status).toBe(200);
    expect((await ollama.ps()).models.length).toBe(1);
  });

  test("a prompt longer than the context is refused with the limit named, whatever num_ctx says", async () => {
    const long = "word ".repeat(s.llm.info.contextLength + 10);
    const [status, error] = await refused(s, "/api/generate", { model: "test-model", prompt: long, raw: true, options: { num_ctx: 1 << 20 } });
    expect(status).toBe(400);
    expect(error).toContain(String(s.llm.info.contextLength));
  }, LIMIT_MS);

  test("bad inputs: ollama's {\"error\"} with its status codes", async () => {
    expect(await refused(s, "/api/chat", { model: "nope", messages: ASK })).toEqual([404, "model 'nope' not found"]);
    expect(await refused(s, "/api/show", { model: "nope:7b" })).toEqual([404, "model 'nope:7b' not found"]);
    expect(await refused(s, "/api/embed", { model: "missing", input: "x" })).toEqual([404, "model 'missing' not found"]);
    expect((await refused(s, "/api/chat", { messages: ASK }))[0]).toBe(400);
    expect(await refused(s, "/api/chat", "{not json")).toEqual([400, expect.stringContaining("not valid JSON") as unknown as string]);
    const bad = async (path: string, body: object, words: string) => {
      const [status, error] = await refused(s, path, { model: "test-model", ...body });
      expect(status).toBe(400);
      expect(error).toContain(words);
    };
    await bad("/api/chat", { messages: ASK, options: { temperature: "hot" } }, "options.temperature");
    await bad("/api/chat", { messages: ASK, options: { mirostat: 2 } }, "options.mirostat");
    await bad("/api/chat", { messages: ASK, options: { warp: 1 } }, "options.warp");
    await bad("/api/chat", { messages: ASK, format: 5 }, "invalid format");
    await bad("/api/chat", { messages: ASK, think: true }, "\"test-model\" does not support thinking");
    await bad("/api/chat", { messages: ASK, think: "hard" }, "invalid think value");
    await bad("/api/chat", { messages: [{ role: "user", content: "x", images: ["aGk="] }] }, "messages[0].images");
    await bad("/api/chat", { messages: [{ role: "robot", content: "x" }] }, "messages[0].role");
    await bad("/api/chat", { messages: ASK, keep_alive: "soon" }, "keep_alive");
    await bad("/api/chat", { messages: ASK, colour: "red" }, "colour");
    await bad("/api/generate", { prompt: "x", raw: true, system: "s" }, "raw mode does not support template, system, or context");
    await bad("/api/generate", { prompt: "x", template: "{{ .Prompt }}" }, "template");
    await bad("/api/generate", { prompt: "x", suffix: "y" }, "suffix");
    await bad("/api/embed", { input: "x" }, "\"test-model\" does not support embeddings");
    const pull = await fetch(`${s.url}/api/pull`, { method: "POST", body: "{}" });
    expect(pull.status).toBe(404);
    expect(((await pull.json()) as { error: string }).error).toContain("pull");
    expect((await fetch(`${s.url}/api/tags`, { method: "POST" })).status).toBe(405);
    // The client turns them into a ResponseError with the status and the message.
    const error = await ollama.chat({ model: "nope", messages: ASK }).catch((e: unknown) => e as { status_code: number; error: string });
    expect(error).toMatchObject({ status_code: 404, error: "model 'nope' not found" });
  }, LIMIT_MS);
});

const SCRIPTED = sharedPath("vocab/ggml-vocab-qwen2.gguf") !== null && sharedPath(WEATHER_SCRIPT.template) !== null;
const WEATHER: Tool[] = [{ type: "function", function: { ...WEATHER_TOOL, parameters: { ...WEATHER_TOOL.parameters } } as Tool["function"] }];

describe.skipIf(!SCRIPTED)("tool calls through the ollama client (a scripted model that calls get_weather)", () => {
  const s = serveScripted(WEATHER_SCRIPT, LIMIT_MS);

  test("the call in message.tool_calls with its arguments as an object; then the tool's result answered", async () => {
    const ollama = ollamaClient(s.get());
    const r = await ollama.chat({ model: "test-model", messages: ASK, tools: WEATHER, stream: false });
    expect(r.message.content).toBe("");
    expect(r.message.tool_calls).toEqual([{ id: expect.stringMatching(/^call_/) as unknown as string, function: { index: 0, name: "get_weather", arguments: { city: "Paris" } } } as never]);
    expect(r.done_reason).toBe("stop");
    const streamed: unknown[] = [];
    for await (const part of await ollama.chat({ model: "test-model", messages: ASK, tools: WEATHER, stream: true })) streamed.push(...(part.message.tool_calls ?? []));
    expect(streamed).toMatchObject([{ function: { name: "get_weather", arguments: { city: "Paris" } } }]);
    const answer = await ollama.chat({
      model: "test-model", tools: WEATHER, stream: false,
      messages: [...ASK, r.message, { role: "tool", content: "sunny", tool_name: "get_weather" }],
    });
    expect(answer.message.content).toBe(WEATHER_SCRIPT.afterResult);
    expect(answer.message.tool_calls).toBeUndefined();
  }, LIMIT_MS);
});

describe.skipIf(!SCRIPTED)("thinking through the ollama client (a scripted Qwen3 model)", () => {
  const s = serveScripted(THINKING_SCRIPT, LIMIT_MS);

  test("capabilities list thinking; message.thinking apart from content, whole and streamed; generate's thinking too", async () => {
    const ollama = ollamaClient(s.get());
    expect((await ollama.show({ model: "test-model" })).capabilities).toContain("thinking");
    const whole = await ollama.chat({ model: "test-model", messages: ASK, stream: false, think: true, options: { temperature: 0 } });
    expect(whole.message.thinking).toBe("\nThe user asks about Paris.\n");
    expect(whole.message.content).toBe("\n\nParis is in France.");
    let thinking = "";
    let content = "";
    for await (const part of await ollama.chat({ model: "test-model", messages: ASK, stream: true, options: { temperature: 0 } })) {
      thinking += part.message.thinking ?? "";
      content += part.message.content;
    }
    expect([thinking, content]).toEqual([whole.message.thinking!, whole.message.content]);
    const generated = await ollama.generate({ model: "test-model", prompt: ASK[0]!.content, stream: false, options: { temperature: 0 } });
    expect([generated.thinking, generated.response]).toEqual([whole.message.thinking, whole.message.content]);
  }, LIMIT_MS);
});

for (const [label, path] of [["rnd-bert", BERT], ["rnd-qwen3-embed", QWEN3_EMBED]] as const) {
  describe.skipIf(path === null)(`embeddings through the ollama client on ${label}`, () => {
    let s: TestServer;
    beforeAll(async () => {
      s = await startServer(path!);
    }, LIMIT_MS);
    afterAll(async () => {
      await s?.close();
    });

    test("/api/embed: a string and an array, L2-normalized, equal to /v1/embeddings bit for bit; dimensions; the older /api/embeddings", async () => {
      const ollama = ollamaClient(s);
      const texts = ["The sky is blue.", "Grass is green because of chlorophyll."];
      const openai = await s.client.embeddings.create({ model: "test-model", input: texts, encoding_format: "float" });
      const many = await ollama.embed({ model: "test-model", input: texts });
      expect(many.model).toBe("test-model");
      expect(many.embeddings).toEqual(openai.data.map((d) => d.embedding));
      expect((many as unknown as { prompt_eval_count: number }).prompt_eval_count).toBe(openai.usage.prompt_tokens);
      for (const e of many.embeddings) expect(Math.hypot(...e)).toBeCloseTo(1, 5);
      const one = await ollama.embed({ model: "test-model", input: texts[0]! });
      expect(one.embeddings).toEqual([openai.data[0]!.embedding]);
      const cut = await ollama.embed({ model: "test-model", input: texts[0]!, dimensions: 8 });
      const openaiCut = await s.client.embeddings.create({ model: "test-model", input: texts[0]!, dimensions: 8, encoding_format: "float" });
      expect(cut.embeddings).toEqual([openaiCut.data[0]!.embedding]);
      const legacy = await ollama.embeddings({ model: "test-model", prompt: texts[1]! });
      expect(legacy.embedding).toEqual(openai.data[1]!.embedding);
      expect((await post(s, "/api/embed", { model: "test-model", input: [] })).json).toEqual({ model: "test-model", embeddings: [] });
      expect((await ollama.show({ model: "test-model" })).capabilities).toEqual(label === "rnd-bert" ? ["embedding"] : ["completion", "embedding"]);
    }, LIMIT_MS);

    test("bad inputs: a number, truncate false past the context, dimensions past the width", async () => {
      expect(await refused(s, "/api/embed", { model: "test-model", input: 5 })).toEqual([400, expect.stringContaining("invalid input type") as unknown as string]);
      const [status] = await refused(s, "/api/embed", { model: "test-model", input: "word ".repeat(70_000), truncate: false });
      expect(status).toBe(400);
      expect((await refused(s, "/api/embed", { model: "test-model", input: "x", dimensions: 1 << 20 }))[0]).toBe(400);
      if (label === "rnd-bert") expect((await refused(s, "/api/chat", { model: "test-model", messages: ASK }))[1]).toContain("\"test-model\" does not support chat");
    }, LIMIT_MS);
  });
}
