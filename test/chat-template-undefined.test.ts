/**
 * Undefined values in chat templates render as Python's Jinja2 renders them (src/chat/jinja-undefined.ts):
 * NousResearch's Hermes tool_use templates write `param_fields.description|trim` for every
 * parameter, and a parameter without a description failed with "Cannot apply filter trim to
 * type: UndefinedValue" where transformers (and so vLLM) and llama.cpp render it empty.
 *
 * Every expected text below is what jinja2 3.1.6 renders for the same template and variables, in
 * transformers' environment (ImmutableSandboxedEnvironment with trim_blocks, lstrip_blocks and
 * loopcontrols, `tojson` as json.dumps), `x` and `y` left undefined and `p` = {"type": "string"}.
 */
import { describe, expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import { ChatTemplate } from "../src/chat/jinja-template.ts";
import { describeShared } from "./helpers/shared.ts";

const SPECIALS = { bosToken: "<|begin_of_text|>", eosToken: "<|im_end|>" };
const render = (text: string, vars: Record<string, unknown> = {}) => new ChatTemplate(text, "t.jinja", SPECIALS).render([{ role: "user", content: "hi" }], true, vars);
const yesNo = (e: string) => `{% if ${e} %}T{% else %}F{% endif %}`;

const JINJA2: [string, string][] = [
  ["[{{ x|trim }}]", "[]"],
  ["[{{ x|upper }}{{ x|lower }}{{ x|title }}{{ x|capitalize }}]", "[]"],
  ["[{{ x|string }}]", "[]"],
  ["[{{ x|replace('a', 'b') }}]", "[]"],
  ["[{{ x|join }}{{ x|join(', ') }}]", "[]"],
  ["{{ x|length }}{{ x|count }}", "00"],
  ["{{ [1, 2]|count }}", "2"],
  ["{{ x|list|length }}", "0"],
  ["{{ x|trim|length }}", "0"],
  ["[{{ x|first }}{{ x|last }}]", "[]"],
  [yesNo("x|first is defined"), "F"],
  [yesNo("[]|first is defined"), "F"],
  ["{{ x|sort|length }}{{ x|reverse|list|length }}{{ x|unique|list|length }}", "000"],
  ["{% for k, v in x|items %}{{ k }}{% endfor %}.", "."],
  ["{{ x|map(attribute='a')|list|length }}", "0"],
  ["{{ x|selectattr('a')|list|length }}{{ x|rejectattr('a')|list|length }}", "00"],
  ["{{ x|default('d') }}", "d"],
  ["{{ x|d('d') }}", "d"],
  ["[{{ x|default }}]", "[]"],
  ["{{ 'v'|d('d') }}", "v"],
  ["[{{ x|safe }}]", "[]"],
  ["[{{ x }}]", "[]"],
  [yesNo("x"), "F"],
  [yesNo("not x"), "T"],
  [yesNo("x is defined"), "F"],
  [yesNo("x is undefined"), "T"],
  [yesNo("x is none"), "F"],
  [yesNo("x is string"), "F"],
  [yesNo("x is mapping"), "F"],
  [yesNo("x is number"), "F"],
  [yesNo("x is sequence"), "T"],
  [yesNo("x is iterable"), "T"],
  [yesNo("x is callable"), "T"],
  [yesNo("x is not iterable"), "F"],
  ["[{{ x ~ 'a' }}{{ 'a' ~ x }}]", "[aa]"],
  [yesNo("x in [1, 2]"), "F"],
  [yesNo("x not in [1, 2]"), "T"],
  [yesNo("'a' in x"), "F"],
  [yesNo("x == none"), "F"],
  [yesNo("x != none"), "T"],
  [yesNo("x == y"), "T"],
  ["{% for i in x %}[{{ i }}]{% endfor %}.", "."],
  ["{% for i in x %}[{{ i }}]{% else %}empty{% endfor %}", "empty"],
  ["{{ p.description|trim }}", ""],
  ["{{ (p.description|trim)|length }}", "0"],
];

describe("an undefined value in filters, tests and operators, as Jinja2's Undefined", () => {
  for (const [template, expected] of JINJA2) {
    test(template, () => {
      expect(render(template, { p: { type: "string" } })).toBe(expected);
    });
  }

  test("what Jinja2 refuses on an undefined value stays refused, as a template error", () => {
    for (const template of ["{{ x|int }}", "{{ x|indent(2) }}", "{{ x + 'a' }}", "{{ x|abs }}"]) {
      expect(() => render(template)).toThrow(/^t\.jinja: chat template: /);
    }
  });

  test("defined values are untouched: filters, tests and operators as before", () => {
    expect(render("{{ ' a '|trim }}|{{ [3, 1]|first }}|{{ 'ab'|length }}|{{ [1]|join(',') }}|{{ 1 ~ 'a' }}")).toBe("a|3|2|1|1a");
    expect(render(`${yesNo("'a' is iterable")}${yesNo("1 in [1]")}${yesNo("none == none")}${yesNo("[1] is sequence")}`)).toBe("TTTT");
  });
});

/** The fragment of Hermes-2-Pro-Llama-3-8B's tool_use template that writes a tool's parameters. */
const HERMES_2_PRO_PARAMETERS = [
  "{%- for tool in tools %}",
  "    {%- if tool.function is defined %}",
  "        {%- set tool = tool.function %}",
  "    {%- endif %}",
  '    {{- tool.name + ":\\n" }}',
  "    {%- for param_name, param_fields in tool.parameters.properties|items %}",
  '        {{- "        " + param_name + "(" + param_fields.type + "): " + param_fields.description|trim + "\\n" }}',
  "    {%- endfor %}",
  "{%- endfor %}",
].join("\n");

/** A tool whose `city` parameter has no description (its `unit` has one, with spaces that trim takes off). */
const WEATHER = {
  type: "function",
  function: {
    name: "get_weather", description: "Get the weather.",
    parameters: { type: "object", properties: { city: { type: "string" }, unit: { type: "string", enum: ["c", "f"], description: "  Celsius or Fahrenheit.  " } }, required: ["city"] },
  },
};

test("Hermes-2-Pro's tool_use fragment: a parameter without a description renders empty", () => {
  const tools = [{ type: "function", function: { name: "get_weather", description: "w", parameters: { type: "object", properties: { city: { type: "string" }, unit: { type: "string", description: " c or f " } } } } }];
  expect(render(HERMES_2_PRO_PARAMETERS, { tools })).toBe("get_weather:\n        city(string): \n        unit(string): c or f\n");
});

describeShared("Hermes-3's tool_use template (the same fragment)", ["templates/NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja"], ([path]) => {
  test("a parameter without a description: the rendering transformers gives", () => {
    const template = new ChatTemplate(readFileSync(path!, "utf8"), "hermes-3.jinja", SPECIALS);
    const text = template.render([{ role: "user", content: "Weather in Paris?" }], true, { tools: [WEATHER] });
    expect(text).toBe(
      "<|begin_of_text|><|im_start|>system\nYou are a function calling AI model. You are provided with function signatures within <tools></tools> XML tags. " +
        "You may call one or more functions to assist with the user query. Don't make assumptions about what values to plug into functions. Here are the available tools: <tools> " +
        '{"type": "function", "function": {"name": "get_weather", "description": "get_weather(city: str, unit: str) - Get the weather.\n\n    Args:\n        city(str):         unit(str): Celsius or Fahrenheit.", ' +
        '"parameters": {"type": "object", "properties": {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["c", "f"], "description": "  Celsius or Fahrenheit.  "}}, "required": ["city"]}} </tools>' +
        'Use the following pydantic model json schema for each tool call you will make: {"properties": {"name": {"title": "Name", "type": "string"}, "arguments": {"title": "Arguments", "type": "object"}}, ' +
        '"required": ["name", "arguments"], "title": "FunctionCall", "type": "object"}}\nFor each function call return a json object with function name and arguments within <tool_call></tool_call> XML tags as follows:\n' +
        '<tool_call>\n{"name": <function-name>, "arguments": <args-dict>}\n</tool_call><|im_end|>\n<|im_start|>user\nWeather in Paris?<|im_end|>\n<|im_start|>assistant\n',
    );
  });
});
