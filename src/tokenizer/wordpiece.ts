/**
 * WordPiece (`tokenizer.ggml.model` = "bert"), as llama.cpp's llm_tokenizer_wpm: each character is
 * decomposed (to the first code point of its NFD), lower-cased, stripped of accents, control and
 * format characters, and the text split at whitespace, with every
 * punctuation mark, ASCII symbol and CJK ideograph a word of its own; each word, prefixed with
 * "▁" (how llama.cpp's converter marks a word start), is cut greedily into the longest
 * vocabulary pieces, and a word that cannot be cut becomes the unknown token.
 */
import { InputError, ModelFormatError } from "../errors.ts";
import { partitionSpecials, sortSpecials, type SpecialToken } from "./special-tokens.ts";
import { TokenType } from "./spm.ts";
import type { EncodeOptions, StreamDecoder, Tokenizer } from "./tokenizer.ts";
import { appendAll } from "../util/append-all.ts";

export interface WordPieceVocab {
  readonly file: string;
  readonly tokens: readonly string[];
  readonly types: Uint8Array;
  readonly unkId: number;
  /** [CLS] and [SEP]: what BERT models put around a text. */
  readonly bosId: number | null;
  readonly eosId: number | null;
  /** BertNormalizer's options (tokenizer.ggml.normalizer.*): lower-case (default) and strip accents (default: as lowercase). */
  readonly lowercase?: boolean;
  readonly stripAccents?: boolean;
}

const WORD_START = "\u2581";
const IS_SPACE = /^\p{White_Space}$/u;
/** llama.cpp's is_control: Unicode's C categories but unassigned code points (those are appended as letters are). */
const IS_CONTROL = /^[\p{Cc}\p{Cf}\p{Co}\p{Cs}]$/u;
/** Combining marks (\p{M}): after the decomposition below they are the accents uncased BERT models strip. */
const IS_ACCENT = /^\p{M}$/u;
const IS_PUNCTUATION = /^\p{P}$/u;
const IS_SYMBOL = /^\p{S}$/u;

/** BERT's CJK ideograph blocks, as llama.cpp's is_chinese_char (the 0x2B920 start follows HF's Rust code). */
function isChineseChar(cp: number): boolean {
  return (cp >= 0x4e00 && cp <= 0x9fff) || (cp >= 0x3400 && cp <= 0x4dbf) || (cp >= 0x20000 && cp <= 0x2a6df) ||
    (cp >= 0x2a700 && cp <= 0x2b73f) || (cp >= 0x2b740 && cp <= 0x2b81f) || (cp >= 0x2b920 && cp <= 0x2ceaf) ||
    (cp >= 0xf900 && cp <= 0xfaff) || (cp >= 0x2f800 && cp <= 0x2fa1f);
}

/**
 * llama.cpp's NFD of one code point: the first code point of its canonical decomposition (its
 * table keeps only that), so a precomposed letter becomes its base letter, and a Hangul syllable
 * its first jamo.
 */
function firstOfDecomposition(ch: string): string {
  return String.fromCodePoint(ch.normalize("NFD").codePointAt(0)!);
}

/** Unicode's simple lower-case mapping (one code point; JavaScript's full mapping lowers U+0130 to two). */
function simpleLower(ch: string): string {
  return String.fromCodePoint(ch.toLowerCase().codePointAt(0)!);
}

export class WordPieceTokenizer implements Tokenizer {
  readonly vocabSize: number;
  readonly bosId: number | null;
  readonly eosId: number | null;
  readonly eogIds: ReadonlySet<number>;
  private readonly tokenToId = new Map<string, number>();
  private readonly maxTokenLength: number;
  private readonly specials: SpecialToken[];

  constructor(private readonly vocab: WordPieceVocab) {
    if (vocab.tokens.length === 0) throw new ModelFormatError(vocab.file, "vocabulary is empty");
    this.vocabSize = vocab.tokens.length;
    this.bosId = vocab.bosId;
    this.eosId = vocab.eosId;
    this.eogIds = new Set(vocab.eosId === null ? [] : [vocab.eosId]);
    vocab.tokens.forEach((t, id) => {
      if (!this.tokenToId.has(t)) this.tokenToId.set(t, id);
    });
    this.maxTokenLength = Math.max(...vocab.tokens.map((t) => Array.from(t).length));
    this.specials = sortSpecials(vocab.tokens.flatMap((text, id) =>
      vocab.types[id] === TokenType.control || vocab.types[id] === TokenType.userDefined ? [{ id, text, control: vocab.types[id] === TokenType.control }] : []));
  }

  encode(text: string, opts: EncodeOptions = {}): number[] {
    const ids: number[] = [];
    if (opts.addBos === true && this.bosId !== null) ids.push(this.bosId);
    for (const f of partitionSpecials(text, this.specials, opts.parseSpecial === true)) {
      if ("id" in f) ids.push(f.id);
      else for (const word of this.words(f.text)) appendAll(ids, this.cut(word));
    }
    if (opts.addEos === true && this.eosId !== null) ids.push(this.eosId);
    return ids;
  }

  /** BERT's basic tokenizer, as llama.cpp's preprocess. */
  private words(text: string): string[] {
    const lowercase = this.vocab.lowercase ?? true;
    const stripAccents = this.vocab.stripAccents ?? lowercase;
    const words: string[] = [""];
    for (const original of text) {
      const ch = stripAccents ? firstOfDecomposition(original) : original;
      const cp = ch.codePointAt(0)!;
      if (IS_SPACE.test(ch)) {
        if (words[words.length - 1] !== "") words.push("");
        continue;
      }
      if (cp === 0 || cp === 0xfffd || IS_CONTROL.test(ch) || (stripAccents && IS_ACCENT.test(ch))) continue;
      const piece = lowercase ? simpleLower(ch) : ch;
      if (IS_PUNCTUATION.test(ch) || (cp < 0x7f && IS_SYMBOL.test(ch)) || isChineseChar(cp)) {
        if (words[words.length - 1] !== "") words.push("");
        words[words.length - 1] = piece;
        words.push("");
      } else {
        words[words.length - 1] += piece;
      }
    }
    return words.filter((w) => w !== "");
  }

  /** Greedy longest-match of "▁" + word; the unknown token when some position matches nothing. */
  private cut(word: string): number[] {
    const chars = Array.from(WORD_START + word);
    const ids: number[] = [];
    for (let i = 0; i < chars.length; ) {
      let found = -1;
      let end = Math.min(chars.length, i + this.maxTokenLength);
      for (; end > i; end--) {
        const id = this.tokenToId.get(chars.slice(i, end).join(""));
        if (id !== undefined) {
          found = id;
          break;
        }
      }
      if (found < 0) return [this.vocab.unkId];
      ids.push(found);
      i = end;
    }
    return ids;
  }

  decode(ids: ArrayLike<number>): string {
    let out = "";
    for (let i = 0; i < ids.length; i++) out += this.pieceText(ids[i]!);
    return out.startsWith(" ") ? out.slice(1) : out;
  }

  createStreamDecoder(prevTokenId?: number): StreamDecoder {
    let first = prevTokenId === undefined;
    return {
      push: (id: number) => {
        let text = this.pieceText(id);
        if (first && text.length > 0) {
          if (text.startsWith(" ")) text = text.slice(1);
          first = false;
        }
        return text;
      },
      flush: () => "",
    };
  }

  private pieceText(id: number): string {
    this.checkId(id);
    const type = this.vocab.types[id];
    if (type === TokenType.control || type === TokenType.unknown) return "";
    return this.vocab.tokens[id]!.replaceAll(WORD_START, " ");
  }

  tokenPiece(id: number): string {
    this.checkId(id);
    return this.vocab.tokens[id]!;
  }

  tokenText(id: number): string {
    this.checkId(id);
    return this.vocab.tokens[id]!;
  }

  private checkId(id: number): void {
    if (!Number.isInteger(id) || id < 0 || id >= this.vocabSize) throw new InputError(`token id ${id} is outside the vocabulary (0..${this.vocabSize - 1})`);
  }
}
