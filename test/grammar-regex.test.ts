/**
 * Regular expressions (src/grammar/regex-syntax.ts, regex-expr.ts, code-set.ts, json-strings.ts)
 * against JavaScript's own RegExp, the independent oracle: full-match (vLLM's regex) and search
 * (JSON Schema's pattern) readings, raw UTF-8 and inside JSON strings in any spelling.
 */
import { describe, expect, test } from "bun:test";
import { ANY_CHAR, utf8Expr } from "../src/grammar/code-set.ts";
import { ExprPool } from "../src/grammar/expr.ts";
import { jsonCharExpr, pythonJsonQuote, quoted } from "../src/grammar/json-strings.ts";
import { regexToExpr } from "../src/grammar/regex-expr.ts";
import { anchoredLiterals, parseRegex, RegexSyntaxError } from "../src/grammar/regex-syntax.ts";
import { Xoshiro128 } from "../src/util/random.ts";

const utf8 = new TextEncoder();
const PATTERNS = [
  "abc", "a|b", "a*b+c?", "[a-z]{2,4}", "(ab)+", "[^0-9]+", "\\d{3}-\\d{2}", "x.y", "(?:a|bc)*d", "[\\w.-]+@[\\w-]+\\.[a-z]{2,}",
  "é+", "[α-ω]+", "\\u00e9a", "a{3}", "(a|b){0,2}c", "[\\s\\S]", "[^]", "[]a", "a{2,}", "\\.", "[-a]", "[a-]+", "\\x41b", "(?<n>a)b",
  "a*?b", "[\\d.]+", "\\W\\D", "[^\\s]{1,3}", "(a|ab)(c|bcd)", "\\u{1F600}", "[😀-😂]x",
];
const ALPHABET = ["a", "b", "c", "d", "x", "y", ".", "-", "@", "é", "α", "ω", "1", "2", " ", "\n", "A", "😀", "_"];

function randomText(rng: Xoshiro128): string {
  let s = "";
  const n = Math.floor(rng.nextFloat() * 7);
  for (let i = 0; i < n; i++) s += ALPHABET[Math.floor(rng.nextFloat() * ALPHABET.length)];
  return s;
}

describe("regular expressions against RegExp", () => {
  const pool = new ExprPool();
  const raw = (set: readonly (readonly [number, number])[]): number => utf8Expr(pool, set);

  test("full match over UTF-8 agrees with ^(?:p)$ on random texts", () => {
    const rng = new Xoshiro128(7);
    for (const p of PATTERNS) {
      const expr = regexToExpr(pool, parseRegex(p), raw, "full");
      const oracle = new RegExp(`^(?:${p})$`, "u");
      for (let i = 0; i < 300; i++) {
        const s = i < 20 ? ["abc", "ab", "aaa", "é", "x.y", "123-45", "a@b.cd", "😀x", "aab", "c", "abcd", "bcd"][i % 12]! : randomText(rng);
        expect([p, s, pool.matches(expr, utf8.encode(s))]).toEqual([p, s, oracle.test(s)]);
      }
    }
  });

  test("search reading (JSON Schema pattern) agrees with an unanchored RegExp", () => {
    const rng = new Xoshiro128(8);
    for (const p of [...PATTERNS, "^ab", "ab$", "^a|b$", "^(a|b)$", "^$", "^\\d+$", "^(?=.*\\d)(?=.*[a-z]).{3,}$", "^(?!ab).*$"]) {
      const expr = regexToExpr(pool, parseRegex(p), raw, "search");
      const oracle = new RegExp(p, "u");
      for (let i = 0; i < 200; i++) {
        const s = randomText(rng);
        expect([p, s, pool.matches(expr, utf8.encode(s))]).toEqual([p, s, oracle.test(s)]);
      }
    }
  });

  test("inside a JSON string: a pattern constrains the decoded text, whatever the spelling", () => {
    const rng = new Xoshiro128(9);
    const json = (set: readonly (readonly [number, number])[]): number => jsonCharExpr(pool, set);
    // Spell every character as \uXXXX (surrogate pairs above U+FFFF): a different spelling of the same text.
    const escaped = (s: string): string => `"${Array.from(s).map((c) => (c.codePointAt(0)! > 0xffff ? JSON.stringify(c).slice(1, -1) : `\\u${c.codePointAt(0)!.toString(16).padStart(4, "0")}`)).join("")}"`;
    const surrogates = (s: string): string => `"${Array.from(s).map((c) => {
      const cp = c.codePointAt(0)!;
      if (cp <= 0xffff) return `\\u${cp.toString(16).toUpperCase().padStart(4, "0")}`;
      const v = cp - 0x10000;
      return `\\u${(0xd800 + (v >> 10)).toString(16)}\\u${(0xdc00 + (v & 0x3ff)).toString(16)}`;
    }).join("")}"`;
    for (const p of PATTERNS) {
      const lexeme = quoted(pool, regexToExpr(pool, parseRegex(p), json, "search"));
      const oracle = new RegExp(p, "u");
      for (let i = 0; i < 150; i++) {
        const s = randomText(rng);
        for (const spelled of [pythonJsonQuote(s), JSON.stringify(s), escaped(s), surrogates(s)]) {
          expect([p, spelled, pool.matches(lexeme, utf8.encode(spelled))]).toEqual([p, spelled, oracle.test(s)]);
        }
      }
    }
  });

  test("JSON string characters: raw where JSON allows, escapes always, never a bare quote or control", () => {
    const any = quoted(pool, pool.repeat(jsonCharExpr(pool, ANY_CHAR), 0, Infinity));
    for (const ok of ['""', '"a\\"b"', '"\\\\"', '"\\/"', '"\\b\\f\\n\\r\\t"', '"\\u00E9"', '"é😀"', '"\\ud83d\\ude00"']) expect([ok, pool.matches(any, utf8.encode(ok))]).toEqual([ok, true]);
    for (const bad of ['"a"b"', '"\\x41"', '"\n"', '"\\u12"', '"\\a"', '"\u0001"', '"']) expect([bad, pool.matches(any, utf8.encode(bad))]).toEqual([bad, false]);
  });

  test("what cannot be regular is refused with a message naming it", () => {
    for (const [p, what] of [["(a)\\1", "back-references"], ["(?<=a)b", "look-behind"], ["a\\bb", "word boundaries"], ["\\p{L}", "Unicode property"], ["a{5,2}", "m < n"], ["(a", 'missing ")"'], ["*a", "nothing to repeat"], ["a(?=b)", "look-ahead"]] as const) {
      expect(() => regexToExpr(pool, parseRegex(p), raw, "search")).toThrow(RegexSyntaxError);
      expect(() => regexToExpr(pool, parseRegex(p), raw, "search")).toThrow(what);
    }
  });

  test("anchored lists of names are recognised as literals", () => {
    expect(anchoredLiterals(parseRegex("^name$"))).toEqual(["name"]);
    expect(anchoredLiterals(parseRegex("^(a|bc)$"))).toEqual(["a", "bc"]);
    expect(anchoredLiterals(parseRegex("^a$|^b$"))).toEqual(["a", "b"]);
    expect(anchoredLiterals(parseRegex("^a.$"))).toBeNull();
    expect(anchoredLiterals(parseRegex("name"))).toBeNull();
  });
});
