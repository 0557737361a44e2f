/**
 * Full-attention groups (every layer of most models, gemma3's global layers): a query reads every
 * position before it, so every block stays until the request is freed, and a hit is the longest
 * run of cached blocks from the first, each the verified continuation of the one before.
 */
import type { KVCacheBlock } from "./block.ts";
import type { BlockLookup, GroupBlocks, SingleTypeKVCacheManager } from "./single-type-manager.ts";

export class FullAttentionManager implements SingleTypeKVCacheManager {
  constructor(readonly groups: readonly number[]) {}

  findLongestHit(lookup: BlockLookup, maxBlocks: number): GroupBlocks[] {
    const hits: KVCacheBlock[][] = this.groups.map(() => []);
    let parent: number | null = null;
    for (let i = 0; i < maxBlocks; i++) {
      const found = this.groups.map((g) => lookup.find(i, parent, g));
      if (found.some((block) => block === null)) break;
      found.forEach((block, j) => hits[j]!.push(block!));
      // Every group's block i holds the same content: the same contentId (block-pool.ts).
      parent = found[0]!.contentId;
    }
    return hits;
  }

  firstNeededBlock(): number {
    return 0;
  }

  longestHeldHit(held: (index: number, group: number) => boolean, maxBlocks: number): number {
    for (let i = 0; i < maxBlocks; i++) if (!this.groups.every((g) => held(i, g))) return i;
    return maxBlocks;
  }

  firstHitBlock(): number {
    return 0;
  }
}
