/** Counts of a string's UTF-8 bytes, without encoding it (Tokenizer.minTokens). */

/**
 * How many of text's UTF-8 bytes have kept[byte] set (a lone surrogate counted as TextEncoder
 * writes it, U+FFFD), without encoding it.
 */
export function keptUtf8Bytes(text: string, kept: Uint8Array): number {
  let n = 0;
  const add = (b: number) => {
    n += kept[b]!;
  };
  for (let i = 0; i < text.length; i++) {
    let c = text.charCodeAt(i);
    if (c >= 0xd800 && c < 0xdc00 && i + 1 < text.length && (text.charCodeAt(i + 1) & 0xfc00) === 0xdc00) {
      c = 0x10000 + ((c - 0xd800) << 10) + (text.charCodeAt(++i) - 0xdc00);
    } else if (c >= 0xd800 && c < 0xe000) c = 0xfffd;
    if (c < 0x80) add(c);
    else if (c < 0x800) {
      add(0xc0 | (c >> 6));
      add(0x80 | (c & 0x3f));
    } else if (c < 0x10000) {
      add(0xe0 | (c >> 12));
      add(0x80 | ((c >> 6) & 0x3f));
      add(0x80 | (c & 0x3f));
    } else {
      add(0xf0 | (c >> 18));
      add(0x80 | ((c >> 12) & 0x3f));
      add(0x80 | ((c >> 6) & 0x3f));
      add(0x80 | (c & 0x3f));
    }
  }
  return n;
}

/** Every byte value counted. */
export const ALL_BYTES = new Uint8Array(256).fill(1);
