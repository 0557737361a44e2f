/**
 * Special and added tokens inside text, as llama.cpp's tokenizer_st_partition finds them: the
 * text is cut at every occurrence of a special token's text, longest tokens first, leftmost
 * first. Control and unknown tokens (BOS, <|im_start|>, <unk>, ...) are only matched when specials
 * are parsed (template text); user-defined added tokens are matched always, as llama.cpp does.
 */

/** A piece of text to tokenize normally, or a special token found in it. */
export type Fragment = { text: string } | { id: number };

export interface SpecialToken {
  id: number;
  text: string;
  /** A control or unknown token (matched only when specials are parsed); else a user-defined one. */
  control: boolean;
  /** Whitespace before the token is dropped when it matches (Hugging Face's lstrip). */
  lstrip?: boolean;
  /** Whitespace after the token is dropped when it matches (Hugging Face's rstrip). */
  rstrip?: boolean;
}

/** lstrip/rstrip per token id, for the few vocabularies that have them. */
export type StripFlags = ReadonlyMap<number, { lstrip: boolean; rstrip: boolean }>;

const utf8 = new TextEncoder();

/**
 * Special tokens sorted for matching: longest UTF-8 text first (llama.cpp's order, so "<|im_end|>"
 * beats "<|im"), then lowest id; `strip` adds lstrip/rstrip flags.
 */
export function sortSpecials(specials: SpecialToken[], strip?: StripFlags): SpecialToken[] {
  const bytes = new Map(specials.map((s) => [s.id, utf8.encode(s.text).length]));
  return specials
    .filter((s) => s.text.length > 0)
    .map((s) => ({ ...s, ...strip?.get(s.id) }))
    .sort((a, b) => bytes.get(b.id)! - bytes.get(a.id)! || a.id - b.id);
}

/** C's isspace, which llama.cpp's lstrip/rstrip use. */
function isCSpace(ch: string | undefined): boolean {
  return ch === " " || ch === "\t" || ch === "\n" || ch === "\r" || ch === "\v" || ch === "\f";
}

export function partitionSpecials(text: string, specials: readonly SpecialToken[], parseSpecial: boolean): Fragment[] {
  if (text.length === 0) return [];
  let fragments: Fragment[] = [{ text }];
  for (const special of specials) {
    if (special.control && !parseSpecial) continue;
    const next: Fragment[] = [];
    for (const f of fragments) {
      if (!("text" in f) || !f.text.includes(special.text)) {
        next.push(f);
        continue;
      }
      let at = 0;
      for (;;) {
        const found = f.text.indexOf(special.text, at);
        if (found < 0) break;
        let leftEnd = found;
        if (special.lstrip === true) while (leftEnd > at && isCSpace(f.text[leftEnd - 1])) leftEnd--;
        if (leftEnd > at) next.push({ text: f.text.slice(at, leftEnd) });
        next.push({ id: special.id });
        at = found + special.text.length;
        if (special.rstrip === true) while (at < f.text.length && isCSpace(f.text[at])) at++;
      }
      if (at < f.text.length) next.push({ text: f.text.slice(at) });
    }
    fragments = next;
  }
  return fragments;
}
