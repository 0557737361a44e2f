/**
 * A choice's per-token log-probabilities in the two shapes of the OpenAI API: chat's
 * `logprobs.content` (token, logprob, UTF-8 bytes, top_logprobs) and text completions'
 * parallel arrays (tokens, token_logprobs, top_logprobs as {token: logprob}, text_offset).
 */
import { tokenText, type LogprobEntry } from "../llm/sample-fold.ts";
import type { Tokenizer } from "../tokenizer/tokenizer.ts";

export { tokenText };

export interface ChatTokenLogprob {
  token: string;
  logprob: number;
  bytes: number[];
  top_logprobs: { token: string; logprob: number; bytes: number[] }[];
}

export interface CompletionLogprobs {
  tokens: string[];
  token_logprobs: number[];
  top_logprobs: Record<string, number>[];
  text_offset: number[];
}

const encoder = new TextEncoder();

/** Chat logprobs of `entries`. */
export function chatLogprobs(tokenizer: Tokenizer, entries: readonly LogprobEntry[]): ChatTokenLogprob[] {
  return entries.map(({ logprob: l, prev }) => {
    const entry = (id: number, logprob: number) => {
      const token = tokenText(tokenizer, prev, id);
      return { token, logprob, bytes: [...encoder.encode(token)] };
    };
    return { ...entry(l.id, l.logprob), top_logprobs: l.top.map((t) => entry(t.id, t.logprob)) };
  });
}

/** Text-completion logprobs of `entries`, offsets counted from `offset`. */
export function completionLogprobs(tokenizer: Tokenizer, entries: readonly LogprobEntry[], offset: number): CompletionLogprobs {
  const out: CompletionLogprobs = { tokens: [], token_logprobs: [], top_logprobs: [], text_offset: [] };
  let at = offset;
  for (const { logprob: l, prev } of entries) {
    const token = tokenText(tokenizer, prev, l.id);
    out.tokens.push(token);
    out.token_logprobs.push(l.logprob);
    out.top_logprobs.push(Object.fromEntries(l.top.map((t) => [tokenText(tokenizer, prev, t.id), t.logprob])));
    out.text_offset.push(at);
    at += token.length;
  }
  return out;
}
