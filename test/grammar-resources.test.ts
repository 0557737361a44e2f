/**
 * Small schemas that made the lexer and expression pool grow by
 * gigabytes (hundreds of patternProperties, overlapping or nested-star patterns, the same as a
 * tool's parameters) compile and mask with bounded work; a schema over the bounds is refused
 * quickly with a GrammarLimitError naming the limit, and the refusal is cached; a grammar whose
 * masks go over their own bounds is refused from then on; the MaskBench runner finishes a folder
 * holding such schemas, with them as compile errors and memory bounded.
 */
import { describe, expect, test } from "bun:test";
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { GrammarLimitError, RequestFieldError } from "../src/errors.ts";
import { GrammarConstraints } from "../src/grammar/constraints.ts";
import { pagellmEngine, readMaskBenchFiles, runMaskBench } from "../src/bench/grammar.ts";
import { GrammarCompiler, type GrammarSource } from "../src/grammar/compiler.ts";
import { GRAMMAR_LIMITS } from "../src/grammar/limits.ts";
import { GrammarMatcher } from "../src/grammar/matcher.ts";
import { TokenVocabulary } from "../src/grammar/vocabulary.ts";
import { loadGGUFTokenizer } from "../src/tokenizer/gguf-vocab.ts";
import { byteVocabulary, limitOf } from "./helpers/grammar.ts";
import { describeShared } from "./helpers/shared.ts";

const MB = 1 << 20;
const integerPatterns = (count: number, pattern: (i: number) => string): object => ({
  type: "object",
  patternProperties: Object.fromEntries(Array.from({ length: count }, (_, i) => [pattern(i), { type: "integer" }])),
});
const asTool = (schema: object): GrammarSource => ({
  kind: "tool_calls", calls: [{ name: "f", begin: "", end: "", schema, object: { open: "<tool_call>", argumentsKey: "arguments", close: "</tool_call>" } }],
  prefix: "", separator: "", suffix: "", repeat: false, controlTokens: [],
});
const keys300 = integerPatterns(300, (i) => `k${i}`);

/** Item 1's shapes, each with an output it must take and one it must refuse. */
const SHAPES: { name: string; source: GrammarSource; good: string; bad: string }[] = [
  { name: "300 patternProperties k0..k299", source: { kind: "json_schema", schema: keys300 }, good: '{"k12": 5, "ak3x": 7, "zz": "free"}', bad: '{"xk299": "no"}' },
  { name: "1,000 patterns ^(a+)+N$", source: { kind: "json_schema", schema: integerPatterns(1000, (i) => `^(a+)+${i}$`) }, good: '{"aaa999": 1, "b": null}', bad: '{"aa5": 1.5}' },
  { name: "200 overlapping ^.*c.*N$", source: { kind: "json_schema", schema: integerPatterns(200, (i) => `^.*c.*${i}$`) }, good: '{"xcy199": 2, "c": "any"}', bad: '{"cc19": []}' },
  { name: "the 300 patterns as a tool's parameters", source: asTool(keys300), good: '<tool_call>{"name": "f", "arguments": {"k7": 1}}</tool_call>', bad: '<tool_call>{"name": "f", "arguments": {"k7": "x"}}</tool_call>' },
];

/** 300 patterns whose schemas all differ: no union helps; the compile must stop at a limit. */
const hostile = {
  type: "object",
  patternProperties: Object.fromEntries(Array.from({ length: 300 }, (_, i) => [`k${i}`, { type: "integer", minimum: i }])),
};


describe("the small growing schemas over single bytes", () => {
  for (const shape of SHAPES) {
    test(`${shape.name}: compiles and matches within small bounds`, () => {
      const compiler = new GrammarCompiler(byteVocabulary());
      const t0 = performance.now();
      const grammar = compiler.compile(shape.source);
      expect(new GrammarMatcher(grammar).matchesText(shape.good)).toBe(true);
      expect(new GrammarMatcher(grammar).matchesText(shape.bad)).toBe(false);
      // Before: 54 s and 7 GB for the first (refused by exprs); now well under a second, a few hundred states.
      expect(performance.now() - t0).toBeLessThan(10_000);
      expect(grammar.maskMeter.usage.states).toBeLessThan(2_000);
      expect(grammar.maskMeter.usage.exprs).toBeLessThan(100_000);
    }, 30_000);
  }

  test("a schema over the limits is refused within the compile time limit, and a resend costs nothing", () => {
    const compiler = new GrammarCompiler(byteVocabulary());
    const t0 = performance.now();
    expect(["compileMs", "exprs"]).toContain(limitOf(() => compiler.compile({ kind: "json_schema", schema: hostile })));
    // The clock is read inside the expression pool's loops: the refusal comes near compileMs, not minutes later.
    expect(performance.now() - t0).toBeLessThan(GRAMMAR_LIMITS.compileMs + 6_000);
    const t1 = performance.now();
    expect(["compileMs", "exprs"]).toContain(limitOf(() => compiler.compile({ kind: "json_schema", schema: hostile })));
    expect(performance.now() - t1).toBeLessThan(50);
  }, 30_000);

  test("a grammar whose masks go over their bounds is refused there and from then on, compile included", () => {
    // [ab]*a[ab]{12}: each byte a new lexer state (the positions of the last a), with bounds of 60 states and none per token.
    const limits = { ...GRAMMAR_LIMITS, maskLexerStates: 60, maskLexerStatesPerToken: 0 };
    const compiler = new GrammarCompiler(byteVocabulary(), GRAMMAR_LIMITS.compileMs, { maskLimits: limits });
    const source: GrammarSource = { kind: "regex", pattern: "[ab]*a[ab]{12}" };
    const m = compiler.matcher(source);
    const mask = new Uint32Array(byteVocabulary().words);
    let refused: unknown = null;
    let x = 1;
    for (let i = 0; i < 200 && refused === null; i++) {
      try {
        m.fillNextTokenBitmask(mask);
        // Bytes of a fixed pseudo-random sequence (an LCG): a periodic one would revisit its states.
        x = (x * 1103515245 + 12345) & 0x7fffffff;
        m.acceptToken((x >> 16) & 1 ? 0x61 : 0x62);
      } catch (e) {
        refused = e;
      }
    }
    expect(refused).toBeInstanceOf(GrammarLimitError);
    expect((refused as GrammarLimitError).limit).toBe("maskLexerStates");
    expect((refused as Error).message).toContain("(limit: maskLexerStates)");
    // The matcher and the grammar stay refused, and the compiler answers the error on a resend.
    expect(() => m.fillNextTokenBitmask(mask)).toThrow(GrammarLimitError);
    expect(limitOf(() => compiler.compile(source))).toBe("maskLexerStates");
    // Other grammars of the same compiler are untouched.
    expect(compiler.matcher({ kind: "regex", pattern: "[ab]{3}" }).matchesText("aba")).toBe(true);
  });

  test("a long output is not refused: the mask bounds grow with the tokens accepted", () => {
    const limits = { ...GRAMMAR_LIMITS, maskLexerStates: 100 };
    const compiler = new GrammarCompiler(byteVocabulary(), GRAMMAR_LIMITS.compileMs, { maskLimits: limits });
    const m = compiler.matcher({ kind: "json_schema", schema: { type: "string", maxLength: 5000 } });
    const mask = new Uint32Array(byteVocabulary().words);
    const text = JSON.stringify("lorem ipsum ".repeat(300));
    for (const b of new TextEncoder().encode(text)) {
      m.fillNextTokenBitmask(mask);
      expect(m.acceptToken(b)).toBe(true);
    }
    expect(m.canTerminate()).toBe(true);
  });

  test("the compiler keeps grammars within a byte budget as well as a count: a large grammar holds its tables and the parse states it went through", () => {
    const schema = (title: string): GrammarSource => ({
      kind: "json_schema", schema: { title, type: "object", properties: Object.fromEntries(Array.from({ length: 500 }, (_, i) => [`p${i}`, { type: "integer" }])) },
    });
    const text = '{"p1": 1, "p250": 2, "p499": 3}';
    const tight = new GrammarCompiler(byteVocabulary(), 600_000, { cacheBytes: 4 * MB });
    const first = tight.compile(schema("a"));
    const before = first.footprintBytes;
    expect(new GrammarMatcher(first).matchesText(text)).toBe(true);
    // Each set after a member predicts every property after it: the memo grows with what was decoded.
    expect(first.footprintBytes).toBeGreaterThan(before + 100_000);
    expect(first.footprintBytes).toBeGreaterThan(MB / 2);
    for (let i = 0; i < 8; i++) tight.compile(schema(`b${i}`));
    expect(tight.compile(schema("a"))).not.toBe(first);
    const roomy = new GrammarCompiler(byteVocabulary(), 600_000);
    const kept = roomy.compile(schema("a"));
    for (let i = 0; i < 8; i++) roomy.compile(schema(`b${i}`));
    expect(roomy.compile(schema("a"))).toBe(kept);
  }, 60_000);
});

describeShared("the small growing schemas over Llama 3's vocabulary", ["vocab/ggml-vocab-llama-bpe.gguf"], ([vocabPath]) => {
  test("each compiles and masks token by token with bounded time and memory; the hostile one is refused", () => {
    const vocab = TokenVocabulary.fromTokenizer(loadGGUFTokenizer(vocabPath!).tokenizer);
    const mask = new Uint32Array(vocab.words);
    const rss0 = process.memoryUsage().rss;
    const t0 = performance.now();
    for (const shape of SHAPES) {
      const compiler = new GrammarCompiler(vocab);
      const grammar = compiler.compile(shape.source);
      const m = new GrammarMatcher(grammar);
      for (const t of vocab.encode(shape.good)) {
        m.fillNextTokenBitmask(mask);
        expect(((mask[t >>> 5]! >>> (t & 31)) & 1) === 1 && m.acceptToken(t)).toBe(true);
      }
      expect(m.canTerminate()).toBe(true);
      expect(grammar.maskMeter.usage.states).toBeLessThan(5_000);
    }
    expect(["compileMs", "exprs"]).toContain(limitOf(() => new GrammarCompiler(vocab).compile({ kind: "json_schema", schema: hostile })));
    // Before: past 2.5 GB and a minute for each; now seconds and some hundred MB for all of them.
    expect(performance.now() - t0).toBeLessThan(30_000);
    expect(process.memoryUsage().rss - rss0).toBeLessThan(800 * MB);
  }, 90_000);
});

describeShared("the request's front door", ["vocab/ggml-vocab-llama-bpe.gguf"], ([vocabPath]) => {
  test("the hostile schema is a RequestFieldError naming constraint and the limit (a 400), soon, and at once on a resend", () => {
    const { tokenizer } = loadGGUFTokenizer(vocabPath!);
    const constraints = new GrammarConstraints(tokenizer, tokenizer.vocabSize);
    const refusal = (): RequestFieldError => {
      try {
        constraints.compile({ kind: "json_schema", schema: hostile });
      } catch (e) {
        if (e instanceof RequestFieldError) return e;
        throw e;
      }
      throw new Error("compiled");
    };
    const t0 = performance.now();
    const first = refusal();
    expect(performance.now() - t0).toBeLessThan(GRAMMAR_LIMITS.compileMs + 8_000);
    expect(first.field).toBe("constraint");
    expect(first.message).toMatch(/\(limit: (compileMs|exprs)\)/);
    const t1 = performance.now();
    expect(refusal().message).toBe(first.message);
    expect(performance.now() - t1).toBeLessThan(50);
  }, 60_000);
});

describeShared("walks are cached per lexer space", ["vocab/ggml-vocab-llama-bpe.gguf"], ([vocabPath]) => {
  test("a second compiler of one vocabulary (as after a pool rotation) gets its own masks, not the first one's", () => {
    const vocab = TokenVocabulary.fromTokenizer(loadGGUFTokenizer(vocabPath!).tokenizer);
    const mask = new Uint32Array(vocab.words);
    new GrammarCompiler(vocab).matcher({ kind: "json_schema", schema: { type: "object", patternProperties: { k0: { type: "integer" } } } }).fillNextTokenBitmask(mask);
    const m = new GrammarCompiler(vocab).matcher({ kind: "json_schema", schema: { type: "object" } });
    for (const t of vocab.encode('{"name": 1}')) {
      m.fillNextTokenBitmask(mask);
      expect(((mask[t >>> 5]! >>> (t & 31)) & 1) === 1).toBe(true);
      expect(m.acceptToken(t)).toBe(true);
    }
  }, 30_000);
});

describeShared("MaskBench over a folder with hostile schemas", ["grammar/maskbench-sample", "vocab/ggml-vocab-llama-bpe.gguf"], ([sample, vocabPath]) => {
  test("the run finishes: the hostile schemas compile or are compile errors naming a limit, the ordinary ones pass, memory stays bounded", async () => {
    const dir = mkdtempSync(join(tmpdir(), "pagellm-maskbench-"));
    try {
      const ordinary = readdirSync(sample!).filter((n) => n.endsWith(".json")).sort().filter((_, i) => i % 50 === 0);
      for (const name of ordinary) writeFileSync(join(dir, name), readFileSync(join(sample!, name)));
      const write = (name: string, schema: object, tests: { valid: boolean; data: unknown }[]): void =>
        writeFileSync(join(dir, name), JSON.stringify({ description: name, meta: { features: [] }, schema, tests }));
      write("hostile-keys300.json", keys300, [{ valid: true, data: { k1: 1, other: "x" } }, { valid: false, data: { k1: "x" } }]);
      write("hostile-aplus.json", integerPatterns(1000, (i) => `^(a+)+${i}$`), [{ valid: true, data: { aa7: 3 } }, { valid: false, data: { aa7: null } }]);
      write("hostile-dotc.json", integerPatterns(200, (i) => `^.*c.*${i}$`), [{ valid: true, data: { c12: 3 } }, { valid: false, data: { c12: 0.5 } }]);
      write("hostile-differing.json", hostile, [{ valid: true, data: { k5: 7 } }]);
      const vocab = TokenVocabulary.fromTokenizer(loadGGUFTokenizer(vocabPath!).tokenizer);
      const files = readMaskBenchFiles(dir);
      const rss0 = process.memoryUsage().rss;
      const r = await runMaskBench(files, pagellmEngine(vocab), vocab.encode);
      expect(r.schemas).toBe(files.length);
      expect(r.passing + r.compile_error + r.validation_error + r.invalidation_error).toBe(files.length);
      expect(r.invalidation_error).toBe(0);
      const failed = new Map(r.failures.map((f) => [f.file, f]));
      for (const name of ["hostile-keys300.json", "hostile-aplus.json", "hostile-dotc.json"]) expect(failed.get(name)).toBeUndefined();
      expect(failed.get("hostile-differing.json")?.kind).toBe("compile_error");
      expect(failed.get("hostile-differing.json")?.why).toMatch(/\(limit: (compileMs|exprs)\)/);
      expect(process.memoryUsage().rss - rss0).toBeLessThan(1024 * MB);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }, 120_000);
});
