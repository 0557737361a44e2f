/**
 * Grammar front ends under large, deep and malformed input:
 * a big enum or choice list and a long GBNF rule chain cost what their size does (counted in
 * expression nodes, which is what memory follows, and in wall time with room for a busy machine);
 * nesting past GRAMMAR_LIMITS.nesting is a GrammarLimitError naming it, never a stack overflow; a
 * grammar or pattern that matches nothing, a text that is not Unicode scalar values, a quantifier
 * on a quantifier and a fractional count are GrammarErrors naming where.
 */
import { describe, expect, test } from "bun:test";
import { GrammarError, GrammarLimitError } from "../src/errors.ts";
import { GrammarCompiler, type GrammarSource } from "../src/grammar/compiler.ts";
import { GRAMMAR_LIMITS } from "../src/grammar/limits.ts";
import { allocateTokenBitmask } from "../src/grammar/token-bitmask.ts";
import { byteVocabulary, matches } from "./helpers/grammar.ts";

/** A compiler of its own (its pool counts only this test's nodes), with time to spare on a busy machine. */
const patient = (): GrammarCompiler => new GrammarCompiler(byteVocabulary(), 600_000);

/** The error compiling `source` gives (failing the test when it compiles). */
function refusal(compiler: GrammarCompiler, source: GrammarSource): GrammarError {
  try {
    compiler.compile(source);
  } catch (e) {
    if (e instanceof GrammarError) return e;
    throw e;
  }
  throw new Error("compiled, expected a GrammarError");
}

/** GBNF rules root, a1, ..., a(n-1): each `body(i)` but the last, which is `last`. */
function ruleChain(n: number, body: (next: string) => string, last: string): string {
  return Array.from({ length: n }, (_, i) => `${i === 0 ? "root" : `a${i}`} ::= ${i === n - 1 ? last : body(`a${i + 1}`)}`).join("\n");
}

/** Nodes the compile and a few steps of matching made: what a request holds afterwards. */
function nodesAfter(compiler: GrammarCompiler, source: GrammarSource, text: string): number {
  const m = compiler.matcher(source);
  const mask = allocateTokenBitmask(257);
  for (const b of new TextEncoder().encode(text)) {
    m.fillNextTokenBitmask(mask);
    expect(m.acceptToken(b)).toBe(true);
  }
  m.fillNextTokenBitmask(mask);
  expect(m.canTerminate()).toBe(true);
  return m.grammar.space.pool.size;
}

/**
 * How much longer compiling `schema(large)` takes than `schema(small)`: linear work gives about
 * large / small, quadratic its square. Each size's fastest of five runs, the sizes alternating and
 * the heap collected before each run, so that neither a busy machine's pause nor the garbage of
 * the run before lands on one size only.
 */
function compileTimeRatio(schema: (n: number) => GrammarSource, small: number, large: number): number {
  const seconds = (n: number): number => {
    Bun.gc(true);
    const started = performance.now();
    patient().compile(schema(n));
    return performance.now() - started;
  };
  seconds(small); // warm the code paths
  let best = { small: Infinity, large: Infinity };
  for (let round = 0; round < 5; round++) best = { small: Math.min(best.small, seconds(small)), large: Math.min(best.large, seconds(large)) };
  return best.large / best.small;
}

describe("cost proportional to size", () => {
  test("an enum of 100,000 integers: a trie of its texts, not an Or of 300,000 literals", () => {
    const c = patient();
    const source: GrammarSource = { kind: "json_schema", schema: { enum: Array.from({ length: 100_000 }, (_, i) => i) } };
    const started = performance.now();
    // An n-way Or made 540,000 nodes by the third byte; the trie's shared subtrees make a few thousand.
    expect(nodesAfter(c, source, "54321")).toBeLessThan(50_000);
    expect(performance.now() - started).toBeLessThan(30_000);
    expect(matches(c, source, "99999.0")).toBe(true);
    expect(matches(c, source, "100000")).toBe(false);
  }, 60_000);

  test("100,000 choices: a trie as well", () => {
    const c = patient();
    const choices = Array.from({ length: 100_000 }, (_, i) => `c${(i * 7919) % 100_000}`);
    const source: GrammarSource = { kind: "choice", choices };
    expect(nodesAfter(c, source, "c31337")).toBeLessThan(50_000);
    expect(matches(c, source, "c1")).toBe(true);
    expect(matches(c, source, "c100000")).toBe(false);
    expect(matches(c, source, "c")).toBe(false);
  }, 60_000);

  test("allOf of object branches with additionalProperties: true costs linear time in the branches", () => {
    // Each branch's `true` once gave every key declared before it one more schema: 1,000 branches
    // cost 25 times what 200 did (about 2 s on a quiet machine), now about 5 times.
    const schema = (n: number): GrammarSource => ({
      kind: "json_schema",
      schema: { type: "object", allOf: Array.from({ length: n }, (_, i) => ({ type: "object", properties: { [`p${i}`]: { type: "string", maxLength: 5 } }, additionalProperties: true })) },
    });
    expect(compileTimeRatio(schema, 200, 1000)).toBeLessThan(12);
    expect(matches(patient(), schema(1000), '{"p0": "abc", "p999": "x", "q": 1}')).toBe(true);
    expect(matches(patient(), schema(1000), '{"p0": "abcdef"}')).toBe(false);
  }, 120_000);

  test("1,000 optional properties, from allOf branches or one object, cost linear time and keep their language", () => {
    // Each branch once copied every key merged so far (and the nullable rules were found by a
    // sweep per optional property): 2,000 branches cost 25 times what 400 did, now about 5 times.
    const branches = (n: number): GrammarSource => ({ kind: "json_schema", schema: { allOf: Array.from({ length: n }, (_, i) => ({ properties: { [`p${i}`]: { type: "integer" } } })) } });
    const object = (n: number): GrammarSource => ({
      kind: "json_schema", schema: { type: "object", properties: Object.fromEntries(Array.from({ length: n }, (_, i) => [`p${i}`, { type: "integer" }])) },
    });
    for (const schema of [branches, object]) {
      expect(compileTimeRatio(schema, 400, 2000)).toBeLessThan(12);
    }
    // Declared properties in their order, each optional, then others (not declared ones); allOf
    // without "type" also allows values that are not objects.
    const c = patient();
    for (const [text, ok] of [
      ['{"p0": 1, "p999": -2}', true], ['{}', true], ['{"p3": 1, "q": "x", "r": [1]}', true], ['"text"', true], ["7", true],
      ['{"p0": "a"}', false], ['{"p5": 1, "p3": 2}', false], ['{"q": 1, "p3": 2}', false], ['{"p1": 1.5}', false], ['{"p1": 1, "p1": 2}', false],
    ] as const) expect(matches(c, branches(1000), text)).toBe(ok);
    for (const [text, ok] of [['{"p0": 1, "p999": -2}', true], ['{"q": {}}', true], ['"text"', false], ['{"p5": 1, "p3": 2}', false], ['{"p2": null}', false]] as const) {
      expect(matches(c, object(1000), text)).toBe(ok);
    }
  }, 120_000);

  test("a GBNF chain of 40,000 rules compiles in linear time (regular, and recursive)", () => {
    const c = patient();
    const n = 40_000;
    const started = performance.now();
    const regular: GrammarSource = { kind: "gbnf", grammar: ruleChain(n, (next) => `"x" ${next}`, `"x"`) };
    expect(matches(c, regular, "x".repeat(n))).toBe(true);
    expect(matches(c, regular, "x".repeat(n - 1))).toBe(false);
    const recursive: GrammarSource = { kind: "gbnf", grammar: ruleChain(n, (next) => `"x" ${next}`, `"y" | "x" root`) };
    expect(matches(c, recursive, `${"x".repeat(n - 1)}y`)).toBe(true);
    expect(performance.now() - started).toBeLessThan(20_000);
  }, 60_000);

  test("GBNF alternatives of 60,000 literals, in a recursive rule and in a regular one: one trie lexeme", () => {
    // As an Or of 60,000 literals (a terminal each in the recursive rule) they made 61,000 nodes; as a trie, about 50.
    const c = patient();
    const literals = Array.from({ length: 60_000 }, (_, i) => `"${i}"`).join(" | ");
    expect(nodesAfter(c, { kind: "gbnf", grammar: `root ::= "(" root ")" | ${literals}` }, "((59999))")).toBeLessThan(5_000);
    expect(nodesAfter(patient(), { kind: "gbnf", grammar: `root ::= ${literals}` }, "31337")).toBeLessThan(5_000);
    expect(matches(c, { kind: "gbnf", grammar: `root ::= "(" root ")" | ${literals}` }, "(60000)")).toBe(false);
  }, 60_000);

  test("regular rules that double (a1 ::= a0 a0, ... 40 times) are stopped at the node limit, rule by rule", () => {
    const c = patient();
    const grammar = ['a0 ::= "x"', ...Array.from({ length: 40 }, (_, i) => `a${i + 1} ::= a${i} a${i}`), "root ::= a40"].join("\n");
    const started = performance.now();
    const e = refusal(c, { kind: "gbnf", grammar });
    expect(e).toBeInstanceOf(GrammarLimitError);
    expect((e as GrammarLimitError).limit).toBe("exprs");
    expect(performance.now() - started).toBeLessThan(20_000);
  }, 60_000);

  test("a refusal is cached: the second request costs a lookup", () => {
    const c = patient();
    const deep: GrammarSource = { kind: "gbnf", grammar: `root ::= ${"(".repeat(10_000)}"a"${")".repeat(10_000)}` };
    const first = refusal(c, deep);
    expect(refusal(c, deep)).toBe(first);
  });
});

describe("nesting is a named limit, never a stack overflow", () => {
  const limit = (c: GrammarCompiler, source: GrammarSource): string => {
    const e = refusal(c, source);
    expect(e).toBeInstanceOf(GrammarLimitError);
    expect(e.message).toContain("(limit: nesting)");
    expect(e.message.length).toBeLessThan(300);
    return (e as GrammarLimitError).limit;
  };
  const refChain = (n: number): GrammarSource => {
    const defs: Record<string, unknown> = {};
    for (let i = 0; i < n; i++) defs[`d${i}`] = i === n - 1 ? { type: "integer" } : { $ref: `#/$defs/d${i + 1}` };
    return { kind: "json_schema", schema: { $defs: defs, $ref: "#/$defs/d0" } };
  };

  test("a $ref chain of 20,000 $defs, 10,000 nested GBNF parentheses, 100,000 nested regex ones", () => {
    const c = patient();
    expect(limit(c, refChain(20_000))).toBe("nesting");
    expect(limit(c, { kind: "gbnf", grammar: `root ::= ${"(".repeat(10_000)}"a"${")".repeat(10_000)}` })).toBe("nesting");
    expect(limit(c, { kind: "regex", pattern: `${"(".repeat(100_000)}a${")".repeat(100_000)}` })).toBe("nesting");
    expect(limit(c, { kind: "json_schema", schema: { type: "string", pattern: `${"(".repeat(5_000)}a${")".repeat(5_000)}` } })).toBe("nesting");
  });

  test("up to the limit they compile and match", () => {
    const c = patient();
    const depth = GRAMMAR_LIMITS.nesting;
    expect(matches(c, refChain(depth - 1), "42")).toBe(true);
    expect(matches(c, { kind: "gbnf", grammar: `root ::= ${"(".repeat(depth)}"a" root?${")".repeat(depth)}` }, "aaa")).toBe(true);
    expect(matches(c, { kind: "regex", pattern: `${"(?:a|".repeat(depth)}b${")".repeat(depth)}` }, "b")).toBe(true);
  });

  test("a deep shape no front end counts (a chain of 40,000 optional rules) is refused, not thrown as a RangeError", () => {
    const c = patient();
    const source: GrammarSource = { kind: "gbnf", grammar: ruleChain(40_000, (next) => `"x"? ${next}`, `"x"?`) };
    let outcome: string;
    try {
      outcome = matches(c, source, "xx") ? "matched" : "did not match";
    } catch (e) {
      outcome = e instanceof GrammarLimitError ? e.limit : String(e);
    }
    expect(["matched", "nesting"]).toContain(outcome);
  });
});

describe("a language with nothing in it is refused at compile time", () => {
  test.each([
    ["gbnf", { kind: "gbnf", grammar: "root ::= []" }],
    ["gbnf", { kind: "gbnf", grammar: 'root ::= [] "a" | "b" []' }],
    ["regex", { kind: "regex", pattern: "[^\\s\\S]" }],
    ["regex", { kind: "regex", pattern: "a[]b" }],
    ["regex", { kind: "regex", pattern: "^(?=b)a$" }],
    ["json_schema", { kind: "json_schema", schema: { type: "object", properties: { a: { type: "string", pattern: "^a$", minLength: 3 } }, required: ["a"] } }],
    ["json_schema", { kind: "json_schema", schema: { type: "integer", minimum: 1, maximum: 9, multipleOf: 10 } }],
  ] as [string, GrammarSource][])("%s %j", (_, source) => {
    expect(refusal(patient(), source).message).toContain("matches nothing");
  });

  test("an empty alternative beside a real one is fine", () => {
    expect(matches(patient(), { kind: "gbnf", grammar: 'root ::= [] | "a"' }, "a")).toBe(true);
    const schema = { anyOf: [{ type: "string", pattern: "^a$", minLength: 3 }, { type: "integer", minimum: 1, maximum: 9, multipleOf: 10 }, { type: "null" }] };
    expect(matches(patient(), { kind: "json_schema", schema }, "null")).toBe(true);
  });
});

describe("text that is not Unicode scalar values is refused, naming where", () => {
  const lone = "\ud800";
  test.each([
    ["const", { kind: "json_schema", schema: { const: `a${lone}` } }, "# (enum/const)"],
    ["enum", { kind: "json_schema", schema: { enum: ["ok", `\udc00b`] } }, "# (enum/const)"],
    ["property name", { kind: "json_schema", schema: { type: "object", properties: { [`k${lone}`]: {} } } }, "#/properties"],
    ["gbnf literal", { kind: "gbnf", grammar: `root ::= "a${lone}"` }, "gbnf line 1"],
    ["gbnf \\u escape", { kind: "gbnf", grammar: 'root ::= "a\\uD800"' }, "gbnf line 1"],
    ["gbnf \\U escape", { kind: "gbnf", grammar: 'root ::= "\\U00110000"' }, "gbnf line 1"],
    ["gbnf class", { kind: "gbnf", grammar: "root ::= [\\uDC00]" }, "gbnf line 1"],
    ["regex \\u escape", { kind: "regex", pattern: "\\uD800" }, "regex"],
    ["regex raw", { kind: "regex", pattern: `x${lone}` }, "regex"],
    ["pattern", { kind: "json_schema", schema: { type: "string", pattern: "^\\uDBFF$" } }, "#/pattern"],
    ["choice", { kind: "choice", choices: ["yes", `n${lone}o`] }, "choice 1"],
  ] as [string, GrammarSource, string][])("%s", (_, source, where) => {
    const e = refusal(patient(), source);
    expect(e.message.startsWith(where)).toBe(true);
    expect(e.message).toMatch(/surrogate|above U\+10FFFF/);
  });

  test("a surrogate pair written as two \\u escapes in a regex is its one character", () => {
    const c = patient();
    expect(matches(c, { kind: "regex", pattern: "\\uD83D\\uDE00+" }, "😀😀")).toBe(true);
    expect(matches(c, { kind: "json_schema", schema: { type: "string", pattern: "^[\\uD83D\\uDE00-\\uD83D\\uDE4F]$" } }, '"😃"')).toBe(true);
  });
});

describe("wrong values of pattern and counts", () => {
  test.each(["a**", "a+*", "a{2}{3}", "a*??", "(a)?+"])("pattern %j: a quantifier on a quantifier", (pattern) => {
    const e = refusal(patient(), { kind: "json_schema", schema: { type: "string", pattern } });
    expect(e.message).toContain("#/pattern");
    expect(e.message).toContain("a quantifier after a quantifier");
  });

  test("lazy quantifiers and a literal brace still parse", () => {
    const c = patient();
    expect(matches(c, { kind: "regex", pattern: "a*?b+?c??d{1,2}?x{" }, "bbdx{")).toBe(true);
  });

  test.each(["minLength", "maxLength", "minItems", "maxItems", "minProperties", "maxProperties"])("%s: 1.5 is refused, 2.0 is 2", (keyword) => {
    const type = keyword.endsWith("Length") ? "string" : keyword.endsWith("Items") ? "array" : "object";
    const e = refusal(patient(), { kind: "json_schema", schema: { type, [keyword]: 1.5 } });
    expect(e.message).toBe(`#/${keyword}: must be a non-negative integer`);
    expect(() => patient().compile({ kind: "json_schema", schema: `{"type": "${type}", "${keyword}": 2.0}` })).not.toThrow();
  });
});
