/**
 * Tool calls and reasoning over `/v1/chat/completions`, through the official `openai` client,
 * against a server on scripted models (test/helpers/scripted-model.ts: real Qwen2 vocabulary and
 * Qwen2.5 / Qwen3 templates, weights written so that the replies are known: a get_weather call
 * before a tool result and an answer after it; a reasoning then an answer): calls parsed into
 * `tool_calls` with `finish_reason: "tool_calls"`, streamed with their index and the arguments in
 * pieces, the client's stream helper and `runTools` completing a two-step loop, the legacy
 * `functions`, `tool_choice` none, `n`, and reasoning split exactly from content, streamed and not,
 * also through the Anthropic Messages API (thinking blocks) and the Responses API (reasoning items)
 * on the same server; their tool calls are in server-tool-clients.test.ts. The openai client's
 * required, named and streamed calls, its stream helper and runTools are
 * test/fixtures/tool-clients/openai-chat.mjs, run here under Bun (imported) and under Node (one
 * `node openai-chat.mjs URL` process against the same server), with the same checks.
 *
 * The scripted model writes valid arguments by construction, so the ajv checks on it test the
 * plumbing (the arguments arrive whole and parse); the constraint (docs/tools.md) is proved on a
 * random-weight model below, whose calls are valid only because of it. The scripted model follows
 * its script token by token, so where the constraint forces tokens (the canonical `tool`, `_call`
 * of the closing tag, which the script also writes in the opening one) it must be the last
 * thing before the end: the required calls below turn parallel calls off, so the block ends there.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import Anthropic from "@anthropic-ai/sdk";
import Ajv from "ajv";
import OpenAI from "openai";
import { OPENAI_CHAT } from "./fixtures/tool-clients/openai-chat.mjs";
import { resultsUnderNode } from "./helpers/node-clients.ts";
import { THINKING_SCRIPT, WEATHER_SCRIPT, WEATHER_TOOL } from "./helpers/scripted-model.ts";
import { serveScripted, startServer, type TestServer } from "./helpers/serve.ts";
import { sharedPath } from "./helpers/shared.ts";

const LIMIT_MS = 180_000;
const TOOLS: OpenAI.ChatCompletionTool[] = [{ type: "function", function: { ...WEATHER_TOOL, parameters: { ...WEATHER_TOOL.parameters } } }];
const ASK: OpenAI.ChatCompletionMessageParam[] = [{ role: "user", content: "What is the weather in Paris?" }];
const validArguments = new Ajv().compile(WEATHER_TOOL.parameters);

type OpenAIChatResults = { [K in keyof typeof OPENAI_CHAT]: Awaited<ReturnType<(typeof OPENAI_CHAT)[K]>> };

/** What each of the openai client's chat tool-call tests shows (test/fixtures/tool-clients/openai-chat.mjs). */
const OPENAI_CHAT_TESTS: { [K in keyof OpenAIChatResults]: string } = {
  requiredAndNamed: "required and a named function: the same call, finish_reason tool_calls",
  streamedRequired: "streamed: the call's first delta has index 0, its id, type and name; the arguments follow in pieces under index 0; finish_reason tool_calls last",
  streamHelper: "the client's stream helper folds the deltas into the same message",
  runTools: "runTools completes a two-step loop: the call runs the function, its result goes back, the model answers",
};

/** The checks every runtime's results must pass. */
const OPENAI_CHAT_CHECKS: { [K in keyof OpenAIChatResults]: (r: OpenAIChatResults[K]) => void } = {
  requiredAndNamed: (replies) => {
    expect(replies.length).toBe(2);
    for (const r of replies) {
      expect(r.finish).toBe("tool_calls");
      expect(r.content).toBeNull();
      expect(r.calls.length).toBe(1);
      expect(r.calls[0]!.id).toMatch(/^call_[A-Za-z0-9]{24}$/);
      expect(r.calls[0]!.type).toBe("function");
      expect(r.calls[0]!.function.name).toBe("get_weather");
      expect(validArguments(JSON.parse(r.calls[0]!.function.arguments))).toBe(true);
    }
  },
  streamedRequired: ({ finish, content, deltas }) => {
    expect(finish).toBe("tool_calls");
    expect(content).toBe("");
    expect(deltas[0]).toMatchObject({ index: 0, type: "function", function: { name: "get_weather", arguments: "" } });
    expect(deltas[0]!.id).toMatch(/^call_/);
    expect(deltas.slice(1).every((d) => d.index === 0 && d.id === undefined && d.function?.name === undefined)).toBe(true);
    expect(deltas.length).toBeGreaterThan(2);
    expect(deltas.map((d) => d.function?.arguments ?? "").join("")).toBe('{"city":"Paris"}');
  },
  streamHelper: ({ finish, call }) => {
    expect(call).toEqual({ name: "get_weather", arguments: '{"city":"Paris"}' });
    expect(finish).toBe("tool_calls");
  },
  runTools: ({ answer, cities, roles }) => {
    expect(answer).toBe("The weather in Paris is sunny.");
    expect(cities).toEqual(["Paris"]);
    expect(roles).toEqual(["user", "assistant", "tool", "assistant"]);
  },
};

const available = sharedPath("vocab/ggml-vocab-qwen2.gguf") !== null && sharedPath(WEATHER_SCRIPT.template) !== null;

describe.skipIf(!available)("tool calls through the openai client", () => {
  const s = serveScripted(WEATHER_SCRIPT, LIMIT_MS);

  test("auto: the call in message.tool_calls (id, type, name, arguments as JSON text), content null, finish_reason tool_calls", async () => {
    const r = await s.get().client.chat.completions.create({ model: "test-model", messages: ASK, tools: TOOLS });
    const choice = r.choices[0]!;
    expect(choice.finish_reason).toBe("tool_calls");
    expect(choice.message.content).toBeNull();
    const calls = choice.message.tool_calls!;
    expect(calls.length).toBe(1);
    const call = calls[0] as OpenAI.ChatCompletionMessageFunctionToolCall;
    expect(call.id).toMatch(/^call_[A-Za-z0-9]{24}$/);
    expect(call.type).toBe("function");
    expect(call.function).toEqual({ name: "get_weather", arguments: '{"city":"Paris"}' });
    expect(validArguments(JSON.parse(call.function.arguments))).toBe(true);
  }, LIMIT_MS);

  for (const name of Object.keys(OPENAI_CHAT) as (keyof OpenAIChatResults)[]) {
    test(`${name} (${OPENAI_CHAT_TESTS[name]}), under Bun`, async () => {
      (OPENAI_CHAT_CHECKS[name] as (r: unknown) => void)(await OPENAI_CHAT[name](s.get().url));
    }, LIMIT_MS);
  }

  test("the same under Node (node openai-chat.mjs URL)", async () => {
    const results = await resultsUnderNode("openai-chat.mjs", s.get().url, LIMIT_MS);
    for (const name of Object.keys(OPENAI_CHAT) as (keyof OpenAIChatResults)[]) (OPENAI_CHAT_CHECKS[name] as (r: unknown) => void)(results[name]);
  }, LIMIT_MS);

  test("the legacy functions: the call as message.function_call, finish_reason function_call", async () => {
    const body = { model: "test-model", messages: ASK, functions: [{ ...WEATHER_TOOL, parameters: { ...WEATHER_TOOL.parameters } }] };
    const r = await s.get().client.chat.completions.create(body as OpenAI.ChatCompletionCreateParamsNonStreaming);
    const message = r.choices[0]!.message as OpenAI.ChatCompletionMessage & { function_call?: { name: string; arguments: string } };
    expect(r.choices[0]!.finish_reason).toBe("function_call");
    expect(message.function_call).toEqual({ name: "get_weather", arguments: '{"city":"Paris"}' });
    expect(message.tool_calls).toBeUndefined();
  }, LIMIT_MS);

  test("tool_choice none reads no call: the reply's text is the content", async () => {
    const r = await s.get().client.chat.completions.create({ model: "test-model", messages: ASK, tools: TOOLS, tool_choice: "none", temperature: 0 });
    expect(r.choices[0]!.message.tool_calls).toBeUndefined();
    expect(r.choices[0]!.message.content).toBe(WEATHER_SCRIPT.first);
    expect(r.choices[0]!.finish_reason).toBe("stop");
  }, LIMIT_MS);

  test("n samples: each choice has its own call, at index 0 of its own tool_calls, streamed too", async () => {
    const r = await s.get().client.chat.completions.create({ model: "test-model", messages: ASK, tools: TOOLS, n: 2, seed: 3 });
    expect(r.choices.map((c) => (c.message.tool_calls![0] as OpenAI.ChatCompletionMessageFunctionToolCall).function.name)).toEqual(["get_weather", "get_weather"]);
    expect(new Set(r.choices.map((c) => c.message.tool_calls![0]!.id)).size).toBe(2);
    const stream = await s.get().client.chat.completions.create({ model: "test-model", messages: ASK, tools: TOOLS, n: 2, stream: true });
    const names = new Map<number, string[]>();
    for await (const chunk of stream) {
      for (const c of chunk.choices) for (const d of c.delta.tool_calls ?? []) if (d.function?.name !== undefined) names.set(c.index, [...(names.get(c.index) ?? []), `${d.index}:${d.function.name}`]);
    }
    expect([...names.entries()].sort()).toEqual([[0, ["0:get_weather"]], [1, ["0:get_weather"]]]);
  }, LIMIT_MS);

  test("a bad tool or tool message is a 400 naming the field", async () => {
    const fail = async (body: object) => {
      const r = await fetch(`${s.get().url}/v1/chat/completions`, { method: "POST", body: JSON.stringify(body) });
      expect(r.status).toBe(400);
      return ((await r.json()) as { error: { param: string } }).error.param;
    };
    expect(await fail({ messages: ASK, tools: [{ type: "function", function: { name: "a b" } }] })).toBe("tools[0].function.name");
    expect(await fail({ messages: ASK, tools: TOOLS, tool_choice: { type: "function", function: { name: "nope" } } })).toBe("tool_choice");
    expect(await fail({ messages: [...ASK, { role: "tool", content: "x" }] })).toBe("messages[1].tool_call_id");
    expect(await fail({ messages: [...ASK, { role: "assistant", tool_calls: [{ id: "c", type: "function", function: { name: "f", arguments: {} } }] }] })).toBe("messages[1].tool_calls[0].function.arguments");
    expect(await fail({ messages: ASK, tool_choice: "required" })).toBe("tool_choice");
  }, LIMIT_MS);
});

/** Tools a random-weight model can finish a call to: a bounded string, an integer in a range; a function without parameters. */
const RANDOM_TOOLS: OpenAI.ChatCompletionTool[] = [
  {
    type: "function",
    function: {
      name: "get_weather",
      parameters: { type: "object", properties: { city: { type: "string", maxLength: 8 }, days: { type: "integer", minimum: 1, maximum: 7 } }, required: ["city", "days"], additionalProperties: false },
    },
  },
  { type: "function", function: { name: "now", parameters: { type: "object", properties: {}, additionalProperties: false } } },
];
const randomValidators = new Map(RANDOM_TOOLS.map((t) => {
  const f = (t as OpenAI.ChatCompletionFunctionTool).function;
  return [f.name, new Ajv().compile(f.parameters!)];
}));
const randomModel = sharedPath("models/gguf/stories260K.gguf");

describe.skipIf(randomModel === null)("the tool-call constraint through the openai client, on random weights", () => {
  let server: TestServer | undefined;
  beforeAll(async () => {
    server = await startServer(randomModel!);
  }, LIMIT_MS);
  afterAll(async () => {
    await server?.close();
  });
  const validCall = (name: string | undefined, args: string): boolean => randomValidators.get(name ?? "")?.(JSON.parse(args)) === true;

  test("required and a named function: every call's arguments validate against its tool's schema (random weights write them only because of the constraint)", async () => {
    const named = { type: "function", function: { name: "get_weather" } } as const;
    for (const tool_choice of ["required", named] as const) {
      const r = await server!.client.chat.completions.create({
        model: "test-model", messages: ASK, tools: RANDOM_TOOLS, tool_choice, parallel_tool_calls: false, n: 2, temperature: 1, seed: 3, max_tokens: 150,
      });
      for (const choice of r.choices) {
        expect(choice.finish_reason).toBe("tool_calls");
        expect(choice.message.content).toBeNull();
        const calls = choice.message.tool_calls! as OpenAI.ChatCompletionMessageFunctionToolCall[];
        expect(calls.length).toBe(1);
        if (tool_choice === named) expect(calls[0]!.function.name).toBe("get_weather");
        expect(validCall(calls[0]!.function.name, calls[0]!.function.arguments)).toBe(true);
      }
    }
  }, LIMIT_MS);

  test("streamed: the arguments' pieces make arguments that validate, for required and a named function", async () => {
    for (const tool_choice of ["required", { type: "function", function: { name: "get_weather" } }] as const) {
      const stream = await server!.client.chat.completions.create({
        model: "test-model", messages: ASK, tools: RANDOM_TOOLS, tool_choice, parallel_tool_calls: false, temperature: 1, seed: 8, max_tokens: 150, stream: true,
      });
      let name: string | undefined;
      let args = "";
      let finish: string | null = null;
      for await (const chunk of stream) {
        const c = chunk.choices[0];
        if (c === undefined) continue;
        for (const d of c.delta.tool_calls ?? []) {
          expect(d.index).toBe(0);
          name ??= d.function?.name;
          args += d.function?.arguments ?? "";
        }
        if (c.finish_reason !== null) finish = c.finish_reason;
      }
      expect(finish).toBe("tool_calls");
      expect(validCall(name, args)).toBe(true);
    }
  }, LIMIT_MS);
});

describe.skipIf(!available)("reasoning through the openai client", () => {
  const s = serveScripted(THINKING_SCRIPT, LIMIT_MS);
  type Reasoned = { reasoning_content?: string; content?: string | null };
  const REASONING = "\nThe user asks about Paris.\n";
  const CONTENT = "\n\nParis is in France.";

  test("reasoning_content and content split exactly at <think> and </think>, whole and streamed; never reasoning in content", async () => {
    const whole = await s.get().client.chat.completions.create({ model: "test-model", messages: ASK, temperature: 0 });
    const message = whole.choices[0]!.message as Reasoned;
    expect(message.reasoning_content).toBe(REASONING);
    expect(message.content).toBe(CONTENT);
    const stream = await s.get().client.chat.completions.create({ model: "test-model", messages: ASK, temperature: 0, stream: true });
    let reasoning = "";
    let content = "";
    for await (const chunk of stream) {
      const d = (chunk.choices[0]?.delta ?? {}) as Reasoned;
      reasoning += d.reasoning_content ?? "";
      content += d.content ?? "";
      expect(d.content ?? "").not.toContain("think");
    }
    expect(reasoning).toBe(message.reasoning_content!);
    expect(content).toBe(message.content!);
  }, LIMIT_MS);

  test("chat_template_kwargs.enable_thinking false: the template closes the reasoning in the prompt, the reply is all content", async () => {
    const body = { model: "test-model", messages: ASK, temperature: 0, chat_template_kwargs: { enable_thinking: false } };
    const r = await s.get().client.chat.completions.create(body as OpenAI.ChatCompletionCreateParamsNonStreaming);
    const message = r.choices[0]!.message as Reasoned;
    expect(message.reasoning_content).toBeUndefined();
    expect(message.content).toBe("Paris is in France.");
  }, LIMIT_MS);

  test("reasoning_budget: the reasoning ends after that many tokens, </think> forced; 0 closes it at once", async () => {
    // After the forced tag the scripted model is off its script (its tags are its own tokens, not
    // the tokenizer's): what it writes then is content, bounded by max_tokens.
    const reasoned = async (budget: number): Promise<Reasoned & { finish: string }> => {
      const body = { model: "test-model", messages: ASK, temperature: 0, max_tokens: 16, reasoning_budget: budget };
      const choice = (await s.get().client.chat.completions.create(body as OpenAI.ChatCompletionCreateParamsNonStreaming)).choices[0]!;
      return { ...(choice.message as Reasoned), finish: choice.finish_reason };
    };
    const [two, three, none] = [await reasoned(2), await reasoned(3), await reasoned(0)];
    for (const m of [two, three]) {
      expect(REASONING.startsWith(m.reasoning_content!)).toBe(true);
      expect(m.content!.length).toBeGreaterThan(0);
      expect(m.content).not.toContain("think>");
    }
    expect(two.reasoning_content!.length).toBeGreaterThan(1);
    expect(three.reasoning_content!.length).toBeGreaterThan(two.reasoning_content!.length);
    expect(REASONING.length).toBeGreaterThan(three.reasoning_content!.length);
    expect(none.reasoning_content ?? "").toBe("\n");
    expect(none.content!.length).toBeGreaterThan(0);
  }, LIMIT_MS);

  test("Anthropic thinking.budget_tokens: at least 1024 and below max_tokens (else a 400 naming it), enforced as the reasoning budget", async () => {
    const client = new Anthropic({ baseURL: s.get().url, apiKey: "none", maxRetries: 0 });
    const messages: Anthropic.MessageParam[] = [{ role: "user", content: "Where is Paris?" }];
    const r = await client.messages.create({ model: "test-model", max_tokens: 2048, messages, thinking: { type: "enabled", budget_tokens: 1024 } });
    expect(r.content as unknown[]).toEqual([{ type: "thinking", thinking: REASONING, signature: "" }, { type: "text", text: CONTENT }]);
    for (const [max_tokens, budget_tokens] of [[2048, 1023], [1024, 1024], [2048, 1024.5]]) {
      const bad = await fetch(`${s.get().url}/v1/messages`, { method: "POST", body: JSON.stringify({ max_tokens, messages, thinking: { type: "enabled", budget_tokens } }) });
      expect(bad.status).toBe(400);
      expect(((await bad.json()) as { error: { message: string } }).error.message).toContain("thinking.budget_tokens");
    }
  }, LIMIT_MS);

  test("Anthropic: a thinking block, then the text; streamed as a thinking block then a text block; thinking disabled turns it off", async () => {
    const client = new Anthropic({ baseURL: s.get().url, apiKey: "none", maxRetries: 0 });
    const messages: Anthropic.MessageParam[] = [{ role: "user", content: "Where is Paris?" }];
    // This SDK's types have no temperature: the scripted model writes its reply at temperature 1 too.
    const whole = await client.messages.create({ model: "test-model", max_tokens: 64, messages });
    expect(whole.content as unknown[]).toEqual([{ type: "thinking", thinking: REASONING, signature: "" }, { type: "text", text: CONTENT }]);
    const stream = client.messages.stream({ model: "test-model", max_tokens: 64, messages });
    const final = await stream.finalMessage();
    expect(final.content.map((b) => b.type)).toEqual(["thinking", "text"]);
    expect(final.content[1]).toMatchObject({ type: "text", text: CONTENT });
    const off = await client.messages.create({ model: "test-model", max_tokens: 64, messages, thinking: { type: "disabled" } });
    expect(off.content as unknown[]).toEqual([{ type: "text", text: "Paris is in France." }]);
  }, LIMIT_MS);

  test("Responses: a reasoning item with its text, then the message; streamed the same; effort none turns it off", async () => {
    const client = new OpenAI({ baseURL: `${s.get().url}/v1`, apiKey: "none", maxRetries: 0 });
    const whole = await client.responses.create({ model: "test-model", input: "Where is Paris?", temperature: 0 });
    expect(whole.output.map((o) => o.type)).toEqual(["reasoning", "message"]);
    expect((whole.output[0] as OpenAI.Responses.ResponseReasoningItem).content).toEqual([{ type: "reasoning_text", text: REASONING }]);
    expect(whole.output_text).toBe(CONTENT);
    const stream = client.responses.stream({ model: "test-model", input: "Where is Paris?", temperature: 0 });
    const final = await stream.finalResponse();
    expect(final.output.map((o) => o.type)).toEqual(["reasoning", "message"]);
    expect(final.output_text).toBe(CONTENT);
    const off = await client.responses.create({ model: "test-model", input: "Where is Paris?", temperature: 0, reasoning: { effort: "none" } });
    expect(off.output.map((o) => o.type)).toEqual(["message"]);
    expect(off.output_text).toBe("Paris is in France.");
  }, LIMIT_MS);
});
