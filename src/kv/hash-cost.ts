/**
 * Cost of block hashing, for `pagellm bench prefix`: it hashes a request's prompt the way the KV
 * cache manager does at admission (one chain, shared hasher, hex digests).
 */
import { Request } from "./request.ts";
import { BlockHasher, ExtraKeyEncoder, type HashAlgorithm } from "./block-hash.ts";
import { RequestBlockHashes } from "./request-hashes.ts";

/**
 * Nanoseconds per token to hash every full block of a `numTokens`-token prompt with `hash` at
 * `blockSize` tokens per block: the best of several timed rounds, each running for at least
 * `minRoundMs`, after a warm-up round.
 */
export function measureHashCost(hash: HashAlgorithm, blockSize: number, numTokens: number, minRoundMs = 50): number {
  const numBlocks = Math.floor(numTokens / blockSize);
  if (!Number.isInteger(blockSize) || blockSize < 1 || numBlocks < 1) {
    throw new RangeError(`need at least one full block: numTokens ${numTokens}, blockSize ${blockSize}`);
  }
  const promptTokenIds: number[] = [];
  let state = 0x2545f491; // xorshift32: arbitrary but repeatable token ids below a 128k vocabulary
  for (let i = 0; i < numTokens; i++) {
    state ^= state << 13;
    state ^= state >>> 17;
    state ^= state << 5;
    promptTokenIds.push((state >>> 0) % 128_000);
  }
  const request = new Request({ id: "hash-cost", promptTokenIds });
  const hasher = new BlockHasher(hash);
  const encoder = new ExtraKeyEncoder();
  const round = (): number => {
    const start = Bun.nanoseconds();
    let runs = 0;
    do {
      new RequestBlockHashes(request, blockSize, hasher, encoder).hashAt(numBlocks - 1);
      runs++;
    } while (Bun.nanoseconds() - start < minRoundMs * 1e6);
    return (Bun.nanoseconds() - start) / (runs * numBlocks * blockSize);
  };
  round(); // warm-up: JIT tiers
  let best = Infinity;
  for (let i = 0; i < 5; i++) best = Math.min(best, round());
  return best;
}
