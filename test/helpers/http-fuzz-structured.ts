/**
 * Seeded HTTP fuzz cases for structured output, tools and the agent APIs, for
 * test/server-fuzz.test.ts: random requests that ask for a constraint in every spelling
 * (response_format json_schema and json_object, json_schema, grammar, guided_json, guided_regex,
 * guided_choice, guided_grammar, structured_outputs), tools with tool_choice auto, required, none
 * and named on /v1/chat/completions, /v1/messages (Anthropic) with tools, thinking and tool_result
 * blocks, and /v1/responses with tools and text.format; then mutated (a value anywhere set to a
 * wrong type, a huge size, a deep nest, a lone surrogate, an empty grammar). The concrete inputs
 * found by attacking the server come as seeds (STRUCTURED_SEEDS), each with the answer it must get.
 *
 * The property of every answer (checkStructuredAnswer): a 2xx (never finish_reason "error", not a
 * documented value), or a 4xx JSON error in the route's shape, naming the field at fault on the
 * OpenAI routes; never a 5xx, a stack trace or a path of the server's disk. Each case runs within
 * a time limit (a hang fails it); the memory bound is the test's (it watches the server's RSS).
 */
import { tmpdir } from "node:os";
import { FuzzRandom } from "./gguf-fuzz.ts";
import type { RawResponse } from "./raw-http.ts";
import { REPO_ROOT } from "./cli.ts";
import { SHARED_DIR } from "./shared.ts";

/** A request's answer must be whole within this (a compile limit acts long before). */
export const STRUCTURED_REQUEST_LIMIT_MS = 30_000;

type Json = null | boolean | number | string | Json[] | { [key: string]: Json };
type Route = "/v1/completions" | "/v1/chat/completions" | "/v1/messages" | "/v1/messages/count_tokens" | "/v1/responses";

/** What a seed's answer must be: a 400 naming `param` (OpenAI routes), or a 2xx. */
type Expected = { status: 400; param?: string } | { status: 200 } | null;

export interface StructuredCase {
  what: string;
  route: Route;
  /** The body as sent (a string: some seeds are built as text). */
  body: string;
  expected: Expected;
}

const LONE_SURROGATES = ["\ud800", "\udfff", "a\udbffb", "\ude00\ud83d"];
const ODD_TEXT = ["", "x", "日本語", "\u0000", "\n", "😀", '"', "\\", "a".repeat(2000), ...LONE_SURROGATES];

// ---- schemas

/** A random JSON schema, `depth` levels at most; small unless a mutation grows it. */
export function randomSchema(r: FuzzRandom, depth = 0): { [key: string]: Json } {
  const leaf = depth >= 3 || r.int(3) === 0;
  if (leaf) {
    return r.pick<() => { [key: string]: Json }>([
      () => ({ type: "integer", ...(r.int(2) === 0 ? { minimum: r.int(10) - 5, maximum: 5 + r.int(100) } : {}) }),
      () => ({ type: "number", ...(r.int(3) === 0 ? { exclusiveMinimum: 0 } : {}) }),
      () => ({ type: "string", ...(r.int(2) === 0 ? { minLength: r.int(3), maxLength: 3 + r.int(12) } : {}) }),
      () => ({ type: "string", pattern: r.pick(["^[a-z]+$", "^\\d{3}-\\d{4}$", "^(ab|cd)*$", "^.*c.*$", "[A-Z]"]) }),
      () => ({ type: "string", format: r.pick(["date", "date-time", "email", "uuid", "ipv4"]) }),
      () => ({ type: "boolean" }),
      () => ({ type: "null" }),
      () => ({ enum: Array.from({ length: 1 + r.int(5) }, (_, i) => r.pick<Json>([i, `v${i}`, null, true, { k: i }])) }),
      () => ({ const: r.pick<Json>(["fixed", 7, [1, 2], { a: "b" }]) }),
      () => ({}),
    ])();
  }
  return r.pick<() => { [key: string]: Json }>([
    () => {
      const names = Array.from({ length: 1 + r.int(4) }, (_, i) => r.pick(["name", "city", "n", "items", `k${i}`, "日本", "a b"]));
      const properties = Object.fromEntries(names.map((n) => [n, randomSchema(r, depth + 1)]));
      return { type: "object", properties, required: names.slice(0, r.int(names.length + 1)), ...(r.int(2) === 0 ? { additionalProperties: false } : {}) };
    },
    () => ({ type: "array", items: randomSchema(r, depth + 1), ...(r.int(2) === 0 ? { minItems: r.int(2), maxItems: 2 + r.int(4) } : {}) }),
    () => ({ [r.pick(["anyOf", "oneOf", "allOf"])]: Array.from({ length: 1 + r.int(3) }, () => randomSchema(r, depth + 1)) }),
    () => ({ type: "object", patternProperties: { [r.pick(["^k", "^[a-z]+$", ".*"])]: randomSchema(r, depth + 1) } }),
    () => ({ $defs: { item: randomSchema(r, depth + 1) }, type: "array", items: { $ref: "#/$defs/item" } }),
    () => ({ not: randomSchema(r, depth + 1) }),
    () => ({ type: r.pick<Json>([["string", "integer"], ["object", "null"]]) }),
  ])();
}

// ---- grammars and patterns

function randomGbnf(r: FuzzRandom): string {
  return r.pick([
    'root ::= "yes" | "no"',
    'root ::= item ("," item)*\nitem ::= [a-z]+',
    'root ::= "{" ws "\\"a\\":" ws [0-9]+ ws "}"\nws ::= [ \\t\\n]*',
    "root ::= [^\\n]{1,20}",
    'root ::= ("ab" | "c")+ "."',
    'root ::= x\nx ::= "(" x ")" | "z"',
  ]);
}

function randomRegex(r: FuzzRandom): string {
  return r.pick(["[a-z]{1,10}", "\\d+(\\.\\d+)?", "(yes|no|maybe)", "[A-Z][a-z]*( [A-Z][a-z]*){0,3}", "(a|b)*c", "\\w+@\\w+\\.com", ".{0,5}"]);
}

function randomChoice(r: FuzzRandom): Json {
  return Array.from({ length: 1 + r.int(4) }, (_, i) => r.pick(["yes", "no", `choice ${i}`, "日本", "a\nb"]));
}

/** One structured output field of a completion or chat body, in one of its spellings. */
function constraintField(r: FuzzRandom): { [key: string]: Json } {
  const schema = (): Json => randomSchema(r);
  return r.pick<() => { [key: string]: Json }>([
    () => ({ response_format: { type: "json_schema", json_schema: { name: "out", schema: schema(), ...(r.int(2) === 0 ? { strict: true } : {}) } } }),
    () => ({ response_format: { type: "json_object" } }),
    () => ({ response_format: { type: "json_object", schema: schema() } }),
    () => ({ json_schema: schema() }),
    () => ({ grammar: randomGbnf(r) }),
    () => ({ guided_json: schema() }),
    () => ({ guided_regex: randomRegex(r) }),
    () => ({ guided_choice: randomChoice(r) }),
    () => ({ guided_grammar: randomGbnf(r) }),
    () => ({ structured_outputs: r.pick<() => Json>([() => ({ json: schema() }), () => ({ regex: randomRegex(r) }), () => ({ choice: randomChoice(r) }), () => ({ grammar: randomGbnf(r) }), () => ({ json_object: true })])() }),
  ])();
}

// ---- tools and the agent APIs

function randomTool(r: FuzzRandom, i: number): { name: string; description: string; parameters: Json } {
  const parameters = r.int(4) === 0 ? randomSchema(r) : { type: "object", properties: { city: { type: "string", maxLength: 20 }, unit: { type: "string", enum: ["c", "f"] }, extra: randomSchema(r, 2) }, required: ["city"] };
  return { name: r.pick(["get_weather", "search", `tool_${i}`, "a-b.c"]), description: r.pick(["w", "Look something up.", ""]), parameters };
}

function openaiTools(r: FuzzRandom): { tools: Json; tool_choice?: Json } {
  const tools = Array.from({ length: 1 + r.int(3) }, (_, i) => randomTool(r, i));
  const choice = r.pick<Json | undefined>([undefined, "auto", "required", "none", { type: "function", function: { name: tools[0]!.name } }]);
  return { tools: tools.map((t) => ({ type: "function", function: t })), ...(choice === undefined ? {} : { tool_choice: choice }) };
}

function chatBody(r: FuzzRandom): { [key: string]: Json } {
  const messages: Json[] = [{ role: "user", content: r.pick(["weather in Paris?", "Give JSON.", "\ud800?", "日本"]) }];
  if (r.int(3) === 0) {
    messages.push({ role: "assistant", content: null, tool_calls: [{ id: "call_1", type: "function", function: { name: "get_weather", arguments: '{"city":"Paris"}' } }] });
    messages.push({ role: "tool", tool_call_id: "call_1", content: r.pick(["sunny", "", '{"t":20}']) });
  }
  if (r.int(4) === 0) messages.push({ role: "assistant", content: "ok", reasoning_content: "thinking" });
  const body: { [key: string]: Json } = { messages, max_tokens: 1 + r.int(8), temperature: r.pick([0, 1]), seed: r.int(100) };
  const kind = r.int(3);
  if (kind === 0) Object.assign(body, constraintField(r));
  else if (kind === 1) Object.assign(body, openaiTools(r));
  else Object.assign(body, constraintField(r), { tools: openaiTools(r).tools, tool_choice: "auto" });
  if (r.int(5) === 0) body.reasoning_budget = r.pick([0, -1, 16, 1024]);
  return body;
}

function completionBody(r: FuzzRandom): { [key: string]: Json } {
  return { prompt: r.pick(["JSON:", "Answer:", "\ud800", "Once"]), max_tokens: 1 + r.int(8), temperature: r.pick([0, 1]), seed: r.int(100), ...constraintField(r) };
}

function anthropicBody(r: FuzzRandom): { [key: string]: Json } {
  const tools = Array.from({ length: r.int(3) }, (_, i) => {
    const t = randomTool(r, i);
    return { name: t.name, description: t.description, input_schema: t.parameters };
  });
  const messages: Json[] = [{ role: "user", content: r.pick<Json>(["weather in Paris?", [{ type: "text", text: "hi" }], [{ type: "text", text: "\udfff" }]]) }];
  if (r.int(2) === 0 && tools.length > 0) {
    messages.push({ role: "assistant", content: [{ type: "thinking", thinking: "let me see", signature: "x" }, { type: "tool_use", id: "toolu_1", name: tools[0]!.name, input: { city: "Paris" } }] });
    messages.push({ role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_1", content: r.pick<Json>(["sunny", [{ type: "text", text: "20C" }], ""]), ...(r.int(2) === 0 ? { is_error: r.pick([true, false]) } : {}) }] });
  }
  const body: { [key: string]: Json } = { max_tokens: 1 + r.int(8), messages };
  if (tools.length > 0) body.tools = tools;
  if (tools.length > 0 && r.int(2) === 0) body.tool_choice = r.pick<Json>([{ type: "auto" }, { type: "any" }, { type: "none" }, { type: "tool", name: tools[0]!.name }]);
  if (r.int(3) === 0) body.thinking = r.pick<Json>([{ type: "enabled", budget_tokens: 1024 }, { type: "disabled" }, { type: "enabled", budget_tokens: 100 }]);
  if (r.int(3) === 0) body.system = r.pick<Json>(["Be brief.", [{ type: "text", text: "Be brief." }]]);
  if (r.int(4) === 0) body.stream = true;
  return body;
}

function responsesBody(r: FuzzRandom): { [key: string]: Json } {
  const input = r.pick<Json>([
    "weather in Paris?",
    [{ role: "user", content: "hi" }],
    [{ role: "user", content: [{ type: "input_text", text: "weather?" }] }, { type: "function_call", call_id: "c1", name: "get_weather", arguments: '{"city":"Paris"}' }, { type: "function_call_output", call_id: "c1", output: "sunny" }],
  ]);
  const body: { [key: string]: Json } = { input, max_output_tokens: 1 + r.int(8) };
  if (r.int(2) === 0) {
    body.tools = Array.from({ length: 1 + r.int(2) }, (_, i) => {
      const t = randomTool(r, i);
      return { type: "function", name: t.name, description: t.description, parameters: t.parameters };
    });
    if (r.int(2) === 0) body.tool_choice = r.pick<Json>(["auto", "required", "none", { type: "function", name: "get_weather" }]);
  }
  if (r.int(2) === 0) {
    body.text = { format: r.pick<() => Json>([() => ({ type: "json_schema", name: "out", schema: randomSchema(r), strict: true }), () => ({ type: "json_object" }), () => ({ type: "text" })])() };
  }
  if (r.int(4) === 0) body.stream = true;
  return body;
}

// ---- mutations

/** Every path to a value inside `v` (object keys and array indexes), the root excluded. */
function pathsOf(v: Json, at: (string | number)[] = [], out: (string | number)[][] = []): (string | number)[][] {
  if (out.length > 400) return out;
  if (Array.isArray(v)) v.forEach((x, i) => { out.push([...at, i]); pathsOf(x, [...at, i], out); });
  else if (v !== null && typeof v === "object") for (const [k, x] of Object.entries(v)) { out.push([...at, k]); pathsOf(x, [...at, k], out); }
  return out;
}

/** A value to put in place of another: a wrong type, a huge size, a deep nest, a lone surrogate, an empty grammar. */
function mutant(r: FuzzRandom, old: Json): { value: Json | undefined; what: string } {
  const kind = r.int(10);
  switch (kind) {
    case 0: return { value: r.pick<Json>([null, true, 5, -1, 1.5, 2 ** 64, "", [], {}, "x"]), what: "a wrong type" };
    case 1: return { value: undefined, what: "removed" };
    case 2: return { value: r.pick(LONE_SURROGATES), what: "a lone surrogate" };
    case 3: {
      const depth = r.pick([100, 1000, 5000]);
      return { value: JSON.parse(`${'{"anyOf":['.repeat(depth)}{"type":"integer"}${"]}".repeat(depth)}`) as Json, what: `anyOf nested ${depth} deep` };
    }
    case 4: {
      const depth = r.pick([200, 2000]);
      return { value: JSON.parse(`${"[".repeat(depth)}1${"]".repeat(depth)}`) as Json, what: `an array nested ${depth} deep` };
    }
    case 5: {
      const n = r.pick([1000, 20_000]);
      return { value: Array.from({ length: n }, (_, i) => (r.int(2) === 0 ? i : `s${i}`)), what: `an array of ${n}` };
    }
    case 6: {
      // Past the server's body bound at most a little: a string of up to 2 MB.
      const times = typeof old === "string" && old.length > 0 ? Math.min(1 + r.int(2000), Math.floor(2_000_000 / old.length)) : 0;
      return { value: times > 1 ? (old as string).repeat(times) : "y".repeat(r.pick([10_000, 200_000, 2_000_000])), what: "a huge string" };
    }
    case 7: return { value: r.pick(["", " ", "root ::=", "root ::= []", "x ::= \"a\"", "root ::= root", "(", "[", "\\", "a**", "(?<n>a)\\k<n>"]), what: "an empty or broken grammar or pattern" };
    case 8: return { value: r.pick(ODD_TEXT), what: "an odd string" };
    default: return { value: randomSchema(r), what: "another schema" };
  }
}

function setAt(root: { [key: string]: Json }, path: (string | number)[], value: Json | undefined): void {
  let node: Json = root;
  for (const key of path.slice(0, -1)) node = (node as Record<string | number, Json>)[key] as Json;
  const last = path[path.length - 1]!;
  if (Array.isArray(node) && typeof last === "number") {
    if (value === undefined) node.splice(last, 1);
    else node[last] = value;
  } else if (node !== null && typeof node === "object") {
    const obj = node as { [key: string]: Json };
    if (value === undefined) delete obj[last as string];
    else obj[last as string] = value;
  }
}

function mutate(r: FuzzRandom, body: { [key: string]: Json }): string[] {
  const done: string[] = [];
  for (let m = r.int(3); m > 0; m--) {
    const paths = pathsOf(body);
    if (paths.length === 0) break;
    const path = r.pick(paths);
    let old: Json = body;
    for (const key of path) old = (old as Record<string | number, Json>)[key] as Json;
    const { value, what } = mutant(r, old);
    setAt(body, path, value);
    done.push(`${path.join(".")}: ${what}`);
  }
  return done;
}

/** The next `count` random structured cases of a seeded round. */
export function structuredCases(r: FuzzRandom, count: number): StructuredCase[] {
  const makers: [Route, () => { [key: string]: Json }][] = [
    ["/v1/completions", () => completionBody(r)],
    ["/v1/chat/completions", () => chatBody(r)],
    ["/v1/chat/completions", () => chatBody(r)],
    ["/v1/messages", () => anthropicBody(r)],
    ["/v1/responses", () => responsesBody(r)],
  ];
  // The routes in turn, so that even a short pass reaches each.
  return Array.from({ length: count }, (_, i) => {
    const [route, make] = makers[i % makers.length]!;
    const body = make();
    const mutations = mutate(r, body);
    if (r.int(5) === 0 && route !== "/v1/messages" && route !== "/v1/responses") body.stream = true;
    const text = JSON.stringify(body);
    return { what: `${route} ${mutations.join("; ") || "unmutated"} ${text.length > 160 ? `${text.slice(0, 160)}...` : text}`, route, body: text, expected: null };
  });
}

// ---- the seed inputs: concrete requests found by attacking the server

const WEATHER_PARAMS = { type: "object", properties: { city: { type: "string", maxLength: 20 }, unit: { type: "string", enum: ["c", "f"] } }, required: ["city", "unit"], additionalProperties: false };

function seed(what: string, route: Route, body: { [key: string]: Json }, expected: Expected): StructuredCase {
  return { what: `seed: ${what}`, route, body: JSON.stringify(body), expected };
}

function patternProperties(patterns: string[]): Json {
  return { type: "object", patternProperties: Object.fromEntries(patterns.map((p) => [p, { type: "integer" }])) };
}

function nestedGbnf(depth: number): string {
  return `root ::= ${"(".repeat(depth)}"a"${")".repeat(depth)}`;
}

function refChain(n: number): Json {
  const defs: { [key: string]: Json } = {};
  for (let i = 0; i < n; i++) defs[`d${i}`] = i === n - 1 ? { type: "integer" } : { $ref: `#/$defs/d${i + 1}` };
  return { $defs: defs, $ref: "#/$defs/d0" };
}

/**
 * The concrete inputs found by attacking the server, grouped by what they broke, each with the answer
 * it must get: a 400 naming the field, a 2xx, or (null) only the property every answer keeps, within the bounds.
 * `full`: also the largest (multi-megabyte bodies, 100,000-entry enums), for the slow pass.
 */
export function structuredSeeds(full: boolean): StructuredCase[] {
  const chat = (extra: { [key: string]: Json }) => ({ messages: [{ role: "user", content: "weather in Paris?" }], max_tokens: 4, ...extra });
  const completion = (extra: { [key: string]: Json }) => ({ prompt: "JSON:", max_tokens: 8, ...extra });
  const tool = (parameters: Json, description = "w") => ({ tools: [{ type: "function", function: { name: "get_weather", description, parameters } }] });
  const seeds: StructuredCase[] = [
    // small schemas that took gigabytes
    seed("300 patternProperties", "/v1/completions", completion({ json_schema: patternProperties(Array.from({ length: 300 }, (_, i) => `k${i}`)) }), null),
    seed("1,000 patterns ^(a+)+N$", "/v1/completions", completion({ json_schema: patternProperties(Array.from({ length: 1000 }, (_, i) => `^(a+)+${i}$`)) }), null),
    seed("200 overlapping ^.*c.*N$", "/v1/completions", completion({ json_schema: patternProperties(Array.from({ length: 200 }, (_, i) => `^.*c.*${i}$`)) }), null),
    seed("300 patternProperties as a tool's parameters", "/v1/chat/completions", chat({ ...tool(patternProperties(Array.from({ length: 300 }, (_, i) => `k${i}`))), tool_choice: "required" }), null),
    // limits checked too late
    seed("allOf of 1,000 branches", "/v1/completions", completion({ json_schema: { allOf: Array.from({ length: 1000 }, () => ({ type: "integer" })) } }), null),
    // stack overflows as 500s
    seed("GBNF with 10,000 nested parentheses", "/v1/completions", completion({ grammar: nestedGbnf(10_000) }), null),
    // unsatisfiable grammars got a 200 with finish_reason "error"
    seed("grammar root ::= []", "/v1/completions", completion({ grammar: "root ::= []" }), { status: 400, param: "grammar" }),
    seed("guided_regex [^\\s\\S]", "/v1/completions", completion({ guided_regex: "[^\\s\\S]" }), { status: 400, param: "guided_regex" }),
    seed("guided_regex \\uD800", "/v1/completions", completion({ guided_regex: "\\uD800" }), { status: 400, param: "guided_regex" }),
    // lone surrogates and code points above U+10FFFF
    seed("a lone surrogate in const", "/v1/completions", completion({ json_schema: { const: "a\ud800" } }), { status: 400, param: "json_schema" }),
    seed("a lone surrogate in enum", "/v1/completions", completion({ json_schema: { enum: ["ok", "\udfff"] } }), { status: 400, param: "json_schema" }),
    seed("a lone surrogate in a GBNF literal", "/v1/completions", completion({ grammar: 'root ::= "\ud800"' }), { status: 400, param: "grammar" }),
    seed("a lone surrogate in guided_choice", "/v1/completions", completion({ guided_choice: ["yes", "\ud800"] }), { status: 400, param: "guided_choice" }),
    seed("a code point above U+10FFFF in a GBNF literal", "/v1/completions", completion({ grammar: 'root ::= "\\U00110000"' }), { status: 400, param: "grammar" }),
    // wrong values accepted, and right ones refused
    seed('pattern "a**"', "/v1/completions", completion({ json_schema: { type: "string", pattern: "a**" } }), { status: 400, param: "json_schema" }),
    seed("minLength 1.5", "/v1/completions", completion({ json_schema: { type: "string", minLength: 1.5 } }), { status: 400, param: "json_schema" }),
    seed("messages[].reasoning_content 5", "/v1/chat/completions", { messages: [{ role: "user", content: "hi" }, { role: "assistant", content: "x", reasoning_content: 5 }, { role: "user", content: "more" }], max_tokens: 2 }, { status: 400 }),
    // Written out: as a double it rounds to -2^63, which is in range.
    { ...seed("seed -2^63-1", "/v1/completions", completion({ seed: 0 }), { status: 400, param: "seed" }), body: JSON.stringify(completion({ seed: 0 })).replace('"seed":0', '"seed":-9223372036854775809') },
    seed("reasoning_budget 2^64", "/v1/chat/completions", chat({ reasoning_budget: 2 ** 64 }), { status: 400, param: "reasoning_budget" }),
    seed("reasoning_budget -1, llama.cpp's unbounded", "/v1/chat/completions", chat({ reasoning_budget: -1 }), { status: 200 }),
    seed("reasoning_budget 0 turns thinking off", "/v1/chat/completions", chat({ reasoning_budget: 0 }), { status: 200 }),
    seed("reasoning_budget 100, under Anthropic's floor", "/v1/chat/completions", chat({ reasoning_budget: 100 }), { status: 200 }),
    seed('Anthropic tool_result.is_error "yes"', "/v1/messages", {
      max_tokens: 2, tools: [{ name: "get_weather", description: "w", input_schema: WEATHER_PARAMS }],
      messages: [
        { role: "user", content: "weather?" },
        { role: "assistant", content: [{ type: "tool_use", id: "toolu_1", name: "get_weather", input: { city: "Paris", unit: "c" } }] },
        { role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_1", content: "sunny", is_error: "yes" }] },
      ],
    }, { status: 400 }),
    seed("Anthropic metadata.user_id 5", "/v1/messages", { max_tokens: 2, messages: [{ role: "user", content: "hi" }], metadata: { user_id: 5 } }, { status: 400 }),
    seed("Anthropic text blocks with citations", "/v1/messages", { max_tokens: 2, messages: [{ role: "user", content: [{ type: "text", text: "hi", citations: [{ type: "char_location", cited_text: "h" }] }] }] }, { status: 400 }),
    seed("Responses text.verbosity 5", "/v1/responses", { input: "hi", max_output_tokens: 2, text: { verbosity: 5 } }, { status: 400, param: "text.verbosity" }),
    seed("Responses temperature 5", "/v1/responses", { input: "hi", max_output_tokens: 2, temperature: 5 }, { status: 400, param: "temperature" }),
    // context_length_exceeded showed the model's path
    seed("a prompt longer than the context", "/v1/completions", { prompt: "word ".repeat(6000), max_tokens: 2 }, { status: 400, param: "prompt" }),
    // the forced weather call whose cut reply leaked syntax and whose logprobs changed tokens, as a request that must work
    seed("the weather tool with tool_choice required", "/v1/chat/completions", { messages: [{ role: "user", content: "weather in Paris?" }], max_tokens: 64, seed: 1, tool_choice: "required", tools: [{ type: "function", function: { name: "get_weather", description: "w", parameters: WEATHER_PARAMS } }] }, { status: 200 }),
  ];
  if (!full) return seeds;
  return [
    ...seeds,
    seed("enum of 100,000 integers", "/v1/completions", completion({ json_schema: { enum: Array.from({ length: 100_000 }, (_, i) => i) } }), null),
    seed("a GBNF chain of 40,000 rules", "/v1/completions", completion({ grammar: Array.from({ length: 40_000 }, (_, i) => `${i === 0 ? "root" : `r${i}`} ::= "a" ${i === 39_999 ? "" : `r${i + 1}`}`).join("\n") }), null),
    seed("100,000 guided_choice entries", "/v1/completions", completion({ guided_choice: Array.from({ length: 100_000 }, (_, i) => `c${i}`) }), null),
    seed("a 1 MB tool description", "/v1/chat/completions", chat({ ...tool(WEATHER_PARAMS, "d".repeat(1 << 20)), tool_choice: "auto" }), null),
    seed("2 MB of tool_calls arguments", "/v1/chat/completions", {
      messages: [{ role: "user", content: "weather?" }, { role: "assistant", content: null, tool_calls: [{ id: "c1", type: "function", function: { name: "get_weather", arguments: JSON.stringify({ city: "x".repeat(2 << 20) }) } }] }, { role: "tool", tool_call_id: "c1", content: "sunny" }],
      max_tokens: 2, ...tool(WEATHER_PARAMS),
    }, null), // a 400 where the template renders the arguments (past the context), a 2xx where it does not
    seed("a logit_bias of 100,000 entries", "/v1/completions", completion({ logit_bias: Object.fromEntries(Array.from({ length: 100_000 }, (_, i) => [String(i), 1])) }), { status: 400, param: "logit_bias" }),
    seed("a $ref chain of 20,000 $defs", "/v1/completions", completion({ json_schema: refChain(20_000) }), null),
    seed("a regex with 100,000 nested parentheses", "/v1/completions", completion({ guided_regex: `${"(".repeat(100_000)}a${")".repeat(100_000)}` }), null),
    seed("a tool enum of 100,000 strings with tool_choice required", "/v1/chat/completions", chat({ ...tool({ type: "object", properties: { city: { enum: Array.from({ length: 100_000 }, (_, i) => `c${i}`) } }, required: ["city"] }), tool_choice: "required" }), null),
    seed("count_tokens of a 7.2 MB text", "/v1/messages/count_tokens", { messages: [{ role: "user", content: "word ".repeat(1_440_000) }] }, null),
  ];
}

// ---- the property

/** Roots of the server's disk that no answer may show: the checkout, the shared data, the temporary folder. */
const SERVER_PATHS = [REPO_ROOT, SHARED_DIR, tmpdir()].filter((p) => p.length > 1);

/** A 2xx event stream ends as its API ends one: [DONE], Anthropic's message_stop, a finished or cut response; never an error event. */
function checkStreamEnd(c: StructuredCase, answer: RawResponse, fail: (why: string) => never): void {
  if (!answer.headers["content-type"]?.startsWith("text/event-stream")) return;
  if (/^event: (error|response\.failed)$/m.test(answer.body)) fail("an error event in a stream");
  const ended = c.route === "/v1/messages" ? /^event: message_stop$/m.test(answer.body)
    : c.route === "/v1/responses" ? /^event: response\.(completed|incomplete)$/m.test(answer.body)
    : answer.body.endsWith("data: [DONE]\n\n");
  if (!ended) fail("a stream that did not end as its API ends one");
}

/** Throws unless `answer` keeps the property (see the file's comment); `expected` adds a seed's own answer. */
export function checkStructuredAnswer(c: StructuredCase, answer: RawResponse): void {
  const fail = (why: string): never => {
    throw new Error(`${c.what}: ${why} (${answer.status} ${answer.body.slice(0, 300)})`);
  };
  if (!(answer.status >= 200 && answer.status < 300) && !(answer.status >= 400 && answer.status < 500)) fail("neither a 2xx nor a 4xx");
  if (/\n\s+at |\bat .+:\d+:\d+\)/.test(answer.body)) fail("a stack trace");
  for (const root of SERVER_PATHS) if (answer.body.includes(root)) fail(`a server path (${root}) in the body`);
  if (/"finish_reason":\s*"error"|"stop_reason":\s*"error"/.test(answer.body)) fail('finish_reason "error" (not a documented value)');
  if (c.expected !== null && (c.expected.status === 200) !== (answer.status < 300)) fail(`expected a ${c.expected.status}`);
  if (answer.status < 400) return checkStreamEnd(c, answer, fail);
  let parsed: unknown;
  try {
    parsed = JSON.parse(answer.body);
  } catch {
    return fail("an error body that is not JSON");
  }
  const anthropic = c.route.startsWith("/v1/messages");
  const error = (parsed as { error?: Record<string, unknown> }).error;
  if (typeof error !== "object" || error === null || typeof error.message !== "string" || error.message === "") return fail("no error object with a message");
  if (error.message.length > 600) fail("a message that quotes more than an excerpt");
  if (anthropic) {
    if ((parsed as { type?: unknown }).type !== "error" || typeof error.type !== "string") fail("not Anthropic's error shape");
    return;
  }
  // A refused field is named; a body refused whole (too deep to read) and a busy server's 429 name none.
  const wholeBody = /^request body /.test(error.message);
  if (answer.status === 400 && !wholeBody && (typeof error.param !== "string" || error.param === "")) fail("a 400 naming no field");
  if (c.expected?.status === 400 && c.expected.param !== undefined && typeof error.param === "string" && !error.param.startsWith(c.expected.param)) {
    fail(`a 400 naming ${error.param}, not ${c.expected.param}`);
  }
}
