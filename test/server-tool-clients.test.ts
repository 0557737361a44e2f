/**
 * Agent clients against a server started here, on the scripted weather model
 * (test/helpers/scripted-model.ts: real Qwen2 vocabulary and Qwen2.5 template, weights written so
 * that it calls get_weather for Paris before a tool result and answers "The weather in Paris is
 * sunny." after one): the Vercel AI SDK's generateText with tools over several steps, LangChain's
 * bindTools, the Anthropic SDK's messages.create (a tool use, then its result) and messages.stream,
 * and the Responses API through the openai client (a function call, its output sent back, and the
 * stream helper). The clients are test/fixtures/tool-clients/clients.mjs, run under Bun (imported
 * here) and under Node (`node clients.mjs URL` as a child process), with the same checks.
 *
 * Also the two APIs' own shapes: Anthropic's stop reasons and error objects, its token count; the
 * Responses API's refusals of stored state. Their reasoning is in server-tools.test.ts (its thinking
 * model's server).
 */
import { describe, expect, test } from "bun:test";
import Anthropic from "@anthropic-ai/sdk";
import OpenAI from "openai";
import { CLIENTS } from "./fixtures/tool-clients/clients.mjs";
import { resultsUnderNode } from "./helpers/node-clients.ts";
import { WEATHER_SCRIPT } from "./helpers/scripted-model.ts";
import { serveScripted } from "./helpers/serve.ts";
import { sharedPath } from "./helpers/shared.ts";

const LIMIT_MS = 180_000;
const ANSWER = WEATHER_SCRIPT.afterResult;
const available = sharedPath("vocab/ggml-vocab-qwen2.gguf") !== null && sharedPath(WEATHER_SCRIPT.template) !== null;

type Results = { [K in keyof typeof CLIENTS]: Awaited<ReturnType<(typeof CLIENTS)[K]>> };

/** The checks every runtime's results must pass. */
const CHECKS: { [K in keyof Results]: (r: Results[K]) => void } = {
  aiSdkGenerateText: (r) => {
    expect(r.text).toBe(ANSWER);
    expect(r.steps).toBe(2);
    expect(r.cities).toEqual(["Paris"]);
    expect(r.firstFinish).toBe("tool-calls");
    expect(r.toolCalls).toEqual([{ name: "get_weather", input: { city: "Paris" } }]);
  },
  langchainBindTools: (r) => {
    expect(r.toolCalls).toEqual([{ name: "get_weather", args: { city: "Paris" } }]);
  },
  anthropicCreate: (r) => {
    expect(r.firstStop).toBe("tool_use");
    expect(r.toolUse.name).toBe("get_weather");
    expect(r.toolUse.input).toEqual({ city: "Paris" });
    expect(r.toolUse.id).toMatch(/^toolu_/);
    expect(r.secondStop).toBe("end_turn");
    expect(r.answer).toBe(ANSWER);
    // The second request's prompt begins with the first's: the prefix cache served it.
    expect(r.usage.cache_read_input_tokens).toBeGreaterThan(0);
  },
  anthropicStream: (r) => {
    expect(r.stop).toBe("tool_use");
    expect(r.toolUse).toEqual({ name: "get_weather", input: { city: "Paris" } });
    expect(r.partialJson).toBe('{"city":"Paris"}');
    expect(r.events).toEqual(["message_start", "content_block_start", "content_block_delta", "content_block_stop", "message_delta", "message_stop"]);
  },
  responsesApi: (r) => {
    expect(r.firstStatus).toBe("completed");
    expect(r.call).toMatchObject({ name: "get_weather", arguments: '{"city":"Paris"}' });
    expect(r.call.callId).toMatch(/^call_/);
    expect(r.answer).toBe(ANSWER);
    expect(r.streamedCall).toEqual({ name: "get_weather", arguments: '{"city":"Paris"}' });
    expect(r.events).toEqual([
      "response.created", "response.in_progress", "response.output_item.added", "response.function_call_arguments.delta",
      "response.function_call_arguments.done", "response.output_item.done", "response.completed",
    ]);
  },
};

describe.skipIf(!available)("agent clients against the server", () => {
  const s = serveScripted(WEATHER_SCRIPT, LIMIT_MS);

  for (const name of Object.keys(CLIENTS) as (keyof Results)[]) {
    test(`${name}, under Bun`, async () => {
      const check = CHECKS[name] as (r: Results[typeof name]) => void;
      check(await CLIENTS[name](s.get().url) as Results[typeof name]);
    }, LIMIT_MS);
  }

  test("every client under Node (node clients.mjs URL)", async () => {
    const results = await resultsUnderNode("clients.mjs", s.get().url, LIMIT_MS);
    for (const name of Object.keys(CLIENTS) as (keyof Results)[]) (CHECKS[name] as (r: unknown) => void)(results[name]);
  }, LIMIT_MS);

  test("Anthropic: errors have Anthropic's shape and status; the SDK raises its typed error", async () => {
    const r = await fetch(`${s.get().url}/v1/messages`, { method: "POST", body: JSON.stringify({ model: "test-model", messages: [{ role: "user", content: "hi" }] }) });
    expect(r.status).toBe(400);
    expect(await r.json()).toEqual({ type: "error", error: { type: "invalid_request_error", message: "'max_tokens' is required" } });
    const client = new Anthropic({ baseURL: s.get().url, apiKey: "none", maxRetries: 0 });
    const bad = await client.messages.create({ model: "other-model", max_tokens: 5, messages: [{ role: "user", content: "hi" }] }).catch((e: unknown) => e);
    expect(bad).toBeInstanceOf(Anthropic.NotFoundError);
    const image = await fetch(`${s.get().url}/v1/messages`, {
      method: "POST", body: JSON.stringify({ max_tokens: 5, messages: [{ role: "user", content: [{ type: "image", source: {} }] }] }),
    });
    expect(((await image.json()) as { error: { message: string } }).error.message).toContain("messages[0].content[0].type");
    const unnamed = await fetch(`${s.get().url}/v1/messages`, {
      method: "POST", body: JSON.stringify({ max_tokens: 5, messages: [{ role: "user", content: "hi" }], tools: [{ name: "f", input_schema: { type: "object" } }], tool_choice: { type: "tool" } }),
    });
    expect(((await unnamed.json()) as { error: { message: string } }).error.message).toBe("'tool_choice.name' must be the name of one of the tools");
  }, LIMIT_MS);

  test("Anthropic: count_tokens counts the prompt a message would have; a stop sequence is named in the stop reason", async () => {
    const client = new Anthropic({ baseURL: s.get().url, apiKey: "none", maxRetries: 0 });
    const messages: Anthropic.MessageParam[] = [{ role: "user", content: "What is the weather in Paris?" }];
    const count = await client.messages.countTokens({ model: "test-model", messages });
    const reply = await client.messages.create({ model: "test-model", max_tokens: 64, messages });
    expect(count.input_tokens).toBe(reply.usage.input_tokens + (reply.usage.cache_read_input_tokens ?? 0));
    const stopped = await client.messages.create({ model: "test-model", max_tokens: 64, messages, stop_sequences: ["Paris"] });
    expect(stopped.stop_reason).toBe("stop_sequence");
    expect(stopped.stop_sequence).toBe("Paris");
    const short = await client.messages.create({ model: "test-model", max_tokens: 2, messages });
    expect(short.stop_reason).toBe("max_tokens");
  }, LIMIT_MS);

  test("Responses: stored state is refused with a 400 naming the field; a stored response is a 404", async () => {
    const client = new OpenAI({ baseURL: `${s.get().url}/v1`, apiKey: "none", maxRetries: 0 });
    const previous = await client.responses.create({ model: "test-model", input: "hi", previous_response_id: "resp_1" }).catch((e: unknown) => e);
    expect(previous).toBeInstanceOf(OpenAI.BadRequestError);
    expect((previous as InstanceType<typeof OpenAI.BadRequestError>).param).toBe("previous_response_id");
    expect(await client.responses.retrieve("resp_1").catch((e: unknown) => e)).toBeInstanceOf(OpenAI.NotFoundError);
    const builtin = await client.responses.create({ model: "test-model", input: "hi", tools: [{ type: "web_search" }] }).catch((e: unknown) => e);
    expect((builtin as InstanceType<typeof OpenAI.BadRequestError>).param).toBe("tools[0].type");
    // Flat tools: a field at fault is named as the body has it, not as chat completions nest it.
    const tool = { type: "function", name: "get_weather", parameters: { type: "object" } };
    const badTools: [Record<string, unknown>, string][] = [
      [{ tools: [{ ...tool, name: "has space" }] }, "tools[0].name"],
      [{ tools: [tool], tool_choice: { type: "function" } }, "tool_choice.name"],
      [{ tools: [tool], tool_choice: { type: "function", name: "other" } }, "tool_choice"],
    ];
    for (const [fields, param] of badTools) {
      const r = await fetch(`${s.get().url}/v1/responses`, { method: "POST", body: JSON.stringify({ input: "hi", ...fields }) });
      expect({ fields, param: ((await r.json()) as { error: { param: string } }).error.param }).toEqual({ fields, param });
    }
    const unknownType = await client.responses.create({ model: "test-model", input: "hi", text: { format: { type: "json_schema", name: "w", schema: { type: "strnig" } } } }).catch((e: unknown) => e);
    expect((unknownType as InstanceType<typeof OpenAI.BadRequestError>).param).toBe("text.format.schema");
    const short = await client.responses.create({ model: "test-model", input: "hi", max_output_tokens: 2 });
    expect(short.status).toBe("incomplete");
    expect(short.incomplete_details).toEqual({ reason: "max_output_tokens" });
  }, LIMIT_MS);

  test("Responses: text.format json_schema holds the output to the schema (the structured-output engine) and is echoed", async () => {
    // The scripted model has no preference among the schema's tokens: greedy, it writes a value and then whitespace up to the grammar's limit.
    const client = new OpenAI({ baseURL: `${s.get().url}/v1`, apiKey: "none", maxRetries: 0 });
    const format = { type: "json_schema" as const, name: "forecast", strict: true, schema: { enum: ["sunny", "rainy"] } };
    const r = await client.responses.create({ model: "test-model", input: "What is the weather in Paris?", text: { format }, temperature: 0 });
    expect(r.status).toBe("completed");
    expect(["sunny", "rainy"]).toContain(JSON.parse(r.output_text));
    expect(r.text?.format).toEqual(format);
  }, LIMIT_MS);
});
