/**
 * The tokens a model that reasons before it answers writes around its reasoning: `<think>` and
 * `</think>` (Qwen3, QwQ, DeepSeek-R1 and its distills, SmolLM3), each one token of its vocabulary.
 * A constraint on the answer starts after the closing one (src/engine/reasoning-gate.ts).
 */
import type { ReasoningMarkers } from "../engine/constraint.ts";
import type { Tokenizer } from "../tokenizer/tokenizer.ts";

/** The reasoning markers of `tokenizer`'s vocabulary, or null when it has no single-token pair. */
export function reasoningMarkers(tokenizer: Tokenizer): ReasoningMarkers | null {
  const start = singleToken(tokenizer, "<think>");
  const end = singleToken(tokenizer, "</think>");
  return start === null || end === null ? null : { start, end };
}

function singleToken(tokenizer: Tokenizer, text: string): number | null {
  const ids = tokenizer.encode(text, { parseSpecial: true });
  return ids.length === 1 && tokenizer.tokenText(ids[0]!) === text ? ids[0]! : null;
}
