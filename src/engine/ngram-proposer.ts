/**
 * Prompt-lookup drafts (vLLM's `ngram` speculative method, llama.cpp's lookup decoding): the last
 * n tokens of a sequence are looked up earlier in its own prompt and output, longest n first, and
 * the tokens that followed the latest earlier occurrence are proposed as the next ones. Drafting
 * costs no model: text that repeats its input (quotes, code edits, summaries, loops) is drafted
 * for free, and a wrong draft only costs the verification (speculative.ts keeps that rare).
 */

export interface NgramRange {
  /** Shortest suffix looked up (>= 1). */
  min: number;
  /** Longest suffix looked up, tried first. */
  max: number;
}

/**
 * Up to `maxDraft` tokens proposed to follow `tokens`, or [] when no suffix of min..max tokens
 * occurs earlier. The match taken is the latest earlier occurrence of the longest suffix that has
 * one. Its continuation is copied LZ77-style: when it runs into the end of `tokens`, the copy goes
 * on from the draft itself, so a loop of period p < maxDraft still yields maxDraft tokens.
 */
export function proposeNgram(tokens: readonly number[], range: NgramRange, maxDraft: number): number[] {
  const len = tokens.length;
  if (maxDraft <= 0) return [];
  const match = longestEarlierMatch(tokens, Math.min(range.max, len - 1));
  if (match.length < range.min) return [];
  const draft: number[] = [];
  for (let i = 0; i < maxDraft; i++) {
    const at = match.start + match.length + i;
    draft.push(at < len ? tokens[at]! : draft[at - len]!);
  }
  return draft;
}

/**
 * The longest run of up to maxN tokens that ends before the last token and equals the same number
 * of last tokens, the latest such run among the longest; length 0 when even the last token does
 * not occur earlier. One pass from the end: a candidate's match is counted backwards from where the
 * last token occurs, and only a strictly longer match replaces the one kept, so the first (latest)
 * of each length wins; it stops at the first match of maxN.
 */
function longestEarlierMatch(tokens: readonly number[], maxN: number): { start: number; length: number } {
  const len = tokens.length;
  const last = tokens[len - 1];
  let best = { start: 0, length: 0 };
  for (let end = len - 2; end >= 0 && best.length < maxN; end--) {
    if (tokens[end] !== last) continue;
    let k = 1;
    while (k < maxN && k <= end && tokens[end - k] === tokens[len - 1 - k]) k++;
    if (k > best.length) best = { start: end - k + 1, length: k };
  }
  return best;
}
