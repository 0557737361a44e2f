/**
 * Byte-level BPE on request-sized input: a long word is merged on token ids in
 * typed arrays (the same ids as the merge by text, on every BPE vocabulary in ../shared), a text
 * of a million ids is returned without spreading them into a call, minTokens is a lower bound of
 * the tokens (with and without specials; SentencePiece's too), and stopAfter stops at a prefix
 * just past it.
 */
import { describe, expect, test } from "bun:test";
import { readdirSync } from "node:fs";
import { join } from "node:path";
import { loadTokenizer } from "../src/tokenizer/load.ts";
import { toByteLevel } from "../src/tokenizer/byte-level.ts";
import type { Tokenizer } from "../src/tokenizer/tokenizer.ts";
import { sharedPath } from "./helpers/shared.ts";

const vocabDir = sharedPath("vocab");
const vocabs: [string, Tokenizer][] = vocabDir === null ? [] : readdirSync(vocabDir)
  .filter((f) => f.endsWith(".gguf"))
  .map((f): [string, Tokenizer] => [f, loadTokenizer(join(vocabDir, f)).tokenizer]);
const bpeVocabs = vocabs.filter(([, tok]) => tok.constructor.name === "BpeTokenizer");
/** The vocabularies whose tokenizer gives a lower bound (byte-level BPE, SentencePiece). */
const boundedVocabs = vocabs.filter(([, tok]) => ["BpeTokenizer", "SpmTokenizer"].includes(tok.constructor.name));

/** A seeded text of `n` characters from a mixed alphabet (letters, digits, punctuation, CJK, emoji, specials' text). */
function text(n: number, seed: number, alphabet = "aaabbcdeeefghiijklmnoopqrstuvwxyz0123456789    ..,,__--//\n\tÀñÄéß中文字😀ÿ<|im_start|><|endoftext|>"): string {
  const chars = Array.from(alphabet);
  let s = seed;
  let out = "";
  for (let i = 0; i < n; i++) {
    s = (s * 1103515245 + 12345) & 0x7fffffff;
    out += chars[s % chars.length];
  }
  return out;
}

/** The tokenizer's merge by text (the reference the id merge must equal). */
function mergeByText(tok: Tokenizer, word: string): number[] {
  return (tok as unknown as { merge(spelled: string): number[] }).merge(toByteLevel(word));
}

describe.skipIf(bpeVocabs.length === 0)("byte-level BPE on long input", () => {
  test("a long word gives the ids the merge by text gives, on every BPE vocabulary", () => {
    for (const [name, tok] of bpeVocabs) {
      for (let k = 0; k < 20; k++) {
        // Letters only: one pre-token in every pre-tokenizer, so encode merges it whole.
        const word = text(300 + k * 150, k + 1, "abcdefghijklmnopqrstuvwxyzàéß");
        expect({ name, k, ids: tok.encode(word) }).toEqual({ name, k, ids: mergeByText(tok, word) });
      }
    }
  });

  test("a word of a million ids is encoded whole (no call spread over its ids) and decodes back", () => {
    const [, tok] = bpeVocabs.find(([name]) => name.includes("qwen2")) ?? bpeVocabs[0]!;
    const word = text(2 << 20, 5, "abcdefghijklmnopqrstuvwxyz");
    const ids = tok.encode(word);
    expect(ids.length).toBeGreaterThan(500_000);
    expect(tok.decode(ids)).toBe(word);
  });

  test("minTokens (BPE and SentencePiece) is at most the tokens of any text, with or without specials, and grows with it", () => {
    expect(boundedVocabs.length).toBeGreaterThan(bpeVocabs.length);
    for (const [name, tok] of boundedVocabs) {
      expect(tok.minTokens).toBeDefined();
      for (let k = 0; k < 40; k++) {
        const t = text(1 + k * 97, k + 7);
        for (const parseSpecial of [false, true]) expect({ name, k, over: tok.minTokens!(t) > tok.encode(t, { parseSpecial }).length }).toEqual({ name, k, over: false });
      }
    }
    const [, tok] = bpeVocabs.find(([name]) => name.includes("qwen2")) ?? bpeVocabs[0]!;
    expect(tok.minTokens!("a".repeat(1 << 20))).toBeGreaterThan(1000);
  });

  test("stopAfter (BPE, SentencePiece) returns a start of the ids, just past the bound; under it, all of them", () => {
    for (const [name, tok] of boundedVocabs) {
      const t = text(5000, 11);
      const all = tok.encode(t);
      const stopped = tok.encode(t, { stopAfter: 100 });
      expect({ name, prefix: all.slice(0, stopped.length).join() === stopped.join(), past: stopped.length > 100, short: stopped.length < all.length }).toEqual({ name, prefix: true, past: true, short: true });
      expect(tok.encode(t, { stopAfter: all.length })).toEqual(all);
    }
  });
});
