/**
 * JSON-Schema-Test-Suite (draft 2020-12) cases of the applicators and keywords that combine
 * (oneOf, anyOf, allOf, not, properties, patternProperties, exclusiveMinimum/Maximum), run as
 * MaskBench runs an instance: Python's json.dumps text of it, matched by the compiled grammar.
 * A schema either compiles, and then rejects every invalid instance, or is refused; never looser.
 * The fixture (test/fixtures/json-schema-suite-2020-12.json) says where the cases come from.
 */
import { describe, expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import { GrammarError } from "../src/errors.ts";
import { isObject, parseJsonText, pythonJsonDumps, type JsonValue } from "../src/grammar/json-value.ts";
import { bytesCompiler, matches } from "./helpers/grammar.ts";

interface Case {
  readonly name: string;
  readonly schema: JsonValue;
  readonly tests: readonly { readonly name: string; readonly text: string; readonly valid: boolean }[];
}

function field(v: JsonValue, key: string): JsonValue {
  if (!isObject(v) || !v.has(key)) throw new Error(`fixture: no "${key}"`);
  return v.get(key)!;
}

function readCases(): Case[] {
  const doc = parseJsonText(readFileSync(new URL("./fixtures/json-schema-suite-2020-12.json", import.meta.url), "utf8"));
  const group = (file: string, g: JsonValue): Case => {
    const tests = field(g, "tests") as JsonValue[];
    return {
      name: `${file} | ${field(g, "description") as string}`,
      schema: field(g, "schema"),
      tests: tests.map((t) => ({
        name: field(t, "description") as string,
        // Suite cases: the data as Python's json.dumps writes it (MaskBench's text); own cases: as written.
        text: isObject(t) && t.has("data_text") ? (t.get("data_text") as string) : pythonJsonDumps(field(t, "data")),
        valid: field(t, "valid") === true,
      })),
    };
  };
  const files = field(doc, "files");
  if (!isObject(files)) throw new Error("fixture: files");
  const cases = files.entries.flatMap(([file, groups]) => (groups as JsonValue[]).map((g) => group(file, g)));
  return [...cases, ...(field(doc, "extra") as JsonValue[]).map((g) => group("extra", g))];
}

/** Valid instances rejected on purpose (stricter, never looser): properties come in the schema's order. */
const STRICTER = new Set([
  "allOf | allOf | allOf",
  "allOf | allOf with base schema | valid",
]);

/** The schemas refused, and what the message says: nothing satisfies them, or a keyword that is not enforced. */
const NOTHING = "the schema matches nothing";
const REFUSED: Readonly<Record<string, string>> = {
  "allOf | allOf combined with anyOf, oneOf": '"multipleOf" on numbers is supported only for 1, 0.1, 0.01',
  "allOf | allOf with boolean schemas, all false": NOTHING,
  "allOf | allOf with boolean schemas, some false": NOTHING,
  "anyOf | anyOf with boolean schemas, all false": NOTHING,
  "not | collect annotations inside a 'not', even if collection is disabled": '#/not: "unevaluatedProperties" is not supported',
  "not | forbid everything with boolean schema true": NOTHING,
  "not | forbid everything with empty schema": NOTHING,
  "oneOf | oneOf with boolean schemas, all false": NOTHING,
  // Every value matches two or three of the `true` branches: none matches exactly one.
  "oneOf | oneOf with boolean schemas, all true": NOTHING,
  "oneOf | oneOf with boolean schemas, more than one true": NOTHING,
  "patternProperties | patternProperties with Unicode property escape": "Unicode property classes (\\p{...}) are not supported",
};

describe("JSON-Schema-Test-Suite draft 2020-12 through the matcher", () => {
  const compiler = bytesCompiler();
  const results = readCases().map((c) => {
    const source = { kind: "json_schema" as const, schema: c.schema };
    try {
      compiler.compile(source);
    } catch (e) {
      if (!(e instanceof GrammarError)) throw e;
      return { c, refused: e.message, accepted: [] as boolean[] };
    }
    return { c, refused: null, accepted: c.tests.map((t) => matches(compiler, source, t.text)) };
  });

  test("no instance the schema rejects is accepted", () => {
    const letThrough = results.flatMap(({ c, accepted }) => c.tests.filter((t, i) => !t.valid && accepted[i]).map((t) => `${c.name} | ${t.name} | ${t.text}`));
    expect(letThrough).toEqual([]);
  });

  test("valid instances are accepted (but for the property-order cases)", () => {
    const rejected = results.flatMap(({ c, accepted, refused }) =>
      refused !== null ? [] : c.tests.filter((t, i) => t.valid && !accepted[i]).map((t) => `${c.name} | ${t.name}`));
    expect(rejected.sort()).toEqual([...STRICTER].sort());
  });

  test("only the schemas that cannot be enforced exactly are refused, naming the keyword", () => {
    const refused = Object.fromEntries(results.filter((r) => r.refused !== null).map((r) => [r.c.name, r.refused!]));
    expect(Object.keys(refused).sort()).toEqual(Object.keys(REFUSED).sort());
    for (const [name, message] of Object.entries(refused)) expect(message).toContain(REFUSED[name]!);
  });
});
