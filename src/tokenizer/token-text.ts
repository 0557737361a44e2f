/**
 * Tokens as text, as llama-server's and vLLM's /tokenize and /detokenize show them: control tokens
 * (BOS, `<|im_start|>`, `[INST]`) written out as the template writes them, where decode() leaves
 * them out, and each token's own piece.
 */
import { isByteTokenizer, type Tokenizer } from "./tokenizer.ts";

/** A token that decodes to nothing but is written as text (BOS, EOS, `<|im_end|>`). */
function isControl(tok: Tokenizer, id: number): boolean {
  return tok.decode([id]) === "" && tok.tokenText(id) !== "";
}

/**
 * The text of `ids` with control tokens written out; the tokens between them are decoded together,
 * so that a character split over byte tokens joins.
 */
export function decodeWritten(tok: Tokenizer, ids: readonly number[]): string {
  let text = "";
  let run: number[] = [];
  for (const id of ids) {
    if (!isControl(tok, id)) {
      run.push(id);
      continue;
    }
    text += tok.decode(run) + tok.tokenText(id);
    run = [];
  }
  return text + tok.decode(run);
}

const UTF8 = new TextDecoder("utf-8", { fatal: true });

/**
 * One token's text as it adds it in the middle of a text: a string, or its bytes where they are not
 * whole UTF-8 characters (a piece of a character), as llama-server's `with_pieces` gives them.
 */
export function tokenPieceText(tok: Tokenizer, id: number): string | number[] {
  if (isControl(tok, id)) return tok.tokenText(id);
  if (!isByteTokenizer(tok)) return tok.decode([id]);
  const bytes = tok.tokenBytes(id);
  try {
    return UTF8.decode(bytes);
  } catch {
    return [...bytes];
  }
}
