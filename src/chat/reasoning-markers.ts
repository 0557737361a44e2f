/**
 * The tags a model that reasons before it answers writes around its reasoning: `<think>` and
 * `</think>` (Qwen3, QwQ, DeepSeek-R1 and its distills, SmolLM3), each one token of their
 * vocabularies; a template that thinks on a vocabulary without them has its replies write them as
 * text. The constraint on the answer starts after the closing one, and a reasoning budget forces it
 * (src/engine/reasoning-gate.ts).
 */
import type { ReasoningMarkers } from "../constraint/token-constraint.ts";
import { isByteTokenizer, type Tokenizer } from "../tokenizer/tokenizer.ts";

const START = "<think>";
const END = "</think>";
const utf8 = new TextEncoder();

/** The markers of `tokenizer`'s vocabulary when it has both tags as tokens; else null. */
export function reasoningMarkers(tokenizer: Tokenizer): ReasoningMarkers | null {
  const start = singleToken(tokenizer, START);
  const end = singleToken(tokenizer, END);
  return start === null || end === null ? null : markers(tokenizer, start, end);
}

/**
 * The markers of the tags written as text (a template that thinks, on a vocabulary without them as
 * tokens); null for a tokenizer whose tokens have no bytes of their own (WordPiece).
 */
export function textReasoningMarkers(tokenizer: Tokenizer): ReasoningMarkers | null {
  return isByteTokenizer(tokenizer) ? markers(tokenizer, null, null) : null;
}

function markers(tokenizer: Tokenizer, startId: number | null, endId: number | null): ReasoningMarkers {
  const spell = (tag: string, id: number | null): ((at: number) => readonly number[]) => {
    const memo = new Map<number, readonly number[]>();
    return (at) => {
      let ids = memo.get(at);
      if (ids === undefined) memo.set(at, (ids = at === 0 && id !== null ? [id] : tokenizer.encode(tag.slice(at), { continuation: true })));
      return ids;
    };
  };
  const start = utf8.encode(START);
  const end = utf8.encode(END);
  const bytes = isByteTokenizer(tokenizer) ? (id: number) => tokenizer.tokenBytes(id) : (id: number) => utf8.encode(tokenizer.tokenText(id));
  return {
    start, end,
    tokenBytes: (id) => (id === startId ? start : id === endId ? end : bytes(id)),
    startTokens: spell(START, startId),
    endTokens: spell(END, endId),
  };
}

function singleToken(tokenizer: Tokenizer, text: string): number | null {
  const ids = tokenizer.encode(text, { parseSpecial: true });
  return ids.length === 1 && tokenizer.tokenText(ids[0]!) === text ? ids[0]! : null;
}
