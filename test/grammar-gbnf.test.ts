/**
 * llama.cpp's GBNF grammars (src/grammar/gbnf.ts): every grammar of ../shared/grammar/gbnf parses
 * and constrains (texts it should take and texts it should refuse, and the masks agree with
 * acceptToken on Llama 3's vocabulary), and a malformed grammar is refused naming its line.
 */
import { describe, expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import { GrammarError } from "../src/errors.ts";
import { GrammarCompiler } from "../src/grammar/compiler.ts";
import { allocateTokenBitmask, isAllowed } from "../src/grammar/token-bitmask.ts";
import { TokenVocabulary } from "../src/grammar/vocabulary.ts";
import { loadGGUFTokenizer } from "../src/tokenizer/gguf-vocab.ts";
import { bytesCompiler, matches } from "./helpers/grammar.ts";
import { describeShared } from "./helpers/shared.ts";

const SAMPLES: Record<string, [string[], string[]]> = {
  json: [['{"a": [1, 2.5, "x", true, null]}', '{"k": {"n": -1e5}}'], ['{"a" 1}', "[1]"]],
  json_arr: [['[\n{"a": 1},\n2]', "[\n]"], ["[1]", "[\n1,2]"]],
  arithmetic: [["1+2= 3\n", "(x*2)=y\n"], ["1+=2\n", "1=2"]],
  list: [["- item one\n- two\n"], ["item\n", "- \n"]],
  chess: [["1. e4 e5\n2. Nf3 Nc6\n", "1. O-O Qh5+\n2. exd5 a8=Q\n"], ["1. e9 e5\n", "e4 e5\n"]],
  c: [["int main(){return 0;}", "float f(int x){x = x+1;while(x<3){x = x*2;}}"], ["int main(){return 0}", "main(){}"]],
  english: [["Hello world.", "a b\nc"], ["Héllo", "a  b"]],
  japanese: [["こんにちは", "カタカナ、ひらがな"], ["hello", "漢字 abc"]],
};

describeShared("GBNF grammars of llama.cpp", Object.keys(SAMPLES).map((n) => `grammar/gbnf/${n}.gbnf`), (paths) => {
  const bytes = bytesCompiler();
  test("each parses and constrains: takes what it should, refuses what it should", () => {
    Object.entries(SAMPLES).forEach(([name, [good, bad]], i) => {
      const grammar = readFileSync(paths[i]!, "utf8");
      for (const t of good) expect([name, t, matches(bytes, { kind: "gbnf", grammar }, t)]).toEqual([name, t, true]);
      for (const t of bad) expect([name, t, matches(bytes, { kind: "gbnf", grammar }, t)]).toEqual([name, t, false]);
    });
  });
});

describeShared("GBNF masks over Llama 3's vocabulary", ["vocab/ggml-vocab-llama-bpe.gguf", ...Object.keys(SAMPLES).map((n) => `grammar/gbnf/${n}.gbnf`)], ([vocabPath, ...paths]) => {
  test("a token is in the mask exactly when the matcher takes it, along each sample", () => {
    const vocab = TokenVocabulary.fromTokenizer(loadGGUFTokenizer(vocabPath!).tokenizer);
    const compiler = new GrammarCompiler(vocab);
    const mask = allocateTokenBitmask(vocab.size);
    Object.entries(SAMPLES).forEach(([name, [good]], i) => {
      const grammar = readFileSync(paths[i]!, "utf8");
      const m = compiler.matcher({ kind: "gbnf", grammar });
      for (const id of vocab.encode(good[0]!)) {
        m.fillNextTokenBitmask(mask);
        // Every allowed token is taken by a fork; the sample's own token is allowed.
        expect([name, id, isAllowed(mask, id)]).toEqual([name, id, true]);
        for (let t = 0; t < vocab.size; t += 97) expect([name, t, isAllowed(mask, t)]).toEqual([name, t, m.fork().acceptToken(t)]);
        expect(m.acceptToken(id)).toBe(true);
      }
      expect([name, m.canTerminate()]).toEqual([name, true]);
    });
  });
});

describe("GBNF syntax", () => {
  const bytes = bytesCompiler();
  const compile = (grammar: string) => bytes.compile({ kind: "gbnf", grammar });

  test("llama.cpp's syntax: escapes, classes, repetition counts, comments, groups over lines", () => {
    const grammar = 'root ::= (\n  "a\\x41\\u00e9" [^\\n\\]x-z]{2,3} # comment\n)+ | "b"? c\nc ::= . "\\t"';
    for (const [t, ok] of [["aAéqq", true], ["aAé12aAé345", true], ["c\t", true], ["bc\t", true], ["aAéx", false], ["aAé]]", false], ["bc", false]] as const) {
      expect([t, matches(bytes, { kind: "gbnf", grammar }, t)]).toEqual([t, ok]);
    }
    expect(matches(bytes, { kind: "gbnf", grammar: 'root ::= x{2}\nx ::= "ab" | "c"' }, "abc")).toBe(true);
    expect(matches(bytes, { kind: "gbnf", grammar: 'root ::= "(" root ")" | ""' }, "((()))")).toBe(true);
    expect(matches(bytes, { kind: "gbnf", grammar: 'root ::= "(" root ")" | ""' }, "(()")).toBe(false);
  });

  test("errors name the line", () => {
    const bad: [string, string][] = [
      ['root ::= "a"\nx ::= "b\n', "gbnf line 2"],
      ['root ::= "a"\n\nfoo = "b"\n', "gbnf line 3: expecting ::="],
      ['root ::= "a" bar\n', "gbnf line 1: undefined rule identifier 'bar'"],
      ['root ::= ( "a"\n', "expecting ')'"],
      ['item ::= "a"\n', "no root rule"],
      ['root ::= "\\q"\n', "gbnf line 1: unknown escape"],
      ['root ::= <[1234]>\n', "token references"],
      ['root ::= "a"{3001}\n', "exceeds"],
      ['root ::= * "a"\n', "expecting preceding item"],
    ];
    for (const [grammar, words] of bad) {
      expect(() => compile(grammar)).toThrow(GrammarError);
      expect(() => compile(grammar)).toThrow(words);
    }
  });

  test("regex and choice sources", () => {
    expect(matches(bytes, { kind: "regex", pattern: "[0-9]{3}-[a-z]+" }, "123-abc")).toBe(true);
    expect(matches(bytes, { kind: "regex", pattern: "^[0-9]{3}$" }, "1234")).toBe(false);
    expect(matches(bytes, { kind: "choice", choices: ["yes", "no", "maybe"] }, "no")).toBe(true);
    expect(matches(bytes, { kind: "choice", choices: ["yes", "no", "maybe"] }, "nope")).toBe(false);
    expect(() => bytes.compile({ kind: "choice", choices: [] })).toThrow("empty");
    expect(() => bytes.compile({ kind: "regex", pattern: "(a" })).toThrow(GrammarError);
  });
});
