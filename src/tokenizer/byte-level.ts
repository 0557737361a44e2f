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
const BYTE_TO_CODE = Uint16Array.from(BYTE_TO_CHAR, (ch) => ch.charCodeAt(0));

/** The character that spells byte `b` (0..255). */
export function byteLevelChar(b: number): string {
  return BYTE_TO_CHAR[b]!;
}

/** The byte-level spelling of text's UTF-8 bytes. */
export function toByteLevel(text: string): string {
  const bytes = utf8.encode(text);
  // Written in chunks of char codes: a string built a character at a time is a rope of one node
  // per character (tens of bytes each) for a long word.
  const codes = new Uint16Array(Math.min(bytes.length, CHUNK));
  let out = "";
  for (let at = 0; at < bytes.length; at += CHUNK) {
    const n = Math.min(CHUNK, bytes.length - at);
    for (let i = 0; i < n; i++) codes[i] = BYTE_TO_CODE[bytes[at + i]!]!;
    out += String.fromCharCode.apply(null, codes.subarray(0, n) as unknown as number[]);
  }
  return out;
}

/** Characters per String.fromCharCode call: well under the engines' argument limits. */
const CHUNK = 4096;

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
