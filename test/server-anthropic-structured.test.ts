/**
 * Anthropic's structured output over `POST /v1/messages`: `output_config.format`
 * `{"type": "json_schema", "schema"}` (what the Anthropic SDK's `messages.parse` and LangChain's
 * `ChatAnthropic.withStructuredOutput` send) and the older beta's `output_format` hold the reply's
 * text to the schema, whole and streamed; a bad shape or schema is a 400 naming the field; with
 * thinking, the reasoning is written first and the schema holds from its end. LangChain's
 * withStructuredOutput and the SDK's parse helpers (test/fixtures/tool-clients/anthropic-structured.mjs)
 * get objects that follow the schema, under Bun and under Node.
 *
 * On the random qwen2 model (the text is what the mask lets through; checked by ajv, never by its
 * text) and on the scripted thinking model (test/helpers/scripted-model.ts), its reasoning bounded
 * by `thinking.budget_tokens`.
 */
import { describe, expect, test } from "bun:test";
import Ajv from "ajv";
import Anthropic from "@anthropic-ai/sdk";
import { ANTHROPIC_STRUCTURED, SCHEMAS, VERDICT } from "./fixtures/tool-clients/anthropic-structured.mjs";
import { resultsUnderNode } from "./helpers/node-clients.ts";
import { describeShared, sharedPath } from "./helpers/shared.ts";
import { THINKING_SCRIPT } from "./helpers/scripted-model.ts";
import { serveForSuite, serveScripted, type TestServer } from "./helpers/serve.ts";

const CHAT_MODEL = "models/gguf/rnd-qwen2-Q5_K_M.gguf";
const LIMIT_MS = 180_000;

const validVerdict = new Ajv().compile(VERDICT);
/** Whether `parsed` follows the schema the client `name` was given. */
const followsSchema = (name: keyof typeof SCHEMAS, parsed: unknown) => new Ajv().validate(SCHEMAS[name], parsed);

const MESSAGES: Anthropic.MessageParam[] = [{ role: "user", content: "Who is it?" }];

/** The text of a reply's text blocks. */
function textOf(m: Anthropic.Message): string {
  return m.content.map((b) => (b.type === "text" ? b.text : "")).join("");
}

interface ErrorAnswer {
  status: number;
  message: string;
}

async function postMessages(url: string, body: Record<string, unknown>): Promise<ErrorAnswer> {
  const r = await fetch(`${url}/v1/messages`, { method: "POST", body: JSON.stringify({ model: "test-model", max_tokens: 200, messages: MESSAGES, ...body }) });
  const json = (await r.json()) as { error?: { message: string } };
  return { status: r.status, message: json.error?.message ?? "" };
}

describeShared("Anthropic structured output (output_config.format, output_format)", [CHAT_MODEL], ([model]) => {
  let s!: TestServer;
  serveForSuite((started) => (s = started), LIMIT_MS, model!);
  const client = () => new Anthropic({ baseURL: s.url, apiKey: "none", maxRetries: 0 });

  test("output_config.format holds the text to the schema, whole and streamed; ended by the schema, end_turn", async () => {
    const format = { type: "json_schema" as const, schema: VERDICT };
    // This SDK's types have no temperature: the replies are sampled at 1, each checked on its own.
    const whole = await client().messages.create({ model: "test-model", max_tokens: 300, messages: MESSAGES, output_config: { format } });
    expect(validVerdict(JSON.parse(textOf(whole)))).toBe(true);
    expect(whole.stop_reason).toBe("end_turn");
    const streamed = await client().messages.stream({ model: "test-model", max_tokens: 300, messages: MESSAGES, output_config: { format } }).finalMessage();
    expect(validVerdict(JSON.parse(textOf(streamed)))).toBe(true);
    expect(streamed.stop_reason).toBe("end_turn");
  }, LIMIT_MS);

  test("the beta's output_format (sent as it is, as older SDKs and LangChain sent it) holds the text the same", async () => {
    const r = await fetch(`${s.url}/v1/messages`, {
      method: "POST",
      headers: { "anthropic-beta": "structured-outputs-2025-11-13" },
      body: JSON.stringify({ model: "test-model", max_tokens: 300, temperature: 0, messages: MESSAGES, output_format: { type: "json_schema", schema: VERDICT } }),
    });
    expect(r.status).toBe(200);
    const reply = (await r.json()) as Anthropic.Message;
    expect(validVerdict(JSON.parse(textOf(reply)))).toBe(true);
  }, LIMIT_MS);

  for (const name of Object.keys(ANTHROPIC_STRUCTURED) as (keyof typeof ANTHROPIC_STRUCTURED)[]) {
    test(`${name} (test/fixtures/tool-clients/anthropic-structured.mjs), under Bun: every object it parsed follows the schema`, async () => {
      const parsed = await ANTHROPIC_STRUCTURED[name](s.url);
      expect(parsed.length).toBe(2);
      for (const p of parsed) expect({ p, valid: followsSchema(name, p) }).toEqual({ p, valid: true });
    }, LIMIT_MS);
  }

  test("the same clients under Node (node anthropic-structured.mjs URL)", async () => {
    const results = await resultsUnderNode("anthropic-structured.mjs", s.url, LIMIT_MS);
    for (const name of Object.keys(ANTHROPIC_STRUCTURED) as (keyof typeof SCHEMAS)[]) {
      const parsed = results[name] as unknown[];
      expect(parsed.length).toBe(2);
      for (const p of parsed) expect({ p, valid: followsSchema(name, p) }).toEqual({ p, valid: true });
    }
  }, LIMIT_MS);

  test("bad shapes and schemas are 400s naming the field", async () => {
    const format = { type: "json_schema", schema: VERDICT };
    const cases: [Record<string, unknown>, string][] = [
      [{ output_config: { format: { type: "json", schema: VERDICT } } }, "output_config.format.type"],
      [{ output_config: { format: { type: "json_schema" } } }, "output_config.format.schema"],
      [{ output_config: { format: { type: "json_schema", schema: "{}" } } }, "output_config.format.schema"],
      [{ output_config: { format: { ...format, name: "x" } } }, "output_config.format.name"],
      [{ output_config: { format, task_budget: { total: 5 } } }, "output_config.task_budget"],
      [{ output_config: { effort: "extreme" } }, "output_config.effort"],
      [{ output_config: "json" }, "output_config"],
      [{ output_format: format, output_config: { format } }, "output_format"],
      [{ output_format: { type: "json_schema", schema: { type: "object", properties: { a: { type: "strin" } } } } }, "output_format.schema"],
      [{ output_config: { format: { type: "json_schema", schema: { type: "string", pattern: "(" } } } }, "output_config.format.schema"],
    ];
    for (const [body, field] of cases) {
      const answer = await postMessages(s.url, body);
      expect({ body, status: answer.status }).toEqual({ body, status: 400 });
      expect(answer.message).toContain(field);
    }
    // Null and effort alone ask for nothing: plain text.
    for (const body of [{ output_config: null, output_format: null }, { output_config: { format: null, effort: "low" } }]) {
      expect((await postMessages(s.url, { ...body, max_tokens: 2 })).status).toBe(200);
    }
  }, LIMIT_MS);
});

const thinkingAvailable = sharedPath("vocab/ggml-vocab-qwen2.gguf") !== null && sharedPath(THINKING_SCRIPT.template) !== null;

describe.skipIf(!thinkingAvailable)("Anthropic structured output after thinking", () => {
  const s = serveScripted(THINKING_SCRIPT, LIMIT_MS);

  // The scripted model writes `<think>` in tokens of its own, not the tokenizer's, and the gate
  // offers only the tokenizer's spelling of the tag: from there it is off its script, and its
  // reasoning (random text, which never writes `</think>`) ends at the budget, where the tag is
  // forced. The text after it must follow the schema.
  test("the reasoning comes first, ended by its budget; the text after it follows the schema, whole and streamed", async () => {
    const client = new Anthropic({ baseURL: s.get().url, apiKey: "none", maxRetries: 0 });
    const format = { type: "json_schema" as const, schema: VERDICT };
    const body = { model: "test-model", max_tokens: 1500, messages: MESSAGES, thinking: { type: "enabled" as const, budget_tokens: 1024 }, output_config: { format } };
    const whole = await client.messages.create(body);
    const streamed = await client.messages.stream(body).finalMessage();
    for (const reply of [whole, streamed]) {
      expect(reply.content.map((b) => b.type)).toEqual(["thinking", "text"]);
      expect(validVerdict(JSON.parse(textOf(reply)))).toBe(true);
      expect(reply.stop_reason).toBe("end_turn");
    }
  }, LIMIT_MS);
});
