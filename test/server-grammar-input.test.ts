/**
 * Grammar input refused over HTTP: deep nesting, languages with
 * nothing in them, text that is not Unicode scalar values, a quantifier on a quantifier and a
 * fractional count are each a 400 naming the body field (and the limit or keyword), never a 500
 * from the stack or a 200 whose finish_reason is "error". The tiny stories260K model: nothing here
 * generates more than a token.
 */
import { expect, test } from "bun:test";
import { describeShared } from "./helpers/shared.ts";
import { serveForSuite, type TestServer } from "./helpers/serve.ts";

const MODEL = "models/gguf/stories260K.gguf";
const LIMIT_MS = 120_000;

interface Answer {
  status: number;
  body: { error?: { message: string; param: string | null } };
}

function refChain(n: number): Record<string, unknown> {
  const defs: Record<string, unknown> = {};
  for (let i = 0; i < n; i++) defs[`d${i}`] = i === n - 1 ? { type: "integer" } : { $ref: `#/$defs/d${i + 1}` };
  return { $defs: defs, $ref: "#/$defs/d0" };
}

describeShared("serve: grammar input refused with a 400 naming the field", [MODEL], ([model]) => {
  let s!: TestServer;
  serveForSuite((started) => (s = started), LIMIT_MS, model!);

  const post = async (body: Record<string, unknown>): Promise<Answer> => {
    const r = await fetch(`${s.url}/v1/completions`, {
      method: "POST", headers: { "content-type": "application/json" },
      body: JSON.stringify({ model: "test-model", prompt: "Once", max_tokens: 1, ...body }),
    });
    return { status: r.status, body: (await r.json()) as Answer["body"] };
  };

  const cases: [string, Record<string, unknown>, string, string][] = [
    ["$ref chain of 20,000", { json_schema: refChain(20_000) }, "json_schema", "(limit: nesting)"],
    ["GBNF 10,000 nested parentheses", { grammar: `root ::= ${"(".repeat(10_000)}"a"${")".repeat(10_000)}` }, "grammar", "(limit: nesting)"],
    ["regex 100,000 nested parentheses", { guided_regex: `${"(".repeat(100_000)}a${")".repeat(100_000)}` }, "guided_regex", "(limit: nesting)"],
    ["an empty GBNF class", { grammar: "root ::= []" }, "grammar", "matches nothing"],
    ["a regex class of nothing", { guided_regex: "[^\\s\\S]" }, "guided_regex", "matches nothing"],
    ["a pattern and a length that leave nothing", { response_format: { type: "json_schema", json_schema: { name: "x", schema: { type: "string", pattern: "^a$", minLength: 3 } } } }, "response_format.json_schema.schema", "matches nothing"],
    ["a regex lone surrogate escape", { guided_regex: "\\uD800" }, "guided_regex", "lone surrogate"],
    ["a lone surrogate const", { json_schema: { const: "a\ud800" } }, "json_schema", "lone surrogate"],
    ["a lone surrogate choice", { guided_choice: ["yes", "\udc00"] }, "guided_choice", "lone surrogate"],
    ["a GBNF escape above U+10FFFF", { grammar: 'root ::= "\\U00110000"' }, "grammar", "above U+10FFFF"],
    ["pattern a**", { json_schema: { type: "string", pattern: "a**" } }, "json_schema", "#/pattern"],
    ["minLength 1.5", { json_schema: { type: "string", minLength: 1.5 } }, "json_schema", "#/minLength: must be a non-negative integer"],
  ];
  test.each(cases)("%s", async (_, fields, param, words) => {
    const a = await post(fields);
    expect({ status: a.status, param: a.body.error?.param }).toEqual({ status: 400, param });
    expect(a.body.error!.message).toContain(words);
    expect(a.body.error!.message).not.toContain("\n");
  }, LIMIT_MS);
});
