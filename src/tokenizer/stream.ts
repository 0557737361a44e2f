/** The streaming decoder shared by vocabularies whose tokens stand for byte strings. */
import type { StreamDecoder } from "./tokenizer.ts";

/**
 * Decodes tokens to text as they arrive. A UTF-8 character whose bytes come from several tokens is held in
 * the TextDecoder until its last byte arrives, so it is printed once and whole.
 */
export class BytesStreamDecoder implements StreamDecoder {
  private utf8 = new TextDecoder("utf-8", { ignoreBOM: true });

  constructor(
    private readonly bytesAfter: (id: number, prevId: number | undefined) => Uint8Array,
    private prevId: number | undefined,
  ) {}

  push(id: number): string {
    const bytes = this.bytesAfter(id, this.prevId);
    this.prevId = id;
    return this.utf8.decode(bytes, { stream: true });
  }

  flush(): string {
    return this.utf8.decode();
  }
}

/** Concatenate byte strings. */
export function concatBytes(parts: readonly Uint8Array[]): Uint8Array {
  let total = 0;
  for (const part of parts) total += part.length;
  const joined = new Uint8Array(total);
  let at = 0;
  for (const part of parts) {
    joined.set(part, at);
    at += part.length;
  }
  return joined;
}
