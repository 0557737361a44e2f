/**
 * A reply cut inside a tool call (max_tokens): in every format, a reply with text
 * and two calls is cut at every character and read whole and a character at a time. Whatever the
 * cut, the call's syntax never reaches `content` (neither the message nor any delta): content is a
 * start of the text before the calls; the calls before the cut come back whole; the cut call is
 * kept, with the arguments so far, once its name is whole, and dropped before (docs/tools.md).
 * Then over HTTP on random-weight models: a forced weather call (rnd-qwen2, Qwen2.5's template) whose
 * max_tokens cuts a second call, streamed and not, on the Chat Completions, Anthropic Messages and
 * Responses APIs; and calls cut at several lengths in harmony (rnd-gptoss, gpt-oss's template) and
 * Qwen3-Coder's XML (rnd-qwen2, Qwen3-Coder's template), tool_choice required and auto.
 */
import { describe, expect, test } from "bun:test";
import { replySetup, type ReplySetup } from "../src/tools/reply-reader.ts";
import { checkTools, type ToolDefinition } from "../src/tools/tool-types.ts";
import { joined, read, type ReadMessage } from "./helpers/reply-read.ts";
import { startServer, type TestServer } from "./helpers/serve.ts";
import { describeShared } from "./helpers/shared.ts";

const TOOLS: ToolDefinition[] = [
  { type: "function", function: { name: "get_weather", parameters: { type: "object", properties: { city: { type: "string" }, days: { type: "integer" } }, required: ["city"] } } },
  { type: "function", function: { name: "python", parameters: { type: "object", properties: { code: { type: "string" } } } } },
];

/** Text of a call's syntax in any format: none of it may be content. */
const SYNTAX = /<tool_call>|<\/tool_call>|"name"|<function=|<\|channel\|>|<\|message|to=functions/;

interface CutCase {
  /** Text of a template that the format chooser reads as the format. */
  template: string;
  /** Content, then the calls. */
  content: string;
  reply: string;
  /** The arguments of each call (all of get_weather). */
  calls: string[];
  /** How a cut call's arguments relate to its whole ones: the text so far, or the whole parameters so far as JSON (XML calls). */
  partial: "prefix" | "json";
  /** The reasoning, for formats that write it first. */
  reasoning?: string;
}

const PARIS = '{"city": "Paris"}';
const OSLO = '{"city": "Oslo"}';
const OSLO_2 = '{"city": "Oslo", "days": 2}';

const CASES: Record<string, CutCase> = {
  "hermes (Qwen2.5)": {
    template: "{{ '<tool_call>' }}", content: "Let me check.", partial: "prefix",
    reply: 'Let me check. <tool_call>\n\t{\r\n "name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n<tool_call>\n\t{\r\n "name": "get_weather", "arguments": {"city": "Oslo", "days": 2}}\n</tool_call>',
    calls: [PARIS, OSLO_2],
  },
  "hermes with reasoning (Qwen3)": {
    template: "<tool_call> <think>", content: "\n\nSure.", partial: "prefix", reasoning: "\nParis or Oslo.\n",
    reply: '<think>\nParis or Oslo.\n</think>\n\nSure.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>',
    calls: [PARIS, OSLO],
  },
  "qwen3-coder (XML)": {
    template: "<function=x><parameter=y>", content: "Checking.", partial: "json",
    reply: "Checking.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n</tool_call>\n<tool_call>\n<function=get_weather>\n<parameter=city>\nOslo\n</parameter>\n<parameter=days>\n2\n</parameter>\n</function>\n</tool_call>",
    calls: [PARIS, OSLO_2],
  },
  "mistral": {
    template: "[TOOL_CALLS]", content: "Ok.", partial: "prefix",
    reply: 'Ok.[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}}, {"name": "get_weather", "arguments": {"city": "Oslo"}}]',
    calls: [PARIS, OSLO],
  },
  "llama3 (bare JSON)": {
    template: "<|start_header_id|>ipython", content: "", partial: "prefix",
    reply: '{"name": "get_weather", "parameters": {"city": "Paris"}}; {"name": "get_weather", "parameters": {"city": "Oslo"}}',
    calls: [PARIS, OSLO],
  },
  "harmony (gpt-oss), recipient in the channel": {
    template: "<|channel|>", content: "", partial: "prefix", reasoning: "Need weather.",
    reply: '<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city": "Paris"}',
    calls: [PARIS],
  },
  "harmony (gpt-oss), recipient in the role": {
    template: "<|channel|>", content: "", partial: "prefix",
    reply: ' to=functions.get_weather<|channel|>commentary json<|message|>{"city": "Paris"}',
    calls: [PARIS],
  },
};

/** Where in `reply` each call's name is whole: the cut positions from which that call must be kept. */
function nameEnds(reply: string, name: string): number[] {
  const ends: number[] = [];
  for (let at = reply.indexOf(name); at >= 0; at = reply.indexOf(name, at + 1)) ends.push(at + name.length + 1);
  return ends;
}

/** Checks a message read from the reply cut at `cut`. */
function checkCut(c: CutCase, message: ReadMessage, cut: number): void {
  const where = `cut at ${cut}: ${JSON.stringify(c.reply.slice(0, cut))}`;
  // Trailing whitespace stays in a reply without calls (reply-reader.ts): only what precedes it is compared.
  expect(c.content.startsWith(message.content.trimEnd()), where).toBe(true);
  expect(message.content, where).not.toMatch(SYNTAX);
  if (c.reasoning !== undefined) expect(c.reasoning.startsWith(message.reasoning), where).toBe(true);
  // A call counts once the character after its name came (the quote, `>`, a space or a token).
  const named = nameEnds(c.reply, "get_weather").filter((end) => end <= cut).length;
  expect(message.toolCalls.length, where).toBe(Math.min(named, c.calls.length));
  message.toolCalls.forEach((got, i) => {
    const whole = c.calls[i]!;
    expect(got.name, where).toBe("get_weather");
    if (i < message.toolCalls.length - 1 || cut === c.reply.length) expect(got.arguments, where).toBe(whole);
    else if (c.partial === "prefix") expect(whole.startsWith(got.arguments), where).toBe(true);
    else expect(Object.entries(JSON.parse(whole))).toEqual(expect.arrayContaining(Object.entries(JSON.parse(got.arguments))));
  });
}

/**
 * Texts the models of these formats write as one token (Qwen's `<tool_call>`, Mistral's
 * `[TOOL_CALLS]`, harmony's): no reply is cut inside one (and a reply ending in a start of one,
 * written as text, is text).
 */
const ONE_TOKEN = ["<tool_call>", "</tool_call>", "<think>", "</think>", "[TOOL_CALLS]", "<|channel|>", "<|message|>", "<|constrain|>", "<|start|>", "<|end|>"];

/** Whether a reply may be cut at `cut`: not inside a one-token text. */
function cuttable(reply: string, cut: number): boolean {
  return !ONE_TOKEN.some((t) => {
    for (let at = reply.indexOf(t); at >= 0 && at < cut; at = reply.indexOf(t, at + 1)) if (cut < at + t.length) return true;
    return false;
  });
}

describe("a reply cut inside a call: kept once its name is whole, dropped before, never content", () => {
  for (const [name, c] of Object.entries(CASES)) {
    test(name, () => {
      const setup: ReplySetup = replySetup(c.template, "", checkTools(TOOLS, "auto", true))!;
      for (let cut = 0; cut <= c.reply.length; cut++) {
        if (!cuttable(c.reply, cut)) continue;
        const text = c.reply.slice(0, cut);
        const whole = read(setup, [text]);
        checkCut(c, whole.message, cut);
        const chars = read(setup, [...text]);
        expect(chars.message).toEqual(whole.message);
        // Each delta too: no streamed piece of content is syntax.
        for (const d of chars.deltas) expect(d.content).not.toMatch(SYNTAX);
        expect(joined(chars.deltas)).toEqual(whole.message);
      }
    });
  }
});

describe("tool_choice required: the reply is all calls, so no cut leaves content", () => {
  for (const [name, c] of Object.entries(CASES)) {
    test(name, () => {
      const setup: ReplySetup = replySetup(c.template, "", checkTools(TOOLS, "required", true))!;
      // Every cut, inside a tag written as text too (a random model writes `<tool_call>` a letter at a time).
      const reply = c.reply.slice(c.reply.indexOf(c.content) + c.content.length);
      for (let cut = 0; cut <= reply.length; cut++) {
        const chars = read(setup, [...reply.slice(0, cut)]);
        expect(chars.message.content, `cut at ${cut}`).toBe("");
        expect(chars.deltas.every((d) => d.content === "")).toBe(true);
      }
    });
  }
});

const WEATHER_TOOL = {
  name: "get_weather", description: "w",
  parameters: { type: "object", properties: { city: { type: "string", maxLength: 20 }, unit: { type: "string", enum: ["c", "f"] } }, required: ["city", "unit"], additionalProperties: false },
};
const CUT_CALL_REQUEST = {
  messages: [{ role: "user", content: "weather in Paris?" }], max_tokens: 64, seed: 1, tool_choice: "required",
  tools: [{ type: "function", function: WEATHER_TOOL }],
};
const LIMIT_MS = 120_000;

/** The JSON of every `data:` line of a server-sent event stream ([DONE] left out). */
function sseEvents(text: string): unknown[] {
  return text.split("\n").filter((l) => l.startsWith("data: ") && l !== "data: [DONE]").map((l) => JSON.parse(l.slice(6)) as unknown);
}

async function post(server: TestServer, path: string, body: unknown): Promise<Response> {
  return fetch(server.url + path, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
}

/** The content a route returned, whole and streamed, and its calls. */
async function routeReplies(server: TestServer, request: typeof CUT_CALL_REQUEST) {
  const chat = (await (await post(server, "/v1/chat/completions", request)).json()) as { choices: { message: { content: string | null; tool_calls?: unknown[] }; finish_reason: string }[] };
  const chatStream = sseEvents(await (await post(server, "/v1/chat/completions", { ...request, stream: true })).text());
  const streamedContent = chatStream.flatMap((e) => ((e as { choices?: { delta?: { content?: string } }[] }).choices ?? []).map((c) => c.delta?.content ?? ""));
  const anthropic = { model: "test-model", max_tokens: request.max_tokens, messages: request.messages, tool_choice: { type: "any" }, tools: [{ name: WEATHER_TOOL.name, description: WEATHER_TOOL.description, input_schema: WEATHER_TOOL.parameters }] };
  const messages = (await (await post(server, "/v1/messages", anthropic)).json()) as { content: { type: string; text?: string }[] };
  const messagesStream = sseEvents(await (await post(server, "/v1/messages", { ...anthropic, stream: true })).text());
  const responsesBody = { model: "test-model", input: "weather in Paris?", max_output_tokens: request.max_tokens, tool_choice: "required", tools: [{ type: "function", ...WEATHER_TOOL }] };
  const responses = (await (await post(server, "/v1/responses", responsesBody)).json()) as { output: { type: string; content?: { text: string }[] }[] };
  const responsesStream = sseEvents(await (await post(server, "/v1/responses", { ...responsesBody, stream: true })).text());
  return {
    chat,
    texts: [
      chat.choices[0]!.message.content ?? "",
      ...streamedContent,
      ...messages.content.filter((b) => b.type === "text").map((b) => b.text ?? ""),
      ...messagesStream.map((e) => ((e as { delta?: { type?: string; text?: string } }).delta?.type === "text_delta" ? (e as { delta: { text: string } }).delta.text : "")),
      ...responses.output.filter((o) => o.type === "message").flatMap((o) => (o.content ?? []).map((p) => p.text)),
      ...responsesStream.map((e) => ((e as { type?: string }).type === "response.output_text.delta" ? (e as { delta: string }).delta : "")),
    ],
  };
}

describeShared("a call cut by max_tokens over HTTP (rnd-qwen2, Qwen2.5's template)", ["models/gguf/rnd-qwen2-Q5_K_M.gguf"], ([model]) => {
  test("a forced call cut by max_tokens: the parsed call comes back, the cut one's syntax in no content, whole or streamed, on every API", async () => {
    const server = await startServer(model!);
    try {
      const { chat, texts } = await routeReplies(server, CUT_CALL_REQUEST);
      expect(chat.choices[0]!.finish_reason).toBe("length");
      expect(chat.choices[0]!.message.tool_calls?.length).toBeGreaterThan(0);
      for (const t of texts) expect(t).not.toMatch(SYNTAX);
      expect(chat.choices[0]!.message.content).toBeNull();
    } finally {
      await server.close();
    }
  }, LIMIT_MS);
});

/** Requests cut at several lengths, whole and streamed: no content or delta holds call syntax. */
async function sweepCuts(server: TestServer, toolChoice: string): Promise<number> {
  const tool = { type: "function", function: { name: "get_time", description: "t", parameters: { type: "object", properties: { zone: { type: "string", maxLength: 12 } }, required: ["zone"] } } };
  let calls = 0;
  for (const maxTokens of [2, 6, 10, 14, 17, 20, 26, 40]) {
    const body = { messages: [{ role: "user", content: "time?" }], max_tokens: maxTokens, seed: 1, tool_choice: toolChoice, tools: [tool] };
    const whole = (await (await post(server, "/v1/chat/completions", body)).json()) as { choices: { message: { content: string | null; tool_calls?: unknown[] } }[] };
    const message = whole.choices[0]!.message;
    calls += message.tool_calls?.length ?? 0;
    expect([maxTokens, message.content ?? ""]).not.toEqual([maxTokens, expect.stringMatching(SYNTAX)]);
    const events = sseEvents(await (await post(server, "/v1/chat/completions", { ...body, stream: true })).text());
    for (const e of events) for (const c of (e as { choices?: { delta?: { content?: string } }[] }).choices ?? []) expect(c.delta?.content ?? "").not.toMatch(SYNTAX);
  }
  return calls;
}

describeShared("calls cut by max_tokens over HTTP: harmony (rnd-gptoss) and Qwen3-Coder (rnd-qwen2)", [
  "models/gguf/rnd-gptoss-MXFP4_MOE.gguf", "templates/openai-gpt-oss-120b.jinja", "models/gguf/rnd-qwen2-Q5_K_M.gguf", "templates/Qwen3-Coder.jinja",
], ([gptoss, harmonyTemplate, qwen2, coderTemplate]) => {
  for (const [name, model, template] of [["harmony", gptoss!, harmonyTemplate!], ["qwen3-coder", qwen2!, coderTemplate!]] as const) {
    test(`${name}: required and auto, every cut: the call's syntax in no content or delta`, async () => {
      const server = await startServer(model, {}, {}, template);
      try {
        expect(await sweepCuts(server, "required")).toBeGreaterThan(0);
        await sweepCuts(server, "auto");
      } finally {
        await server.close();
      }
    }, LIMIT_MS);
  }
});
