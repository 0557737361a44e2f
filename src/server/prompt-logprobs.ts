/**
 * Log-probabilities of a prompt's own tokens (`echo` with `logprobs` on /v1/completions, as
 * lm-evaluation-harness scores continuations): each token's log-probability given the tokens
 * before it, and the most likely alternatives there; the first token has none. The prompt is run
 * through the engine's teacher-forced scoring, between two steps of the batch, through the paged
 * KV cache (its full blocks stay in the prefix cache for the generation that follows).
 */
import type { LLM } from "../engine/llm.ts";
import { sampledLogprob } from "../engine/logprobs.ts";
import type { EngineLoop } from "./engine-loop.ts";
import { tokenText } from "./logprobs-format.ts";

export interface PromptLogprobs {
  tokens: string[];
  token_logprobs: (number | null)[];
  top_logprobs: (Record<string, number> | null)[];
}

export async function promptLogprobs(llm: LLM, loop: EngineLoop, ids: readonly number[], top: number): Promise<PromptLogprobs> {
  const tok = llm.tokenizer;
  const out: PromptLogprobs = { tokens: [], token_logprobs: [null], top_logprobs: [null] };
  ids.forEach((id, i) => out.tokens.push(tokenText(tok, ids[i - 1], id)));
  const blocks = Math.ceil(ids.length / llm.engine.options.blockSize);
  await loop.exclusive(blocks, () =>
    llm.engine.score(ids, (i, logits) => {
      const next = ids[i + 1];
      if (next === undefined) return;
      const l = sampledLogprob(logits, next, top);
      out.token_logprobs.push(l.logprob);
      out.top_logprobs.push(Object.fromEntries([...l.top, l].map((t) => [tokenText(tok, ids[i], t.id), t.logprob])));
    }),
  );
  return out;
}
