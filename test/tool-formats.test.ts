/**
 * Tool-call formats and reasoning, read from known reply texts (src/tools/): for each format a
 * reply with a call, two calls in one reply, text before a call, a call the reply breaks off, and
 * every reply read again split at every character boundary and fed a character at a time, which
 * must give the same message (a streamed reply always agrees with the same reply whole) and the
 * same deltas joined. Reasoning splits exactly at `<think>`/`</think>`, also when the prompt opened
 * it; gpt-oss's harmony channels. The format chosen from each shared template, and the grammar
 * hook: every format's call syntax (call-syntax.ts) writes text its own parser reads back as the
 * same call.
 *
 * Sources of the reply texts: the formats as the families' templates write them in
 * ../shared/templates (what the models are trained to write), and llama.cpp's parser tests
 * (tests/test-chat.cpp: `{"name": "special_function", "parameters": {"arg1": 1}}` for Llama 3.x,
 * `[TOOL_CALLS][{"name": "special_function", "arguments": {"arg1": 1}, "id": "123456789"}]` for
 * Mistral Nemo, `<tool_call>\n{"name": "special_function", "arguments": {"arg1": 1}}\n</tool_call>`
 * for Hermes).
 */
import { describe, expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { jsonText } from "../src/tools/qwen3-coder.ts";
import { replyCallSyntax, replySetup, type ReplySetup } from "../src/tools/reply-reader.ts";
import { toolCallFormat } from "../src/tools/tool-format.ts";
import { checkTools, type CheckedTools, type ToolChoice, type ToolDefinition } from "../src/tools/tool-types.ts";
import { joined, read } from "./helpers/reply-read.ts";
import { SHARED_DIR } from "./helpers/shared.ts";
import { describeShared } from "./helpers/shared.ts";

const TOOLS: ToolDefinition[] = [
  { type: "function", function: { name: "get_weather", description: "The weather in a city.", parameters: { type: "object", properties: { city: { type: "string" }, days: { type: "integer" } }, required: ["city"] } } },
  { type: "function", function: { name: "special_function", parameters: { type: "object", properties: { arg1: { type: "integer" } } } } },
  { type: "function", function: { name: "python", parameters: { type: "object", properties: { code: { type: "string" } } } } },
];

function tools(choice: ToolChoice = "auto", parallel = true): CheckedTools {
  return checkTools(TOOLS, choice, parallel)!;
}

/** A setup for a template that writes `marker` (the format chooser reads it), with tools. */
function setupFor(marker: string, opts: { tools?: CheckedTools | null; tail?: string } = {}): ReplySetup {
  return replySetup(marker, opts.tail ?? "", opts.tools === undefined ? tools() : opts.tools)!;
}

const HERMES = "{{ '<tool_call>' }}";
const LLAMA3 = "<|start_header_id|>ipython";
const MISTRAL = "[TOOL_CALLS]";
const CODER = "<function=x><parameter=y>";
const HARMONY = "<|channel|>";
const QWEN3 = "<tool_call> <think>";

/**
 * Reads `text` whole, split at every boundary into two pieces, and a character at a time: the
 * message is the same each time, and equals its deltas joined.
 */
function readEveryWay(setup: ReplySetup, text: string) {
  const whole = read(setup, [text]);
  expect(joined(whole.deltas)).toEqual(whole.message);
  const chars = read(setup, [...text]);
  expect(chars.message).toEqual(whole.message);
  expect(joined(chars.deltas)).toEqual(whole.message);
  for (let i = 1; i < text.length; i++) {
    const two = read(setup, [text.slice(0, i), text.slice(i)]);
    expect(two.message).toEqual(whole.message);
  }
  return whole.message;
}

const call = (name: string, args: string) => ({ name, arguments: args });

describe("Hermes <tool_call> (Qwen2.5, Qwen3, Hermes 3)", () => {
  const setup = setupFor(HERMES);

  test("one call, as llama.cpp's test writes it: the arguments are the model's JSON text", () => {
    const m = readEveryWay(setup, '<tool_call>\n{"name": "special_function", "arguments": {"arg1": 1}}\n</tool_call>');
    expect(m).toEqual({ content: "", reasoning: "", toolCalls: [call("special_function", '{"arg1": 1}')] });
  });

  test("text before a call, two calls in one reply (each its own index), keys in either order, parameters as a name for arguments", () => {
    const text = 'Let me check.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}\n</tool_call>\n' +
      '<tool_call>\n{"arguments": {"city": "Tokyo"}, "name": "get_weather"}\n</tool_call>';
    const m = readEveryWay(setup, text);
    expect(m).toEqual({ content: "Let me check.", reasoning: "", toolCalls: [call("get_weather", '{"city": "Paris", "days": 2}'), call("get_weather", '{"city": "Tokyo"}')] });
  });

  test("the arguments stream in pieces, the name comes first with the call's id", () => {
    const { deltas, ids } = read(setup, ['<tool_call>\n{"name": "get_weather", "arg', 'uments": {"ci', 'ty": "Par', 'is"}}\n</tool_call>']);
    expect(deltas.map((d) => d.toolCalls)).toEqual([
      [{ index: 0, id: ids[0], name: "get_weather", arguments: "" }],
      [{ index: 0, arguments: '{"ci' }],
      [{ index: 0, arguments: 'ty": "Par' }],
      [{ index: 0, arguments: 'is"}' }],
      [],
    ]);
    expect(ids[0]).toMatch(/^call_[A-Za-z0-9]{24}$/);
  });

  test("arguments written as a JSON string holding an object are decoded; a call without arguments gets {}", () => {
    const m = readEveryWay(setup, '<tool_call>{"name": "get_weather", "arguments": "{\\"city\\": \\"Oslo\\"}"}</tool_call><tool_call>{"name": "special_function"}</tool_call>');
    expect(m.toolCalls).toEqual([call("get_weather", '{"city": "Oslo"}'), call("special_function", "{}")]);
  });

  test("a tag around no call object stays text; text after the calls is content", () => {
    expect(readEveryWay(setup, "I write <tool_call> tags in prose.")).toEqual({ content: "I write <tool_call> tags in prose.", reasoning: "", toolCalls: [] });
    expect(readEveryWay(setup, '<tool_call>{"nam": 1}</tool_call> ok')).toEqual({ content: '<tool_call>{"nam": 1}</tool_call> ok', reasoning: "", toolCalls: [] });
    const after = readEveryWay(setup, '<tool_call>{"name": "get_weather", "arguments": {}}</tool_call>Done.');
    expect(after).toEqual({ content: "Done.", reasoning: "", toolCalls: [call("get_weather", "{}")] });
  });

  test("a reply cut off inside a call (max_tokens) keeps the call with the arguments so far; one cut before the name is dropped", () => {
    expect(readEveryWay(setup, '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Pa').toolCalls).toEqual([call("get_weather", '{"city": "Pa')]);
    expect(readEveryWay(setup, '<tool_call>\n{"name": "get_w')).toEqual({ content: "", reasoning: "", toolCalls: [] });
  });

  test("parallel_tool_calls false keeps the first call only", () => {
    const m = readEveryWay(setupFor(HERMES, { tools: tools("auto", false) }), '<tool_call>{"name": "get_weather", "arguments": {"city": "A"}}</tool_call>\n<tool_call>{"name": "get_weather", "arguments": {"city": "B"}}</tool_call>');
    expect(m.toolCalls).toEqual([call("get_weather", '{"city": "A"}')]);
  });

  test("tool_choice none reads no calls: without reasoning the reply needs no reading at all", () => {
    expect(replySetup(HERMES, "", tools("none"))).toBeNull();
    expect(replySetup(HERMES, "", null)).toBeNull();
  });
});

describe("Llama 3.x JSON calls", () => {
  const setup = setupFor(LLAMA3);

  test("llama.cpp's vector: the reply is the call, with parameters", () => {
    expect(readEveryWay(setup, '{"name": "special_function", "parameters": {"arg1": 1}}')).toEqual({ content: "", reasoning: "", toolCalls: [call("special_function", '{"arg1": 1}')] });
  });

  test("after <|python_tag|>, a JSON call or code for the python tool; two calls separated by ;", () => {
    expect(readEveryWay(setup, '<|python_tag|>{"name": "get_weather", "parameters": {"city": "Rome"}}').toolCalls).toEqual([call("get_weather", '{"city": "Rome"}')]);
    expect(readEveryWay(setup, '<|python_tag|>print("hi")\nx = 1').toolCalls).toEqual([call("python", '{"code": "print(\\"hi\\")\\nx = 1"}')]);
    expect(JSON.parse(read(setup, ['<|python_tag|>print("hi")']).message.toolCalls[0]!.arguments)).toEqual({ code: 'print("hi")' });
    const two = readEveryWay(setup, '{"name": "get_weather", "parameters": {"city": "A"}}; {"name": "get_weather", "parameters": {"city": "B"}}');
    expect(two.toolCalls).toEqual([call("get_weather", '{"city": "A"}'), call("get_weather", '{"city": "B"}')]);
  });

  test("JSON whose name is no tool stays text (llama.cpp's test: unknown_function), and so does other JSON", () => {
    const unknown = '{"name": "unknown_function", "arguments": {"arg1": 1}}';
    expect(readEveryWay(setup, unknown)).toEqual({ content: unknown, reasoning: "", toolCalls: [] });
    expect(readEveryWay(setup, 'The answer is {"a": 1} and {"b": {"c": 2}}.').content).toBe('The answer is {"a": 1} and {"b": {"c": 2}}.');
  });

  test("text before a call is content", () => {
    expect(readEveryWay(setup, 'Sure: {"name": "get_weather", "parameters": {"city": "Lima"}}')).toEqual({ content: "Sure:", reasoning: "", toolCalls: [call("get_weather", '{"city": "Lima"}')] });
  });
});

describe("Mistral [TOOL_CALLS]", () => {
  const setup = setupFor(MISTRAL);

  test("llama.cpp's Nemo vector, with the model's id: a 9-character id of our own", () => {
    const { message, ids } = read(setup, ['[TOOL_CALLS][{"name": "special_function", "arguments": {"arg1": 1}, "id": "123456789"}]']);
    expect(message.toolCalls).toEqual([call("special_function", '{"arg1": 1}')]);
    expect(ids[0]).toMatch(/^[A-Za-z0-9]{9}$/);
  });

  test("two calls in the array, text before, every split", () => {
    const m = readEveryWay(setup, 'Checking.[TOOL_CALLS] [{"name": "get_weather", "arguments": {"city": "A"}}, {"name": "special_function", "arguments": {"arg1": 2}}]');
    expect(m).toEqual({ content: "Checking.", reasoning: "", toolCalls: [call("get_weather", '{"city": "A"}'), call("special_function", '{"arg1": 2}')] });
  });

  test("a single object without the array; no calls after the token is text", () => {
    expect(readEveryWay(setup, '[TOOL_CALLS]{"name": "get_weather", "arguments": {"city": "A"}}').toolCalls).toEqual([call("get_weather", '{"city": "A"}')]);
    expect(readEveryWay(setup, "[TOOL_CALLS] nothing")).toEqual({ content: "[TOOL_CALLS] nothing", reasoning: "", toolCalls: [] });
  });
});

describe("Qwen3-Coder XML", () => {
  const setup = setupFor(CODER);

  test("parameters become JSON by the tool's schema (a string stays a string, an integer is read), a parameter at a time", () => {
    const text = "I'll check.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nNew York\n</parameter>\n<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>";
    const m = readEveryWay(setup, text);
    expect(m).toEqual({ content: "I'll check.", reasoning: "", toolCalls: [call("get_weather", '{"city": "New York", "days": 3}')] });
    expect(JSON.parse(m.toolCalls[0]!.arguments)).toEqual({ city: "New York", days: 3 });
  });

  test("two calls; a function without parameters", () => {
    const text = "<tool_call>\n<function=special_function>\n</function>\n</tool_call>\n<tool_call>\n<function=get_weather>\n<parameter=city>\n12\n</parameter>\n</function>\n</tool_call>";
    expect(readEveryWay(setup, text).toolCalls).toEqual([call("special_function", "{}"), call("get_weather", '{"city": "12"}')]);
  });
});

describe("reasoning: <think> ... </think>", () => {
  test("the split is exact at the tags, streamed and whole; content after", () => {
    const setup = setupFor("<think>", { tools: null });
    expect(readEveryWay(setup, "<think>\nLet me think.\n</think>\n\nParis.")).toEqual({ content: "\n\nParis.", reasoning: "\nLet me think.\n", toolCalls: [] });
  });

  test("a prompt that opened <think> (DeepSeek-R1 distills): the reply starts in its reasoning", () => {
    const setup = setupFor("<think>", { tools: null, tail: "<｜Assistant｜><think>\n" });
    expect(setup.reasoning).toBe("open");
    expect(readEveryWay(setup, "Hmm, 2+2.</think>4")).toEqual({ content: "4", reasoning: "Hmm, 2+2.", toolCalls: [] });
    // Cut off while thinking: reasoning only.
    expect(readEveryWay(setup, "still thinking")).toEqual({ content: "", reasoning: "still thinking", toolCalls: [] });
  });

  test("Qwen3 with enable_thinking false: the prompt closed the reasoning, the reply is content", () => {
    const setup = setupFor("<think>", { tools: null, tail: "<|im_start|>assistant\n<think>\n\n</think>\n\n" });
    expect(setup.reasoning).toBe("tags");
    expect(readEveryWay(setup, "Paris.")).toEqual({ content: "Paris.", reasoning: "", toolCalls: [] });
  });

  test("a <think> later in a reply is text; reasoning then a call (Qwen3): the blank line between them is dropped", () => {
    const plain = setupFor("<think>", { tools: null });
    expect(readEveryWay(plain, "Use <think> tags.").content).toBe("Use <think> tags.");
    const setup = setupFor(QWEN3);
    const m = readEveryWay(setup, '<think>\nThe user wants weather.\n</think>\n\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>');
    expect(m).toEqual({ content: "", reasoning: "\nThe user wants weather.\n", toolCalls: [call("get_weather", '{"city": "Paris"}')] });
  });
});

describe("gpt-oss harmony channels", () => {
  test("analysis is reasoning, final is content", () => {
    const setup = setupFor(HARMONY, { tools: null });
    const m = readEveryWay(setup, "<|channel|>analysis<|message|>Think about it.<|end|><|start|>assistant<|channel|>final<|message|>It is 4.");
    expect(m).toEqual({ content: "It is 4.", reasoning: "Think about it.", toolCalls: [] });
  });

  test("a call to functions.NAME after the reasoning (the recipient after the channel, or before it)", () => {
    const setup = setupFor(HARMONY);
    const a = readEveryWay(setup, '<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city": "Paris"}');
    expect(a).toEqual({ content: "", reasoning: "Need weather.", toolCalls: [call("get_weather", '{"city": "Paris"}')] });
    const b = readEveryWay(setup, ' to=functions.get_weather<|channel|>commentary json<|message|>{"city": "Rome"}<|call|>');
    expect(b.toolCalls).toEqual([call("get_weather", '{"city": "Rome"}')]);
  });

  test("without tools, a message to a function is content; plain text with no channel is content", () => {
    const setup = setupFor(HARMONY, { tools: null });
    expect(readEveryWay(setup, '<|channel|>commentary to=functions.x <|message|>{"a": 1}').content).toBe('{"a": 1}');
    expect(readEveryWay(setup, "just text").content).toBe("just text");
  });
});

describe("the format chosen from the shared templates", () => {
  const expected: [string, string, string][] = [
    ["Qwen-Qwen2.5-7B-Instruct", "hermes", "none"],
    ["Qwen-Qwen3-0.6B", "hermes", "tags"],
    ["NousResearch-Hermes-3-Llama-3.1-8B-tool_use", "hermes", "none"],
    ["Qwen3-Coder", "qwen3-coder", "none"],
    ["Qwen3.5-4B", "qwen3-coder", "tags"],
    ["meta-llama-Llama-3.1-8B-Instruct", "llama3", "none"],
    ["meta-llama-Llama-3.2-3B-Instruct", "llama3", "none"],
    ["mistralai-Mistral-Nemo-Instruct-2407", "mistral", "none"],
    ["openai-gpt-oss-120b", "harmony", "harmony"],
    ["deepseek-ai-DeepSeek-R1-Distill-Qwen-32B", "generic", "tags"],
    ["HuggingFaceTB-SmolLM3-3B", "generic", "tags"],
    ["microsoft-Phi-3.5-mini-instruct", "generic", "none"],
    ["google-gemma-2-2b-it", "generic", "none"],
  ];
  describeShared("templates", expected.map(([f]) => `templates/${f}.jinja`), (paths) => {
    test("each family's format and reasoning", () => {
      const got = paths.map((p, i) => {
        const text = readFileSync(p, "utf8");
        const setup = replySetup(text, "", tools())!;
        return [expected[i]![0], setup.format.name, setup.reasoning];
      });
      expect(got).toEqual(expected);
    });

    test("the generic fallback: a template that cannot render tools gets them in the system message; SmolLM3's and Phi-3.5's cannot", () => {
      const smol = readFileSync(join(SHARED_DIR, "templates/HuggingFaceTB-SmolLM3-3B.jinja"), "utf8");
      expect(toolCallFormat(smol).templateRendersTools).toBe(false);
      expect(toolCallFormat(readFileSync(join(SHARED_DIR, "templates/Qwen-Qwen2.5-7B-Instruct.jinja"), "utf8")).templateRendersTools).toBe(true);
    });
  });
});

describe("the grammar hook: each format's call syntax writes what its parser reads", () => {
  const formats: [string, string][] = [["hermes", HERMES], ["llama3", LLAMA3], ["mistral", MISTRAL], ["qwen3-coder", CODER], ["harmony", HARMONY], ["generic", "plain"]];
  for (const [name, marker] of formats) {
    test(name, () => {
      const setup = setupFor(marker);
      expect(setup.format.name).toBe(name as ReplySetup["format"]["name"]);
      const syntax = replyCallSyntax(setup)!;
      expect(syntax.mode).toBe("lazy");
      const args: Record<string, string | number>[] = [{ city: "Paris", days: 2 }, { arg1: 7 }];
      const items = [syntax.calls.find((c) => c.name === "get_weather")!, syntax.calls.find((c) => c.name === "special_function")!];
      const written = items.map((item, i) => item.begin + (syntax.argumentsAs === "json" ? jsonText(args[i]!) : xmlParameters(args[i]!)) + item.end);
      const block = syntax.prefix + (syntax.parallel ? written.join(syntax.separator) : written[0]!) + syntax.suffix;
      expect(syntax.triggers.some((t) => block.startsWith(t))).toBe(true);
      const m = readEveryWay(setup, block);
      const expectedCalls = (syntax.parallel ? items : items.slice(0, 1)).map((item, i) => ({ name: item.name, args: args[i] }));
      expect(m.toolCalls.map((c) => ({ name: c.name, args: JSON.parse(c.arguments) }))).toEqual(expectedCalls);
      expect(m.content).toBe("");
      // The call's other beginnings, and a preamble before it (gpt-oss's analysis message), read the same.
      const preamble = syntax.preamble === undefined ? [""] : ["", `${syntax.preamble.open}Think first.${syntax.preamble.close}`];
      for (const begin of items[0]!.alternativeBegins ?? []) {
        for (const before of preamble) {
          const alt = readEveryWay(setup, before + syntax.prefix + begin + jsonText(args[0]!) + items[0]!.end + syntax.suffix);
          expect(alt.toolCalls.map((c) => ({ name: c.name, args: JSON.parse(c.arguments) }))).toEqual(expectedCalls.slice(0, 1));
          expect(alt.content).toBe("");
          expect(alt.reasoning).toBe(before === "" ? "" : "Think first.");
        }
      }
    });
  }

  test("required and a named function force the block; a named function offers only it", () => {
    expect(replyCallSyntax(setupFor(HERMES, { tools: tools("required") }))!.mode).toBe("forced");
    const named = replyCallSyntax(setupFor(HERMES, { tools: tools({ type: "function", function: { name: "get_weather" } }) }))!;
    expect(named.mode).toBe("forced");
    expect(named.calls.map((c) => c.name)).toEqual(["get_weather"]);
    expect(named.parallel).toBe(false);
    expect(named.calls[0]!.schema).toEqual(TOOLS[0]!.function.parameters!);
  });
});

function xmlParameters(args: Record<string, unknown>): string {
  return Object.entries(args).map(([k, v]) => `<parameter=${k}>\n${typeof v === "string" ? v : JSON.stringify(v)}\n</parameter>\n`).join("");
}
