/**
 * Compile bounds (src/grammar/limits.ts): huge, self-referring, remote or unsatisfiable schemas
 * and grammars are refused with typed errors naming the limit or the keyword, after bounded work;
 * recursive schemas that are fine compile and match.
 */
import { describe, expect, test } from "bun:test";
import { GrammarError } from "../src/errors.ts";
import { GrammarCompiler } from "../src/grammar/compiler.ts";
import { GRAMMAR_LIMITS } from "../src/grammar/limits.ts";
import { byteVocabulary, bytesCompiler, limitOf, matches } from "./helpers/grammar.ts";

const compiler = bytesCompiler();
// The count limits are tested with time to spare, so that on a busy machine the clock never trips first.
const patient = new GrammarCompiler(byteVocabulary(), 600_000);

describe("compile bounds", () => {
  test("too many rules: a huge object, a huge counted array", () => {
    const properties = Object.fromEntries(Array.from({ length: 30_000 }, (_, i) => [`p${i}`, {}]));
    expect(limitOf(() => patient.compile({ kind: "json_schema", schema: { type: "object", properties } }))).toBe("rules");
    expect(limitOf(() => patient.compile({ kind: "json_schema", schema: { type: "array", minItems: 1, maxItems: 10 * GRAMMAR_LIMITS.rules } }))).toBe("rules");
  });

  test("too large a source", () => {
    const big = JSON.stringify({ type: "string", description: "x".repeat(GRAMMAR_LIMITS.sourceBytes) });
    expect(limitOf(() => compiler.compile({ kind: "json_schema", schema: big }))).toBe("sourceBytes");
  });

  test("too many expression nodes: an enormous enum", () => {
    // Pseudo-random letters, so that the enum's trie shares little but the first few: about 37 nodes each.
    let seed = 1;
    const letter = (): string => String.fromCharCode(97 + ((seed = (Math.imul(seed, 1103515245) + 12345) >>> 0) >>> 16) % 26);
    const values = Array.from({ length: 16_000 }, () => Array.from({ length: 40 }, letter).join(""));
    expect(limitOf(() => patient.compile({ kind: "json_schema", schema: { enum: values } }))).toBe("exprs");
  });

  test("a compile that runs past its time is stopped (a budget of 0 ms: at the first check)", () => {
    const impatient = new GrammarCompiler(byteVocabulary(), 0);
    expect(limitOf(() => impatient.compile({ kind: "json_schema", schema: { type: "object", properties: { a: {} } } }))).toBe("compileMs");
  });

  test("anyOf distributed over allOf is bounded", () => {
    const choice = { anyOf: [{ type: "integer" }, { type: "string" }, { type: "null" }, { type: "boolean" }] };
    expect(limitOf(() => compiler.compile({ kind: "json_schema", schema: { allOf: [choice, choice, choice, choice, choice] } }))).toBe("allOfBranches");
  });

  test("the errors are GrammarErrors with a one-line message naming the limit", () => {
    try {
      compiler.compile({ kind: "json_schema", schema: { type: "array", maxItems: 1_000_000, minItems: 1_000_000 } });
    } catch (e) {
      expect(e).toBeInstanceOf(GrammarError);
      expect((e as Error).message).toContain("(limit: rules)");
      expect((e as Error).message).not.toContain("\n");
    }
  });
});

describe("recursion and references", () => {
  test("a recursive schema compiles once per $ref target and matches deep nesting", () => {
    const tree = { $defs: { t: { type: "object", properties: { kids: { type: "array", items: { $ref: "#/$defs/t" } } }, additionalProperties: false } }, $ref: "#/$defs/t" };
    const deep = '{"kids": ['.repeat(40) + "{}" + "]}".repeat(40);
    expect(matches(compiler, { kind: "json_schema", schema: tree }, deep)).toBe(true);
    expect(matches(compiler, { kind: "json_schema", schema: tree }, deep.slice(0, -1))).toBe(false);
  });

  test("self-reference with nothing else, or through allOf, is refused, never expanded", () => {
    expect(() => compiler.compile({ kind: "json_schema", schema: { $ref: "#" } })).toThrow("matches nothing");
    expect(() => compiler.compile({ kind: "json_schema", schema: { $defs: { a: { allOf: [{ $ref: "#/$defs/a" }] } }, $ref: "#/$defs/a" } })).toThrow("refers to itself");
    expect(() => compiler.compile({ kind: "gbnf", grammar: 'root ::= root "a"' })).toThrow("matches nothing");
  });

  test("a remote $ref is refused, naming it", () => {
    expect(() => compiler.compile({ kind: "json_schema", schema: { properties: { a: { $ref: "http://example.com/a.json#/x" } } } })).toThrow('$ref "http://example.com/a.json#/x" points outside the schema');
    expect(() => compiler.compile({ kind: "json_schema", schema: { $ref: "other.json" } })).toThrow(GrammarError);
  });

  test("a schema that nothing satisfies is refused", () => {
    expect(() => compiler.compile({ kind: "json_schema", schema: false })).toThrow("matches nothing");
    expect(() => compiler.compile({ kind: "json_schema", schema: { type: "integer", minimum: 5, maximum: 1 } })).toThrow("matches nothing");
    expect(() => compiler.compile({ kind: "json_schema", schema: { type: "object", required: ["a"], additionalProperties: false } })).toThrow("matches nothing");
  });

  test("a refusal is cached like a grammar: the same schema again throws at once the same error", () => {
    const bad = { kind: "json_schema" as const, schema: { type: "array", uniqueItems: true } };
    let first: unknown;
    try {
      compiler.compile(bad);
    } catch (e) {
      first = e;
    }
    try {
      compiler.compile(bad);
    } catch (e) {
      expect(e).toBe(first);
    }
  });
});
