/**
 * Parallel sampling (the OpenAI API's `n`): several samples of one prompt compute the prompt once.
 * The first sample is queued like any request, with seats reserved for the others
 * (Scheduler.add's extraSeats); once its prompt is computed, the others are forked from it: they
 * share its prompt's KV blocks (KVCacheManager.fork: full blocks shared, a partly filled last one
 * copied) and draw their first token from the same logits. From then on each is a sequence of its
 * own, finished and preempted alone (a request is aborted whole: all its samples at once).
 *
 * Invariants: a parent with samples pending here never drafts (the forks take its KV as computed);
 * a parent never finishes with samples still pending (they are forked in the step that computes
 * its prompt, before it samples; an abort ends them with it).
 */
import type { BlockCopy, KVCacheManager } from "../kv/kv-cache-manager.ts";
import type { ModelForward } from "../backend/model-forward.ts";
import type { Scheduler } from "./scheduler.ts";
import type { Sequence } from "./sequence.ts";

export class PendingForks {
  private readonly pending = new Map<Sequence, Sequence[]>();
  /** Samples forked sharing their parent's KV, and those that had to recompute their prompt for want of a block to copy into. */
  numShared = 0;
  numRecomputed = 0;

  constructor(
    private readonly kv: KVCacheManager,
    private readonly scheduler: Scheduler<Sequence>,
    private readonly model: ModelForward,
  ) {}

  /** `children` are to be forked from `parent` once its prompt is computed. */
  add(parent: Sequence, children: readonly Sequence[]): void {
    if (children.length > 0) this.pending.set(parent, [...children]);
  }

  /** Samples waiting to be forked, over every parent. */
  get numPending(): number {
    let n = 0;
    for (const children of this.pending.values()) n += children.length;
    return n;
  }

  /** Whether `parent` still has samples to fork. */
  has(parent: Sequence): boolean {
    return this.pending.has(parent);
  }

  /**
   * Forks the unfinished samples pending on `parent`, whose prompt was just computed: each gets
   * the parent's KV (its partly filled last block copied here, before the next step) and runs on;
   * without a free block for the copy it waits to recompute its prompt instead. Returns the
   * forked samples, to sample from the parent's logits ([] when none was pending).
   */
  fork(parent: Sequence): Sequence[] {
    const children = this.pending.get(parent);
    if (children === undefined) return [];
    this.pending.delete(parent);
    const copies: BlockCopy[] = [];
    const forked: Sequence[] = [];
    for (const child of children) {
      if (child.isFinished) {
        this.scheduler.dropFork(parent);
        continue;
      }
      const shared = this.kv.fork(parent, child);
      if (shared !== null) copies.push(...shared.copies);
      if (shared === null) this.numRecomputed++;
      else this.numShared++;
      child.numComputedTokens = shared === null ? 0 : parent.numComputedTokens;
      this.scheduler.startFork(parent, child, shared !== null);
      forked.push(child);
    }
    this.model.copyBlocks(copies);
    return forked;
  }

  /** `parent` was aborted with its samples before its prompt was computed: nothing is left to fork. */
  forget(parent: Sequence): void {
    this.pending.delete(parent);
  }
}
