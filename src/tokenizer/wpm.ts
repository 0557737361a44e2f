/**
 * WordPiece (BERT, `tokenizer.ggml.model = bert`), as llama.cpp's `llm_tokenizer_wpm_session`.
 *
 * The text is normalized (NFD with accent marks removed, lowercased), cut at whitespace and around every
 * punctuation character, ASCII symbol and CJK ideograph; control characters are dropped. Each word gets a
 * leading "▁" (the GGUF converter spells word-initial pieces "▁piece" and continuation pieces without
 * "##") and is covered greedily by the longest pieces; a word that cannot be covered becomes [UNK].
 */
import { InputError, ModelFormatError } from "../errors.ts";
import { partitionSpecials, specialTokens, type SpecialToken } from "./special.ts";
import { PieceTable, TokenType } from "./spm.ts";
import { BytesStreamDecoder, concatBytes } from "./stream.ts";
import type { EncodeOptions, StreamDecoder, Tokenizer } from "./tokenizer.ts";

export interface WpmVocab {
  readonly file: string;
  readonly tokens: readonly string[];
  readonly types: Uint8Array;
  readonly unkId: number;
  readonly bosId: number | null;
  readonly eosId: number | null;
  readonly eogIds: ReadonlySet<number>;
}

const METASPACE = "\u2581";
const utf8Encoder = new TextEncoder();
const utf8Decoder = new TextDecoder("utf-8", { ignoreBOM: true });

const WHITESPACE = /^\p{White_Space}$/u;
const CONTROL = /^[\p{Cc}\p{Cf}\p{Co}\p{Cs}]$/u;
const ACCENT_MARK = /^\p{M}$/u;
const PUNCTUATION = /^\p{P}$/u;
const SYMBOL = /^\p{S}$/u;

/** CJK ideograph blocks BERT isolates (Hugging Face's ranges, which llama.cpp copies). */
function isChineseChar(cpt: number): boolean {
  return (
    (cpt >= 0x4e00 && cpt <= 0x9fff) ||
    (cpt >= 0x3400 && cpt <= 0x4dbf) ||
    (cpt >= 0x20000 && cpt <= 0x2a6df) ||
    (cpt >= 0x2a700 && cpt <= 0x2b73f) ||
    (cpt >= 0x2b740 && cpt <= 0x2b81f) ||
    (cpt >= 0x2b920 && cpt <= 0x2ceaf) ||
    (cpt >= 0xf900 && cpt <= 0xfaff) ||
    (cpt >= 0x2f800 && cpt <= 0x2fa1f)
  );
}

/** Simple (one code point) lowercase mapping of `char`. */
function lowercase(char: string): string {
  const lower = char.toLowerCase();
  const first = lower.codePointAt(0);
  return first !== undefined && lower.length > String.fromCodePoint(first).length ? String.fromCodePoint(first) : lower;
}

/** BERT's basic tokenization: the words of `text`. */
export function wordPieceWords(text: string): string[] {
  const words: string[] = [];
  let word = "";
  const finish = (): void => {
    if (word.length > 0) words.push(word);
    word = "";
  };
  for (const char of text.normalize("NFD")) {
    const cpt = char.codePointAt(0) ?? 0;
    if (WHITESPACE.test(char)) {
      finish();
      continue;
    }
    if (cpt === 0 || cpt === 0xfffd || CONTROL.test(char) || ACCENT_MARK.test(char)) continue;
    const lower = lowercase(char);
    if (PUNCTUATION.test(char) || (cpt < 0x7f && SYMBOL.test(char)) || isChineseChar(cpt)) {
      finish();
      words.push(lower);
    } else {
      word += lower;
    }
  }
  finish();
  return words;
}

export class WpmTokenizer implements Tokenizer {
  readonly vocabSize: number;
  readonly bosId: number | null;
  readonly eosId: number | null;
  readonly eogIds: ReadonlySet<number>;
  private readonly vocab: WpmVocab;
  private readonly tokenToId = new Map<string, number>();
  /** Longest token text in UTF-16 units: no longer piece can match. */
  private readonly maxTokenLength: number;
  private readonly specials: readonly SpecialToken[];
  private readonly textBytes: PieceTable;

  constructor(vocab: WpmVocab) {
    const count = vocab.tokens.length;
    if (vocab.unkId < 0 || vocab.unkId >= count) throw new ModelFormatError(vocab.file, `unknown token id ${vocab.unkId} is outside the vocabulary`);
    this.vocab = vocab;
    this.vocabSize = count;
    this.bosId = vocab.bosId;
    this.eosId = vocab.eosId;
    this.eogIds = vocab.eogIds;
    let longest = 0;
    vocab.tokens.forEach((text, id) => {
      this.tokenToId.set(text, id);
      longest = Math.max(longest, text.length);
    });
    this.maxTokenLength = longest;
    this.specials = specialTokens(count, vocab.types, (id) => vocab.tokens[id]);
    this.textBytes = PieceTable.build(count, (id) => {
      const type = vocab.types[id];
      if (type === TokenType.control || type === TokenType.unknown || type === TokenType.unused) return new Uint8Array(0);
      return utf8Encoder.encode(vocab.tokens[id].replaceAll(METASPACE, " "));
    });
  }

  encode(text: string, opts: EncodeOptions = {}): number[] {
    const ids: number[] = [];
    if (opts.addBos === true && this.bosId !== null) ids.push(this.bosId);
    for (const fragment of partitionSpecials(text, this.specials, opts.parseSpecial === true)) {
      if ("id" in fragment) ids.push(fragment.id);
      else for (const word of wordPieceWords(fragment.text)) this.encodeWord(METASPACE + word, ids);
    }
    if (opts.addEos === true && this.eosId !== null) ids.push(this.eosId);
    return ids;
  }

  /** Greedy longest-match cover of one word; all of it or [UNK]. */
  private encodeWord(word: string, out: number[]): void {
    const first = out.length;
    for (let i = 0; i < word.length; ) {
      let matched = 0;
      for (let j = Math.min(word.length, i + this.maxTokenLength); j > i; j--) {
        const id = this.tokenToId.get(word.slice(i, j));
        if (id !== undefined) {
          out.push(id);
          matched = j - i;
          break;
        }
      }
      if (matched === 0) {
        out.length = first;
        break;
      }
      i += matched;
    }
    if (out.length === first) out.push(this.vocab.unkId);
  }

  private bytesAfter(id: number, prevId: number | undefined): Uint8Array {
    if (!Number.isInteger(id) || id < 0 || id >= this.vocabSize) {
      throw new InputError(`token id ${id} is outside the vocabulary (0..${this.vocabSize - 1})`);
    }
    const bytes = this.textBytes.bytes(id);
    // The first word's space is the "▁" WordPiece added, not text.
    const startsText = prevId === undefined || prevId === this.bosId;
    return startsText && bytes[0] === 0x20 ? bytes.subarray(1) : bytes;
  }

  decode(ids: ArrayLike<number>): string {
    const parts: Uint8Array[] = [];
    for (let i = 0; i < ids.length; i++) parts.push(this.bytesAfter(ids[i], i === 0 ? undefined : ids[i - 1]));
    return utf8Decoder.decode(concatBytes(parts));
  }

  createStreamDecoder(prevTokenId?: number): StreamDecoder {
    return new BytesStreamDecoder((id, prevId) => this.bytesAfter(id, prevId), prevTokenId);
  }

  tokenPiece(id: number): string {
    if (!Number.isInteger(id) || id < 0 || id >= this.vocabSize) {
      throw new InputError(`token id ${id} is outside the vocabulary (0..${this.vocabSize - 1})`);
    }
    return this.vocab.tokens[id];
  }
}
