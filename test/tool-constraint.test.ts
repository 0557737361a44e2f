/**
 * The tool-call constraint (docs/tools.md): a request's tools compiled with its chat
 * format's call syntax, forced for tool_choice "required" and a named function, lazy for "auto"
 * (free text until the trigger, then the call to its end). What must hold:
 *   - whatever is written under the constraint, every call the format's parser reads has one of
 *     the tools' names and arguments that parse and validate (ajv) against its schema: walks that
 *     pick random allowed tokens (leaning towards the trigger, so that auto opens calls), with
 *     rollbacks restoring each earlier mask exactly and refused tokens changing nothing;
 *   - on a random-weight model: required and named calls are valid only because of the
 *     constraint; the same bits alone and batched, prefix cache off, speculating and in 8-token
 *     steps, for auto, required and named requests;
 *   - a request's own constraint and tools: auto keeps the request's constraint (vLLM's
 *     behaviour), required or a named function is a RequestFieldError naming `constraint`.
 */
import { beforeAll, expect, test } from "bun:test";
import Ajv from "ajv";
import { RequestFieldError } from "../src/errors.ts";
import { isAllowed } from "../src/constraint/token-constraint.ts";
import type { GenerateRequest } from "../src/llm/generate-request.ts";
import type { LLM } from "../src/llm/llm.ts";
import { DEFAULT_SPECULATIVE } from "../src/engine/speculative.ts";
import { GrammarConstraints } from "../src/grammar/constraints.ts";
import { ExprPool } from "../src/grammar/expr.ts";
import { textWithout } from "../src/grammar/xml-parameters.ts";
import { ReplyReader, replySetup } from "../src/tools/reply-reader.ts";
import { toolCallFormat } from "../src/tools/tool-format.ts";
import type { CheckedTools, ToolChoice, ToolDefinition } from "../src/tools/tool-types.ts";
import { Xoshiro128 } from "../src/util/random.ts";
import { walkConstraint, type Lean, validCalls } from "./helpers/constraint-walk.ts";
import { eachAlone, openedLLMs, sameOutputView } from "./helpers/llm.ts";
import { bytesCompiler, matches } from "./helpers/grammar.ts";
import { describeShared } from "./helpers/shared.ts";

const utf8 = new TextEncoder();

const LIMIT_MS = 120_000;
const MODEL = "models/gguf/stories260K.gguf";

/** Tools whose arguments a random walk can finish: bounded strings, integers in a range, an enum, a tool without parameters. */
const TOOLS: ToolDefinition[] = [
  {
    type: "function",
    function: {
      name: "get_weather",
      parameters: {
        type: "object",
        properties: { city: { type: "string", maxLength: 6 }, days: { type: "integer", minimum: 1, maximum: 7 }, unit: { enum: ["c", "f"] } },
        required: ["city", "days"],
        additionalProperties: false,
      },
    },
  },
  { type: "function", function: { name: "now", parameters: { type: "object", properties: {}, additionalProperties: false } } },
];
const ajv = new Ajv();
const NAMED: ToolChoice = { type: "function", function: { name: "get_weather" } };

/** Every call read has a tool's name and arguments valid for its schema; returns how many there were. */
const expectValidCalls = validCalls(TOOLS);

const TRIGGER = "<tool_call>";
/** Qwen3-Coder's format is chosen by a template that writes both of these. */
const CODER_TEMPLATE = "<function= <parameter=";

test("text without a tag (Qwen3-Coder's text values): every string over the tag's letters, matched iff the tag is not in it", () => {
  const pool = new ExprPool();
  const wrong = (tag: string, strings: readonly string[]): string[] => {
    const e = textWithout(pool, tag);
    return strings.filter((s) => pool.matches(e, utf8.encode(s)) === s.includes(tag));
  };
  let strings = [""];
  const all: string[] = [];
  for (let n = 0; n <= 6; n++) {
    all.push(...strings);
    strings = strings.flatMap((s) => ["<", "/", "p", ">", "é"].map((c) => s + c));
  }
  expect(all.length).toBe(19531);
  expect(wrong("</p>", all)).toEqual([]);
  expect(wrong("</parameter>", ["", "a</parameter", "<</parameter>", "x</parameter>y", "</parameterX>", "<<<", "</param\n</parameter", "</parameter>"])).toEqual([]);
});

test("Qwen3-Coder's XML calls: declared parameters in order, required ones present, text values without </parameter> and by their string schema, other values JSON; what matches reads back valid", () => {
  const tool: ToolDefinition = {
    type: "function",
    function: {
      name: "write_file",
      parameters: {
        type: "object",
        properties: { path: { type: "string", pattern: "^/" }, mode: { type: "string", enum: ["w", "a"] }, lines: { type: "integer", minimum: 0 }, tags: { type: "array", items: { type: "string" } } },
        required: ["path"],
      },
    },
  };
  const validate = ajv.compile(tool.function.parameters!);
  const syntax = toolCallFormat(CODER_TEMPLATE).syntax([tool], "forced", false);
  const compiler = bytesCompiler();
  const source = { kind: "tool_calls", calls: syntax.calls, prefix: syntax.prefix, separator: syntax.separator, suffix: syntax.suffix, repeat: false, controlTokens: syntax.controlTokens } as const;
  const call = (params: string): string => `<tool_call>\n<function=write_file>\n${params}</function>\n</tool_call>`;
  const p = (name: string, value: string): string => `<parameter=${name}>\n${value}\n</parameter>\n`;
  const setup = replySetup(CODER_TEMPLATE, "", { tools: [tool], choice: "required", parallel: false })!;
  const allowed = [
    call(p("path", "/a <b>\n    </param x")),
    call(p("path", "/") + p("mode", "a") + p("lines", "12") + p("tags", '["x", "</parameter"]')),
    call(p("path", "/\n") + p("tags", "[]")),
    "<tool_call><function=write_file><parameter=path>\n/p\n</parameter></function></tool_call>",
  ];
  for (const text of allowed) {
    expect(matches(compiler, source, text)).toBe(true);
    const reader = new ReplyReader(setup);
    reader.push(text);
    reader.end();
    const [read] = reader.message.toolCalls;
    expect(read!.function.name).toBe("write_file");
    expect(validate(JSON.parse(read!.function.arguments))).toBe(true);
  }
  for (const text of [
    call(""), // path is required
    call(p("path", "a")), // its pattern
    call(p("path", "/a</parameter>b")), // no closing tag inside a text value
    call(p("path", "/") + p("mode", "x")), // its enum
    call(p("path", "/") + p("mode", '"w"')), // a text value is not JSON
    call(p("path", "/") + p("lines", "-1")), // an integer of at least 0
    call(p("mode", "w") + p("path", "/")), // the schema's order
    call(p("path", "/") + p("other", "1")), // not declared
    call(p("path", "/") + p("path", "/")), // once
    call(p("path", "/") + "\n\n\n"), // whitespace runs are short
  ]) {
    expect(matches(compiler, source, text)).toBe(false);
  }
});

/** Leans into TRIGGER a character at a time: now and then to start it, mostly to go on with it. */
function leanIntoTrigger(encodeChar: (ch: string) => number | undefined): Lean {
  return (_ids, text) => {
    const matched = [...Array(TRIGGER.length).keys()].reverse().find((k) => text.endsWith(TRIGGER.slice(0, k))) ?? 0;
    return { token: matched < TRIGGER.length ? encodeChar(TRIGGER[matched]!) : undefined, chance: matched === 0 ? 0.1 : 0.9 };
  };
}

describeShared("the tool-call constraint", [MODEL], ([model]) => {
  const llms = openedLLMs({ afterEach: false });
  let llm!: LLM;
  beforeAll(() => {
    llm = llms.load({ model: model! });
  }, LIMIT_MS);

  const checked = (choice: ToolChoice, parallel = true): CheckedTools => ({ tools: TOOLS, choice, parallel });

  for (const [formatName, template] of [["generic", null], ["qwen3-coder", CODER_TEMPLATE]] as const) {
    test(`random walks (${formatName}): every call read parses and validates, in free text (auto) and as the whole reply (required, named)`, () => {
      const tok = llm.tokenizer;
      const constraints = new GrammarConstraints(tok, tok.vocabSize);
      const format = toolCallFormat(template);
      expect(format.name).toBe(formatName);
      const encodeChar = (ch: string): number | undefined => {
        const ids = tok.encode(ch, { continuation: true });
        return ids.length === 1 ? ids[0] : undefined;
      };
      const eos = [...tok.eogIds][0]!;
      const validated = { auto: 0, forced: 0 };
      for (const [choice, parallel] of [["auto", true], ["auto", false], ["required", true], [NAMED, false]] as const) {
        const setup = replySetup(template, "", checked(choice, parallel))!;
        const make = constraints.compile({ kind: "tool_calls", syntax: format.syntax(choice === NAMED ? [TOOLS[0]!] : TOOLS, choice === "auto" ? "lazy" : "forced", parallel) });
        for (let seed = 1; seed <= 3; seed++) {
          const c = make();
          const { ids } = walkConstraint(c, new Xoshiro128(seed), tok.vocabSize, (x) => tok.decode(x), leanIntoTrigger(encodeChar), 300);
          const mask = new Uint32Array(Math.ceil(tok.vocabSize / 32));
          c.fillNextTokenBitmask(mask);
          const complete = c.isTerminated() || isAllowed(mask, eos);
          const reader = new ReplyReader(setup);
          reader.push(tok.decode(ids.filter((t) => !tok.eogIds.has(t))));
          reader.end();
          const calls = reader.message.toolCalls;
          // A walk cut off inside a call leaves that last call unfinished: the others are whole.
          validated[choice === "auto" ? "auto" : "forced"] += expectValidCalls(complete ? calls : calls.slice(0, -1));
          if (choice !== "auto" && complete) {
            expect(calls.length).toBeGreaterThan(0);
            expect(reader.message.content).toBe("");
          }
          if (!parallel && choice === "auto") expect(calls.length).toBeLessThanOrEqual(1);
        }
      }
      expect(validated.auto).toBeGreaterThanOrEqual(3);
      expect(validated.forced).toBeGreaterThanOrEqual(6);
    }, LIMIT_MS);
  }

  const ASK = [{ role: "user" as const, content: "What is the weather?" }];
  const requests: GenerateRequest[] = [
    { id: "auto", messages: ASK, tools: TOOLS, maxTokens: 30, temperature: 1, seed: 4 },
    { id: "required", messages: ASK, tools: TOOLS, toolChoice: "required", parallelToolCalls: false, maxTokens: 120, temperature: 0.9, seed: 7, n: 2 },
    { id: "named", messages: ASK, tools: TOOLS, toolChoice: NAMED, maxTokens: 120, temperature: 0 },
  ];

  test("a random-weight model: required and named calls are valid, ended by the grammar; the same bits alone, batched, cache off, speculating, in 8-token steps", async () => {
    const batch = requests;
    const together = await llm.generate(batch);
    for (const r of together.filter((x) => x.id !== "auto")) {
      expect(r.finish_reason).toBe("tool_calls");
      expect(expectValidCalls(r.tool_calls!)).toBe(1);
    }
    expect(await eachAlone(llm, batch)).toEqual(together.map(sameOutputView));
    for (const engine of [{ enablePrefixCaching: false }, { speculative: { ...DEFAULT_SPECULATIVE, adaptive: false } }, { maxNumBatchedTokens: 8 }]) {
      const other = llms.load({ model: model!, engine });
      expect((await other.generate(batch)).map(sameOutputView)).toEqual(together.map(sameOutputView));
      if ("speculative" in engine) expect(other.stats().draftedTokens).toBeGreaterThan(0);
      other.close();
    }
  }, LIMIT_MS);

  test("a request's own constraint with tools: auto keeps it, required or a named function is refused naming constraint", async () => {
    const choice = { kind: "choice" as const, choices: ["yes", "no"] };
    const [r] = await llm.generate([{ messages: ASK, tools: TOOLS, constraint: choice, maxTokens: 20, temperature: 1, seed: 2 }]);
    expect(["yes", "no"]).toContain(r!.text);
    for (const toolChoice of ["required", NAMED] as const) {
      let error: unknown;
      try {
        llm.client.prepare({ messages: ASK, tools: TOOLS, toolChoice, constraint: choice });
      } catch (e) {
        error = e;
      }
      expect(error).toBeInstanceOf(RequestFieldError);
      expect((error as RequestFieldError).field).toBe("constraint");
    }
    // tool_choice none: the tools are not called, the request's constraint holds.
    expect(() => llm.client.prepare({ messages: ASK, tools: TOOLS, toolChoice: "none", constraint: choice })).not.toThrow();
  }, LIMIT_MS);

  test("a tool's schema that cannot be compiled is a RequestFieldError naming tools and the function, never unconstrained calls", () => {
    const bad: ToolDefinition[] = [{ type: "function", function: { name: "fetch_page", parameters: { $ref: "https://example.com/s.json" } } }];
    let error: unknown;
    try {
      llm.client.prepare({ messages: ASK, tools: bad });
    } catch (e) {
      error = e;
    }
    expect(error).toBeInstanceOf(RequestFieldError);
    expect((error as RequestFieldError).field).toBe("tools");
    expect((error as RequestFieldError).problem).toContain("fetch_page");
  });
});
