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
 *  - each token is checked against the grammar (a token the matcher would refuse ends the list).
 * So a forced token is always one the canonical tokenization of the whole output would produce at
 * that place, given the text so far.
 */
import type { GrammarMatcher } from "./matcher.ts";

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

export function forcedTokensOf(matcher: GrammarMatcher): number[] {
  const forced = matcher.forcedBytes(MAX_FORCED_BYTES);
  if (forced.length === 0) return [];
  const text = wholeCharacters(forced);
  if (text === "") return [];
  const vocab = matcher.grammar.vocab;
  const ends = matcher.mustEndAfter(new TextEncoder().encode(text));
  let ids: number[];
  const last = matcher.lastToken;
  const lastBytes = last === undefined ? undefined : vocab.bytes[last];
  if (last !== undefined && lastBytes !== undefined && lastBytes.length > 0) {
    let lastText: string;
    try {
      lastText = utf8.decode(lastBytes);
    } catch {
      return []; // the last token ends inside a character: leave the split to the model
    }
    const together = vocab.encode(lastText + text);
    if (together[0] !== last) return [];
    ids = together.slice(1);
  } else ids = vocab.encode(text);
  if (!ends) ids.pop();
  const probe = matcher.fork();
  const out: number[] = [];
  for (const id of ids) {
    if (!probe.acceptToken(id)) break;
    out.push(id);
  }
  return out;
}
