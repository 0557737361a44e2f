/**
 * The block hash chain of one request, computed once per block and kept as the request grows
 * (vLLM keeps it as `request.block_hashes`): the decode path, which runs every step for every
 * request, only ever hashes the one block that just filled.
 */
import type { Request } from "./request.ts";
import { type BlockHash, BlockHasher, ExtraKeyEncoder, ExtraKeyTag, ROOT_PARENT_DIGEST, utf16CodeUnits } from "./block-hash.ts";

const NO_EXTRA_KEYS = new Uint8Array(0);
const utf8 = new TextEncoder();

interface EncodedMultimodalItem {
  readonly offset: number;
  readonly length: number;
  readonly idUtf8: Uint8Array;
}

export class RequestBlockHashes {
  /** Hashes of the request's first `hashes.length` full blocks. Only ever grows. */
  readonly hashes: BlockHash[] = [];
  /** Raw digest of the last hash in `hashes` (the root parent while empty), the next block's parent. */
  private readonly lastDigest: Uint8Array;
  private readonly lora: Uint8Array | null;
  private readonly salt: Uint8Array | null;
  private readonly mmItems: readonly EncodedMultimodalItem[];
  private readonly hasExtraKeys: boolean;

  constructor(
    readonly request: Request,
    private readonly blockSize: number,
    private readonly hasher: BlockHasher,
    private readonly encoder: ExtraKeyEncoder,
  ) {
    this.lastDigest = ROOT_PARENT_DIGEST[hasher.algorithm].slice();
    // Encode the request's strings once, not once per block.
    this.lora = request.loraName === null ? null : utf8.encode(request.loraName);
    // The salt's exact code units: distinct salts never share a block (see block-hash.ts).
    this.salt = request.cacheSalt === null ? null : utf16CodeUnits(request.cacheSalt);
    this.mmItems = request.mmItems.map((item) => ({ offset: item.offset, length: item.length, idUtf8: utf8.encode(item.id) }));
    this.hasExtraKeys = this.lora !== null || this.salt !== null || this.mmItems.length > 0;
  }

  /** Full blocks the request's known tokens make now. */
  get numFullBlocks(): number {
    return Math.floor(this.request.numTokens / this.blockSize);
  }

  /** Hash of full block `index`, hashing the blocks before it first if they are not yet. */
  hashAt(index: number): BlockHash {
    if (index >= this.numFullBlocks) throw new RangeError(`request ${this.request.id}: block ${index} is not full`);
    const tokens = this.request.allTokenIds;
    while (this.hashes.length <= index) {
      const next = this.hashes.length;
      this.hasher.begin(this.lastDigest);
      this.hasher.addTokens(tokens, next * this.blockSize, this.blockSize);
      if (this.hasExtraKeys) this.hasher.addExtraKeys(this.extraKeysOf(next));
      this.hashes.push(this.hasher.finish());
      this.lastDigest.set(this.hasher.digest);
    }
    return this.hashes[index] as BlockHash;
  }

  /**
   * The framed extra keys of block `index` (block-hash.ts): the LoRA name on every block, each
   * multimodal item the block overlaps with its start relative to the block, the cache salt on the
   * first block. A view into the shared encoder, valid until its next use; empty when none.
   */
  extraKeysOf(index: number): Uint8Array {
    if (!this.hasExtraKeys) return NO_EXTRA_KEYS;
    const encoder = this.encoder;
    const start = index * this.blockSize;
    const end = start + this.blockSize;
    encoder.clear();
    if (this.lora !== null) encoder.addBytes(ExtraKeyTag.lora, this.lora);
    for (const item of this.mmItems) {
      if (item.offset < end && item.offset + item.length > start) encoder.addMultimodal(item.offset - start, item.length, item.idUtf8);
    }
    if (index === 0 && this.salt !== null) encoder.addBytes(ExtraKeyTag.cacheSalt, this.salt);
    return encoder.encoded;
  }
}
