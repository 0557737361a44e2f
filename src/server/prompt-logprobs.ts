/**
 * Log-probabilities of a prompt's own tokens (`echo` with `logprobs` on /v1/completions, as
 * lm-evaluation-harness scores continuations): each token's log-probability given the tokens
 * before it, and the most likely alternatives there; the first token has none. The prompt is
 * scored by the engine's front door, between two steps of the batch, through the paged KV cache
 * (its full blocks stay in the prefix cache for the generation that follows).
 */
import type { EngineClient } from "../llm/engine-client.ts";
import type { Tokenizer } from "../tokenizer/tokenizer.ts";
import { tokenText } from "./logprobs-format.ts";

export interface PromptLogprobs {
  tokens: string[];
  token_logprobs: (number | null)[];
  top_logprobs: (Record<string, number> | null)[];
}

export async function promptLogprobs(tok: Tokenizer, client: EngineClient, ids: readonly number[], top: number): Promise<PromptLogprobs> {
  const out: PromptLogprobs = { tokens: [], token_logprobs: [], top_logprobs: [] };
  if (ids.length === 0) return out;
  ids.forEach((id, i) => out.tokens.push(tokenText(tok, ids[i - 1], id)));
  // The first token follows nothing: it has no log-probability (one entry per token, always).
  out.token_logprobs.push(null);
  out.top_logprobs.push(null);
  const scored = await client.score({ tokens: ids, window: ids.length, topLogprobs: top });
  scored.alternatives!.forEach((l, i) => {
    out.token_logprobs.push(l.logprob);
    out.top_logprobs.push(Object.fromEntries([...l.top, l].map((t) => [tokenText(tok, ids[i], t.id), t.logprob])));
  });
  return out;
}
