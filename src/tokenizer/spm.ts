/**
 * SentencePiece BPE tokenizer, as llama2.c's run.c `encode`/`decode` and llama.cpp's `llm_tokenizer_spm`.
 *
 * Encoding: prepend the dummy-prefix space, split the UTF-8 text into code points, then repeatedly merge the
 * adjacent pair whose concatenation is a vocabulary piece with the highest score (leftmost on ties) until no
 * pair is a piece. Code points that are not pieces become one byte token per UTF-8 byte. The pairs wait in a
 * priority queue over a linked list of symbols, so encoding is O(n log n), not run.c's O(n²) rescans.
 *
 * Pieces are compared as byte strings: a JS "binary" string holds one byte per UTF-16 unit, so keys work
 * for pieces that are not valid UTF-8 (llama2.c files store raw bytes).
 */
import { InputError, ModelFormatError } from "../errors.ts";
import { partitionSpecials, sortSpecials, type SpecialToken, type StripFlags } from "./special-tokens.ts";
import { EOG_TEXTS, type ByteTokenizer, type EncodeOptions, type StreamDecoder } from "./tokenizer.ts";
import { ALL_BYTES, keptUtf8Bytes } from "./utf8-count.ts";

/** Token types as GGUF stores them in `tokenizer.ggml.token_type` (llama.cpp's llama_token_type). */
export const TokenType = {
  undefined: 0,
  normal: 1,
  unknown: 2,
  control: 3,
  userDefined: 4,
  unused: 5,
  byte: 6,
} as const;
export type TokenType = (typeof TokenType)[keyof typeof TokenType];

/** A read-only list of byte strings (GGUFStringArray is one). */
export interface PieceList {
  readonly length: number;
  /** Bytes of item i; callers must not modify them. */
  bytes(i: number): Uint8Array;
}

/** A compact PieceList: one buffer plus offsets. Invariant: offsets[i] <= offsets[i + 1], offsets[length] === data.length. */
export class PieceTable implements PieceList {
  private constructor(
    private readonly data: Uint8Array,
    private readonly offsets: Uint32Array,
  ) {}

  static build(count: number, pieceAt: (i: number) => Uint8Array): PieceTable {
    const offsets = new Uint32Array(count + 1);
    const pieces: Uint8Array[] = [];
    for (let i = 0; i < count; i++) {
      const piece = pieceAt(i);
      pieces.push(piece);
      offsets[i + 1] = offsets[i] + piece.length;
    }
    const data = new Uint8Array(offsets[count]);
    pieces.forEach((piece, i) => data.set(piece, offsets[i]));
    return new PieceTable(data, offsets);
  }

  get length(): number {
    return this.offsets.length - 1;
  }

  bytes(i: number): Uint8Array {
    return this.data.subarray(this.offsets[i], this.offsets[i + 1]);
  }
}

/** The byte a "<0xXX>" piece stands for, or -1 for any other piece. */
export function hexBytePieceValue(piece: Uint8Array): number {
  if (piece.length !== 6) return -1;
  const text = String.fromCharCode(...piece);
  return /^<0x[0-9A-Fa-f]{2}>$/.test(text) ? parseInt(text.slice(3, 5), 16) : -1;
}

/** Everything the SentencePiece tokenizer needs to know about a vocabulary, whatever file it came from. */
export interface SpmVocab {
  /** The file the vocabulary came from, named in errors. */
  readonly file: string;
  readonly pieces: PieceList;
  readonly scores: Float32Array;
  /** TokenType of each id. */
  readonly types: Uint8Array;
  /** The byte each byte token (types[id] === TokenType.byte) stands for; -1 for other tokens. */
  readonly byteValues: Int16Array;
  readonly bosId: number | null;
  readonly eosId: number | null;
  readonly unkId: number | null;
  /** Prepend a space to non-empty text before encoding (SentencePiece's add_dummy_prefix), strip it on decode. */
  readonly addSpacePrefix: boolean;
  /** Pieces spell a space as U+2581 "▁" (SentencePiece, GGUF); false where they hold real spaces (llama2.c). */
  readonly spacesAsMetaspace: boolean;
  /** End-of-generation tokens the metadata names besides EOS (EOT, EOM). */
  readonly eogIds?: readonly number[];  /** lstrip/rstrip of special tokens (llama.cpp sets them for Phi-3); default none. */
  readonly stripFlags?: StripFlags;
}

const METASPACE = "\u2581";
const utf8Encoder = new TextEncoder();
// ignoreBOM keeps a leading U+FEFF in the text instead of silently dropping it.
const utf8Decoder = new TextDecoder("utf-8", { ignoreBOM: true });

/** The bytes of `bytes` as a string of UTF-16 units 0..255, usable as a Map key. */
function binaryString(bytes: Uint8Array): string {
  return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString("latin1");
}

const METASPACE_UTF8 = utf8Encoder.encode(METASPACE);
/** Words whose ids are kept before the cache starts over. */
const MAX_CACHED_CHUNKS = 1 << 16;

/** `piece` with each UTF-8 "▁" replaced by a space byte, working on bytes so any piece survives intact. */
function metaspacesToSpaces(piece: Uint8Array): Uint8Array {
  const [b0, b1, b2] = METASPACE_UTF8;
  const out: number[] = [];
  for (let i = 0; i < piece.length; i++) {
    if (piece[i] === b0 && piece[i + 1] === b1 && piece[i + 2] === b2) {
      out.push(0x20);
      i += 2;
    } else {
      out.push(piece[i]);
    }
  }
  return Uint8Array.from(out);
}

/** Byte length of the UTF-8 sequence that starts with `lead` (1 for a stray continuation byte). */
function utf8SequenceLength(lead: number): number {
  if (lead < 0xc0) return 1;
  if (lead < 0xe0) return 2;
  if (lead < 0xf0) return 3;
  return 4;
}

/** A candidate merge of two adjacent symbols into the piece `id`. */
interface Bigram {
  left: number;
  right: number;
  score: number;
  /** Byte length of the merged text; a queued bigram whose symbols changed size since is stale. */
  size: number;
  id: number;
}

/** Max-heap of bigrams: highest score first, then the leftmost (llama.cpp's llm_bigram_spm::comparator). */
class BigramQueue {
  private readonly heap: Bigram[] = [];

  private static before(a: Bigram, b: Bigram): boolean {
    return a.score > b.score || (a.score === b.score && a.left < b.left);
  }

  push(bigram: Bigram): void {
    const heap = this.heap;
    let i = heap.length;
    heap.push(bigram);
    while (i > 0) {
      const parent = (i - 1) >> 1;
      if (!BigramQueue.before(bigram, heap[parent])) break;
      heap[i] = heap[parent];
      i = parent;
    }
    heap[i] = bigram;
  }

  pop(): Bigram | undefined {
    const heap = this.heap;
    const top = heap[0];
    const last = heap.pop();
    if (top === undefined || last === undefined || heap.length === 0) return top;
    let i = 0;
    for (;;) {
      const left = 2 * i + 1;
      if (left >= heap.length) break;
      const right = left + 1;
      const child = right < heap.length && BigramQueue.before(heap[right], heap[left]) ? right : left;
      if (!BigramQueue.before(heap[child], last)) break;
      heap[i] = heap[child];
      i = child;
    }
    heap[i] = last;
    return top;
  }
}

/**
 * The symbols of one text during merging: a doubly linked list over spans of its UTF-8 bytes. A symbol that
 * was merged into its left neighbour has length 0; symbol 0 is never merged away, so the list starts there.
 */
class SymbolList {
  readonly start: Int32Array;
  readonly length: Int32Array;
  readonly prev: Int32Array;
  readonly next: Int32Array;
  /** Piece id of each symbol's text; -1 for a code point that is not a piece. */
  readonly id: Int32Array;

  constructor(bytes: Uint8Array, pieceOf: (start: number, length: number) => number) {
    const starts: number[] = [];
    for (let at = 0; at < bytes.length; at += utf8SequenceLength(bytes[at])) starts.push(at);
    const count = starts.length;
    this.start = Int32Array.from(starts);
    this.length = new Int32Array(count);
    this.prev = new Int32Array(count);
    this.next = new Int32Array(count);
    this.id = new Int32Array(count);
    for (let i = 0; i < count; i++) {
      const end = i + 1 < count ? starts[i + 1] : bytes.length;
      this.length[i] = end - starts[i];
      this.prev[i] = i - 1;
      this.next[i] = i + 1 < count ? i + 1 : -1;
      this.id[i] = pieceOf(starts[i], this.length[i]);
    }
  }

  get count(): number {
    return this.start.length;
  }

  /** Merge symbol `right` into its left neighbour `left`, which becomes piece `id`. */
  merge(left: number, right: number, id: number): void {
    this.length[left] += this.length[right];
    this.length[right] = 0;
    this.id[left] = id;
    const after = this.next[right];
    this.next[left] = after;
    if (after >= 0) this.prev[after] = left;
  }
}

/** Token types whose pieces encoding may produce from text. Control, unknown, unused and byte pieces never match. */
const MATCHABLE_TYPES: ReadonlySet<number> = new Set([TokenType.normal, TokenType.userDefined, TokenType.undefined]);

export class SpmTokenizer implements ByteTokenizer {
  readonly vocabSize: number;
  readonly bosId: number | null;
  readonly eosId: number | null;
  readonly unkId: number | null;
  readonly addSpacePrefix: boolean;
  readonly eogIds: ReadonlySet<number>;
  private readonly vocab: SpmVocab;
  /** Control tokens, matched in text only when specials are parsed. */
  private readonly specials: SpecialToken[];
  /** Piece (as a binary string, spaces as in the vocabulary) → id, for matchable tokens only. */
  private readonly pieceToId = new Map<string, number>();
  /** Byte token id of each byte value; -1 where the vocabulary has none. */
  private readonly byteToId = new Int32Array(256).fill(-1);
  /** The bytes each token contributes to decoded text (empty for control, unknown and unused tokens). */
  private readonly textBytes: PieceTable;

  /**
   * True when every matchable piece is some spaces followed by text without spaces (as in Llama's and
   * Phi-3's vocabularies). Then no piece, hence no merge, spans a space that follows a non-space, so the
   * text can be encoded word by word with the same result, and repeated words come from a cache.
   */
  private readonly wordsAreIndependent: boolean;
  private readonly chunkCache = new Map<string, number[]>();
  private lookups = 0;
  /**
   * The most UTF-8 bytes of (normalized) text one token stands for: a piece's, a special's text,
   * or 4 (one unknown token per code point); 0 when a special strips the spaces beside it.
   */
  private readonly maxTokenBytes: number;

  constructor(vocab: SpmVocab) {
    validateVocab(vocab);
    this.vocab = vocab;
    this.vocabSize = vocab.pieces.length;
    this.bosId = vocab.bosId;
    this.eosId = vocab.eosId;
    this.unkId = vocab.unkId;
    this.addSpacePrefix = vocab.addSpacePrefix;
    for (let id = 0; id < this.vocabSize; id++) {
      const byte = vocab.byteValues[id];
      if (vocab.types[id] === TokenType.byte) {
        if (this.byteToId[byte] === -1) this.byteToId[byte] = id;
      } else if (MATCHABLE_TYPES.has(vocab.types[id])) {
        const key = binaryString(vocab.pieces.bytes(id));
        // Pieces are unique in SentencePiece models; should a file repeat one, the lowest id wins.
        if (!this.pieceToId.has(key)) this.pieceToId.set(key, id);
      }
    }
    const space = vocab.spacesAsMetaspace ? binaryString(METASPACE_UTF8) : " ";
    this.wordsAreIndependent = [...this.pieceToId.keys()].every((piece) => {
      let at = 0;
      while (piece.startsWith(space, at)) at += space.length;
      return !piece.includes(space, at);
    });
    if (this.unkId === null && this.byteToId.includes(-1)) {
      throw new ModelFormatError(vocab.file, "vocabulary has neither all 256 byte tokens nor an unknown token");
    }
    this.textBytes = PieceTable.build(this.vocabSize, (id) => this.decodedPiece(id));
    const controls: SpecialToken[] = [];
    const eog = new Set<number>(vocab.eogIds ?? []);
    if (this.eosId !== null) eog.add(this.eosId);
    for (let id = 0; id < this.vocabSize; id++) {
      const type = vocab.types[id];
      if (type !== TokenType.control && type !== TokenType.unknown && type !== TokenType.userDefined) continue;
      const text = utf8Decoder.decode(vocab.pieces.bytes(id));
      // As llama.cpp: user-defined tokens are matched in any text, control and unknown ones only when parsed.
      controls.push({ id, text, control: type !== TokenType.userDefined });
      if (type === TokenType.control && EOG_TEXTS.has(text)) eog.add(id);
    }
    this.specials = sortSpecials(controls, vocab.stripFlags);
    this.eogIds = eog;
    this.maxTokenBytes = this.mostBytesPerToken();
  }

  /**
   * A lower bound on the tokens of `text` (encode's, with or without specials): every byte of the
   * normalized text, at least as many as the text's, is in a piece, a byte token or an unknown
   * token's code point, none longer than maxTokenBytes. 0 where no bound holds.
   */
  minTokens(text: string): number {
    return this.maxTokenBytes === 0 ? 0 : Math.ceil(keptUtf8Bytes(text, ALL_BYTES) / this.maxTokenBytes);
  }

  private mostBytesPerToken(): number {
    const strip = this.vocab.stripFlags;
    if (strip !== undefined && [...strip.values()].some((f) => f.lstrip || f.rstrip)) return 0;
    let most = 4;
    for (let id = 0; id < this.vocabSize; id++) most = Math.max(most, this.vocab.pieces.bytes(id).length);
    return most;
  }

  /**
   * Adjacent symbol pairs looked up in the vocabulary by every encode so far: the merge's work. The
   * queue keeps it linear, fewer than 3 per code point of text the chunk cache did not serve (n - 1
   * pairs to start, 2 more per merge); run.c's rescan after every merge looks up O(n²).
   */
  get pairLookups(): number {
    return this.lookups;
  }

  /** The bytes token `id` stands for in text, before any leading-space stripping. */
  private decodedPiece(id: number): Uint8Array {
    switch (this.vocab.types[id]) {
      case TokenType.byte:
        return Uint8Array.of(this.vocab.byteValues[id]);
      case TokenType.control:
      case TokenType.unknown:
      case TokenType.unused:
        return new Uint8Array(0);
      default: {
        const piece = this.vocab.pieces.bytes(id);
        return this.vocab.spacesAsMetaspace ? metaspacesToSpaces(piece) : piece;
      }
    }
  }

  encode(text: string, opts: EncodeOptions = {}): number[] {
    const ids: number[] = [];
    if (opts.addBos === true && this.bosId !== null) ids.push(this.bosId);
    // As llama.cpp: the dummy prefix goes before the text at the start and after each special token.
    let afterSpecial = opts.continuation !== true;
    const stopAfter = opts.stopAfter ?? Infinity;
    for (const f of partitionSpecials(text, this.specials, opts.parseSpecial === true)) {
      if (ids.length > stopAfter) return ids;
      if ("id" in f) ids.push(f.id);
      else this.encodeText(f.text, ids, afterSpecial, stopAfter);
      afterSpecial = "id" in f;
    }
    if (ids.length > stopAfter) return ids;
    if (opts.addEos === true && this.eosId !== null) ids.push(this.eosId);
    return ids;
  }

  /** `out` gets text's ids; once it holds more than `stopAfter`, the rest of the words are left (EncodeOptions.stopAfter). */
  private encodeText(text: string, out: number[], prefix: boolean, stopAfter: number): void {
    let normalized = this.addSpacePrefix && prefix ? " " + text : text;
    if (this.vocab.spacesAsMetaspace) normalized = normalized.replaceAll(" ", METASPACE);
    if (!this.wordsAreIndependent) {
      this.encodeChunk(normalized, out);
      return;
    }
    // Cut before every space that follows a non-space: no piece spans such a cut (see wordsAreIndependent).
    const space = this.vocab.spacesAsMetaspace ? METASPACE : " ";
    let start = 0;
    for (let i = 1; i < normalized.length; i++) {
      if (normalized[i] === space && normalized[i - 1] !== space) {
        this.encodeCachedChunk(normalized.slice(start, i), out);
        if (out.length > stopAfter) return;
        start = i;
      }
    }
    this.encodeCachedChunk(normalized.slice(start), out);
  }

  private encodeCachedChunk(chunk: string, out: number[]): void {
    let ids = this.chunkCache.get(chunk);
    if (ids === undefined) {
      ids = [];
      this.encodeChunk(chunk, ids);
      if (this.chunkCache.size >= MAX_CACHED_CHUNKS) this.chunkCache.clear();
      this.chunkCache.set(chunk, ids);
    }
    for (const id of ids) out.push(id);
  }

  /** SentencePiece BPE over `normalized` (spaces already spelled as the vocabulary spells them). */
  private encodeChunk(normalized: string, out: number[]): void {
    const bytes = utf8Encoder.encode(normalized);
    const binary = binaryString(bytes);
    const pieceOf = (start: number, length: number): number =>
      this.pieceToId.get(binary.substring(start, start + length)) ?? -1;
    const symbols = new SymbolList(bytes, pieceOf);
    const queue = new BigramQueue();
    const tryAddBigram = (left: number, right: number): void => {
      if (left < 0 || right < 0) return;
      this.lookups++;
      const size = symbols.length[left] + symbols.length[right];
      const id = pieceOf(symbols.start[left], size);
      if (id >= 0) queue.push({ left, right, score: this.vocab.scores[id], size, id });
    };
    for (let i = 1; i < symbols.count; i++) tryAddBigram(i - 1, i);
    for (let bigram = queue.pop(); bigram !== undefined; bigram = queue.pop()) {
      const { left, right } = bigram;
      const leftLength = symbols.length[left];
      const rightLength = symbols.length[right];
      // Stale: one side was merged away or grew since this pair was queued.
      if (leftLength === 0 || rightLength === 0 || leftLength + rightLength !== bigram.size) continue;
      symbols.merge(left, right, bigram.id);
      tryAddBigram(symbols.prev[left], left);
      tryAddBigram(left, symbols.next[left]);
    }
    for (let i = 0; i !== -1; i = symbols.next[i]) {
      const id = symbols.id[i];
      if (id >= 0) out.push(id);
      else this.pushByteFallback(bytes.subarray(symbols.start[i], symbols.start[i] + symbols.length[i]), out);
    }
  }

  /** A code point that is no piece: one byte token per UTF-8 byte, or one unknown token without byte tokens. */
  private pushByteFallback(bytes: Uint8Array, out: number[]): void {
    if (bytes.every((byte) => this.byteToId[byte] !== -1)) {
      for (const byte of bytes) out.push(this.byteToId[byte]);
    } else {
      // The constructor guarantees an unknown token whenever a byte token is missing.
      out.push(this.unkId!);
    }
  }

  private checkId(id: number): void {
    if (!Number.isInteger(id) || id < 0 || id >= this.vocabSize) {
      throw new InputError(`token id ${id} is outside the vocabulary (0..${this.vocabSize - 1})`);
    }
  }

  /**
   * The bytes token `id` adds to text after token `prevId` (undefined: it starts the text). A piece that
   * starts the text or follows BOS loses one leading space, the dummy prefix encoding added.
   */
  private bytesAfter(id: number, prevId: number | undefined): Uint8Array {
    this.checkId(id);
    const bytes = this.textBytes.bytes(id);
    const startsText = prevId === undefined || prevId === this.bosId;
    const isByteToken = this.vocab.types[id] === TokenType.byte;
    if (this.addSpacePrefix && startsText && !isByteToken && bytes[0] === 0x20) return bytes.subarray(1);
    return bytes;
  }

  decode(ids: ArrayLike<number>): string {
    const parts: Uint8Array[] = [];
    let total = 0;
    for (let i = 0; i < ids.length; i++) {
      const bytes = this.bytesAfter(ids[i], i === 0 ? undefined : ids[i - 1]);
      parts.push(bytes);
      total += bytes.length;
    }
    const joined = new Uint8Array(total);
    let at = 0;
    for (const part of parts) {
      joined.set(part, at);
      at += part.length;
    }
    return utf8Decoder.decode(joined);
  }

  createStreamDecoder(prevTokenId?: number): StreamDecoder {
    return new SpmStreamDecoder((id, prevId) => this.bytesAfter(id, prevId), prevTokenId);
  }

  tokenPiece(id: number): string {
    this.checkId(id);
    if (this.vocab.types[id] === TokenType.byte) {
      return `<0x${this.vocab.byteValues[id].toString(16).toUpperCase().padStart(2, "0")}>`;
    }
    return utf8Decoder.decode(this.vocab.pieces.bytes(id));
  }

  tokenText(id: number): string {
    this.checkId(id);
    return this.vocab.types[id] === TokenType.control ? this.tokenPiece(id) : utf8Decoder.decode(this.textBytes.bytes(id));
  }

  specialTokens(): readonly { readonly id: number; readonly text: string }[] {
    return this.specials.map(({ id, text }) => ({ id, text }));
  }

  tokenBytes(id: number): Uint8Array {
    this.checkId(id);
    return this.textBytes.bytes(id);
  }

  /** True for tokens that never appear in text: control (BOS, EOS, …), unknown and unused tokens. */
  isSpecial(id: number): boolean {
    this.checkId(id);
    const type = this.vocab.types[id];
    return type === TokenType.control || type === TokenType.unknown || type === TokenType.unused;
  }
}

class SpmStreamDecoder implements StreamDecoder {
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

function validateVocab(vocab: SpmVocab): void {
  const fail = (problem: string): never => {
    throw new ModelFormatError(vocab.file, problem);
  };
  const count = vocab.pieces.length;
  if (count === 0) fail("vocabulary is empty");
  if (vocab.scores.length !== count) fail(`has ${vocab.scores.length} token scores for ${count} tokens`);
  if (vocab.types.length !== count) fail(`has ${vocab.types.length} token types for ${count} tokens`);
  if (vocab.byteValues.length !== count) fail(`has ${vocab.byteValues.length} byte values for ${count} tokens`);
  for (const [name, id] of [
    ["BOS", vocab.bosId],
    ["EOS", vocab.eosId],
    ["unknown", vocab.unkId],
  ] as const) {
    if (id !== null && (!Number.isInteger(id) || id < 0 || id >= count)) {
      fail(`${name} token id ${id} is outside the vocabulary (0..${count - 1})`);
    }
  }
  for (let id = 0; id < count; id++) {
    const isByte = vocab.types[id] === TokenType.byte;
    const byte = vocab.byteValues[id];
    if (isByte !== (byte >= 0) || byte > 255) fail(`token ${id} has byte value ${byte} but type ${vocab.types[id]}`);
  }
}
