/**
 * A sequence's per-token log-probabilities in the two shapes of the OpenAI API: chat's
 * `logprobs.content` (token, logprob, UTF-8 bytes, top_logprobs) and text completions'
 * parallel arrays (tokens, token_logprobs, top_logprobs as {token: logprob}, text_offset).
 */
import type { Sequence } from "../engine/sequence.ts";
import type { Tokenizer } from "../tokenizer/tokenizer.ts";

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

/** Text of token `id` where it follows token `prev` in a stream (so a word's leading space shows). */
export function tokenText(tokenizer: Tokenizer, prev: number | undefined, id: number): string {
  const decoder = tokenizer.createStreamDecoder(prev);
  return decoder.push(id) + decoder.flush();
}

/** Chat logprobs of generated tokens [from, to) of `seq`. */
export function chatLogprobs(tokenizer: Tokenizer, seq: Sequence, from: number, to: number): ChatTokenLogprob[] {
  const out: ChatTokenLogprob[] = [];
  for (let k = from; k < to && k < seq.logprobs.length; k++) {
    const l = seq.logprobs[k]!;
    const prev = seq.allTokenIds[seq.numPromptTokens + k - 1];
    const entry = (id: number, logprob: number) => {
      const token = tokenText(tokenizer, prev, id);
      return { token, logprob, bytes: [...encoder.encode(token)] };
    };
    out.push({ ...entry(l.id, l.logprob), top_logprobs: l.top.map((t) => entry(t.id, t.logprob)) });
  }
  return out;
}

/** Text-completion logprobs of generated tokens [from, to) of `seq`, offsets counted from `offset`. */
export function completionLogprobs(tokenizer: Tokenizer, seq: Sequence, from: number, to: number, offset: number): CompletionLogprobs {
  const out: CompletionLogprobs = { tokens: [], token_logprobs: [], top_logprobs: [], text_offset: [] };
  let at = offset;
  for (let k = from; k < to && k < seq.logprobs.length; k++) {
    const l = seq.logprobs[k]!;
    const prev = seq.allTokenIds[seq.numPromptTokens + k - 1];
    const token = tokenText(tokenizer, prev, l.id);
    out.tokens.push(token);
    out.token_logprobs.push(l.logprob);
    out.top_logprobs.push(Object.fromEntries(l.top.map((t) => [tokenText(tokenizer, prev, t.id), t.logprob])));
    out.text_offset.push(at);
    at += token.length;
  }
  return out;
}
