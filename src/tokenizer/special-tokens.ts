/**
 * Special and added tokens inside text, as llama.cpp's tokenizer_st_partition finds them: the
 * text is cut at every occurrence of a special token's text, longest tokens first, leftmost
 * first. Control tokens (BOS, <|im_start|>, ...) are only matched when specials are parsed
 * (template text); user-defined added tokens are matched always, as llama.cpp does.
 */

/** A piece of text to tokenize normally, or a special token found in it. */
export type Fragment = { text: string } | { id: number };

export interface SpecialToken {
  id: number;
  text: string;
  /** A control token (matched only when specials are parsed); else a user-defined one. */
  control: boolean;
}

/** Special tokens sorted for matching: longest text first (so "<|im_end|>" beats "<|im"), then lowest id. */
export function sortSpecials(specials: SpecialToken[]): SpecialToken[] {
  return specials.filter((s) => s.text.length > 0).sort((a, b) => b.text.length - a.text.length || a.id - b.id);
}

export function partitionSpecials(text: string, specials: readonly SpecialToken[], parseSpecial: boolean): Fragment[] {
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
        if (found > at) next.push({ text: f.text.slice(at, found) });
        next.push({ id: special.id });
        at = found + special.text.length;
      }
      if (at < f.text.length) next.push({ text: f.text.slice(at) });
    }
    fragments = next;
  }
  return fragments;
}
