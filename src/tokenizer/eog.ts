/**
 * Which tokens end a generation, by their text, as llama.cpp's llama-vocab.cpp decides it at load
 * (at the llama.cpp of ../shared/tools/llama-ref), for GGUF vocabularies and tokenizer.json alike:
 *
 * - Every token (not a byte token) spelled as one of EOG_TEXTS ends a generation, and becomes a
 *   control token if it was not one, so text a user types never produces it.
 * - Where `<|end|>` ends a message but not the reply (gpt-oss's harmony format, which has
 *   `<|return|>` and `<|call|>`; solar-open's `<|calls|>` and `<|flush|>`), it does not end a
 *   generation and becomes user-defined: it shows in the reply's text, as llama.cpp shows it.
 * - The harmony tokens that frame a message's header (`<|start|>`, `<|channel|>`, `<|message|>`,
 *   `<|constrain|>`) are user-defined, as llama.cpp makes them: a gpt-oss reply's text keeps its
 *   channels (`<|channel|>analysis<|message|>...<|end|><|start|>assistant<|channel|>final<|message|>...`),
 *   for whatever splits reasoning from the answer.
 */
import { TokenType } from "./spm.ts";
import { EOG_TEXTS } from "./tokenizer.ts";

/** The harmony tokens llama.cpp always renders in text. */
const RENDERED_HARMONY_TEXTS: ReadonlySet<string> = new Set(["<|start|>", "<|channel|>", "<|message|>", "<|constrain|>"]);

/** Add the ids of `texts` that end a generation to `eog`, and adjust `types` as above (in place). */
export function addEogByText(texts: readonly string[], types: Uint8Array, eog: Set<number>): void {
  const byText = new Map<string, number>();
  texts.forEach((t, id) => {
    if (RENDERED_HARMONY_TEXTS.has(t)) types[id] = TokenType.userDefined;
    if (types[id] === TokenType.byte || !EOG_TEXTS.has(t)) return;
    eog.add(id);
    byText.set(t, id);
    types[id] = TokenType.control;
  });
  const has = (t: string) => byText.has(t);
  const messageEnd = byText.get("<|end|>");
  const calls = has("<|call|>") || has("<|calls|>");
  if (messageEnd !== undefined && ((has("<|return|>") && calls) || (calls && has("<|flush|>")))) {
    eog.delete(messageEnd);
    types[messageEnd] = TokenType.userDefined;
  }
}
