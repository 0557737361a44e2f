/**
 * Forced tokens ("jump-forward" decoding): where the grammar allows exactly one continuation for
 * a while (after `{` in compact JSON with a required first property: `"name": "`), the engine may
 * append those tokens without sampling and compute them as one chunk.
 *
 * Which tokens: the forced bytes (every continuation starts with them; GrammarMatcher.forcedBytes)
 * cut to whole characters, tokenized the way the model's tokenizer would split the text that
 * follows the last accepted token:
 *  - the last token accepted and the forced text are tokenized together; where the tokenizer would
 *    merge the last token with the start of the forced text, nothing is forced (the model's next
 *    token decides the split, as it would without a constraint);
 *  - the last forced token is dropped unless the grammar must end right after the forced text,
 *    because what the model writes next could merge with it into another token;
 *  - each token is checked against the grammar (a token the matcher would refuse ends the list);
 *  - a special token the grammar names (its spelling, vocabulary.ts) is forced as itself, and the
 *    text before it is tokenized alone and kept whole (nothing merges across a special token).
 * So a forced token is always one the canonical tokenization of the whole output would produce at
 * that place, given the text so far.
 */
import { SPELLING_CLOSE, SPELLING_OPEN, type TokenVocabulary } from "./vocabulary.ts";

/** What forcing reads of a matcher (GrammarMatcher is one; declared here so that it can call forcedTokensOf(this)). */
export interface ForcingMatcher {
  readonly grammar: { readonly vocab: TokenVocabulary };
  readonly lastToken: number | undefined;
  /** The bytes every continuation starts with, at most `max`. */
  forcedBytes(max: number): Uint8Array;
  /** Whether the grammar must end right after `bytes`. */
  mustEndAfter(bytes: Uint8Array): boolean;
  /** A copy to try tokens on, leaving this matcher as it was. */
  fork(): { acceptToken(id: number): boolean };
}

const MAX_FORCED_BYTES = 256;
const utf8 = new TextDecoder("utf-8", { fatal: true });

/** The longest prefix of `bytes` made of whole UTF-8 characters, as text. */
function wholeCharacters(bytes: Uint8Array): string {
  for (let end = bytes.length; end >= Math.max(0, bytes.length - 3); end--) {
    try {
      return utf8.decode(bytes.subarray(0, end));
    } catch {
      // a partial character at the end: try shorter
    }
  }
  return "";
}

export function forcedTokensOf(matcher: ForcingMatcher): number[] {
  const forced = matcher.forcedBytes(MAX_FORCED_BYTES);
  if (forced.length === 0) return [];
  const vocab = matcher.grammar.vocab;
  const probe = matcher.fork();
  const out: number[] = [];
  let last = matcher.lastToken;
  for (let at = 0; at < forced.length; ) {
    if (forced[at] === SPELLING_OPEN) {
      // A special token the grammar names: that token (whole, nothing merges with it).
      const close = forced.indexOf(SPELLING_CLOSE, at);
      const id = close < 0 ? undefined : vocab.spelledToken(forced.subarray(at, close + 1));
      if (id === undefined || !probe.acceptToken(id)) break;
      out.push(id);
      last = id;
      at = close + 1;
      continue;
    }
    const next = forced.indexOf(SPELLING_OPEN, at);
    const end = next < 0 ? forced.length : next;
    const text = wholeCharacters(forced.subarray(at, end));
    if (text === "") break;
    // Text before a special token is tokenized alone and whole; at the end of the forced bytes, its
    // last token could still merge with what comes next, unless the grammar must end there.
    const whole = next >= 0 || matcher.mustEndAfter(forced.subarray(0, at + utf8Length(text)));
    const ids = textTokens(vocab, text, last);
    if (ids === null) break;
    if (!whole) ids.pop();
    let taken = 0;
    for (const id of ids) {
      if (!probe.acceptToken(id)) break;
      out.push(id);
      taken++;
    }
    if (taken < ids.length || !whole || next < 0) break;
    last = ids.at(-1) ?? last;
    at = end;
  }
  return out;
}

const utf8Encoder = new TextEncoder();

function utf8Length(text: string): number {
  return utf8Encoder.encode(text).length;
}

/**
 * The tokens of `text` written right after token `last`, as the tokenizer would split them; null
 * where it would merge `last` with the start of the text (the model's next token decides the split).
 */
function textTokens(vocab: TokenVocabulary, text: string, last: number | undefined): number[] | null {
  const lastBytes = last === undefined ? undefined : vocab.bytes[last];
  // After a special token (or none) text starts afresh: tokenizers split special tokens out first.
  if (last === undefined || lastBytes === undefined || lastBytes.length === 0 || vocab.spelling(last) !== undefined) return vocab.encode(text);
  let lastText: string;
  try {
    lastText = utf8.decode(lastBytes);
  } catch {
    return null; // the last token ends inside a character: leave the split to the model
  }
  const together = vocab.encode(lastText + text);
  return together[0] === last ? together.slice(1) : null;
}
