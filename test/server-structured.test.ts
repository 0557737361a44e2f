/**
 * Structured output over HTTP, on one server with the random qwen2 model (Qwen2's real
 * vocabulary): every spelling clients send (OpenAI's response_format, llama-server's json_schema
 * and grammar, vLLM's structured_outputs and guided_*) holds the output to its constraint on both
 * endpoints, streamed too; `max_tokens` reached first ends with finish_reason length; two
 * spellings at once, a bad schema, grammar or pattern are 400s naming the field (and the keyword,
 * rule or line), never unconstrained text with a 200. Then the real clients: the `openai` package
 * with a zod schema (zodResponseFormat and `.parse`), the Vercel AI SDK's generateObject and
 * LangChain's withStructuredOutput each get JSON their own parser accepts.
 *
 * A random model writes whatever the grammar lets through (JSON whitespace included, up to the
 * limit in a row), so the schemas here are small and max_tokens generous; the outputs are checked
 * by what they must be (in the set, matching the pattern, valid by ajv), never by their text.
 */
import { expect, test } from "bun:test";
import Ajv from "ajv";
import { z } from "zod";
import { zodResponseFormat } from "openai/helpers/zod";
import { generateObject } from "ai";
import { createOpenAICompatible } from "@ai-sdk/openai-compatible";
import { ChatOpenAI } from "@langchain/openai";
import { describeShared } from "./helpers/shared.ts";
import { serveForSuite, type TestServer } from "./helpers/serve.ts";

const CHAT_MODEL = "models/gguf/rnd-qwen2-Q5_K_M.gguf";
const LIMIT_MS = 180_000;

/** A small schema a random model finishes within max_tokens. */
const PERSON = {
  type: "object",
  properties: { name: { type: "string", maxLength: 6 }, age: { type: "integer", minimum: 0, maximum: 99 } },
  required: ["name", "age"],
  additionalProperties: false,
};
const validPerson = new Ajv().compile(PERSON);

interface Answer {
  status: number;
  body: {
    choices?: { text?: string; message?: { content: string | null }; finish_reason: string }[];
    error?: { message: string; param: string | null; code: string | null };
  };
}

describeShared("serve: structured output fields", [CHAT_MODEL], ([model]) => {
  let s!: TestServer;
  serveForSuite((started) => (s = started), LIMIT_MS, model!);

  const post = async (path: "chat/completions" | "completions", body: Record<string, unknown>): Promise<Answer> => {
    const base = path === "chat/completions" ? { messages: [{ role: "user", content: "Answer." }] } : { prompt: "Answer:" };
    const r = await fetch(`${s.url}/v1/${path}`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ model: "test-model", max_tokens: 300, temperature: 0, ...base, ...body }) });
    return { status: r.status, body: (await r.json()) as Answer["body"] };
  };
  const texts = (a: Answer) => a.body.choices!.map((c) => c.message?.content ?? c.text!);

  test("choice, regex and GBNF in every spelling, on both endpoints: each output in the language, ended by the grammar", async () => {
    const inSet = (t: string) => ["yes", "no"].includes(t);
    const pattern = (t: string) => /^[a-z]{3}-[0-9]{2}$/.test(t);
    const cases: [Record<string, unknown>, (t: string) => boolean][] = [
      [{ structured_outputs: { choice: ["yes", "no"] } }, inSet],
      [{ guided_choice: ["yes", "no"] }, inSet],
      [{ structured_outputs: { regex: "[a-z]{3}-[0-9]{2}" } }, pattern],
      [{ guided_regex: "[a-z]{3}-[0-9]{2}" }, pattern],
      [{ grammar: 'root ::= "yes" | "no"' }, inSet],
      [{ guided_grammar: 'root ::= answer\nanswer ::= "yes" | "no"' }, inSet],
      [{ structured_outputs: { grammar: 'root ::= [a-z]{3} "-" [0-9]{2}' } }, pattern],
    ];
    // All at once: the server batches them.
    const runs = cases.flatMap(([fields, valid]) => (["chat/completions", "completions"] as const).map(async (path) => {
      const a = await post(path, { ...fields, n: 2, temperature: 1, seed: 3 });
      expect(a.status).toBe(200);
      for (const t of texts(a)) expect({ fields, path, t, ok: valid(t) }).toEqual({ fields, path, t, ok: true });
      expect(a.body.choices!.every((c) => c.finish_reason === "stop")).toBe(true);
    }));
    await Promise.all(runs);
  }, LIMIT_MS);

  test("JSON Schema spellings: response_format json_schema, llama-server's json_schema, vLLM's json; valid by ajv", async () => {
    const spellings = [
      { response_format: { type: "json_schema", json_schema: { name: "person", schema: PERSON, strict: true } } },
      { json_schema: PERSON },
      { structured_outputs: { json: PERSON } },
      { guided_json: JSON.stringify(PERSON) },
      { response_format: { type: "json_object", schema: PERSON } },
    ];
    await Promise.all(spellings.map(async (fields, i) => {
      const a = await post(i % 2 === 0 ? "chat/completions" : "completions", fields);
      expect(a.status).toBe(200);
      expect(a.body.choices![0]!.finish_reason).toBe("stop");
      expect(validPerson(JSON.parse(texts(a)[0]!))).toBe(true);
    }));
  }, LIMIT_MS);

  test("json_object: an object from the first token; max_tokens reached first is finish_reason length", async () => {
    for (const fields of [{ response_format: { type: "json_object" } }, { structured_outputs: { json_object: true } }]) {
      const a = await post("chat/completions", { ...fields, max_tokens: 4 });
      expect(a.status).toBe(200);
      expect(a.body.choices![0]!.finish_reason).toBe("length");
      // What was written is the start of a JSON object: whitespace, then "{".
      const t = texts(a)[0]!;
      expect(t.trimStart() === "" || t.trimStart().startsWith("{")).toBe(true);
    }
    const text = await post("chat/completions", { response_format: { type: "text" }, max_tokens: 2 });
    expect(text.status).toBe(200);
  }, LIMIT_MS);

  test("streamed: the deltas join into an output of the language", async () => {
    const r = await fetch(`${s.url}/v1/chat/completions`, {
      method: "POST", headers: { "content-type": "application/json" },
      body: JSON.stringify({ model: "test-model", messages: [{ role: "user", content: "x" }], stream: true, temperature: 0, structured_outputs: { regex: "[a-z]{3}-[0-9]{2}" } }),
    });
    expect(r.status).toBe(200);
    let content = "";
    for (const line of (await r.text()).split("\n")) {
      if (!line.startsWith("data: {")) continue;
      const chunk = JSON.parse(line.slice(6)) as { choices: { delta: { content?: string } }[] };
      content += chunk.choices[0]?.delta.content ?? "";
    }
    expect(content).toMatch(/^[a-z]{3}-[0-9]{2}$/);
  }, LIMIT_MS);

  test("errors: two spellings, bad shapes, and what the compiler refuses are 400s naming the field", async () => {
    const cases: [Record<string, unknown>, string, string][] = [
      [{ json_schema: PERSON, grammar: 'root ::= "a"' }, "grammar", "'json_schema' and 'grammar'"],
      [{ response_format: { type: "json_object" }, guided_regex: "a" }, "guided_regex", "'response_format' and 'guided_regex'"],
      [{ structured_outputs: { regex: "a", choice: ["a"] } }, "structured_outputs.choice", "not 'regex' and 'choice'"],
      [{ structured_outputs: { whitespace_pattern: " " } }, "structured_outputs.whitespace_pattern", "not supported"],
      [{ response_format: { type: "yaml" } }, "response_format.type", "json_schema"],
      [{ response_format: { type: "json_schema", json_schema: { name: "x" } } }, "response_format.json_schema.schema", "is required"],
      [{ response_format: { type: "json_schema", json_schema: { name: "x", schema: 5 } } }, "response_format.json_schema.schema", "JSON Schema"],
      [{ response_format: { type: "json_schema", json_schema: { name: "x", schema: { type: "strnig" } } } }, "response_format.json_schema.schema", "unknown type \"strnig\""],
      [{ response_format: { type: "json_schema", json_schema: { schema: { $ref: "https://example.com/s.json" } } } }, "response_format.json_schema.schema", "https://example.com/s.json"],
      [{ grammar: 'root ::= "a" b\n\nb ::= c' }, "grammar", "line 3"],
      [{ guided_grammar: "root ::= (" }, "guided_grammar", "line 1"],
      [{ guided_regex: "(a" }, "guided_regex", "missing \")\""],
      [{ guided_choice: [] }, "guided_choice", "non-empty array"],
      [{ structured_outputs: { json_object: false } }, "structured_outputs.json_object", "must be true"],
    ];
    for (const [fields, param, words] of cases) {
      for (const path of ["chat/completions", "completions"] as const) {
        const a = await post(path, fields);
        expect({ fields, status: a.status, param: a.body.error?.param }).toEqual({ fields, status: 400, param });
        expect(a.body.error!.message).toContain(words);
      }
    }
  }, LIMIT_MS);

  // The clients' own schemas: a person a random model finishes within max_tokens.
  const Person = z.object({ name: z.string().max(6), age: z.number().int().min(0).max(99) });
  const isPerson = (v: unknown) => Person.safeParse(v).success;

  test("the openai client: zodResponseFormat and chat.completions.parse give the parsed object", async () => {
    const r = await s.client.chat.completions.parse({
      model: "test-model", messages: [{ role: "user", content: "A person, please." }], temperature: 0, max_tokens: 300,
      response_format: zodResponseFormat(Person, "person"),
    });
    const choice = r.choices[0]!;
    expect(choice.finish_reason).toBe("stop");
    expect(isPerson(choice.message.parsed)).toBe(true);
    expect(choice.message.parsed).toEqual(JSON.parse(choice.message.content!));
  }, LIMIT_MS);

  test("the Vercel AI SDK: generateObject with a zod schema (structured outputs on)", async () => {
    const provider = createOpenAICompatible({ name: "pagellm", baseURL: `${s.url}/v1`, supportsStructuredOutputs: true });
    const { object, finishReason } = await generateObject({
      model: provider.chatModel("test-model"), schema: Person, prompt: "A person, please.", temperature: 0, maxOutputTokens: 300, maxRetries: 0,
    });
    expect(finishReason).toBe("stop");
    expect(isPerson(object)).toBe(true);
  }, LIMIT_MS);

  test("LangChain: withStructuredOutput (jsonSchema method) on ChatOpenAI", async () => {
    const chat = new ChatOpenAI({ model: "test-model", apiKey: "none", temperature: 0, maxTokens: 300, maxRetries: 0, configuration: { baseURL: `${s.url}/v1` } });
    const structured = chat.withStructuredOutput(Person, { method: "jsonSchema", name: "person" });
    const person = await structured.invoke("A person, please.");
    expect(isPerson(person)).toBe(true);
  }, LIMIT_MS);
});
