/**
 * A tokenizer's vocabulary as the matcher sees it: each token's exact bytes, which tokens end a
 * generation, and the tries the mask walks. Built once per tokenizer (it costs a sort of the
 * vocabulary) and shared by every grammar compiled for it.
 *
 * Tokens are split by length into two tries: tokens of at most SHORT_TOKEN_BYTES bytes (all but
 * about 1% of Llama 3's) and the rest. A walk of the short trie depends on the lexer state only up
 * to counts above SHORT_TOKEN_BYTES (lexer.ts clampKey), so its results are shared across the
 * positions of a long counted string; the long trie is small and walked per exact state.
 *
 * Special tokens (control and added tokens: Mistral's `[TOOL_CALLS]`, gpt-oss's `<|channel|>`) have,
 * besides the text they may show, a spelling of their own that only the token itself writes
 * (llguidance's special-token marker): 0xFF, the token id in decimal digits, 0xFE. Text never
 * holds those bytes (they are not UTF-8, and every grammar's text is), so a grammar terminal of a
 * token's spelling matches that token and nothing else: not its text written in pieces, not two
 * tokens' bytes run together (a spelling opens with 0xFF and closes with 0xFE). The few tokens
 * whose own bytes hold 0xFE or 0xFF (the byte tokens of byte-level BPE and byte fallback) are
 * never text either, so no grammar allows them and they have no bytes here.
 */
import { GrammarError } from "../errors.ts";
import { isByteTokenizer, type Tokenizer } from "../tokenizer/tokenizer.ts";
import { TokenTrie, type TrieEntry } from "./token-trie.ts";

export const SHORT_TOKEN_BYTES = 16;

/** The bytes that open and close a special token's spelling: never in UTF-8 text. */
export const SPELLING_OPEN = 0xff;
export const SPELLING_CLOSE = 0xfe;

/** A special token's spelling: SPELLING_OPEN, its id in decimal digits, SPELLING_CLOSE. */
export function specialSpelling(id: number): Uint8Array {
  const digits = String(id);
  const out = new Uint8Array(digits.length + 2);
  out[0] = SPELLING_OPEN;
  for (let i = 0; i < digits.length; i++) out[i + 1] = digits.charCodeAt(i);
  out[out.length - 1] = SPELLING_CLOSE;
  return out;
}

/** A token the tokenizer writes whole (control and added tokens), with its text as templates write it. */
export interface SpecialTokenText {
  readonly id: number;
  readonly text: string;
}

/** Printable ASCII but `"` and `\`: the bytes of plain text inside a JSON string (and most text). */
export function isPlainByte(b: number): boolean {
  return b >= 0x20 && b <= 0x7e && b !== 0x22 && b !== 0x5c;
}

/**
 * Tokens of one length class, split (llguidance's "slices"): `plain` holds the tokens made of plain
 * bytes only (isPlainByte: most of a vocabulary), `text` those of whole characters of which some
 * are above ASCII (other scripts; still no `"`, `\` or control), `rest` all others. Where a lexer
 * state lets any plain text of up to `plainMaxBytes` bytes through (inside a free string), every
 * plain token is allowed at once (`plainBits`); likewise the text tokens (`textMaxChars`); only
 * what is left is walked.
 */
export interface TokenSlice {
  readonly plain: TokenTrie;
  readonly plainBits: Uint32Array;
  readonly plainMaxBytes: number;
  readonly text: TokenTrie;
  readonly textBits: Uint32Array;
  readonly textMaxChars: number;
  readonly rest: TokenTrie;
}

const strictUtf8 = new TextDecoder("utf-8", { fatal: true });

/** The characters of a token that is whole UTF-8 characters, none of them `"`, `\` or a control; else null. */
function textCharacters(bytes: Uint8Array): number | null {
  let text: string;
  try {
    text = strictUtf8.decode(bytes);
  } catch {
    return null;
  }
  let n = 0;
  for (const ch of text) {
    const cp = ch.codePointAt(0)!;
    if (cp < 0x20 || cp === 0x22 || cp === 0x5c || cp === 0x7f || (cp >= 0xd800 && cp <= 0xdfff)) return null;
    n++;
  }
  return n;
}

export class TokenVocabulary {
  /** Words of a token bitmask: ceil(size / 32). */
  readonly words: number;
  /** Tokens of at most SHORT_TOKEN_BYTES bytes, and the longer ones. */
  readonly short: TokenSlice;
  readonly long: TokenSlice;
  /** Every plain and text token of both length classes. */
  readonly plainAndTextBits: Uint32Array;
  /** Special token id -> its spelling (specialSpelling). */
  private readonly spellings = new Map<number, Uint8Array>();
  /** A special token's text -> its id (the lowest, where two share a text). */
  private readonly specialByText = new Map<string, number>();

  constructor(
    /** Length of a logits row: the model's vocabulary, at least the tokenizer's (padding is never allowed). */
    readonly size: number,
    /** Token id -> its bytes; empty for tokens that are never text (control, unknown, padding). */
    readonly bytes: readonly Uint8Array[],
    /** End-of-generation tokens: allowed exactly where the grammar may end. */
    readonly eog: Int32Array,
    /** Text -> token ids the way the model's tokenizer splits it (no special tokens). */
    readonly encode: (text: string) => number[],
    /** The special tokens a grammar may name (end-of-generation tokens excluded: they end a grammar). */
    special: readonly SpecialTokenText[] = [],
  ) {
    this.words = Math.ceil(size / 32);
    const short: TrieEntry[] = [];
    const long: TrieEntry[] = [];
    const add = (b: Uint8Array, token: number): void => {
      (b.length <= SHORT_TOKEN_BYTES ? short : long).push({ bytes: b, token });
    };
    bytes.forEach((b, token) => {
      if (b.length > 0) add(b, token);
    });
    const eogSet = new Set(eog);
    for (const { id, text } of special) {
      if (eogSet.has(id) || this.spellings.has(id) || id < 0 || id >= bytes.length) continue;
      const spelled = specialSpelling(id);
      this.spellings.set(id, spelled);
      if (!this.specialByText.has(text)) this.specialByText.set(text, id);
      add(spelled, id);
    }
    this.short = this.slice(short);
    this.long = this.slice(long);
    this.plainAndTextBits = new Uint32Array(this.words);
    for (const slice of [this.short, this.long]) {
      for (let w = 0; w < this.words; w++) this.plainAndTextBits[w]! |= slice.plainBits[w]! | slice.textBits[w]!;
    }
  }

  /** The spelling of special token `id` (it writes these bytes as well as its text, if any), or undefined. */
  spelling(id: number): Uint8Array | undefined {
    return this.spellings.get(id);
  }

  /** The special token written as `text`, or undefined where the vocabulary has none. */
  specialToken(text: string): number | undefined {
    return this.specialByText.get(text);
  }

  /** The special token whose whole spelling `bytes` is, or undefined. */
  spelledToken(bytes: Uint8Array): number | undefined {
    if (bytes.length < 3 || bytes[0] !== SPELLING_OPEN || bytes[bytes.length - 1] !== SPELLING_CLOSE) return undefined;
    const id = Number(new TextDecoder().decode(bytes.subarray(1, bytes.length - 1)));
    const spelled = Number.isInteger(id) ? this.spellings.get(id) : undefined;
    return spelled !== undefined && spelled.length === bytes.length && spelled.every((b, i) => b === bytes[i]) ? id : undefined;
  }

  private slice(entries: readonly TrieEntry[]): TokenSlice {
    const plain: TrieEntry[] = [];
    const text: TrieEntry[] = [];
    const rest: TrieEntry[] = [];
    let textMaxChars = 0;
    for (const e of entries) {
      if (e.bytes.every(isPlainByte)) plain.push(e);
      else {
        const chars = textCharacters(e.bytes);
        if (chars === null) rest.push(e);
        else {
          text.push(e);
          textMaxChars = Math.max(textMaxChars, chars);
        }
      }
    }
    const bitsOf = (list: readonly TrieEntry[]): Uint32Array => {
      const bits = new Uint32Array(this.words);
      for (const e of list) bits[e.token >>> 5]! |= 1 << (e.token & 31);
      return bits;
    };
    return {
      plain: TokenTrie.build(plain), plainBits: bitsOf(plain), plainMaxBytes: plain.reduce((m, e) => Math.max(m, e.bytes.length), 0),
      text: TokenTrie.build(text), textBits: bitsOf(text), textMaxChars, rest: TokenTrie.build(rest),
    };
  }

  /** The vocabulary of a byte-level BPE or SentencePiece tokenizer. */
  static fromTokenizer(tokenizer: Tokenizer, modelVocabSize = tokenizer.vocabSize): TokenVocabulary {
    if (!isByteTokenizer(tokenizer)) {
      throw new GrammarError("structured output needs a byte-level BPE or SentencePiece vocabulary; this model's tokenizer (WordPiece) has none");
    }
    const bytes: Uint8Array[] = [];
    const empty = new Uint8Array(0);
    for (let id = 0; id < tokenizer.vocabSize; id++) {
      const b = tokenizer.eogIds.has(id) ? empty : tokenizer.tokenBytes(id);
      bytes.push(b.includes(SPELLING_OPEN) || b.includes(SPELLING_CLOSE) ? empty : b);
    }
    const encode = (text: string): number[] => tokenizer.encode(text, { continuation: true });
    return new TokenVocabulary(Math.max(modelVocabSize, tokenizer.vocabSize), bytes, Int32Array.from(tokenizer.eogIds), encode, tokenizer.specialTokens());
  }
}
