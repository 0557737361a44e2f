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
import type { ByteTokenizer, EncodeOptions, StreamDecoder } from "./tokenizer.ts";

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

export class BpeTokenizer implements ByteTokenizer {
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

  /**
   * Merge the characters of a byte-level word by rank (lowest first, leftmost on ties); each final
   * symbol becomes a token. As llama.cpp's llm_tokenizer_bpe_session: the symbols form a linked
   * list and the candidate pairs a heap, so a long word (base64, a run of digits or spaces) takes
   * O(n log n), not a rescan of every pair after each merge. A heap entry whose symbols have since
   * changed is stale and skipped.
   */
  private merge(spelled: string): number[] {
    const text = Array.from(spelled);
    const n = text.length;
    const prev = Int32Array.from({ length: n }, (_, i) => i - 1);
    const next = Int32Array.from({ length: n }, (_, i) => (i + 1 < n ? i + 1 : -1));
    const heap = new PairHeap();
    const offer = (left: number, right: number): void => {
      if (left < 0 || right < 0) return;
      const rank = this.ranks.get(`${text[left]} ${text[right]}`);
      if (rank !== undefined) heap.push({ rank, left, right, size: text[left]!.length + text[right]!.length });
    };
    for (let i = 0; i + 1 < n; i++) offer(i, i + 1);
    for (let pair = heap.pop(); pair !== undefined; pair = heap.pop()) {
      const { left, right } = pair;
      // Stale: one side was merged away, or grew since the pair was offered.
      if (text[left] === "" || text[right] === "" || next[left] !== right || text[left]!.length + text[right]!.length !== pair.size) continue;
      text[left] += text[right]!;
      text[right] = "";
      next[left] = next[right]!;
      if (next[right]! >= 0) prev[next[right]!] = left;
      offer(prev[left]!, left);
      offer(left, next[left]!);
    }
    const symbols: string[] = [];
    for (let i = n > 0 ? 0 : -1; i >= 0; i = next[i]!) symbols.push(text[i]!);
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

  specialTokens(): readonly { readonly id: number; readonly text: string }[] {
    return this.specials.map(({ id, text }) => ({ id, text }));
  }

  tokenBytes(id: number): Uint8Array {
    return this.bytesOf(id);
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

/** A candidate merge of the adjacent symbols `left` and `right`, `size` UTF-16 units long together when offered. */
interface Pair {
  rank: number;
  left: number;
  right: number;
  size: number;
}

/** A binary min-heap of pairs: lowest rank first, then leftmost. */
class PairHeap {
  private readonly items: Pair[] = [];

  push(p: Pair): void {
    const a = this.items;
    a.push(p);
    for (let i = a.length - 1; i > 0; ) {
      const parent = (i - 1) >> 1;
      if (!before(a[i]!, a[parent]!)) break;
      [a[i], a[parent]] = [a[parent]!, a[i]!];
      i = parent;
    }
  }

  pop(): Pair | undefined {
    const a = this.items;
    const top = a[0];
    const last = a.pop();
    if (a.length === 0 || last === undefined) return top;
    a[0] = last;
    for (let i = 0; ; ) {
      const l = 2 * i + 1, r = l + 1;
      let m = i;
      if (l < a.length && before(a[l]!, a[m]!)) m = l;
      if (r < a.length && before(a[r]!, a[m]!)) m = r;
      if (m === i) break;
      [a[i], a[m]] = [a[m]!, a[i]!];
      i = m;
    }
    return top;
  }
}

function before(x: Pair, y: Pair): boolean {
  return x.rank < y.rank || (x.rank === y.rank && x.left < y.left);
}
