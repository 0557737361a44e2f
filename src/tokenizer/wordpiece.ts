/**
 * WordPiece (`tokenizer.ggml.model` = "bert"), as llama.cpp's llm_tokenizer_wpm: the text is
 * NFD-normalised, lower-cased, stripped of accents and control characters and split at whitespace, with every
 * punctuation mark, ASCII symbol and CJK ideograph a word of its own; each word, prefixed with
 * "▁" (how llama.cpp's converter marks a word start), is cut greedily into the longest
 * vocabulary pieces, and a word that cannot be cut becomes the unknown token.
 */
import { InputError, ModelFormatError } from "../errors.ts";
import { partitionSpecials, sortSpecials, type SpecialToken } from "./special-tokens.ts";
import { TokenType } from "./spm.ts";
import type { EncodeOptions, StreamDecoder, Tokenizer } from "./tokenizer.ts";

export interface WordPieceVocab {
  readonly file: string;
  readonly tokens: readonly string[];
  readonly types: Uint8Array;
  readonly unkId: number;
  /** [CLS] and [SEP]: what BERT models put around a text. */
  readonly bosId: number | null;
  readonly eosId: number | null;
}

const WORD_START = "\u2581";
const IS_SPACE = /^\p{White_Space}$/u;
const IS_CONTROL = /^\p{Cc}$/u;
/** Combining marks: after NFD they are the accents BERT's uncased models strip. */
const IS_ACCENT = /^\p{Mn}$/u;
const IS_SEPARATE = /^[\p{P}\p{Script=Han}]$/u;
const IS_SYMBOL = /^\p{S}$/u;

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
      else for (const word of this.words(f.text)) ids.push(...this.cut(word));
    }
    if (opts.addEos === true && this.eosId !== null) ids.push(this.eosId);
    return ids;
  }

  /** BERT's basic tokenizer, as llama.cpp's preprocess. */
  private words(text: string): string[] {
    const words: string[] = [""];
    for (const ch of text.normalize("NFD")) {
      const cp = ch.codePointAt(0)!;
      if (IS_SPACE.test(ch)) {
        if (words[words.length - 1] !== "") words.push("");
        continue;
      }
      if (cp === 0 || cp === 0xfffd || IS_CONTROL.test(ch) || IS_ACCENT.test(ch)) continue;
      const lower = ch.toLowerCase();
      if (IS_SEPARATE.test(ch) || (cp < 0x7f && IS_SYMBOL.test(ch))) {
        if (words[words.length - 1] !== "") words.push("");
        words[words.length - 1] = lower;
        words.push("");
      } else {
        words[words.length - 1] += lower;
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
