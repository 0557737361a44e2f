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
  for (let n = Math.min(range.max, len - 1); n >= range.min; n--) {
    const start = findEarlier(tokens, n);
    if (start < 0) continue;
    const draft: number[] = [];
    for (let i = 0; i < maxDraft; i++) {
      const at = start + n + i;
      draft.push(at < len ? tokens[at]! : draft[at - len]!);
    }
    return draft;
  }
  return [];
}

/**
 * Start of the latest occurrence of the last n tokens that ends before the last token (so it has
 * at least one token after it), or -1.
 */
function findEarlier(tokens: readonly number[], n: number): number {
  const len = tokens.length;
  const suffix = len - n;
  const last = tokens[len - 1]!;
  // Scan candidate ends from the latest; compare the last token first (one load rejects most).
  for (let end = len - 2; end >= n - 1; end--) {
    if (tokens[end] !== last) continue;
    let k = 1;
    while (k < n && tokens[end - k] === tokens[suffix + n - 1 - k]) k++;
    if (k === n) return end - n + 1;
  }
  return -1;
}
