/**
 * Minimal llama2.c tokenizer.bin decoder for reference tests (run.c's build_tokenizer + decode +
 * safe_printf), independent of the engine's tokenizer. Encoding is not needed: tests hard-code ids.
 */
import { readFileSync } from "node:fs";

/** Token pieces as raw bytes, indexed by token id. */
export function readTokenPieces(path: string, vocabSize: number): Uint8Array[] {
  const bytes = readFileSync(path);
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const pieces: Uint8Array[] = [];
  let offset = 4; // skip max_token_length
  for (let i = 0; i < vocabSize; i++) {
    const length = view.getInt32(offset + 4, true); // after the float score
    offset += 8;
    pieces.push(bytes.subarray(offset, offset + length));
    offset += length;
  }
  return pieces;
}

const BYTE_TOKEN = /^<0x([0-9A-Fa-f]{2})>$/;
const BOS = 1;

/** Text run.c prints for `tokens` following `previousToken`: BOS strips a leading space, <0xNN> is a byte. */
export function decodeTokens(pieces: readonly Uint8Array[], previousToken: number, tokens: readonly number[]): string {
  const out: number[] = [];
  let prev = previousToken;
  for (const token of tokens) {
    let piece = pieces[token]!;
    if (prev === BOS && piece[0] === 0x20) piece = piece.subarray(1);
    const byteToken = BYTE_TOKEN.exec(new TextDecoder().decode(piece));
    if (byteToken !== null) piece = Uint8Array.of(parseInt(byteToken[1]!, 16));
    // safe_printf drops one-byte pieces that are neither printable ASCII nor whitespace.
    const single = piece.length === 1 ? piece[0]! : -1;
    const unprintable = single >= 0 && !((single >= 0x20 && single < 0x7f) || (single >= 0x09 && single <= 0x0d));
    if (!unprintable) out.push(...piece);
    prev = token;
  }
  return new TextDecoder().decode(new Uint8Array(out));
}
