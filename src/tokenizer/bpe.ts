/**
 * Byte-level BPE (`tokenizer.ggml.model` = "gpt2"), as llama.cpp's llm_tokenizer_bpe: split the
 * text into words with the vocabulary's pre-tokenizer, spell each word's UTF-8 bytes in GPT-2's
 * byte alphabet, then merge adjacent symbols by merge rank (lowest first, leftmost on ties) until
 * no pair has a rank; each symbol is then a token (a symbol missing from the vocabulary falls back
 * to its single characters). Llama 3's pre-tokenizer keeps a whole word that is itself a token
 * (its ignore_merges). Words are cached: text repeats them.
 */
import { InputError, ModelFormatError } from "../errors.ts";
import { byteLevelChar, fromByteLevel, toByteLevel } from "./byte-level.ts";
import { PreTokenizer } from "./pretokenizers.ts";
import { appendAll } from "../util/append-all.ts";
import { keptUtf8Bytes } from "./utf8-count.ts";
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
/** Longest word (UTF-16 units) the word cache keeps. */
const MAX_CACHED_WORD_LENGTH = 256;
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
  /**
   * The merges by the token ids they join (IdMerges), built at the first long word, so that a
   * long word is merged on integers; null when some merge does not join two tokens into a token
   * (then every word is merged by text).
   */
  private idMerges: IdMerges | null | undefined;
  /** Bytes each token stands for in decoded text (control tokens: none). */
  private readonly textBytes: Uint8Array[];
  /**
   * The most UTF-8 bytes of text one token stands for (a control token its written text), or 0
   * when a special token strips the spaces beside it (they then stand for no token): no bound.
   */
  private readonly maxTokenBytes: number;
  /** Bytes whose byte-level character is a token: only those are kept by encode (others are dropped). */
  private readonly keptBytes: Uint8Array;

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
    this.keptBytes = Uint8Array.from({ length: 256 }, (_, b) => (this.tokenToId.has(byteLevelChar(b)) ? 1 : 0));
    this.maxTokenBytes = this.mostBytesPerToken();
  }

  encode(text: string, opts: EncodeOptions = {}): number[] {
    const ids: number[] = [];
    if (opts.addBos === true && this.bosId !== null) ids.push(this.bosId);
    const stopAfter = opts.stopAfter ?? Infinity;
    for (const f of partitionSpecials(text, this.specials, opts.parseSpecial === true)) {
      if (ids.length > stopAfter) return ids;
      if ("id" in f) ids.push(f.id);
      else {
        this.vocab.preTokenizer.forEachWord(f.text, (word) => {
          appendAll(ids, this.encodeWord(word));
          return ids.length <= stopAfter;
        });
      }
    }
    if (ids.length > stopAfter) return ids;
    if (opts.addEos === true && this.eosId !== null) ids.push(this.eosId);
    return ids;
  }

  /**
   * A lower bound on the tokens of `text` (encode's, with or without specials): every byte of it
   * whose character is a token is in some token (a merge joins tokens only), and one token stands
   * for at most maxTokenBytes bytes. 0 where no bound holds.
   */
  minTokens(text: string): number {
    return this.maxTokenBytes === 0 ? 0 : Math.ceil(keptUtf8Bytes(text, this.keptBytes) / this.maxTokenBytes);
  }

  private mostBytesPerToken(): number {
    const stripped = this.vocab.stripFlags !== undefined && [...this.vocab.stripFlags.values()].some((f) => f.lstrip || f.rstrip);
    if (stripped) return 0;
    const utf8 = new TextEncoder();
    let most = 1;
    this.vocab.tokens.forEach((text, id) => {
      most = Math.max(most, this.textBytes[id]!.length, utf8.encode(text).length);
    });
    return most;
  }

  private encodeWord(word: string): number[] {
    const cached = this.cache.get(word);
    if (cached !== undefined) return cached;
    const spelled = toByteLevel(word);
    const whole = this.ignoreMerges ? this.tokenToId.get(spelled) : undefined;
    const ids = whole !== undefined ? [whole] : this.mergeSpelled(spelled);
    // Only words of ordinary length are kept: a long one (a request's megabyte of digits) is not
    // met again, and the cache's memory stays bounded by its count.
    if (word.length > MAX_CACHED_WORD_LENGTH) return ids;
    if (this.cache.size >= MAX_CACHED_WORDS) this.cache.clear();
    this.cache.set(word, ids);
    return ids;
  }

  /** A long word merged on ids (the same merges: IdMerges), a short one by text. */
  private mergeSpelled(spelled: string): number[] {
    if (spelled.length <= MAX_CACHED_WORD_LENGTH) return this.merge(spelled);
    if (this.idMerges === undefined) this.idMerges = IdMerges.of(this.vocab.merges, this.tokenToId, this.vocabSize);
    return this.idMerges === null ? this.merge(spelled) : this.idMerges.merge(spelled, this.tokenToId);
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

/**
 * The merge of a byte-level word on token ids: the same merges in the same order as
 * BpeTokenizer.merge (lowest rank first, leftmost on ties), where every symbol is a token, so a
 * pair is looked up by its two ids and a stale heap entry is one whose symbols' ids changed
 * (symbols only grow). Memory is a few typed arrays of the word's length: a megabyte word costs
 * tens of megabytes, not the gigabyte its strings and pair objects took.
 */
class IdMerges {
  private constructor(
    /** (left id * vocabSize + right id) → the merge's rank. */
    private readonly rankOf: Map<number, number>,
    /** The merged token's id, by rank. */
    private readonly mergedId: Int32Array,
    private readonly vocabSize: number,
  ) {}

  /** The merges by ids, or null when one is not "left right" of two tokens that join into a token. */
  static of(merges: readonly string[], tokenToId: ReadonlyMap<string, number>, vocabSize: number): IdMerges | null {
    const rankOf = new Map<number, number>();
    const mergedId = new Int32Array(merges.length).fill(-1);
    for (let rank = 0; rank < merges.length; rank++) {
      const m = merges[rank]!;
      const space = m.indexOf(" ");
      if (space < 0 || m.indexOf(" ", space + 1) >= 0) return null;
      const left = tokenToId.get(m.slice(0, space));
      const right = tokenToId.get(m.slice(space + 1));
      const joined = tokenToId.get(m.slice(0, space) + m.slice(space + 1));
      if (left === undefined || right === undefined || joined === undefined) return null;
      const key = left * vocabSize + right;
      if (rankOf.has(key)) continue;
      rankOf.set(key, rank);
      mergedId[rank] = joined;
    }
    return new IdMerges(rankOf, mergedId, vocabSize);
  }

  merge(spelled: string, tokenToId: ReadonlyMap<string, number>): number[] {
    // Each character's token (-1: none; it never merges and is dropped, as merge() drops it).
    const id = new Int32Array(spelled.length);
    let n = 0;
    for (const ch of spelled) id[n++] = tokenToId.get(ch) ?? -1;
    const next = new Int32Array(n);
    const prev = new Int32Array(n);
    for (let i = 0; i < n; i++) {
      prev[i] = i - 1;
      next[i] = i + 1 < n ? i + 1 : -1;
    }
    const heap = new IdPairHeap(n);
    const offer = (left: number, right: number): void => {
      if (left < 0 || right < 0 || id[left]! < 0 || id[right]! < 0) return;
      const rank = this.rankOf.get(id[left]! * this.vocabSize + id[right]!);
      if (rank !== undefined) heap.push(rank, left, id[left]!, id[right]!);
    };
    for (let i = 0; i + 1 < n; i++) offer(i, i + 1);
    while (heap.size > 0) {
      heap.pop();
      const left = heap.topLeft;
      const right = next[left]!;
      // Stale: the left symbol was merged away or grew, or its right neighbour changed.
      if (id[left] !== heap.topLeftId || right < 0 || id[right] !== heap.topRightId) continue;
      id[left] = this.mergedId[heap.topRank]!;
      id[right] = -2;
      next[left] = next[right]!;
      if (next[right]! >= 0) prev[next[right]!] = left;
      offer(prev[left]!, left);
      offer(left, next[left]!);
    }
    const ids: number[] = [];
    for (let i = n > 0 ? 0 : -1; i >= 0; i = next[i]!) if (id[i]! >= 0) ids.push(id[i]!);
    return ids;
  }
}

/** IdMerges' candidate pairs in typed arrays: a binary min-heap by rank, then leftmost. */
class IdPairHeap {
  private rank: Int32Array;
  private left: Int32Array;
  private leftId: Int32Array;
  private rightId: Int32Array;
  size = 0;

  constructor(capacity: number) {
    const c = Math.max(16, capacity);
    this.rank = new Int32Array(c);
    this.left = new Int32Array(c);
    this.leftId = new Int32Array(c);
    this.rightId = new Int32Array(c);
  }

  push(rank: number, left: number, leftId: number, rightId: number): void {
    if (this.size === this.rank.length) this.grow();
    let i = this.size++;
    while (i > 0) {
      const parent = (i - 1) >> 1;
      if (!this.precedes(rank, left, parent)) break;
      this.move(parent, i);
      i = parent;
    }
    this.set(i, rank, left, leftId, rightId);
  }

  /** The entry pop() took last (fields, not an object: a long word pops millions). */
  topRank = 0;
  topLeft = 0;
  topLeftId = 0;
  topRightId = 0;

  /** Takes the first entry into the top* fields. */
  pop(): void {
    this.topRank = this.rank[0]!;
    this.topLeft = this.left[0]!;
    this.topLeftId = this.leftId[0]!;
    this.topRightId = this.rightId[0]!;
    const last = --this.size;
    if (last === 0) return;
    // The last entry sifts down from the top; entries 0..last-1 remain.
    const rank = this.rank[last]!, left = this.left[last]!, leftId = this.leftId[last]!, rightId = this.rightId[last]!;
    let i = 0;
    for (;;) {
      let child = 2 * i + 1;
      if (child >= last) break;
      if (child + 1 < last && this.precedes(this.rank[child + 1]!, this.left[child + 1]!, child)) child++;
      if (!this.precedes(this.rank[child]!, this.left[child]!, -1, rank, left)) break;
      this.move(child, i);
      i = child;
    }
    this.set(i, rank, left, leftId, rightId);
  }

  /** Whether (rank, left) goes before the entry at `at` (at -1: before (atRank, atLeft)). */
  private precedes(rank: number, left: number, at: number, atRank = 0, atLeft = 0): boolean {
    const r = at < 0 ? atRank : this.rank[at]!;
    const l = at < 0 ? atLeft : this.left[at]!;
    return rank < r || (rank === r && left < l);
  }

  private move(from: number, to: number): void {
    this.set(to, this.rank[from]!, this.left[from]!, this.leftId[from]!, this.rightId[from]!);
  }

  private set(i: number, rank: number, left: number, leftId: number, rightId: number): void {
    this.rank[i] = rank;
    this.left[i] = left;
    this.leftId[i] = leftId;
    this.rightId[i] = rightId;
  }

  private grow(): void {
    const c = this.rank.length * 2;
    const grown = (a: Int32Array) => {
      const b = new Int32Array(c);
      b.set(a);
      return b;
    };
    this.rank = grown(this.rank);
    this.left = grown(this.left);
    this.leftId = grown(this.leftId);
    this.rightId = grown(this.rightId);
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
