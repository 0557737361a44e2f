/**
 * Byte-level BPE (`tokenizer.ggml.model` = "gpt2"), as llama.cpp's llm_tokenizer_bpe: split the
 * text into words with the vocabulary's pre-tokenizer, spell each word's UTF-8 bytes in GPT-2's
 * byte alphabet, then merge adjacent symbols by merge rank (lowest first, leftmost on ties) until
 * no pair has a rank; each symbol is then a token (a symbol missing from the vocabulary falls back
 * to its single characters). Llama 3's pre-tokenizer keeps a whole word that is itself a token
 * (its ignore_merges). Words are cached: text repeats them.
 */
import { InputError, ModelFormatError } from "../errors.ts";
import { fromByteLevel, toByteLevel } from "./byte-level.ts";
import { PreTokenizer } from "./pretokenizers.ts";
import { partitionSpecials, sortSpecials, type SpecialToken, type StripFlags } from "./special-tokens.ts";
import { TokenType } from "./spm.ts";
import type { EncodeOptions, StreamDecoder, Tokenizer } from "./tokenizer.ts";

export interface BpeVocab {
  readonly file: string;
  /** Token texts in the byte alphabet (added tokens as they are written). */
  readonly tokens: readonly string[];
  readonly types: Uint8Array;
  /** Merges "left right", rank = index. */
  readonly merges: readonly string[];
  readonly preTokenizer: PreTokenizer;
  readonly bosId: number | null;
  readonly eosId: number | null;
  readonly eogIds: ReadonlySet<number>;
  /** lstrip/rstrip of special tokens (tokenizer.json's added tokens); default none. */
  readonly stripFlags?: StripFlags;
}

const MAX_CACHED_WORDS = 1 << 16;
/** Pre-tokenizers whose models keep a word that is itself a token (llama.cpp's ignore_merges). */
const IGNORE_MERGES: ReadonlySet<string> = new Set(["llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2", "tekken"]);

export class BpeTokenizer implements Tokenizer {
  readonly vocabSize: number;
  readonly bosId: number | null;
  readonly eosId: number | null;
  readonly eogIds: ReadonlySet<number>;
  private readonly tokenToId = new Map<string, number>();
  private readonly ranks = new Map<string, number>();
  private readonly specials: SpecialToken[];
  private readonly ignoreMerges: boolean;
  private readonly cache = new Map<string, number[]>();
  /** Bytes each token stands for in decoded text (control tokens: none). */
  private readonly textBytes: Uint8Array[];

  constructor(private readonly vocab: BpeVocab) {
    this.vocabSize = vocab.tokens.length;
    this.bosId = vocab.bosId;
    this.eosId = vocab.eosId;
    this.eogIds = vocab.eogIds;
    vocab.tokens.forEach((t, id) => {
      if (!this.tokenToId.has(t)) this.tokenToId.set(t, id);
    });
    vocab.merges.forEach((m, rank) => {
      if (!this.ranks.has(m)) this.ranks.set(m, rank);
    });
    const specials: SpecialToken[] = [];
    vocab.tokens.forEach((text, id) => {
      const type = vocab.types[id];
      if (type === TokenType.control || type === TokenType.unknown || type === TokenType.userDefined) {
        specials.push({ id, text, control: type !== TokenType.userDefined });
      }
    });
    this.specials = sortSpecials(specials, vocab.stripFlags);
    this.ignoreMerges = IGNORE_MERGES.has(vocab.preTokenizer.name);
    this.textBytes = vocab.tokens.map((text, id) => {
      const type = vocab.types[id];
      if (type === TokenType.control || type === TokenType.unknown || type === TokenType.unused) return new Uint8Array(0);
      return type === TokenType.userDefined ? new TextEncoder().encode(text) : fromByteLevel(text);
    });
  }

  encode(text: string, opts: EncodeOptions = {}): number[] {
    const ids: number[] = [];
    if (opts.addBos === true && this.bosId !== null) ids.push(this.bosId);
    for (const f of partitionSpecials(text, this.specials, opts.parseSpecial === true)) {
      if ("id" in f) ids.push(f.id);
      else for (const word of this.vocab.preTokenizer.split(f.text)) ids.push(...this.encodeWord(word));
    }
    if (opts.addEos === true && this.eosId !== null) ids.push(this.eosId);
    return ids;
  }

  private encodeWord(word: string): number[] {
    const cached = this.cache.get(word);
    if (cached !== undefined) return cached;
    const spelled = toByteLevel(word);
    const whole = this.ignoreMerges ? this.tokenToId.get(spelled) : undefined;
    const ids = whole !== undefined ? [whole] : this.merge(spelled);
    if (this.cache.size >= MAX_CACHED_WORDS) this.cache.clear();
    this.cache.set(word, ids);
    return ids;
  }

  /** Merge the characters of a byte-level word by rank; each final symbol becomes a token. */
  private merge(spelled: string): number[] {
    const symbols = Array.from(spelled);
    for (;;) {
      let best = -1;
      let bestRank = Infinity;
      for (let i = 0; i + 1 < symbols.length; i++) {
        const rank = this.ranks.get(`${symbols[i]} ${symbols[i + 1]}`);
        if (rank !== undefined && rank < bestRank) {
          bestRank = rank;
          best = i;
        }
      }
      if (best < 0) break;
      symbols.splice(best, 2, symbols[best]! + symbols[best + 1]!);
    }
    const ids: number[] = [];
    for (const s of symbols) {
      const id = this.tokenToId.get(s);
      if (id !== undefined) {
        ids.push(id);
        continue;
      }
      // Not a token: its characters one by one (every byte-level character is in a sane vocabulary).
      for (const ch of s) {
        const c = this.tokenToId.get(ch);
        if (c !== undefined) ids.push(c);
      }
    }
    return ids;
  }

  decode(ids: ArrayLike<number>): string {
    const decoder = this.createStreamDecoder();
    let out = "";
    for (let i = 0; i < ids.length; i++) out += decoder.push(ids[i]!);
    return out + decoder.flush();
  }

  createStreamDecoder(): StreamDecoder {
    const utf8 = new TextDecoder("utf-8", { ignoreBOM: true });
    return {
      push: (id: number) => utf8.decode(this.bytesOf(id), { stream: true }),
      flush: () => utf8.decode(),
    };
  }

  tokenPiece(id: number): string {
    this.checkId(id);
    return this.vocab.tokens[id]!;
  }

  /** The token's text as templates write it (`<|im_end|>`), and as decoded text for ordinary tokens. */
  tokenText(id: number): string {
    this.checkId(id);
    const type = this.vocab.types[id];
    return type === TokenType.control || type === TokenType.userDefined ? this.vocab.tokens[id]! : new TextDecoder().decode(this.textBytes[id]!);
  }

  private bytesOf(id: number): Uint8Array {
    this.checkId(id);
    return this.textBytes[id]!;
  }

  private checkId(id: number): void {
    if (!Number.isInteger(id) || id < 0 || id >= this.vocabSize) throw new InputError(`token id ${id} is outside the vocabulary (0..${this.vocabSize - 1})`);
  }

  static check(vocab: BpeVocab): void {
    if (vocab.tokens.length === 0) throw new ModelFormatError(vocab.file, "vocabulary is empty");
    if (vocab.types.length !== vocab.tokens.length) throw new ModelFormatError(vocab.file, `has ${vocab.types.length} token types for ${vocab.tokens.length} tokens`);
  }
}
