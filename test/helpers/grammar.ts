/**
 * Small vocabularies for the grammar tests, where every mask can be checked exactly: a list of
 * token strings (plus an end-of-generation token) and a greedy longest-match tokenizer over them.
 */
import { GrammarLimitError } from "../../src/errors.ts";
import { GrammarCompiler, type GrammarSource } from "../../src/grammar/compiler.ts";
import { GrammarMatcher } from "../../src/grammar/matcher.ts";
import { allowedTokens, allocateTokenBitmask } from "../../src/grammar/token-bitmask.ts";
import { TokenVocabulary } from "../../src/grammar/vocabulary.ts";

const utf8 = new TextEncoder();

/** A vocabulary of `pieces` (ids 0..n-1) and one end-of-generation token (id n). */
export function tinyVocabulary(pieces: readonly string[]): TokenVocabulary {
  const bytes = [...pieces.map((p) => utf8.encode(p)), new Uint8Array(0)];
  const encode = (text: string): number[] => {
    const b = utf8.encode(text);
    const out: number[] = [];
    for (let at = 0; at < b.length; ) {
      let best = -1;
      let bestLen = 0;
      bytes.forEach((t, id) => {
        if (t.length > bestLen && t.length <= b.length - at && t.every((x, i) => b[at + i] === x)) [best, bestLen] = [id, t.length];
      });
      if (best < 0) throw new Error(`no token for ${JSON.stringify(text.slice(at))}`);
      out.push(best);
      at += bestLen;
    }
    return out;
  };
  return new TokenVocabulary(bytes.length, bytes, Int32Array.of(pieces.length), encode);
}

/** Every single byte as a token (ids 0..255) and end-of-generation (256): any text, one byte a step. */
export function byteVocabulary(): TokenVocabulary {
  const pieces = Array.from({ length: 256 }, (_, b) => new Uint8Array([b]));
  const bytes = [...pieces, new Uint8Array(0)];
  return new TokenVocabulary(257, bytes, Int32Array.of(256), (text) => Array.from(utf8.encode(text)));
}

/** The texts of the tokens a matcher allows next (EOG as "<eos>"). */
export function allowedPieces(m: GrammarMatcher, pieces: readonly string[]): string[] {
  const mask = allocateTokenBitmask(pieces.length + 1);
  m.fillNextTokenBitmask(mask);
  return allowedTokens(mask, pieces.length + 1).map((t) => (t === pieces.length ? "<eos>" : pieces[t]!));
}

/** Whether `text` followed by the end matches `source` (over single bytes, so any text can be tried). */
export function matches(compiler: GrammarCompiler, source: GrammarSource, text: string): boolean {
  return compiler.matcher(source).matchesText(text);
}

export const bytesCompiler = (): GrammarCompiler => new GrammarCompiler(byteVocabulary());

/** The limit named by the GrammarLimitError `f` throws (anything else it throws, or no error, fails). */
export function limitOf(f: () => unknown): string {
  try {
    f();
  } catch (e) {
    if (e instanceof GrammarLimitError) return e.limit;
    throw e;
  }
  throw new Error("no limit error");
}
