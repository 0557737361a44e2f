/**
 * Block hashing: the content key of a full KV block, hash(parent block hash, block tokens, extra keys).
 *
 * Hash input of one block, byte by byte (integers little-endian):
 *
 *   u8  P            length of the parent digest in bytes (32 for sha256, 8 for xxh64)
 *   P bytes          the parent block's digest: the raw bytes behind its hex BlockHash, or
 *                    ROOT_PARENT_HASH[algorithm] for the first block of a request
 *   u32 N            number of tokens in the block
 *   N × u32          the token ids
 *   then every extra key, in order:
 *     u8  tag        what kind of key it is (ExtraKeyTag)
 *     u32 L          payload length in bytes
 *     L bytes        payload:
 *                      string       UTF-8 of the string (plain keys given to hashBlockTokens)
 *                      number       f64 of the number (plain keys given to hashBlockTokens)
 *                      lora         UTF-8 of the adapter name
 *                      multimodal   i32 item start relative to the block start (negative when the
 *                                   item began in an earlier block), u32 item length, UTF-8 item id
 *                      cacheSalt    the salt's UTF-16 code units, each a u16: the exact string,
 *                                   lone surrogates included (UTF-8 would turn each into U+FFFD,
 *                                   and "\ud800" and "\ufffd" would share blocks)
 *
 * Every field is either fixed-size or length-prefixed and the extra keys run to the end of the
 * input, so two different (parent, tokens, keys) triples never produce the same bytes; the tag keeps
 * kinds apart, so a LoRA named "x", a salt "x" and a plain string "x" hash differently.
 *
 * BlockHash is the lowercase hex digest. Two functions: sha256 (the default; a collision would leak
 * one tenant's KV into another's) and xxh64 (fast, 64-bit, not collision resistant). The pool never
 * trusts a hash alone: it verifies the exact content of every hit (see BlockPool), so xxh64 costs at
 * most a missed hit, never a wrong one.
 */

/** Lowercase hex digest of a block's content. */
export type BlockHash = string;

export type HashAlgorithm = "sha256" | "xxh64";

export const HASH_ALGORITHMS: readonly HashAlgorithm[] = ["sha256", "xxh64"];

/** Digest size in bytes; the hex BlockHash has twice as many characters. */
export const DIGEST_BYTES: Readonly<Record<HashAlgorithm, number>> = { sha256: 32, xxh64: 8 };

/** The tag byte in front of each extra key of the hash input. */
export const ExtraKeyTag = {
  string: 0x01,
  number: 0x02,
  lora: 0x10,
  multimodal: 0x11,
  // 0x12 was the cache salt as UTF-8: retired and never reused, so that a block file written under
  // it (where two salts could share a name) is never found by a key of today.
  cacheSalt: 0x13,
} as const;

/** Extra key: the LoRA adapter a request runs with. The manager adds it to every block. */
export class LoraExtraKey {
  constructor(readonly name: string) {}
}

/**
 * Extra key: a multimodal item (an image…) whose placeholder tokens cover positions
 * [blockStart + offset, blockStart + offset + length). The manager adds it to every block the item
 * overlaps, with `offset` relative to that block's first token.
 */
export class MultimodalExtraKey {
  constructor(readonly id: string, readonly offset: number, readonly length: number) {}
}

/** Extra key: a request's cache_salt. The manager adds it to the first block only; later blocks inherit it through the parent chain. */
export class CacheSaltExtraKey {
  constructor(readonly salt: string) {}
}

export type ExtraKey = string | number | LoraExtraKey | MultimodalExtraKey | CacheSaltExtraKey;

const utf8 = new TextEncoder();

/**
 * A string's UTF-16 code units, u16 little-endian each: the exact string, where UTF-8 would
 * replace every lone surrogate (which JSON's "\ud800" escapes make) with U+FFFD.
 */
export function utf16CodeUnits(text: string): Uint8Array {
  const out = new Uint8Array(2 * text.length);
  for (let i = 0; i < text.length; i++) {
    const unit = text.charCodeAt(i);
    out[2 * i] = unit & 0xff;
    out[2 * i + 1] = unit >>> 8;
  }
  return out;
}

/** Growable byte buffer with the writes the hash input needs. */
class ByteWriter {
  protected bytes = new Uint8Array(256);
  protected view = new DataView(this.bytes.buffer);
  protected size = 0;

  protected reserve(extra: number): void {
    const needed = this.size + extra;
    if (needed <= this.bytes.length) return;
    const grown = new Uint8Array(Math.max(needed, this.bytes.length * 2));
    grown.set(this.bytes.subarray(0, this.size));
    this.bytes = grown;
    this.view = new DataView(grown.buffer);
  }
}

/**
 * Encodes extra keys into their framed form (tag, u32 length, payload). One encoder is reused for
 * every block; `encoded` is a view that the next clear() invalidates.
 */
export class ExtraKeyEncoder extends ByteWriter {
  clear(): void {
    this.size = 0;
  }

  get length(): number {
    return this.size;
  }

  /** The keys encoded since clear(); a view into the encoder's buffer. */
  get encoded(): Uint8Array {
    return this.bytes.subarray(0, this.size);
  }

  addBytes(tag: number, payload: Uint8Array): void {
    this.reserve(5 + payload.length);
    this.bytes[this.size] = tag;
    this.view.setUint32(this.size + 1, payload.length, true);
    this.bytes.set(payload, this.size + 5);
    this.size += 5 + payload.length;
  }

  addString(tag: number, text: string): void {
    this.reserve(5 + 3 * text.length); // UTF-8 takes at most 3 bytes per UTF-16 unit
    const { written } = utf8.encodeInto(text, this.bytes.subarray(this.size + 5));
    this.bytes[this.size] = tag;
    this.view.setUint32(this.size + 1, written, true);
    this.size += 5 + written;
  }

  addNumber(value: number): void {
    this.reserve(13);
    this.bytes[this.size] = ExtraKeyTag.number;
    this.view.setUint32(this.size + 1, 8, true);
    this.view.setFloat64(this.size + 5, value, true);
    this.size += 13;
  }

  /** `idUtf8` is the item id already encoded (the manager encodes it once per request). */
  addMultimodal(relativeOffset: number, length: number, idUtf8: Uint8Array): void {
    this.reserve(13 + idUtf8.length);
    this.bytes[this.size] = ExtraKeyTag.multimodal;
    this.view.setUint32(this.size + 1, 8 + idUtf8.length, true);
    this.view.setInt32(this.size + 5, relativeOffset, true);
    this.view.setUint32(this.size + 9, length, true);
    this.bytes.set(idUtf8, this.size + 13);
    this.size += 13 + idUtf8.length;
  }

  /** Encodes one key of any supported kind; throws TypeError for anything else. */
  add(key: unknown): void {
    if (typeof key === "string") this.addString(ExtraKeyTag.string, key);
    else if (typeof key === "number") this.addNumber(key);
    else if (key instanceof LoraExtraKey) this.addString(ExtraKeyTag.lora, key.name);
    else if (key instanceof CacheSaltExtraKey) this.addBytes(ExtraKeyTag.cacheSalt, utf16CodeUnits(key.salt));
    else if (key instanceof MultimodalExtraKey) {
      if (!Number.isInteger(key.offset) || key.offset < -0x80000000 || key.offset > 0x7fffffff) {
        throw new RangeError(`multimodal key offset ${key.offset} is not a 32-bit integer`);
      }
      if (!Number.isInteger(key.length) || key.length < 0 || key.length > 0xffffffff) {
        throw new RangeError(`multimodal key length ${key.length} is not a 32-bit unsigned integer`);
      }
      this.addMultimodal(key.offset, key.length, utf8.encode(key.id));
    } else {
      throw new TypeError(`unsupported extra key ${String(key)}: use a string, a number or an ExtraKey class`);
    }
  }
}

/**
 * Builds one block's hash input and digests it. One hasher serves every block of a manager (one
 * thread), so hashing allocates nothing but the returned hex string and, when the input length
 * changes, a view of the buffer.
 *
 * Use: begin(parent) → addTokens(…) → addExtraKeys(…) → finish(); `digest` then holds the raw bytes,
 * which the next block passes to begin() as its parent without parsing hex.
 */
export class BlockHasher extends ByteWriter {
  readonly algorithm: HashAlgorithm;
  readonly digestLength: number;
  /** Raw bytes of the last finish()'s digest; overwritten by the next finish(). */
  readonly digest: Uint8Array;
  private readonly digestBuffer: Buffer;
  private readonly digestView: DataView;
  private inputView: Uint8Array = this.bytes.subarray(0, 0);

  constructor(algorithm: HashAlgorithm) {
    super();
    if (!HASH_ALGORITHMS.includes(algorithm)) throw new RangeError(`unknown hash algorithm ${String(algorithm)}`);
    this.algorithm = algorithm;
    this.digestLength = DIGEST_BYTES[algorithm];
    const storage = new ArrayBuffer(32);
    this.digest = new Uint8Array(storage, 0, this.digestLength);
    this.digestBuffer = Buffer.from(storage, 0, this.digestLength);
    this.digestView = new DataView(storage);
  }

  /** Starts a new input with the parent's raw digest (at most 255 bytes). */
  begin(parentDigest: Uint8Array): void {
    this.size = 0;
    this.reserve(1 + parentDigest.length);
    this.bytes[0] = parentDigest.length;
    this.bytes.set(parentDigest, 1);
    this.size = 1 + parentDigest.length;
  }

  /** Appends the count and `count` token ids starting at `tokens[start]`; ids must be u32 integers (not checked here: Request validates them). */
  addTokens(tokens: ArrayLike<number>, start: number, count: number): void {
    this.reserve(4 + 4 * count);
    const view = this.view;
    let at = this.size;
    view.setUint32(at, count, true);
    at += 4;
    for (let i = 0; i < count; i++, at += 4) view.setUint32(at, tokens[start + i] as number, true);
    this.size = at;
  }

  /** Appends keys already framed by an ExtraKeyEncoder. */
  addExtraKeys(encoded: Uint8Array): void {
    this.reserve(encoded.length);
    this.bytes.set(encoded, this.size);
    this.size += encoded.length;
  }

  /** Digests the input into `digest` and returns it as hex. */
  finish(): BlockHash {
    if (this.inputView.buffer !== this.bytes.buffer || this.inputView.length !== this.size) {
      this.inputView = this.bytes.subarray(0, this.size);
    }
    rawDigest(this.algorithm, this.inputView, this.digest, this.digestView);
    return this.digestBuffer.toString("hex");
  }
}

function rawDigest(algorithm: HashAlgorithm, input: Uint8Array, out: Uint8Array, outView: DataView): void {
  if (algorithm === "sha256") Bun.SHA256.hash(input, out);
  else outView.setBigUint64(0, Bun.hash.xxHash64(input, 0n), false); // big-endian, so the hex reads like the number
}

function rootDigest(algorithm: HashAlgorithm): Uint8Array {
  const storage = new ArrayBuffer(32);
  const out = new Uint8Array(storage, 0, DIGEST_BYTES[algorithm]);
  rawDigest(algorithm, utf8.encode("pagellm/kv/root-parent/v1"), out, new DataView(storage));
  return out;
}

/** Raw bytes of ROOT_PARENT_HASH. */
export const ROOT_PARENT_DIGEST: Readonly<Record<HashAlgorithm, Uint8Array>> = {
  sha256: rootDigest("sha256"),
  xxh64: rootDigest("xxh64"),
};

/**
 * The parent hash of every request's first block: a fixed digest (of the ASCII text
 * "pagellm/kv/root-parent/v1"), so the first block is hashed exactly like every other block and
 * hashes are stable across processes.
 */
export const ROOT_PARENT_HASH: Readonly<Record<HashAlgorithm, BlockHash>> = {
  sha256: Buffer.from(ROOT_PARENT_DIGEST.sha256).toString("hex"),
  xxh64: Buffer.from(ROOT_PARENT_DIGEST.xxh64).toString("hex"),
};

const HEX_DIGEST = /^(?:[0-9a-fA-F]{2}){1,255}$/;

/** Raw bytes of a hex BlockHash; throws RangeError for anything that is not 1 to 255 bytes of hex. */
export function blockHashBytes(hash: BlockHash): Uint8Array {
  if (!HEX_DIGEST.test(hash)) throw new RangeError(`not a hex block hash: ${JSON.stringify(hash)}`);
  return Buffer.from(hash, "hex");
}

const publicHashers: Partial<Record<HashAlgorithm, BlockHasher>> = {};
const publicEncoder = new ExtraKeyEncoder();

/**
 * Hash of one block: `parent` is the previous block's hash (null for a request's first block, which
 * then uses ROOT_PARENT_HASH), `tokenIds` the block's tokens (u32 integers), `extraKeys` strings,
 * numbers or the typed ExtraKey classes, encoded as the module comment describes. The manager
 * produces exactly these hashes for a request's blocks (with LoraExtraKey, MultimodalExtraKey and
 * CacheSaltExtraKey), but without re-parsing hex on every block.
 */
export function hashBlockTokens(
  parent: BlockHash | null,
  tokenIds: ArrayLike<number>,
  extraKeys: unknown[] | null,
  hash: HashAlgorithm = "sha256",
): BlockHash {
  const hasher = (publicHashers[hash] ??= new BlockHasher(hash));
  for (let i = 0; i < tokenIds.length; i++) {
    const token = tokenIds[i] as number;
    if (token >>> 0 !== token) throw new RangeError(`token id ${token} at index ${i} is not a u32 integer`);
  }
  hasher.begin(parent === null ? ROOT_PARENT_DIGEST[hash] : blockHashBytes(parent));
  hasher.addTokens(tokenIds, 0, tokenIds.length);
  if (extraKeys !== null && extraKeys.length > 0) {
    publicEncoder.clear();
    for (const key of extraKeys) publicEncoder.add(key);
    hasher.addExtraKeys(publicEncoder.encoded);
  }
  return hasher.finish();
}
