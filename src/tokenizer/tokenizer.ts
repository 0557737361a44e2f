/**
 * The tokenizer contract every vocabulary kind implements (SentencePiece BPE now, byte-level BPE later).
 */

export interface EncodeOptions {
  /** Prepend the BOS token (ignored when the vocabulary has none). Default false. */
  addBos?: boolean;
  /** Append the EOS token (ignored when the vocabulary has none). Default false. */
  addEos?: boolean;
  /**
   * Match control tokens (`<|im_start|>`, `<s>`, ...) written in the text, as in a rendered chat
   * template. Default false: text a user typed never becomes a control token.
   */
  parseSpecial?: boolean;
  /**
   * The text continues text tokenized before it (a piece of a rendered chat template): no
   * SentencePiece dummy-prefix space at its start. Default false.
   */
  continuation?: boolean;
  /**
   * Stop once more than this many ids are found (a prompt over a context need not be tokenized
   * to its end): the ids returned are then a start of the text's, more than this many. Honoured
   * where a tokenizer can (byte-level BPE; SentencePiece between words); others tokenize the whole text.
   */
  stopAfter?: number;
}

/**
 * Turns the token ids of a generation into text as they arrive. `push` returns only text that is complete:
 * a UTF-8 character split over several byte tokens is held back until its last byte arrives.
 */
export interface StreamDecoder {
  /** Text completed by token `id` ("" while a character is still incomplete or for special tokens). */
  push(id: number): string;
  /** Whatever is held back (an incomplete character becomes U+FFFD); the decoder can then be reused. */
  flush(): string;
}

export interface Tokenizer {
  readonly vocabSize: number;
  readonly bosId: number | null;
  readonly eosId: number | null;
  /** Tokens that end a generation (llama.cpp's is_eog): EOS, EOT, `<|im_end|>`, `<|eot_id|>`, ... */
  readonly eogIds: ReadonlySet<number>;
  /** Token ids of `text`. Invariant: decode(encode(text)) === text for well-formed text. */
  encode(text: string, opts?: EncodeOptions): number[];
  /** Text of `ids`; special tokens (BOS, EOS, other control tokens) contribute nothing. */
  decode(ids: ArrayLike<number>): string;
  /**
   * A decoder for a stream that continues after `prevTokenId` (undefined: the stream starts here). The
   * dummy-prefix space of the first piece is stripped when the stream starts here or right after BOS.
   */
  createStreamDecoder(prevTokenId?: number): StreamDecoder;
  /** The vocabulary entry of `id` as text, for debugging and tests (byte tokens as "<0xXX>"). */
  tokenPiece(id: number): string;
  /** The text a special token is written as in templates (`<s>`, `<|im_end|>`); decoded text for others. */
  tokenText(id: number): string;
  /**
   * A lower bound on encode(text)'s length, found without tokenizing (from the text's bytes), so
   * that a prompt far over a context is refused before its megabytes are tokenized; 0 or absent
   * where the tokenizer gives none.
   */
  minTokens?(text: string): number;
}

/**
 * A tokenizer whose every token stands for the same bytes wherever it appears (byte-level BPE,
 * SentencePiece with byte fallback): what constrained decoding needs to match tokens against a
 * grammar. WordPiece is not one (its spaces depend on the neighbouring tokens).
 */
export interface ByteTokenizer extends Tokenizer {
  /**
   * The bytes token `id` adds to decoded text in the middle of a stream (a SentencePiece piece keeps
   * its leading space); empty for control, unknown and unused tokens.
   */
  tokenBytes(id: number): Uint8Array;
  /**
   * The tokens it writes whole, never by merging text (control and user-defined added tokens:
   * `[TOOL_CALLS]`, `<|channel|>`, `<|im_start|>`), with their texts as templates write them: the
   * tokens a grammar may ask for by name (src/grammar/vocabulary.ts).
   */
  specialTokens(): readonly { readonly id: number; readonly text: string }[];
}

export function isByteTokenizer(tokenizer: Tokenizer): tokenizer is ByteTokenizer {
  return typeof (tokenizer as Partial<ByteTokenizer>).tokenBytes === "function";
}

/**
 * Texts of end-of-generation tokens, as llama.cpp recognises them besides the ids in the metadata
 * (llama-vocab.cpp at the llama.cpp of ../shared/tools/llama-ref; `</s>`: PaddleOCR, `[EOT]` and
 * `[EOS]`: Kimi-K2, `<eos>`, `<turn|>`, `<|tool_response>`: Gemma 4, `[e~[`: MiniMax).
 */
export const EOG_TEXTS: ReadonlySet<string> = new Set([
  "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>", "<end_of_turn>", "<|endoftext|>",
  "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]", "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>",
  "<|tool_response>", "<｜end▁of▁sentence｜>", "[e~[",
]);
