/**
 * GPT-2's byte-level alphabet: every byte is shown as one printable character, so a vocabulary of
 * strings covers all byte sequences. Printable Latin-1 bytes stand for themselves; the others
 * (controls, space, ...) map to U+0100 upward in byte order.
 */

const BYTE_TO_CHAR: string[] = [];
const CHAR_TO_BYTE = new Map<string, number>();
{
  let next = 256;
  for (let b = 0; b < 256; b++) {
    const printable = (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
    const ch = String.fromCodePoint(printable ? b : next++);
    BYTE_TO_CHAR.push(ch);
    CHAR_TO_BYTE.set(ch, b);
  }
}

const utf8 = new TextEncoder();

/** The byte-level spelling of text's UTF-8 bytes. */
export function toByteLevel(text: string): string {
  let out = "";
  for (const b of utf8.encode(text)) out += BYTE_TO_CHAR[b];
  return out;
}

/** The bytes a byte-level string spells; a character outside the alphabet contributes its own UTF-8. */
export function fromByteLevel(text: string): Uint8Array {
  const out: number[] = [];
  for (const ch of text) {
    const b = CHAR_TO_BYTE.get(ch);
    if (b !== undefined) out.push(b);
    else out.push(...utf8.encode(ch));
  }
  return Uint8Array.from(out);
}
