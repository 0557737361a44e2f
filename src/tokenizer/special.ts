/**
 * Special and added tokens, shared by every vocabulary kind (llama.cpp's `tokenizer_st_partition` and its
 * end-of-generation detection).
 *
 * Before a vocabulary's own algorithm sees the text, the text is cut into fragments: runs of raw text and
 * whole special tokens. User-defined tokens (added tokens such as deepseek's single-character tokens) are
 * always cut out, as llama.cpp and Hugging Face do; control and unknown tokens (`<|im_start|>`, `<s>`, ...)
 * only when the caller parses specials (template text), so a user who types `<|im_start|>` gets its
 * characters, never the control token.
 */
import { TokenType } from "./spm.ts";

/** A token that may be matched whole in text. */
export interface SpecialToken {
  readonly id: number;
  readonly text: string;
  /** True for user-defined tokens, matched even when specials are not parsed. */
  readonly always: boolean;
  /** Whitespace before the token is dropped when it matches (Hugging Face's lstrip). */
  readonly lstrip: boolean;
  /** Whitespace after the token is dropped when it matches (Hugging Face's rstrip). */
  readonly rstrip: boolean;
}

/** Per-token lstrip/rstrip flags; most vocabularies have none. */
export type StripFlags = (id: number) => { lstrip: boolean; rstrip: boolean };

const utf8Encoder = new TextEncoder();

const NO_STRIP: StripFlags = () => ({ lstrip: false, rstrip: false });

/** C's isspace, which llama.cpp's stripping uses. */
function isAsciiSpace(char: string | undefined): boolean {
  return char === " " || char === "\t" || char === "\n" || char === "\r" || char === "\v" || char === "\f";
}

/** A piece of text after partitioning: raw text for the vocabulary's algorithm, or one whole token. */
export type Fragment = { readonly text: string } | { readonly id: number };

/**
 * The tokens of a vocabulary that are matched whole, longest text first (llama.cpp's order: a longer
 * token wins over a shorter one it contains). `types` are TokenType values per id.
 */
export function specialTokens(count: number, types: Uint8Array, textOf: (id: number) => string, strip: StripFlags = NO_STRIP): SpecialToken[] {
  const specials: SpecialToken[] = [];
  for (let id = 0; id < count; id++) {
    const type = types[id];
    if (type !== TokenType.control && type !== TokenType.userDefined && type !== TokenType.unknown) continue;
    const text = textOf(id);
    if (text.length > 0) specials.push({ id, text, always: type === TokenType.userDefined, ...strip(id) });
  }
  // llama.cpp orders by UTF-8 length; a stable sort keeps equal lengths in id order.
  const byteLength = new Map(specials.map((special) => [special.id, utf8Encoder.encode(special.text).length]));
  return specials.sort((a, b) => byteLength.get(b.id)! - byteLength.get(a.id)!);
}

/**
 * Cut `text` into fragments at every occurrence of a matchable special token. Like llama.cpp, each token in
 * turn (longest first) splits the raw fragments left by the tokens before it, leftmost occurrence first.
 */
export function partitionSpecials(text: string, specials: readonly SpecialToken[], parseSpecial: boolean): Fragment[] {
  if (text.length === 0) return [];
  let fragments: Fragment[] = [{ text }];
  for (const special of specials) {
    if (!special.always && !parseSpecial) continue;
    if (!text.includes(special.text)) continue;
    const next: Fragment[] = [];
    for (const fragment of fragments) {
      if (!("text" in fragment)) {
        next.push(fragment);
        continue;
      }
      const raw = fragment.text;
      let from = 0;
      for (let at = raw.indexOf(special.text); at >= 0; at = raw.indexOf(special.text, from)) {
        let leftEnd = at;
        if (special.lstrip) while (leftEnd > from && isAsciiSpace(raw[leftEnd - 1])) leftEnd--;
        if (leftEnd > from) next.push({ text: raw.slice(from, leftEnd) });
        next.push({ id: special.id });
        from = at + special.text.length;
        if (special.rstrip) while (from < raw.length && isAsciiSpace(raw[from])) from++;
      }
      if (from < raw.length) next.push({ text: from === 0 ? raw : raw.slice(from) });
    }
    fragments = next;
  }
  return fragments;
}

/** Token texts llama.cpp treats as end of turn when the file names no EOT token. */
const EOT_TEXTS: readonly string[] = [
  "<|eot_id|>",
  "<|im_end|>",
  "<|end|>",
  "<end_of_turn>",
  "<|endoftext|>",
  "<EOT>",
  "_<EOT>",
  "<｜end▁of▁sentence｜>",
  "<end_of_utterance>",
];

/** Token texts that end generation whatever the metadata says (llama.cpp's text-based detection). */
const EOG_TEXTS: ReadonlySet<string> = new Set([
  "<|eot_id|>",
  "<|im_end|>",
  "<|end|>",
  "<|return|>",
  "<|call|>",
  "<|flush|>",
  "<|calls|>",
  "<end_of_turn>",
  "<|endoftext|>",
  "<|eom_id|>",
  "<EOT>",
  "_<EOT>",
  "<|end_of_text|>",
  "<end_of_utterance>",
]);

/** Token ids named by metadata that take part in end-of-generation detection (null: absent). */
export interface EogMetadata {
  readonly eosId: number | null;
  readonly eotId: number | null;
  readonly eomId: number | null;
  /** FIM pad, repo and separator tokens, which llama.cpp also stops at. */
  readonly fimIds: readonly (number | null)[];
}

/**
 * The end-of-generation set as llama.cpp's `is_eog` computes it: the FIM pad/rep/sep tokens, every token
 * whose text is a known end-of-turn marker, then EOS, EOT (from metadata, else the first token with a known
 * end-of-turn text) and EOM. Detected tokens become control tokens in `types` (llama.cpp does the same), so
 * user text never produces them.
 */
export function endOfGenerationIds(meta: EogMetadata, count: number, types: Uint8Array, textOf: (id: number) => string): Set<number> {
  const eog = new Set<number>();
  for (const id of meta.fimIds) if (id !== null) eog.add(id);
  let eotId = meta.eotId;
  let eomId = meta.eomId;
  for (let id = 0; id < count; id++) {
    const text = textOf(id);
    if (text.length === 0 || text.length > 32) continue;
    if (eotId === null && EOT_TEXTS.includes(text)) {
      eotId = id;
      types[id] = TokenType.control;
    }
    if (eomId === null && text === "<|eom_id|>") eomId = id;
    if (EOG_TEXTS.has(text)) {
      eog.add(id);
      types[id] = TokenType.control;
    }
  }
  for (const id of [meta.eosId, eotId, eomId]) if (id !== null) eog.add(id);
  return eog;
}
