/**
 * Tools rendered by the models' own chat templates (src/chat/jinja-template.ts: the `tools`
 * variable, tool results, assistant messages with calls whose arguments reach the template as an
 * object), for the Qwen2.5, Qwen3, Llama 3.1 and Mistral Nemo templates of ../shared/templates.
 *
 * Where the vectors come from:
 * - TRANSFORMERS: the renderings transformers' apply_chat_template gives for these messages and
 *   tools, made with its template environment (transformers/utils/chat_template_utils.py: Python
 *   jinja2 3.1.6's ImmutableSandboxedEnvironment with trim_blocks, lstrip_blocks and loopcontrols,
 *   `tojson` as json.dumps(ensure_ascii=False), raise_exception), tools in OpenAI's shape and call
 *   arguments as dicts, as transformers and vLLM pass them; Llama 3.1's date is its default.
 * - LLAMA_CPP_DELTAS: the text each template adds for an assistant message that calls
 *   special_function(arg1=1) after one user message, as llama.cpp's tests/test-chat.cpp states it
 *   (test_templates' expected_delta: the rendering with the call, without a generation prompt,
 *   less the common prefix with the rendering before it, less the end-of-turn token).
 */
import { describe, expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import { ChatTemplate, type ChatMessage } from "../src/chat/jinja-template.ts";
import { chatFormat } from "../src/chat/formats.ts";
import { chatPrompt, mistralId } from "../src/tools/chat-prompt.ts";
import { checkTools } from "../src/tools/tool-types.ts";
import { loadTokenizer } from "../src/tokenizer/load.ts";
import { describeShared } from "./helpers/shared.ts";

const WEATHER = { type: "function" as const, function: { name: "get_weather", description: "Get the current weather in a city.", parameters: { type: "object", properties: { city: { type: "string", description: "The city's name." } }, required: ["city"] } } };
const TIME = { type: "function" as const, function: { name: "get_time", description: "Get the local time in a city.", parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] } } };

const call = (id: string, name: string, args: string) => ({ id, type: "function" as const, function: { name, arguments: args } });

/** Two parallel calls, then both results. */
function twoCalls(a: string, b: string): ChatMessage[] {
  return [
    { role: "system", content: "You are a helpful assistant." },
    { role: "user", content: "What's the weather and the time in Paris?" },
    { role: "assistant", content: "", tool_calls: [call(a, "get_weather", '{"city": "Paris"}'), call(b, "get_time", '{"city": "Paris"}')] },
    { role: "tool", tool_call_id: a, content: '{"temperature": 22, "sky": "sunny"}' },
    { role: "tool", tool_call_id: b, content: "14:05" },
  ];
}

/** One call and its result (Llama 3.1's template takes one call per message). */
const ONE_CALL: ChatMessage[] = [
  { role: "system", content: "You are a helpful assistant." },
  { role: "user", content: "What's the weather in Paris?" },
  { role: "assistant", content: "", tool_calls: [call("call_1", "get_weather", '{"city": "Paris"}')] },
  { role: "tool", tool_call_id: "call_1", content: '{"temperature": 22, "sky": "sunny"}' },
];

const TRANSFORMERS: Record<string, string> = {
  "qwen2.5": [
    "<|im_start|>system",
    "You are a helpful assistant.",
    "",
    "# Tools",
    "",
    "You may call one or more functions to assist with the user query.",
    "",
    "You are provided with function signatures within <tools></tools> XML tags:",
    "<tools>",
    "{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"Get the current weather in a city.\", \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\", \"description\": \"The city's name.\"}}, \"required\": [\"city\"]}}}",
    "{\"type\": \"function\", \"function\": {\"name\": \"get_time\", \"description\": \"Get the local time in a city.\", \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}}, \"required\": [\"city\"]}}}",
    "</tools>",
    "",
    "For each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:",
    "<tool_call>",
    "{\"name\": <function-name>, \"arguments\": <args-json-object>}",
    "</tool_call><|im_end|>",
    "<|im_start|>user",
    "What's the weather and the time in Paris?<|im_end|>",
    "<|im_start|>assistant",
    "<tool_call>",
    "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}",
    "</tool_call>",
    "<tool_call>",
    "{\"name\": \"get_time\", \"arguments\": {\"city\": \"Paris\"}}",
    "</tool_call><|im_end|>",
    "<|im_start|>user",
    "<tool_response>",
    "{\"temperature\": 22, \"sky\": \"sunny\"}",
    "</tool_response>",
    "<tool_response>",
    "14:05",
    "</tool_response><|im_end|>",
    "<|im_start|>assistant",
    "",
  ].join("\n"),
  "llama3.1": [
    "<|begin_of_text|><|start_header_id|>system<|end_header_id|>",
    "",
    "Environment: ipython",
    "Cutting Knowledge Date: December 2023",
    "Today Date: 26 Jul 2024",
    "",
    "You are a helpful assistant.<|eot_id|><|start_header_id|>user<|end_header_id|>",
    "",
    "Given the following functions, please respond with a JSON for a function call with its proper arguments that best answers the given prompt.",
    "",
    "Respond in the format {\"name\": function name, \"parameters\": dictionary of argument name and its value}.Do not use variables.",
    "",
    "{",
    "    \"type\": \"function\",",
    "    \"function\": {",
    "        \"name\": \"get_weather\",",
    "        \"description\": \"Get the current weather in a city.\",",
    "        \"parameters\": {",
    "            \"type\": \"object\",",
    "            \"properties\": {",
    "                \"city\": {",
    "                    \"type\": \"string\",",
    "                    \"description\": \"The city's name.\"",
    "                }",
    "            },",
    "            \"required\": [",
    "                \"city\"",
    "            ]",
    "        }",
    "    }",
    "}",
    "",
    "What's the weather in Paris?<|eot_id|><|start_header_id|>assistant<|end_header_id|>",
    "",
    "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}<|eot_id|><|start_header_id|>ipython<|end_header_id|>",
    "",
    "\"{\\\"temperature\\\": 22, \\\"sky\\\": \\\"sunny\\\"}\"<|eot_id|><|start_header_id|>assistant<|end_header_id|>",
    "",
    "",
  ].join("\n"),
  "mistral": [
    "<s>[AVAILABLE_TOOLS][{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"Get the current weather in a city.\", \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\", \"description\": \"The city's name.\"}}, \"required\": [\"city\"]}}}, {\"type\": \"function\", \"function\": {\"name\": \"get_time\", \"description\": \"Get the local time in a city.\", \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}}, \"required\": [\"city\"]}}}][/AVAILABLE_TOOLS][INST]What's the weather and the time in Paris?[/INST][TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}, \"id\": \"a1b2c3d4e\"}, {\"name\": \"get_time\", \"arguments\": {\"city\": \"Paris\"}, \"id\": \"f5g6h7i8j\"}]</s>[TOOL_RESULTS]{\"content\": {\"temperature\": 22, \"sky\": \"sunny\"}, \"call_id\": \"a1b2c3d4e\"}[/TOOL_RESULTS][TOOL_RESULTS]{\"content\": 14:05, \"call_id\": \"f5g6h7i8j\"}[/TOOL_RESULTS]",
  ].join("\n"),
};

// transformers renders these messages with Qwen3's template exactly as with Qwen2.5's (no system
// prompt of its own, no reasoning in these turns).
TRANSFORMERS["qwen3"] = TRANSFORMERS["qwen2.5"]!;

const CASES = [
  { name: "qwen2.5", file: "Qwen-Qwen2.5-7B-Instruct", bos: "", eos: "<|im_end|>", messages: twoCalls("call_1", "call_2"), tools: [WEATHER, TIME] },
  { name: "qwen3", file: "Qwen-Qwen3-0.6B", bos: "", eos: "<|im_end|>", messages: twoCalls("call_1", "call_2"), tools: [WEATHER, TIME] },
  { name: "llama3.1", file: "meta-llama-Llama-3.1-8B-Instruct", bos: "<|begin_of_text|>", eos: "<|eot_id|>", messages: ONE_CALL, tools: [WEATHER] },
  { name: "mistral", file: "mistralai-Mistral-Nemo-Instruct-2407", bos: "<s>", eos: "</s>", messages: twoCalls("a1b2c3d4e", "f5g6h7i8j"), tools: [WEATHER, TIME] },
];

const SPECIAL_FUNCTION = { type: "function" as const, function: { name: "special_function", description: "I'm special", parameters: { type: "object", properties: { arg1: { type: "integer", description: "The arg." } }, required: ["arg1"] } } };

const LLAMA_CPP_DELTAS = [
  { file: "Qwen-Qwen2.5-7B-Instruct", bos: "", eos: "<|im_end|>", id: "call_1", delta: '<tool_call>\n{"name": "special_function", "arguments": {"arg1": 1}}\n</tool_call>' },
  { file: "meta-llama-Llama-3.2-3B-Instruct", bos: "<|begin_of_text|>", eos: "<|eot_id|>", id: "call_1", delta: '{"name": "special_function", "parameters": {"arg1": 1}}' },
  { file: "mistralai-Mistral-Nemo-Instruct-2407", bos: "<s>", eos: "</s>", id: "123456789", delta: '[TOOL_CALLS][{"name": "special_function", "arguments": {"arg1": 1}, "id": "123456789"}]' },
];

const template = (path: string, bos: string, eos: string) => new ChatTemplate(readFileSync(path, "utf8"), path, { bosToken: bos, eosToken: eos }, { date_string: "26 Jul 2024" });

describeShared("tools in the templates render as transformers renders them", CASES.map((c) => `templates/${c.file}.jinja`), (paths) => {
  CASES.forEach((c, i) => {
    test(c.name, () => {
      expect(template(paths[i]!, c.bos, c.eos).render(c.messages, true, { tools: c.tools })).toBe(TRANSFORMERS[c.name]!);
    });
  });
});

describeShared("a call in the history renders as llama.cpp's tests state", LLAMA_CPP_DELTAS.map((c) => `templates/${c.file}.jinja`), (paths) => {
  LLAMA_CPP_DELTAS.forEach((c, i) => {
    test(c.file, () => {
      const t = template(paths[i]!, c.bos, c.eos);
      const user: ChatMessage[] = [{ role: "user", content: "Hey there!" }];
      const tools = { tools: [SPECIAL_FUNCTION] };
      const prefix = t.render(user, true, tools);
      const full = t.render([...user, { role: "assistant", content: "", tool_calls: [call(c.id, "special_function", '{"arg1": 1}')] }], false, tools);
      let same = 0;
      while (same < prefix.length && prefix[same] === full[same]) same++;
      let delta = full.slice(same);
      const end = delta.lastIndexOf(c.eos);
      if (end >= 0) delta = delta.slice(0, end);
      expect(delta).toBe(c.delta);
    });
  });
});

describeShared("the prompt of a conversation with tools", ["vocab/ggml-vocab-qwen2.gguf", "templates/mistralai-Mistral-Nemo-Instruct-2407.jinja", "templates/HuggingFaceTB-SmolLM3-3B.jinja"], ([vocab, mistral, smol]) => {
  const { tokenizer } = loadTokenizer(vocab!, {});
  const format = (path: string) => chatFormat(path, null, "model", tokenizer);

  test("Mistral: OpenAI-style call ids become the 9 letters and digits its template demands (the last 9, as vLLM cuts them), the same for a call and its result", () => {
    expect(mistralId("call_Ab3xYz9QwErT")).toBe("xYz9QwErT");
    expect(mistralId("a1")).toBe("0000000a1");
    const messages = twoCalls("call_Ab3xYz9QwErT", "call_Zz8yXw7VuTs");
    // The template raises on the raw ids; through the prompt they render.
    expect(() => template(mistral!, "<s>", "</s>").render(messages, true, {})).toThrow("Tool call IDs should be alphanumeric strings with length 9");
    const prompt = chatPrompt(format(mistral!), tokenizer, false, messages, null, checkTools([WEATHER, TIME], "auto", true));
    const text = tokenizer.decode(prompt.ids);
    expect(text).toContain('"id": "xYz9QwErT"}');
    expect(text).toContain('"call_id": "xYz9QwErT"}');
    expect(prompt.reply?.format.name).toBe("mistral");
  });

  test("the generic fallback: SmolLM3's template renders no tools, so they are described in the system message", () => {
    const messages: ChatMessage[] = [{ role: "system", content: "Be brief." }, { role: "user", content: "Weather in Oslo?" }];
    const prompt = chatPrompt(format(smol!), tokenizer, false, messages, null, checkTools([WEATHER], "auto", true));
    const text = tokenizer.decode(prompt.ids);
    expect(text).toContain("Be brief.\n\nYou can call these tools");
    expect(text).toContain(JSON.stringify(WEATHER.function));
    expect(prompt.reply?.format.name).toBe("generic");
    // Without tools, no word of them.
    expect(tokenizer.decode(chatPrompt(format(smol!), tokenizer, false, messages, null, null).ids)).not.toContain("You can call these tools");
  });
});

describe("messages a built-in format cannot render", () => {
  test("tools need a Jinja template", () => {
    const tok = { bosId: null, eosId: null, encode: (s: string) => [...s].map((c) => c.charCodeAt(0)), decode: () => "" };
    const format = chatFormat("llama2", null, "m", tok as unknown as Parameters<typeof chatFormat>[3]);
    expect(() => chatPrompt(format, tok as unknown as Parameters<typeof chatPrompt>[1], false, [{ role: "user", content: "x" }], null, checkTools([WEATHER], "auto", true)))
      .toThrow("use tools, which need a Jinja chat template");
  });
});
