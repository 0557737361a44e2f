/**
 * A tokenizer that refuses, before tokenizing, any text that must give more than `limit` tokens
 * (Tokenizer.minTokens): a prompt of megabytes over the context costs its bytes' count, not its
 * tokenization (without it a megabyte tool description took a gigabyte to find it too long). Each
 * encode call is checked on its own: every piece of a prompt is tokenized into it, so a piece
 * over the limit is a prompt over it. Only large texts (LARGE_TEXT) are checked so. Its limit is also there for encodeRendered (tokenLimitOf),
 * which stops tokenizing a prompt's pieces once they pass it (EncodeOptions.stopAfter).
 */
import { RequestTooLongError } from "../errors.ts";
import type { EncodeOptions, Tokenizer } from "./tokenizer.ts";

/**
 * Texts shorter than this (UTF-16 units) are tokenized whole, as before: they cost little, and
 * the context's own check then gives the exact count and names what sets the context.
 */
export const LARGE_TEXT = 1 << 16;

/** The property of a limited tokenizer that holds its limit (tokenLimitOf). */
const LIMIT = Symbol("token limit");

export function withTokenLimit<T extends Tokenizer>(tok: T, limit: number): T {
  const minTokens = tok.minTokens?.bind(tok) ?? (() => 0);
  const encode = (text: string, opts?: EncodeOptions): number[] => {
    const least = text.length < LARGE_TEXT ? 0 : minTokens(text);
    if (least > limit) throw tooLong(`at least ${least}`, limit);
    return tok.encode(text, opts);
  };
  // Every other method runs on the tokenizer itself (bound once each); fields read through.
  const bound = new Map<PropertyKey, unknown>();
  return new Proxy(tok, {
    get(target, key) {
      if (key === "encode") return encode;
      if (key === LIMIT) return limit;
      const v: unknown = Reflect.get(target, key, target);
      if (typeof v !== "function" || key === "constructor") return v;
      let method = bound.get(key);
      if (method === undefined) bound.set(key, (method = (v as (...args: unknown[]) => unknown).bind(target)));
      return method;
    },
  });
}

/**
 * The most tokens a prompt tokenized with `tok` may have (withTokenLimit's), or undefined; for a
 * large text only (LARGE_TEXT: a short one is tokenized whole).
 */
export function tokenLimitOf(tok: Tokenizer, text: string): number | undefined {
  if (text.length < LARGE_TEXT) return undefined;
  const limit: unknown = Reflect.get(tok, LIMIT);
  return typeof limit === "number" ? limit : undefined;
}

/** A prompt of `count` tokens ("at least 6477", "more than 4096") over a context of `limit`. */
export function tooLong(count: string, limit: number): RequestTooLongError {
  return new RequestTooLongError(`prompt of ${count} tokens is longer than the context of ${limit} (a shorter prompt)`, "prompt");
}
