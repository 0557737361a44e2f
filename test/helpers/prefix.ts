/**
 * Helpers for the engine-level tests: the shared models, prompt texts, and the exact number of
 * prompt tokens the prefix cache must serve (`cached_tokens`) given what was computed before.
 */
import type { CompletionResult } from "../../src/llm/llm.ts";

/** The real llama2.c models the engine tests run on (paths relative to the shared directory). */
export const TOKENIZER = "models/llama2c/tok512.bin";
export const MODELS = {
  stories260K: "models/llama2c/stories260K.bin",
  llama2xs: "models/llama2c/llama2xs_h192.bin",
  stories260K_q80: "models/llama2c/stories260K_q80.bin",
} as const;

/** Short story openings (tok512 covers TinyStories-like English). */
export const TEXTS: readonly string[] = [
  "Once upon a time, there was a little girl named Lily. She loved to play outside in the park with her friends and her dog.",
  "One day, a big brown bear came out of the forest. The bear was hungry and looked for some honey in the tall old tree.",
  "Tom and Sam were best friends. They liked to build castles in the sand at the beach and swim in the blue sea.",
  "The sun was shining and the birds were singing. Mia went to the garden to pick some red flowers for her mom.",
  "There was a small cat who lived in a big house. The cat liked to sleep on the soft bed all day long.",
  "Ben had a new toy car. It was red and shiny and went very fast. He showed it to his sister Sue.",
  "In a little town there was a baker who made the best bread. Every morning the children came to smell it.",
  "A frog sat on a green leaf in the pond. He wanted to jump to the other side, but the water was deep.",
];

/** Length of the longest common prefix of a and b. */
export function lcp(a: readonly number[], b: readonly number[]): number {
  const n = Math.min(a.length, b.length);
  let i = 0;
  while (i < n && a[i] === b[i]) i++;
  return i;
}

/**
 * The tokens whose KV a finished request computed, in order: its prompt and every generated token
 * that was fed back. A stop token (EOS) is never appended to token_ids, so everything in token_ids
 * was fed back; a request that ended on max_tokens never fed back its last token.
 */
export function computedTokens(promptTokenIds: readonly number[], result: CompletionResult): number[] {
  const out = result.finish_reason === "length" ? result.token_ids.slice(0, -1) : result.token_ids;
  return [...promptTokenIds, ...out];
}

/**
 * The cached_tokens the engine must report for `prompt`, given the token sequences computed (or
 * being computed) before it was admitted, with no eviction: the longest common prefix with any of
 * them, floored to whole blocks, capped so that the prompt's last token is computed again.
 */
export function expectedCachedTokens(prompt: readonly number[], history: readonly (readonly number[])[], blockSize: number): number {
  let best = 0;
  for (const h of history) best = Math.max(best, lcp(prompt, h));
  const blocks = Math.min(Math.floor(best / blockSize), Math.floor((prompt.length - 1) / blockSize));
  return blocks * blockSize;
}

/** A result without its timings (the only fields that differ between equal runs). */
export function withoutTimings(r: CompletionResult): Omit<CompletionResult, "ttft_ms" | "latency_ms"> {
  const { ttft_ms: _t, latency_ms: _l, ...rest } = r;
  return rest;
}
