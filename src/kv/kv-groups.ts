/**
 * KV cache groups, as vLLM v1's hybrid KV cache manager forms them: a model whose layers attend
 * differently (gemma3's local sliding-window layers beside its global ones) keeps each kind's KV
 * in groups of its own, each group with its own block table per request, all groups drawing
 * their blocks from one pool. A block id is one page of the arena: `numSlots` layers' rows (K and
 * V) for blockSize positions; the group that holds a block id stores its layers there, layer
 * `layers[j]` of the group in slot j. Groups have equal numbers of layers (the last group of a
 * kind may be short, its last slots unused), so any block can serve any group and the pool needs no
 * split by kind.
 *
 * How layers are grouped (vLLM's `_get_kv_cache_groups_uniform_page_size`): layers of one kind
 * together; the group size is the smallest kind's layer count (or the largest's when it is within
 * 1.25x of it, to avoid padding); a kind of n layers makes ceil(n / size) groups, group i taking
 * its layers i, i + groups, i + 2 groups, ... A model with one kind is one group of every layer:
 * a block holds all layers, as before there were groups.
 *
 * Gemma 3 1B (26 layers: 4 global, 22 local): groups of 4 layers, one global group and six local
 * ones, pages of 4 layers. At 32,768 tokens with a 512-token window and blocks of 16 a sequence
 * holds 2048 global blocks and 6 x 33 local ones, 2,246 pages of 4 layers: 0.17x of 26 layers x 2,048.
 */

/**
 * What grouping needs of a model (a ModelConfig has it; kv/ sits below model/ and names only
 * these fields): its layers and which of them attend through a sliding window.
 */
export interface LayerAttention {
  readonly nLayers: number;
  /** `local[l]`: layer l attends to the last `size` positions. */
  readonly slidingWindow?: { readonly size: number; readonly local: readonly boolean[] };
}

/** How a group's layers attend: to every position, or to the last `window` positions (their own included). */
export type GroupAttention = { readonly kind: "full" } | { readonly kind: "sliding"; readonly window: number };

export interface KVCacheGroup {
  readonly attention: GroupAttention;
  /** The group's layers; layer layers[j] lives in slot j of the group's blocks. */
  readonly layers: readonly number[];
}

export class KVCacheGroups {
  /** Full-attention groups first, then sliding-window ones by window. */
  readonly groups: readonly KVCacheGroup[];
  /** Layers one block holds (the group size): every group's slots. */
  readonly numSlots: number;
  /** Per layer: its group, and its slot in that group's blocks. */
  readonly groupOf: readonly number[];
  readonly slotOf: readonly number[];

  private constructor(groups: KVCacheGroup[], nLayers: number) {
    this.groups = groups;
    this.numSlots = Math.max(...groups.map((g) => g.layers.length));
    const groupOf = new Array<number>(nLayers).fill(-1);
    const slotOf = new Array<number>(nLayers).fill(-1);
    groups.forEach((g, gi) => g.layers.forEach((l, j) => {
      groupOf[l] = gi;
      slotOf[l] = j;
    }));
    if (groupOf.some((g) => g < 0)) throw new Error("KVCacheGroups: a layer in no group");
    this.groupOf = groupOf;
    this.slotOf = slotOf;
  }

  /** The groups of a model whose layers attend as `attentionOf(l)` says. */
  static fromLayers(nLayers: number, attentionOf: (l: number) => GroupAttention): KVCacheGroups {
    const kinds = new Map<string, { attention: GroupAttention; layers: number[] }>();
    for (let l = 0; l < nLayers; l++) {
      const attention = attentionOf(l);
      const key = attention.kind === "full" ? "full" : `sliding ${attention.window}`;
      let kind = kinds.get(key);
      if (kind === undefined) {
        kind = { attention, layers: [] };
        kinds.set(key, kind);
      }
      kind.layers.push(l);
    }
    const ordered = [...kinds.values()].sort((a, b) => windowOf(a.attention) - windowOf(b.attention));
    const counts = ordered.map((k) => k.layers.length);
    const smallest = Math.min(...counts);
    const largest = Math.max(...counts);
    const size = largest < 1.25 * smallest ? largest : smallest;
    const groups: KVCacheGroup[] = [];
    for (const kind of ordered) {
      const numGroups = Math.ceil(kind.layers.length / size);
      for (let i = 0; i < numGroups; i++) {
        groups.push({ attention: kind.attention, layers: kind.layers.filter((_, j) => j % numGroups === i) });
      }
    }
    return new KVCacheGroups(groups, nLayers);
  }

  /** The groups of model `c`: sliding-window layers (config.slidingWindow) apart from the others. */
  static of(c: LayerAttention): KVCacheGroups {
    const w = c.slidingWindow;
    return KVCacheGroups.fromLayers(c.nLayers, (l) => (w !== undefined && w.local[l] === true ? { kind: "sliding", window: w.size } : { kind: "full" }));
  }

  /** The slots the layers [first, end) occupy, each once, ascending: what an arena holding those layers stores. */
  slotsOf(first: number, end: number): number[] {
    return [...new Set(this.slotOf.slice(first, end))].sort((a, b) => a - b);
  }

  /**
   * One sequence's block tables when the caller hands out blocks itself (a benchmark, a test rig):
   * `table` for the first group, the same shifted by `blocksPerGroup` for each next one, so that no
   * two groups share a block (layers of different groups share a slot's region, backend/wasm/kv-arena.ts).
   */
  disjointTables(table: readonly number[], blocksPerGroup: number): number[][] {
    return this.groups.map((_, g) => table.map((b) => b + g * blocksPerGroup));
  }

  /** More than one group: the layers attend differently. */
  get hybrid(): boolean {
    return this.groups.length > 1;
  }

  /**
   * Blocks one sequence holds at most while it computes `tokens` positions in steps of at most
   * `stepTokens` (vLLM's max_memory_usage): a full group one per blockSize positions; a sliding
   * one those of its window and of a step's new tokens (a chunk's first query still reads the
   * window before it), plus one for a window that straddles a block boundary.
   */
  blocksPerSequence(tokens: number, blockSize: number, stepTokens: number): number {
    const all = Math.ceil(tokens / blockSize);
    let blocks = 0;
    for (const g of this.groups) {
      blocks += g.attention.kind === "full" ? all : Math.min(all, Math.ceil((g.attention.window - 1 + stepTokens) / blockSize) + 1);
    }
    return blocks;
  }

  /** The most positions one sequence can reach in a pool of `numBlocks` (at most `limit`). */
  maxPositions(numBlocks: number, blockSize: number, stepTokens: number, limit: number): number {
    if (this.blocksPerSequence(limit, blockSize, stepTokens) <= numBlocks) return limit;
    let lo = 0;
    let hi = limit;
    while (lo < hi) {
      const mid = Math.ceil((lo + hi) / 2);
      if (this.blocksPerSequence(mid, blockSize, stepTokens) <= numBlocks) lo = mid;
      else hi = mid - 1;
    }
    return lo;
  }
}

/** Sort key: full attention (no window) first, then by window. */
function windowOf(a: GroupAttention): number {
  return a.kind === "full" ? 0 : a.window;
}
