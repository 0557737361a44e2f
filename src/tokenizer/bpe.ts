/**
 * Byte-level BPE (GPT-2 style, `tokenizer.ggml.model = gpt2`), as llama.cpp's `llm_tokenizer_bpe_session`.
 *
 * Encoding: cut special tokens out (special.ts), cut the raw text into words with the vocabulary's
 * pre-tokenizer regexes (pretokenize.ts), spell each word's UTF-8 bytes with GPT-2's byte-to-character
 * mapping, then repeatedly merge the adjacent pair with the lowest merge rank (leftmost on ties) until no
 * pair has a rank. A final symbol that is no token becomes one token per byte. Words repeat a lot in real
 * text, so each word's ids are cached.
 */
import { InputError, ModelFormatError } from "../errors.ts";
import type { PreTokenizer } from "./pretokenize.ts";
import { splitWords } from "./pretokenize.ts";
import { partitionSpecials, specialTokens, type SpecialToken, type StripFlags } from "./special.ts";
import { hexBytePieceValue, PieceTable, TokenType } from "./spm.ts";
import { BytesStreamDecoder, concatBytes } from "./stream.ts";
import type { EncodeOptions, StreamDecoder, Tokenizer } from "./tokenizer.ts";

/**
 * GPT-2's bytes_to_unicode: printable Latin-1 bytes stand for themselves, the other 68 bytes for
 * U+0100.. in byte order, so every byte string is a string of visible characters.
 */
function buildByteToChar(): string[] {
  const table: string[] = new Array<string>(256);
  let next = 256;
  for (let byte = 0; byte < 256; byte++) {
    const printable = (byte >= 0x21 && byte <= 0x7e) || (byte >= 0xa1 && byte <= 0xac) || byte >= 0xae;
    table[byte] = String.fromCharCode(printable ? byte : next++);
  }
  return table;
}

export const BYTE_TO_CHAR: readonly string[] = buildByteToChar();
const CHAR_TO_BYTE: ReadonlyMap<number, number> = new Map(BYTE_TO_CHAR.map((char, byte) => [char.charCodeAt(0), byte]));

const utf8Encoder = new TextEncoder();
const utf8Decoder = new TextDecoder("utf-8", { ignoreBOM: true });

/** The word's UTF-8 bytes, each spelled as its GPT-2 character (one UTF-16 unit per byte). */
export function byteEncode(word: string): string {
  let out = "";
  for (const byte of utf8Encoder.encode(word)) out += BYTE_TO_CHAR[byte];
  return out;
}

/** Bytes of a byte-level token text; characters outside the mapping stand for their own UTF-8 bytes. */
function byteDecode(text: string): Uint8Array {
  const bytes: number[] = [];
  for (const char of text) {
    const byte = char.length === 1 ? CHAR_TO_BYTE.get(char.charCodeAt(0)) : undefined;
    if (byte !== undefined) bytes.push(byte);
    else bytes.push(...utf8Encoder.encode(char));
  }
  return Uint8Array.from(bytes);
}

/** Everything byte-level BPE needs to know about a vocabulary, whatever file it came from. */
export interface BpeVocab {
  readonly file: string;
  /** Token texts in GPT-2 byte spelling (added tokens as plain text). */
  readonly tokens: readonly string[];
  /** TokenType per id. */
  readonly types: Uint8Array;
  /** Merges in rank order, each "left right". */
  readonly merges: readonly string[];
  readonly preTokenizer: PreTokenizer;
  readonly bosId: number | null;
  readonly eosId: number | null;
  readonly eogIds: ReadonlySet<number>;
  /** lstrip/rstrip of special tokens; default none. */
  readonly strip?: StripFlags;
}

/** A candidate merge of adjacent symbols `left` and `right`. */
interface BpePair {
  rank: number;
  left: number;
  right: number;
  /** Length of the merged text; a queued pair whose symbols changed since is stale. */
  size: number;
}

/** Min-heap of pairs: lowest rank first, then the leftmost (llama.cpp's llm_bigram_bpe::comparator). */
class PairQueue {
  private readonly heap: BpePair[] = [];

  private static before(a: BpePair, b: BpePair): boolean {
    return a.rank < b.rank || (a.rank === b.rank && a.left < b.left);
  }

  push(pair: BpePair): void {
    const heap = this.heap;
    let i = heap.length;
    heap.push(pair);
    while (i > 0) {
      const parent = (i - 1) >> 1;
      if (!PairQueue.before(pair, heap[parent])) break;
      heap[i] = heap[parent];
      i = parent;
    }
    heap[i] = pair;
  }

  pop(): BpePair | undefined {
    const heap = this.heap;
    const top = heap[0];
    const last = heap.pop();
    if (top === undefined || last === undefined || heap.length === 0) return top;
    let i = 0;
    for (;;) {
      const left = 2 * i + 1;
      if (left >= heap.length) break;
      const right = left + 1;
      const child = right < heap.length && PairQueue.before(heap[right], heap[left]) ? right : left;
      if (!PairQueue.before(heap[child], last)) break;
      heap[i] = heap[child];
      i = child;
    }
    heap[i] = last;
    return top;
  }
}

/** Cached words before the cache starts over (bounds memory on endless streams of new words). */
const WORD_CACHE_LIMIT = 1 << 16;

export class BpeTokenizer implements Tokenizer {
  readonly vocabSize: number;
  readonly bosId: number | null;
  readonly eosId: number | null;
  readonly eogIds: ReadonlySet<number>;
  private readonly vocab: BpeVocab;
  /** Token text → id over every token (llama.cpp's text_to_token; a repeated text keeps its last id). */
  private readonly tokenToId = new Map<string, number>();
  /** "left right" → merge rank. */
  private readonly mergeRank = new Map<string, number>();
  private readonly specials: readonly SpecialToken[];
  private readonly textBytes: PieceTable;
  private readonly wordCache = new Map<string, readonly number[]>();

  constructor(vocab: BpeVocab) {
    const count = vocab.tokens.length;
    if (count === 0) throw new ModelFormatError(vocab.file, "vocabulary is empty");
    if (vocab.types.length !== count) throw new ModelFormatError(vocab.file, `has ${vocab.types.length} token types for ${count} tokens`);
    for (const [name, id] of [["BOS", vocab.bosId], ["EOS", vocab.eosId]] as const) {
      if (id !== null && (id < 0 || id >= count)) throw new ModelFormatError(vocab.file, `${name} token id ${id} is outside the vocabulary (0..${count - 1})`);
    }
    this.vocab = vocab;
    this.vocabSize = count;
    this.bosId = vocab.bosId;
    this.eosId = vocab.eosId;
    this.eogIds = vocab.eogIds;
    vocab.tokens.forEach((text, id) => this.tokenToId.set(text, id));
    vocab.merges.forEach((merge, rank) => {
      if (!this.mergeRank.has(merge)) this.mergeRank.set(merge, rank);
    });
    this.specials = specialTokens(count, vocab.types, (id) => vocab.tokens[id], vocab.strip);
    this.textBytes = PieceTable.build(count, (id) => this.decodedToken(id));
  }

  /** The bytes token `id` stands for in text. */
  private decodedToken(id: number): Uint8Array {
    const text = this.vocab.tokens[id];
    switch (this.vocab.types[id]) {
      case TokenType.control:
      case TokenType.unknown:
      case TokenType.unused:
        return new Uint8Array(0);
      case TokenType.userDefined:
        return utf8Encoder.encode(text);
      case TokenType.byte: {
        const byte = hexBytePieceValue(utf8Encoder.encode(text));
        return byte >= 0 ? Uint8Array.of(byte) : byteDecode(text);
      }
      default:
        return byteDecode(text);
    }
  }

  encode(text: string, opts: EncodeOptions = {}): number[] {
    const ids: number[] = [];
    if (opts.addBos === true && this.bosId !== null) ids.push(this.bosId);
    for (const fragment of partitionSpecials(text, this.specials, opts.parseSpecial === true)) {
      if ("id" in fragment) ids.push(fragment.id);
      else this.encodeFragment(fragment.text, ids);
    }
    if (opts.addEos === true && this.eosId !== null) ids.push(this.eosId);
    return ids;
  }

  private encodeFragment(text: string, out: number[]): void {
    for (const word of splitWords(text, this.vocab.preTokenizer.regexes)) {
      let ids = this.wordCache.get(word);
      if (ids === undefined) {
        ids = this.encodeWord(byteEncode(word));
        if (this.wordCache.size >= WORD_CACHE_LIMIT) this.wordCache.clear();
        this.wordCache.set(word, ids);
      }
      for (const id of ids) out.push(id);
    }
  }

  /** BPE over one byte-encoded word. */
  private encodeWord(word: string): number[] {
    if (this.vocab.preTokenizer.ignoreMerges) {
      const whole = this.tokenToId.get(word);
      if (whole !== undefined) return [whole];
    }
    const count = word.length;
    const start = new Int32Array(count);
    const length = new Int32Array(count).fill(1);
    const next = new Int32Array(count);
    const prev = new Int32Array(count);
    for (let i = 0; i < count; i++) {
      start[i] = i;
      prev[i] = i - 1;
      next[i] = i + 1 < count ? i + 1 : -1;
    }
    const queue = new PairQueue();
    const addPair = (left: number, right: number): void => {
      if (left < 0 || right < 0) return;
      const key = word.substr(start[left], length[left]) + " " + word.substr(start[right], length[right]);
      const rank = this.mergeRank.get(key);
      if (rank !== undefined) queue.push({ rank, left, right, size: length[left] + length[right] });
    };
    for (let i = 1; i < count; i++) addPair(i - 1, i);
    for (let pair = queue.pop(); pair !== undefined; pair = queue.pop()) {
      const { left, right } = pair;
      if (length[left] === 0 || length[right] === 0 || length[left] + length[right] !== pair.size) continue;
      length[left] += length[right];
      length[right] = 0;
      const after = next[right];
      next[left] = after;
      if (after >= 0) prev[after] = left;
      addPair(prev[left], left);
      addPair(left, after);
    }
    const ids: number[] = [];
    for (let i = 0; i !== -1 && count > 0; i = next[i]) {
      const symbol = word.substr(start[i], length[i]);
      const id = this.tokenToId.get(symbol);
      if (id !== undefined) {
        ids.push(id);
        continue;
      }
      // No token for the merged text: one token per byte, skipping bytes the vocabulary lacks (as llama.cpp).
      for (const char of symbol) {
        const byteId = this.tokenToId.get(char);
        if (byteId !== undefined) ids.push(byteId);
      }
    }
    return ids;
  }

  private checkId(id: number): void {
    if (!Number.isInteger(id) || id < 0 || id >= this.vocabSize) {
      throw new InputError(`token id ${id} is outside the vocabulary (0..${this.vocabSize - 1})`);
    }
  }

  private bytesOf(id: number): Uint8Array {
    this.checkId(id);
    return this.textBytes.bytes(id);
  }

  decode(ids: ArrayLike<number>): string {
    const parts: Uint8Array[] = [];
    for (let i = 0; i < ids.length; i++) parts.push(this.bytesOf(ids[i]));
    return utf8Decoder.decode(concatBytes(parts));
  }

  createStreamDecoder(prevTokenId?: number): StreamDecoder {
    return new BytesStreamDecoder((id) => this.bytesOf(id), prevTokenId);
  }

  tokenPiece(id: number): string {
    this.checkId(id);
    return this.vocab.tokens[id];
  }

  /** True for tokens that never appear in decoded text: control, unknown and unused tokens. */
  isSpecial(id: number): boolean {
    this.checkId(id);
    const type = this.vocab.types[id];
    return type === TokenType.control || type === TokenType.unknown || type === TokenType.unused;
  }
}
