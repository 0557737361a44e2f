/**
 * GrammarMatcher's contract (src/grammar/matcher.ts, forced.ts): rollback and fork give exactly the
 * state of a fresh matcher fed the same tokens; a mask allows a token iff acceptToken takes it;
 * end-of-generation only where the grammar may end; forced tokens are the canonical split of the
 * only continuation.
 */
import { describe, expect, test } from "bun:test";
import { GrammarCompiler, type GrammarSource } from "../src/grammar/compiler.ts";
import type { GrammarMatcher } from "../src/grammar/matcher.ts";
import { allocateTokenBitmask, allowedTokens } from "../src/grammar/token-bitmask.ts";
import { TokenVocabulary } from "../src/grammar/vocabulary.ts";
import { loadGGUFTokenizer } from "../src/tokenizer/gguf-vocab.ts";
import { Xoshiro128 } from "../src/util/random.ts";
import { tinyVocabulary } from "./helpers/grammar.ts";
import { describeShared } from "./helpers/shared.ts";

const PIECES = ["{", "}", '"', "a", "b", ":", ",", " ", "1", "2", "[", "]", "true", '"a"', '": ', ", ", '{"', "ab", "\n"];
const vocab = tinyVocabulary(PIECES);
const EOS = PIECES.length;
const compiler = new GrammarCompiler(vocab);
const SCHEMA: GrammarSource = {
  kind: "json_schema",
  schema: { type: "object", properties: { a: { type: "array", items: { type: "integer" } }, b: { type: "boolean" } }, required: ["a"] },
};

function maskOf(m: GrammarMatcher): number[] {
  const mask = allocateTokenBitmask(vocab.size);
  m.fillNextTokenBitmask(mask);
  return allowedTokens(mask, vocab.size);
}

/** A random walk through the grammar: at each step one of the allowed tokens (not the end). */
function randomPath(rng: Xoshiro128, steps: number): number[] {
  const m = compiler.matcher(SCHEMA);
  const path: number[] = [];
  for (let i = 0; i < steps; i++) {
    const allowed = maskOf(m).filter((t) => t !== EOS);
    if (allowed.length === 0) break;
    const t = allowed[Math.floor(rng.nextFloat() * allowed.length)]!;
    expect(m.acceptToken(t)).toBe(true);
    path.push(t);
  }
  return path;
}

function fresh(tokens: readonly number[]): GrammarMatcher {
  const m = compiler.matcher(SCHEMA);
  for (const t of tokens) expect(m.acceptToken(t)).toBe(true);
  return m;
}

describe("GrammarMatcher", () => {
  test("mask bit t is set exactly when acceptToken(t) succeeds, at every step of random paths", () => {
    const rng = new Xoshiro128(11);
    for (let walk = 0; walk < 20; walk++) {
      const path = randomPath(rng, 25);
      for (let k = 0; k <= path.length; k++) {
        const m = fresh(path.slice(0, k));
        const allowed = new Set(maskOf(m));
        for (let t = 0; t < vocab.size; t++) expect([k, t, allowed.has(t)]).toEqual([k, t, m.fork().acceptToken(t)]);
      }
    }
  });

  test("rollback(n) restores exactly the state of a fresh matcher fed the shorter prefix", () => {
    const rng = new Xoshiro128(12);
    for (let walk = 0; walk < 20; walk++) {
      const path = randomPath(rng, 20);
      const m = fresh(path);
      for (let n = path.length; n >= 0; n--) {
        const probe = fresh(path);
        probe.rollback(path.length - n);
        const reference = fresh(path.slice(0, n));
        expect(maskOf(probe)).toEqual(maskOf(reference));
        expect(probe.canTerminate()).toBe(reference.canTerminate());
        expect(probe.tokenCount).toBe(n);
      }
      // Roll back, then go on differently: as if the rolled-back tokens never were.
      m.rollback(Math.min(3, path.length));
      expect(maskOf(m)).toEqual(maskOf(fresh(path.slice(0, path.length - Math.min(3, path.length)))));
      expect(() => m.rollback(m.tokenCount + 1)).toThrow(RangeError);
    }
  });

  test("fork() is independent: each branch equals a fresh matcher on its own tokens", () => {
    const rng = new Xoshiro128(13);
    for (let walk = 0; walk < 15; walk++) {
      const path = randomPath(rng, 12);
      const cut = Math.floor(path.length / 2);
      const m = fresh(path.slice(0, cut));
      const f = m.fork();
      for (const t of path.slice(cut)) expect(f.acceptToken(t)).toBe(true);
      expect(maskOf(m)).toEqual(maskOf(fresh(path.slice(0, cut))));
      expect(maskOf(f)).toEqual(maskOf(fresh(path)));
    }
  });

  test("the end of generation: allowed only where the grammar may end; after it, nothing else", () => {
    const m = compiler.matcher(SCHEMA);
    for (const piece of ['{"', "a", '": ', "[", "1", "]"]) {
      expect(maskOf(m).includes(EOS)).toBe(false);
      expect(m.acceptToken(PIECES.indexOf(piece))).toBe(true);
    }
    expect(m.acceptToken(EOS)).toBe(false);
    expect(m.acceptToken(PIECES.indexOf("}"))).toBe(true);
    expect(m.canTerminate()).toBe(true);
    expect(maskOf(m)).toEqual([PIECES.indexOf(" "), PIECES.indexOf("\n"), EOS]);
    expect(m.acceptToken(EOS)).toBe(true);
    expect(m.isTerminated()).toBe(true);
    expect(m.canTerminate()).toBe(false);
    expect(m.acceptToken(PIECES.indexOf(" "))).toBe(false);
    expect(maskOf(m)).toEqual([EOS]);
    m.rollback(1);
    expect(m.isTerminated()).toBe(false);
  });

  test("tokens with no bytes (control tokens, padding rows past the tokenizer) are never allowed", () => {
    const padded = new TokenVocabulary(40, [...PIECES.map((p) => new TextEncoder().encode(p)), new Uint8Array(0), new Uint8Array(0)], Int32Array.of(EOS), vocab.encode);
    const m = new GrammarCompiler(padded).matcher({ kind: "json_object" });
    const mask = allocateTokenBitmask(40);
    m.fillNextTokenBitmask(mask);
    expect(allowedTokens(mask, 40).filter((t) => t > EOS)).toEqual([]);
    expect(m.acceptToken(EOS + 1)).toBe(false);
    expect(m.acceptToken(39)).toBe(false);
  });

  test("compiled grammars are cached by content", () => {
    expect(compiler.compile(SCHEMA)).toBe(compiler.compile({ ...SCHEMA, schema: { ...(SCHEMA as { schema: object }).schema } }));
    expect(compiler.compile(SCHEMA)).not.toBe(compiler.compile({ kind: "json_object" }));
  });
});

describe("forced tokens", () => {
  test("the only continuation, split as the tokenizer would, the last token held back", () => {
    const forcedPieces = (m: GrammarMatcher): string[] => m.forcedTokens().map((t) => PIECES[t]!);
    const compact: GrammarSource = {
      kind: "json_schema",
      schema: { type: "object", properties: { ab: { type: "boolean" }, b: { const: true } }, required: ["ab", "b"], additionalProperties: false },
      options: { whitespaceFlexible: false },
    };
    const m = compiler.matcher(compact);
    expect(new TextDecoder().decode(m.forcedBytes())).toBe('{"ab": ');
    // {"ab": tokenizes as {" ab ": — the last held back (what follows could merge with it).
    expect(forcedPieces(m)).toEqual(['{"', "ab"]);
    for (const t of m.forcedTokens()) expect(m.acceptToken(t)).toBe(true);
    expect(forcedPieces(m)).toEqual([]);
    expect(m.acceptToken(PIECES.indexOf('": '))).toBe(true);
    expect(m.forcedTokens()).toEqual([]);
    expect(m.acceptToken(PIECES.indexOf("true"))).toBe(true);
    // Then ", "b": true}" is the only way on, and the grammar ends after it: nothing held back.
    expect(new TextDecoder().decode(m.forcedBytes())).toBe(', "b": true}');
    const forced = m.forcedTokens();
    expect(forced.map((t) => PIECES[t]).join("")).toBe(', "b": true}');
    for (const t of forced) expect(m.acceptToken(t)).toBe(true);
    expect(m.canTerminate()).toBe(true);
  });

  test("nothing is forced where the model has a choice, or where the split would cross the last token", () => {
    const m = compiler.matcher(SCHEMA);
    expect(m.forcedTokens()).toEqual([]); // whitespace or "{"
    const choice = compiler.matcher({ kind: "choice", choices: ["ab", "a1"] });
    expect(new TextDecoder().decode(choice.forcedBytes())).toBe("a");
    expect(choice.forcedTokens()).toEqual([]); // "a" could merge into "ab": the model decides
  });
});

describeShared("matcher over Llama 3's vocabulary", ["vocab/ggml-vocab-llama-bpe.gguf"], ([path]) => {
  test("a JSON answer token by token: masks agree with acceptToken, forced tokens are canonical", () => {
    const tokenizer = loadGGUFTokenizer(path!).tokenizer;
    const big = TokenVocabulary.fromTokenizer(tokenizer);
    const c = new GrammarCompiler(big);
    const src: GrammarSource = { kind: "json_schema", schema: { type: "object", properties: { name: { type: "string", maxLength: 20 }, tags: { type: "array", items: { enum: ["alpha", "beta"] } } }, required: ["name", "tags"] }, options: { whitespaceFlexible: false } };
    const text = '{"name": "Ada Lovelace", "tags": ["alpha", "beta"]}';
    const m = c.matcher(src);
    const mask = allocateTokenBitmask(big.size);
    const rng = new Xoshiro128(5);
    for (const id of big.encode(text)) {
      m.fillNextTokenBitmask(mask);
      const allowed = new Set(allowedTokens(mask, big.size));
      expect(allowed.has(id)).toBe(true);
      for (let k = 0; k < 200; k++) {
        const t = Math.floor(rng.nextFloat() * big.size);
        expect([t, allowed.has(t)]).toEqual([t, m.fork().acceptToken(t)]);
      }
      const probe = m.fork();
      for (const t of m.forcedTokens()) expect(probe.acceptToken(t)).toBe(true);
      expect(m.acceptToken(id)).toBe(true);
    }
    expect(m.canTerminate()).toBe(true);
    // Forced at the start: the canonical tokens of '{"name": "' but the last.
    const start = c.matcher(src);
    const forced = start.forcedTokens();
    expect(tokenizer.decode(forced)).toBe(tokenizer.decode(big.encode('{"name": "').slice(0, -1)));
  });
});
