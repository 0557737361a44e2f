/**
 * One KV block on disk: a file named by the block's hash, carrying its full key and a checksum, so
 * that a reader can prove the file is the block it asked for, whole, and made for this model.
 *
 * Layout (integers little-endian):
 *
 *   offset  size  field
 *   0       8     magic "PLKVBLK1"
 *   8       4     format version (1)
 *   12      4     header size H (bytes before the KV)
 *   16      32    KV fingerprint (fingerprint.ts: model and KV layout, and the group's for group N > 0)
 *   48      32    block hash (raw sha256)
 *   80      32    parent block hash (raw sha256)
 *   112     4     tokens in the block N
 *   116     4     extra keys length E
 *   120     8     KV length K
 *   128     4N    token ids
 *   128+4N  E     extra keys, framed as block-hash.ts encodes them
 *   H       K     the KV of the block's KV cache group (KVBlockIO layout: [j][K, V][kvHead][row][headDim], layers[j])
 *   H+K     8     xxHash64 of every byte before it
 *
 * A file passes only when its size is exactly H + K + 8, every header field equals what the
 * reader expects (its fingerprint, the hash it looked up, that block's parent hash, tokens and
 * extra keys, the layout's KV length) and the checksum matches: a torn, truncated, bit-flipped,
 * swapped (another block's file under this name), other model's or other salt's file fails.
 */
import type { KVBlockKey } from "../kv/second-tier.ts";

const MAGIC = "PLKVBLK1";
const VERSION = 1;
const FIXED_HEADER = 128;
const CHECKSUM_BYTES = 8;

/** Bytes before the KV in the file of block `key`. */
function headerBytesOf(key: KVBlockKey): number {
  return FIXED_HEADER + 4 * key.tokens.length + key.extraKeys.length;
}

/** The exact size of the file of block `key` with `kvBytes` of KV: a reader checks it before reading a byte. */
export function blockFileBytes(key: KVBlockKey, kvBytes: number): number {
  return headerBytesOf(key) + kvBytes + CHECKSUM_BYTES;
}

/** The bytes of a block file for `key` with KV `kv`, under fingerprint `fingerprint`. */
export function encodeBlockFile(fingerprint: Uint8Array, key: KVBlockKey, kv: Uint8Array): Uint8Array {
  const headerBytes = headerBytesOf(key);
  const out = new Uint8Array(blockFileBytes(key, kv.length));
  const view = new DataView(out.buffer);
  out.set(new TextEncoder().encode(MAGIC), 0);
  view.setUint32(8, VERSION, true);
  view.setUint32(12, headerBytes, true);
  out.set(fingerprint, 16);
  out.set(Buffer.from(key.hash, "hex"), 48);
  out.set(Buffer.from(key.parentHash, "hex"), 80);
  view.setUint32(112, key.tokens.length, true);
  view.setUint32(116, key.extraKeys.length, true);
  view.setBigUint64(120, BigInt(kv.length), true);
  for (let i = 0; i < key.tokens.length; i++) view.setUint32(FIXED_HEADER + 4 * i, key.tokens[i] as number, true);
  out.set(key.extraKeys, FIXED_HEADER + 4 * key.tokens.length);
  out.set(kv, headerBytes);
  view.setBigUint64(headerBytes + kv.length, checksum(out.subarray(0, headerBytes + kv.length)), true);
  return out;
}

/** Why a block file was refused. */
export type BlockFileProblem = "size" | "magic" | "version" | "fingerprint" | "key" | "checksum";

/**
 * The KV of a block file (a view into `file`) when it is exactly the block `key` of `fingerprint`
 * with `kvBytes` of KV, else the first check it fails.
 */
export function decodeBlockFile(
  file: Uint8Array, fingerprint: Uint8Array, key: KVBlockKey, kvBytes: number,
): { kv: Uint8Array } | { problem: BlockFileProblem } {
  const headerBytes = headerBytesOf(key);
  if (file.length !== blockFileBytes(key, kvBytes)) return { problem: "size" };
  const view = new DataView(file.buffer, file.byteOffset, file.length);
  if (new TextDecoder().decode(file.subarray(0, 8)) !== MAGIC) return { problem: "magic" };
  if (view.getUint32(8, true) !== VERSION) return { problem: "version" };
  if (!equalBytes(file.subarray(16, 48), fingerprint)) return { problem: "fingerprint" };
  const keyOk = view.getUint32(12, true) === headerBytes &&
    equalBytes(file.subarray(48, 80), Buffer.from(key.hash, "hex")) &&
    equalBytes(file.subarray(80, 112), Buffer.from(key.parentHash, "hex")) &&
    view.getUint32(112, true) === key.tokens.length &&
    view.getUint32(116, true) === key.extraKeys.length &&
    view.getBigUint64(120, true) === BigInt(kvBytes) &&
    tokensEqual(view, key.tokens) &&
    equalBytes(file.subarray(FIXED_HEADER + 4 * key.tokens.length, headerBytes), key.extraKeys);
  if (!keyOk) return { problem: "key" };
  const end = headerBytes + kvBytes;
  if (view.getBigUint64(end, true) !== checksum(file.subarray(0, end))) return { problem: "checksum" };
  return { kv: file.subarray(headerBytes, end) };
}

function checksum(bytes: Uint8Array): bigint {
  return Bun.hash.xxHash64(bytes, 0n);
}

function tokensEqual(view: DataView, tokens: Uint32Array): boolean {
  for (let i = 0; i < tokens.length; i++) if (view.getUint32(FIXED_HEADER + 4 * i, true) !== tokens[i]) return false;
  return true;
}

function equalBytes(a: Uint8Array, b: Uint8Array): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}
