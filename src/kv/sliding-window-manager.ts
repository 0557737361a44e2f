/**
 * Sliding-window groups (gemma3's local layers): a query at position p reads positions p - window
 * + 1..p only (the attention kernels read nothing before, assembly/attention.ts), so
 *   - a running request's blocks wholly before the window of its next query are freed as it
 *     advances (they stay cached, and findable, until the pool reuses them), and
 *   - a prefix hit of n blocks needs only its last ceil((window - 1) / blockSize) blocks (those
 *     the next query's window can reach), or all of them when the hit is shorter; the blocks before
 *     stay null. The hit is searched from its longest possible end leftwards, for the first end
 *     with that many cached blocks before it, as vLLM's SlidingWindowManager.
 */
import type { KVCacheBlock } from "./block.ts";
import type { BlockLookup, GroupBlocks, SingleTypeKVCacheManager } from "./single-type-manager.ts";

export class SlidingWindowManager implements SingleTypeKVCacheManager {
  /** Blocks a hit must end with: the window before the next query, less the query itself. */
  private readonly runBlocks: number;

  constructor(
    readonly groups: readonly number[],
    readonly window: number,
    private readonly blockSize: number,
  ) {
    this.runBlocks = Math.ceil((window - 1) / blockSize);
  }

  findLongestHit(lookup: BlockLookup, maxBlocks: number, chain: readonly number[]): GroupBlocks[] {
    const hits: GroupBlocks[] = this.groups.map(() => new Array<KVCacheBlock | null>(maxBlocks).fill(null));
    // A window of one position reads no cached block: every prefix is a hit.
    if (this.runBlocks === 0) return hits;
    let run = 0;
    for (let i = maxBlocks - 1; i >= 0; i--) {
      const found = this.groups.map((g) => this.findBlock(lookup, i, chain, g, run > 0 ? hits[0]![i + 1]! : null));
      if (found.some((block) => block === null)) {
        run = 0;
        continue;
      }
      found.forEach((block, j) => (hits[j]![i] = block));
      if (++run >= this.runBlocks) return hits.map((blocks) => blocks.slice(0, i + run));
    }
    // No run long enough: the hit is the run that starts at the first block (maybe none).
    return hits.map((blocks) => blocks.slice(0, run));
  }

  firstNeededBlock(numComputedTokens: number): number {
    return Math.max(0, Math.floor((numComputedTokens - this.window + 1) / this.blockSize));
  }

  longestHeldHit(held: (index: number, group: number) => boolean, maxBlocks: number): number {
    if (this.runBlocks === 0) return maxBlocks;
    let run = 0;
    for (let i = maxBlocks - 1; i >= 0; i--) {
      if (!this.groups.every((g) => held(i, g))) {
        run = 0;
        continue;
      }
      if (++run >= this.runBlocks) return i + run;
    }
    return run;
  }

  firstHitBlock(numBlocks: number): number {
    return Math.max(0, numBlocks - this.runBlocks);
  }

  /**
   * Block i of `group`, its parent content checked against the full-attention chain when there is
   * one; else (no full-attention layers) against the block after it, which must name it as parent.
   */
  private findBlock(lookup: BlockLookup, i: number, chain: readonly number[], group: number, next: KVCacheBlock | null): KVCacheBlock | null {
    if (i === 0) return lookup.find(0, null, group);
    if (i - 1 < chain.length) return lookup.find(i, chain[i - 1]!, group);
    const block = lookup.findAfterAnyParent(i, group);
    return block !== null && (next === null || next.parentContentId === block.contentId) ? block : null;
  }
}
