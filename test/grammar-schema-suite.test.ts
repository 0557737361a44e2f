/**
 * JSON-Schema-Test-Suite (draft 2020-12) cases of the applicators and keywords that combine
 * (oneOf, anyOf, allOf, not, properties, patternProperties, exclusiveMinimum/Maximum), run as
 * MaskBench runs an instance: Python's json.dumps text of it, matched by the compiled grammar.
 * A schema either compiles, and then rejects every invalid instance, or is refused; never looser.
 * The fixture (test/fixtures/json-schema-suite-2020-12.json) says where the cases come from.
 * Then random nests of those keywords, each instance judged by ajv.
 */
import { describe, expect, test } from "bun:test";
import Ajv from "ajv";
import { readFileSync } from "node:fs";
import { GrammarError } from "../src/errors.ts";
import { isObject, parseJsonText, pythonJsonDumps, type JsonValue } from "../src/grammar/json-value.ts";
import { bytesCompiler, matches } from "./helpers/grammar.ts";
import { COMPUTE_TEST_MS } from "./helpers/limits.ts";

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

type Schema = Record<string, unknown>;

/** Random schemas of the keywords that combine (seeded: the same schemas every run). */
class SchemaGenerator {
  constructor(private seed: number) {}
  private next(): number {
    this.seed = (this.seed * 1103515245 + 12345) % 2147483648;
    return this.seed / 2147483648;
  }
  private pick<T>(xs: readonly T[]): T {
    return xs[Math.floor(this.next() * xs.length)]!;
  }
  private maybe(p: number, s: Schema): Schema {
    return this.next() < p ? s : {};
  }

  schema(depth: number): Schema {
    if (depth <= 0 || this.next() < 0.35) return this.leaf(depth);
    const key = this.pick(["oneOf", "oneOf", "oneOf", "anyOf", "allOf", "not", "not"]);
    const base = this.next() < 0.3 ? this.leaf(0) : {};
    if (key === "not") return { ...base, not: this.schema(depth - 1) };
    return { ...base, [key]: Array.from({ length: 2 + Math.floor(this.next() * 2) }, () => this.schema(depth - 1)) };
  }

  private leaf(depth: number): Schema {
    const sub = (): Schema => (depth > 0 ? this.schema(depth - 1) : this.leaf(0));
    switch (Math.floor(this.next() * 11)) {
      case 0: return { type: this.pick(["null", "boolean", "string", "integer", "number", "object", "array"]) };
      case 1: return { type: "string", ...this.maybe(0.5, { minLength: this.pick([1, 2]) }), ...this.maybe(0.5, { maxLength: this.pick([1, 2]) }), ...this.maybe(0.4, { pattern: this.pick(["^a", "b$", "a", "^x$"]) }) };
      case 2: {
        const s: Schema = { type: this.pick(["integer", "number"]) };
        if (this.next() < 0.6) s[this.pick(["minimum", "exclusiveMinimum"])] = this.pick([0, 1, 1.5, 5]);
        if (this.next() < 0.6) s[this.pick(["maximum", "exclusiveMaximum"])] = this.pick([0, 1, 5, 10]);
        return s;
      }
      case 3: return { enum: [...new Set(Array.from({ length: 1 + Math.floor(this.next() * 3) }, () => this.pick([null, true, 0, 1, 1.5, "a", "b", "x"])))] };
      case 4: return { const: this.pick([null, false, 1, "a", "ab", { a: 1 }, [1]]) };
      case 5: case 6: {
        const properties: Schema = {};
        for (const n of ["a", "b", "c"]) if (this.next() < 0.5) properties[n] = sub();
        const required = ["a", "b", "c"].filter(() => this.next() < 0.3);
        return {
          ...this.maybe(0.7, { type: "object" }), properties, ...(required.length > 0 ? { required } : {}),
          ...this.maybe(0.3, { additionalProperties: this.next() < 0.6 ? false : this.leaf(0) }),
          ...this.maybe(0.15, { patternProperties: { [this.pick(["^a", "b", "^c$"])]: this.leaf(0) } }),
          ...this.maybe(0.15, { [this.pick(["minProperties", "maxProperties"])]: this.pick([0, 1, 2]) }),
        };
      }
      case 7: return { type: "array", ...this.maybe(0.6, { items: sub() }), ...this.maybe(0.4, { minItems: this.pick([1, 2]) }), ...this.maybe(0.4, { maxItems: this.pick([1, 2]) }) };
      case 8: return { required: [...new Set(["a", "b", "c"].filter(() => this.next() < 0.5).concat(this.pick(["a", "b", "c"])))] };
      case 9: return { type: [this.pick(["null", "string"]), this.pick(["integer", "object", "array"])] };
      default: return {};
    }
  }
}

const INSTANCES = [
  "null", "true", "false", "0", "-0", "1", "1.5", "-1", "2", "5", "10", '""', '"a"', '"ab"', '"ba"', '"abc"', '"b"', '"x"',
  "[]", "[1]", '[1, "a"]', '["a", "b", "c"]', "[null, null]", '[{"a": 1}]', "{}", '{"a": 1}', '{"a": "x"}', '{"b": null}',
  '{"a": 1, "b": 2}', '{"a": "x", "b": "y"}', '{"a": [], "b": {}}', '{"c": 1}', '{"a": {"a": 1}}', '{"a": 1, "c": "ab"}', '{"b": 1.5, "c": true}',
];

describe("random oneOf/anyOf/allOf/not nests against ajv", () => {
  test("no instance ajv rejects is accepted; most schemas compile", () => {
    const ajv = new Ajv({ strict: false });
    const compiler = bytesCompiler();
    const letThrough: string[] = [];
    let compiled = 0;
    const schemas = [1, 2, 3].flatMap((seed) => {
      const g = new SchemaGenerator(seed);
      return Array.from({ length: 200 }, () => g.schema(3));
    });
    for (const schema of schemas) {
      const source = { kind: "json_schema" as const, schema: JSON.stringify(schema) };
      try {
        compiler.compile(source);
      } catch (e) {
        if (e instanceof GrammarError) continue;
        throw e;
      }
      compiled++;
      const validate = ajv.compile(schema);
      for (const text of INSTANCES) {
        if (!validate(JSON.parse(text)) && matches(compiler, source, text)) letThrough.push(`${JSON.stringify(schema)} ${text}`);
      }
    }
    expect(letThrough.slice(0, 10)).toEqual([]);
    // Refused: mostly schemas nothing satisfies (the nests are random); the rest name the keyword.
    expect(compiled).toBeGreaterThan(schemas.length / 2);
  }, COMPUTE_TEST_MS);
});
