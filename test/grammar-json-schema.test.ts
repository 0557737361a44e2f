/**
 * JSON Schema features one by one (src/grammar/json-schema*.ts): each schema accepts its valid
 * texts and refuses its invalid ones (matched over single bytes, so any text can be tried), then
 * exact masks on a tiny vocabulary.
 */
import { describe, expect, test } from "bun:test";
import { GrammarError } from "../src/errors.ts";
import type { GrammarSource } from "../src/grammar/compiler.ts";
import { GrammarCompiler } from "../src/grammar/compiler.ts";
import { GrammarMatcher } from "../src/grammar/matcher.ts";
import { allowedPieces, bytesCompiler, matches, tinyVocabulary } from "./helpers/grammar.ts";

const compiler = bytesCompiler();
type Case = [schema: object | boolean, valid: string[], invalid: string[]];

function check(name: string, cases: Case[]): void {
  test(name, () => {
    for (const [schema, valid, invalid] of cases) {
      const src: GrammarSource = { kind: "json_schema", schema };
      for (const v of valid) expect([JSON.stringify(schema), v, matches(compiler, src, v)]).toEqual([JSON.stringify(schema), v, true]);
      for (const v of invalid) expect([JSON.stringify(schema), v, matches(compiler, src, v)]).toEqual([JSON.stringify(schema), v, false]);
    }
  });
}

describe("JSON Schema: types and values", () => {
  check("type", [
    [{ type: "string" }, ['"a"', '""', '"\\u00e9\\n"', ' "x" '], ["a", "1", '"a', "null"]],
    [{ type: "integer" }, ["0", "-12", "123456789012345678901234567890"], ["1.5", "01", "+1", '"1"', "1e2"]],
    [{ type: "number" }, ["0", "-1.5e-3", "2E+10", "0.25"], [".5", "1.", "-", "NaN", "Infinity"]],
    [{ type: "boolean" }, ["true", "false"], ["True", "1"]],
    [{ type: "null" }, ["null"], ["nul", "None"]],
    [{ type: ["string", "null"] }, ['"x"', "null"], ["1"]],
    [true, ['{"a": [1, {"b": null}]}', "1", '"s"', "[]"], ["{", "[1,]"]],
    [{}, ["{}", "[true]"], ["{]"]],
  ]);
  check("enum and const: exact values, numbers by value", [
    [{ enum: ["red", "green", 3, null, { a: [1] }] }, ['"red"', '"green"', "3", "3.0", "null", '{"a": [1]}', '{ "a" : [ 1 ] }'], ['"blue"', "4", '{"a": [2]}', '"Red"']],
    [{ const: "x\ny" }, ['"x\\ny"'], ['"x\\u000ay"', '"xy"']],
    [{ type: "string", enum: ["a", 1, "bb"], maxLength: 1 }, ['"a"'], ["1", '"bb"']],
  ]);
  check("strings: lengths in characters, pattern anywhere unless anchored", [
    [{ type: "string", minLength: 2, maxLength: 3 }, ['"ab"', '"é😀"', '"a\\nb"', '"\\ud83d\\ude00x"'], ['"a"', '"abcd"', '"😀"']],
    [{ type: "string", pattern: "\\d{3}" }, ['"ab123cd"', '"123"'], ['"12"', '"1a2b3"']],
    [{ type: "string", pattern: "^[A-Z][a-z]+$" }, ['"Hello"'], ['"hello"', '"Hello!"', '"H"']],
    [{ type: "string", pattern: "^a", maxLength: 3 }, ['"a"', '"abc"'], ['"abcd"', '"ba"']],
  ]);
  check("formats", [
    [{ type: "string", format: "date" }, ['"2024-02-29"', '"2023-12-31"', '"2000-02-29"'], ['"2023-02-29"', '"1900-02-29"', '"2024-04-31"', '"2024-13-01"', '"24-01-01"']],
    [{ type: "string", format: "time" }, ['"12:34:56Z"', '"23:59:60.123+05:30"'], ['"24:00:00Z"', '"12:34:56"']],
    [{ type: "string", format: "date-time" }, ['"2024-01-31T12:00:00Z"', '"2024-01-31t12:00:00.5-01:00"'], ['"2024-01-31 12:00:00Z"', '"2024-01-32T12:00:00Z"']],
    [{ type: "string", format: "email" }, ['"a.b+c@example.com"'], ['"a@"', '"@b.com"', '"a b@c.com"']],
    [{ type: "string", format: "uuid" }, ['"123e4567-e89b-12d3-a456-426614174000"'], ['"123e4567e89b12d3a456426614174000"']],
    [{ type: "string", format: "ipv4" }, ['"192.168.0.1"', '"0.0.0.0"'], ['"256.1.1.1"', '"1.2.3"', '"01.2.3.4"']],
    [{ type: "string", format: "ipv6" }, ['"::1"', '"2001:db8::8a2e:370:7334"', '"::ffff:192.168.0.1"'], ['"2001:::1"', '"12345::"']],
    [{ type: "string", format: "hostname" }, ['"example.com"', '"a-b.c"'], ['"-a.com"', '"a_b.com"']],
    [{ type: "string", format: "uri" }, ['"https://example.com/a?b=c"', '"urn:isbn:0451450523"'], ['"example.com"', '"http://a b"']],
    [{ type: "string", format: "x-unknown" }, ['"anything"'], ["1"]],
  ]);
  check("numbers: bounds on integers and numbers, draft 4 and later", [
    [{ type: "integer", minimum: 1, maximum: 10 }, ["1", "10", "5"], ["0", "11", "-1"]],
    [{ type: "integer", exclusiveMinimum: 0, exclusiveMaximum: 3 }, ["1", "2"], ["0", "3"]],
    [{ type: "integer", minimum: 0, exclusiveMinimum: true }, ["1"], ["0"]],
    [{ type: "integer", minimum: 1.5, maximum: 3.5 }, ["2", "3"], ["1", "4"]],
    [{ type: "number", minimum: -1.5, maximum: 2.25 }, ["-1.5", "0", "2.25", "2.2"], ["-1.51", "2.26", "3"]],
    [{ type: "number", exclusiveMaximum: 0 }, ["-0.001", "-5"], ["0", "0.0", "1"]],
    [{ type: "integer", multipleOf: 10 }, ["0", "20", "-130"], ["5", "21"]],
    [{ type: "number", multipleOf: 0.01 }, ["1.25", "3"], ["1.255"]],
  ]);
});

describe("JSON Schema: objects and arrays", () => {
  check("properties in the schema's order, required, additionalProperties", [
    [{ type: "object", properties: { a: { type: "integer" }, b: { type: "string" } }, required: ["b"] }, ['{"b": "x"}', '{"a": 1, "b": "x"}', '{"a": 1, "b": "x", "c": [null]}', '{ "a" :1 ,"b":"x" }'], ['{"a": 1}', '{"b": "x", "a": 1}', '{"a": "1", "b": "x"}', '{"b": "x",}']],
    [{ type: "object", properties: { a: { type: "integer" } }, additionalProperties: false }, ["{}", '{"a": 1}'], ['{"b": 1}', '{"a": 1, "b": 2}']],
    [{ type: "object", properties: { a: {} }, additionalProperties: { type: "integer" } }, ['{"a": "x", "z": 1}', '{"y": 2, "z": 3}'], ['{"z": "x"}', '{"a": "x", "a": 1}']],
    [{ type: "object", required: ["id"], additionalProperties: { type: "integer" } }, ['{"id": 1}', '{"id": 1, "x": 2}'], ["{}", '{"x": 1}', '{"id": "1"}']],
    [{ type: "object", patternProperties: { "^x-": { type: "integer" }, "^y$": { type: "boolean" } }, additionalProperties: false }, ['{"x-a": 1, "y": true}', '{"y": false}'], ['{"x-a": "1"}', '{"z": 1}', '{"y": 1}', '{"yy": true}']],
    [{ type: "object", propertyNames: { pattern: "^[a-z]+$" } }, ['{"abc": 1}'], ['{"aB": 1}', '{"1": 1}']],
    [{ type: "object", minProperties: 2, maxProperties: 3 }, ['{"a": 1, "b": 2}', '{"a": 1, "b": 2, "c": 3}'], ['{"a": 1}', '{"a": 1, "b": 2, "c": 3, "d": 4}', "{}"]],
    [{ type: "object", properties: { a: { type: "integer" } }, minProperties: 1 }, ['{"a": 1}', '{"z": true}'], ["{}"]],
  ]);
  check("arrays: items, prefixItems, tuple items with additionalItems, counts", [
    [{ type: "array", items: { type: "integer" } }, ["[]", "[1, 2, 3]", "[ 1 ,2 ]"], ["[1, 2,]", '["a"]', "[1 2]"]],
    [{ type: "array", minItems: 2, maxItems: 3 }, ["[1, 2]", '[1, "x", null]'], ["[1]", "[1, 2, 3, 4]"]],
    [{ type: "array", prefixItems: [{ type: "string" }, { type: "integer" }], items: false }, ['["a", 1]', '["a"]', "[]"], ['["a", 1, 2]', '[1, "a"]']],
    [{ type: "array", items: [{ type: "string" }], additionalItems: { type: "boolean" } }, ['["a", true, false]'], ['["a", 1]']],
    [{ type: "array", prefixItems: [{ const: 1 }], items: { type: "string" }, minItems: 2 }, ['[1, "a"]', '[1, "a", "b"]'], ["[1]", '["a", "b"]']],
  ]);
});

describe("JSON Schema: references and combinations", () => {
  check("$ref to $defs and definitions, recursion, anchors, siblings", [
    [{ $defs: { pos: { type: "integer", minimum: 0 } }, type: "array", items: { $ref: "#/$defs/pos" } }, ["[0, 5]"], ["[-1]"]],
    [{ definitions: { node: { type: "object", properties: { v: { type: "integer" }, next: { $ref: "#/definitions/node" } }, required: ["v"], additionalProperties: false } }, $ref: "#/definitions/node" },
      ['{"v": 1}', '{"v": 1, "next": {"v": 2, "next": {"v": 3}}}'], ['{"v": 1, "next": {}}', '{"next": {"v": 1}}']],
    [{ $defs: { a: { $anchor: "thing", type: "string" } }, properties: { x: { $ref: "#thing" } }, type: "object" }, ['{"x": "s"}'], ['{"x": 1}']],
    [{ $defs: { s: { type: "string" } }, $ref: "#/$defs/s", maxLength: 2 }, ['"ab"'], ['"abc"', "1"]],
    [{ $defs: { "a/b": { const: 1 } }, $ref: "#/$defs/a~1b" }, ["1"], ["2"]],
  ]);
  check("anyOf, oneOf, allOf (merged keyword by keyword), not", [
    [{ anyOf: [{ type: "integer" }, { type: "string", maxLength: 1 }] }, ["1", '"a"'], ['"ab"', "1.5"]],
    [{ oneOf: [{ type: "object", properties: { kind: { const: "a" }, x: { type: "integer" } }, required: ["kind"] }, { type: "object", properties: { kind: { const: "b" } }, required: ["kind"] }] }, ['{"kind": "a", "x": 1}', '{"kind": "b"}'], ['{"kind": "c"}', '{"kind": "a", "x": "1"}']],
    [{ allOf: [{ type: "object", properties: { a: { type: "integer" } }, required: ["a"] }, { properties: { b: { type: "string" } }, required: ["b"] }] }, ['{"a": 1, "b": "x"}'], ['{"a": 1}', '{"b": "x"}', '{"a": "1", "b": "x"}']],
    [{ allOf: [{ properties: { a: {} }, additionalProperties: false }, { properties: { a: {}, b: {} } }] }, ['{"a": 1}'], ['{"a": 1, "b": 2}']],
    [{ type: "object", properties: { t: { type: "string" } }, required: ["t"], anyOf: [{ required: ["x"] }, { required: ["y"] }] }, ['{"t": "s", "x": 1}', '{"t": "s", "y": 1}'], ['{"t": "s"}']],
    [{ type: ["string", "integer"], not: { type: "integer" } }, ['"a"'], ["1"]],
    [{ type: "string", not: { enum: ["no", "never"] } }, ['"yes"', '"n"', '"nope"'], ['"no"', '"never"', '"n\\u006f"']],
    [{ allOf: [{ type: "integer", minimum: 0 }, { maximum: 5 }] }, ["0", "5"], ["6", "-1"]],
  ]);
  check("whitespace: any JSON whitespace between tokens, bounded", [
    [{ type: "object", properties: { a: { type: "array" } } }, ['{\n  "a": [\n    1,\n    2\n  ]\n}\n', '\t{"a":[]}\r\n', '{"a":[1,2]}'], ['{"a": [1,2]} x', `{${" ".repeat(65)}"a": []}`]],
  ]);
});

describe("JSON Schema: sources and options", () => {
  test("json_object: any object, nothing else", () => {
    for (const [t, ok] of [['{"a": [1]}', true], ["{}", true], ["[]", false], ['"s"', false]] as const) expect([t, matches(compiler, { kind: "json_object" }, t)]).toEqual([t, ok]);
  });

  test("whitespace not flexible: exactly the separators", () => {
    const src: GrammarSource = { kind: "json_schema", schema: { type: "object", properties: { a: { type: "array" }, b: {} } }, options: { whitespaceFlexible: false } };
    expect(matches(compiler, src, '{"a": [1, 2], "b": null}')).toBe(true);
    expect(matches(compiler, src, '{"a":[1,2]}')).toBe(false);
    const compact: GrammarSource = { ...src, options: { whitespaceFlexible: false, itemSeparator: ",", keySeparator: ":" } };
    expect(matches(compiler, compact, '{"a":[1,2],"b":null}')).toBe(true);
  });

  test("a schema given as text keeps its property order, numeric names too", () => {
    const src: GrammarSource = { kind: "json_schema", schema: '{"type":"object","properties":{"b":{},"10":{},"a":{}},"additionalProperties":false}' };
    expect(matches(compiler, src, '{"b": 1, "10": 2, "a": 3}')).toBe(true);
    expect(matches(compiler, src, '{"10": 2, "b": 1}')).toBe(false);
  });

  test("what cannot be enforced is refused, naming the keyword and where", () => {
    const refused: [object, string][] = [
      [{ type: "array", uniqueItems: true }, 'uniqueItems'],
      [{ properties: { a: { if: { type: "string" }, then: {} } } }, "#/properties/a: \"if\""],
      [{ type: "string", pattern: "(a)\\1" }, "#/pattern"],
      [{ not: { multipleOf: 2 } }, "\"not\""],
      [{ type: "integer", multipleOf: 3 }, "multipleOf"],
      [{ $ref: "https://example.com/schema.json" }, "points outside the schema"],
      [{ $ref: "#/$defs/missing" }, "points to nothing"],
      [{ type: "wat" }, "unknown type"],
    ];
    for (const [schema, words] of refused) {
      expect(() => compiler.compile({ kind: "json_schema", schema })).toThrow(GrammarError);
      expect(() => compiler.compile({ kind: "json_schema", schema })).toThrow(words);
    }
  });
});

describe("exact masks on a tiny vocabulary", () => {
  const pieces = ["{", "}", '"', "a", "b", ":", ",", " ", "1", "2", '"a"', '":', "null", '{"', "x"];
  const vocab = tinyVocabulary(pieces);
  const tiny = new GrammarCompiler(vocab);
  const step = (m: GrammarMatcher, text: string): void => {
    for (const id of vocab.encode(text)) expect(m.acceptToken(id)).toBe(true);
  };

  test("an object with one required integer property, then the end", () => {
    const m = tiny.matcher({ kind: "json_schema", schema: { type: "object", properties: { a: { type: "integer" } }, required: ["a"], additionalProperties: false } });
    expect(allowedPieces(m, pieces)).toEqual(["{", " ", '{"']);
    step(m, "{");
    expect(allowedPieces(m, pieces)).toEqual(['"', " ", '"a"']);
    step(m, '"a"');
    expect(allowedPieces(m, pieces)).toEqual([":", " "]);
    step(m, ":");
    expect(allowedPieces(m, pieces)).toEqual([" ", "1", "2"]);
    step(m, "12");
    expect(allowedPieces(m, pieces)).toEqual(["}", " ", "1", "2"]);
    step(m, "}");
    expect(allowedPieces(m, pieces)).toEqual([" ", "<eos>"]);
    expect(m.acceptToken(pieces.length)).toBe(true);
    expect(m.isTerminated()).toBe(true);
    expect(allowedPieces(m, pieces)).toEqual(["<eos>"]);
  });

  test("a token that ends one lexeme and starts the next is allowed by the parser's choice", () => {
    const m = tiny.matcher({ kind: "json_schema", schema: { type: "object", properties: { a: { type: "null" } }, additionalProperties: false } });
    step(m, '{"a');
    expect(allowedPieces(m, pieces)).toEqual(['"', '":']);
    step(m, '":');
    expect(allowedPieces(m, pieces)).toEqual([" ", "null"]);
  });
});
