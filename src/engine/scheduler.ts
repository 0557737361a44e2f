/**
 * Decides, each step, which tokens of which requests run: continuous batching with chunked prefill.
 *
 * A step has a token budget and a sequence cap. Running requests come first, in admission order,
 * each taking what it still needs (one token when decoding, the rest of its prompt in chunks
 * otherwise).
 *
 * Prefill while others decode (vLLM's chunked prefill, with its long_prefill_token_threshold made a
 * step's bound): a step's time grows with its tokens, and every request decoding in it waits that
 * long for its next token. So while any running request decodes (one sampled token to compute), the
 * prompt tokens of the step, every prefilling and newly admitted request together, are at most
 * maxPrefillWhileDecoding, and never so many that a decode token finds no budget; with nothing
 * decoding a prefill takes the whole budget, which keeps prompts as fast as before when nobody
 * waits. Outputs do not depend on how prompts are chunked (docs/architecture.md, batch invariance),
 * only step times do. When the KV pool cannot hold a running request's next tokens, the most recently
 * admitted running request is preempted: its blocks are freed (they stay in the prefix cache
 * until evicted) and it goes back to the head of the waiting queue. Then, if nothing was
 * preempted, waiting requests are admitted with their prefix-cache hits while budget, sequences
 * and blocks last, their prompts chunked to fit the budget.
 *
 * Admission keeps one free block per KV cache group for each seat, running request or sample
 * still to fork (each may cross into a new block of every group within the next blockSize steps;
 * a sliding-window group frees a block as it advances too, but not in the step it crosses), like
 * vLLM v0's watermark: without it, on a tight pool a newly admitted request computed a prefill
 * chunk, was preempted by the next step's decodes, was admitted again, and so on, recomputing its
 * chunk every other step. With no seat taken nothing is kept: a request that fits the pool is
 * admitted into an idle one (samples forked from it that then find no block recompute their
 * prompt), so an idle pool never refuses a request it can hold.
 *
 * Room to finish (no stream starves): given each request's final positions
 * (SchedulerOptions.finalPositions: its prompt and max_tokens, at most the context), admission also
 * keeps free blocks for every admitted request, and every sample still to fork, to reach its end.
 * Without it (vLLM's way) a pool that held the prompts but not the replies preempted streams part
 * way, and a preempted stream waited for the requests before it to finish: under 32 constrained
 * streams on a tight pool, gaps of hundreds of steps between one stream's tokens while the others
 * decoded, and the same stream preempted three or four times, as it came back as the latest
 * admitted. With it a request waits before its first token, in arrival order, and once admitted is
 * not preempted (as llama.cpp's slots and TGI's token budget): only drafts, which use spare blocks,
 * can still take a block an admitted request was to grow into, and preemption remains for that.
 *
 * Parallel sampling (`n` > 1): a request added with extra seats is admitted only when the batch
 * has room for it and for the samples that will be forked from it once its prompt is computed
 * (they share its prompt's KV, see KVCacheManager.fork); until then those seats stay reserved.
 *
 * Speculative decoding: a running request that has all its known tokens scheduled may also run
 * its draft tokens (req.draftTokenIds), but only with what the step leaves over after every running
 * request got its own tokens: the token budget and free KV blocks. A draft is shortened to fit and
 * never preempts anything, so drafting changes neither who runs nor who is preempted; it is
 * scheduled before waiting requests are admitted (decode before new prompts, as running requests
 * are), so it can delay an admission by a step. The engine rolls back the rejected part after the
 * step (numComputedTokens and the blocks that held only rejected positions).
 *
 * Order of admission: "fcfs" (arrival), or "lpm" (longest cached prefix first, as SGLang).
 *
 * A second tier (the disk): a request whose cached blocks the tier holds beyond what memory holds
 * waits in the queue in a state of its own while they are read (vLLM's WAITING_FOR_REMOTE_KVS):
 * admission passes over it, keeping its place, until the reads have landed, then adopts the blocks
 * into the pool (TierLoader.land) so its ordinary lookup finds them. Other requests run meanwhile.
 *
 * A shared prefix is computed once under either order, which is what SGLang's LPM achieves by
 * holding back a request that shares a not-yet-cached prefix with one in the batch. Here it holds
 * by construction: allocateSlots caches every block a step will fill at allocation, so a request
 * admitted later in the same step hits the blocks the earlier one computes in that step (the
 * forward pass writes a layer's K/V for the whole batch before any token attends), and a prompt
 * whose prefill must continue in a later step has taken the whole step budget, so nothing else is
 * admitted until its remaining blocks are allocated and cached too.
 */
import { spanChunkEnd } from "../model/batch.ts";
import type { KVCacheManager } from "../kv/kv-cache-manager.ts";
import type { Request } from "../kv/request.ts";
import type { TierLoad } from "../kv/tier-link.ts";

export type SchedulePolicy = "fcfs" | "lpm";

/** What admission keeps free: room for every admitted request to finish, or the watermark alone (see the class). */
export type AdmissionPolicy = "finish" | "watermark";

export interface SchedulerOptions<R extends Request = Request> {
  /** Tokens one step may compute, prefill and decode together. */
  maxNumBatchedTokens: number;
  /** Sequences one step may hold. */
  maxNumSeqs: number;
  policy: SchedulePolicy;
  /**
   * Prompt tokens (prefill chunks of every request together) a step may compute while a running
   * request decodes; absent: no bound but the token budget.
   */
  maxPrefillWhileDecoding?: number;
  /**
   * Positions a request holds when it ends (prompt plus max_tokens less the last sampled token, at
   * most the context); with it admission keeps room for every admitted request to get there (see
   * the class), without it only the watermark.
   */
  finalPositions?: (req: R) => number;
}

/** Reads a waiting request's blocks from a second tier before it is admitted. */
export interface TierLoader<R extends Request = Request> {
  /** Starts reading what the tier holds for `req` beyond the memory pool; null when nothing. */
  start(req: R): TierLoad | null;
  /**
   * Puts a settled load's blocks into the pool, where the request's lookup finds them as hits;
   * returns a further load when some reads failed and others can make up for them (the request
   * then waits for it too), else null.
   */
  land(req: R, load: TierLoad): TierLoad | null;
}

export interface ScheduledRequest<R extends Request = Request> {
  req: R;
  /**
   * Tokens to compute this step, starting at req.numComputedTokens: known tokens, then draft tokens
   * (req.draftTokenIds) for as many as go past req.numTokens.
   */
  numNewTokens: number;
}

export interface SchedulerOutput<R extends Request = Request> {
  scheduled: ScheduledRequest<R>[];
  /** Requests preempted this step (already back in the waiting queue). */
  preempted: R[];
  numScheduledTokens: number;
}

export class Scheduler<R extends Request = Request> {
  /** Not yet admitted, or preempted; the head is admitted first under FCFS. */
  readonly waiting: R[] = [];
  /** Admitted and holding KV blocks, in admission order. */
  readonly running: R[] = [];
  /** How many times a running request was preempted, over the scheduler's life. */
  numPreemptions = 0;
  /** Seats requests will need for the samples forked from them (parallel sampling), until they fork. */
  private readonly extraSeats = new Map<R, number>();
  /** Sum of extraSeats over the running requests: seats held for forks to come. */
  private numReserved = 0;
  /** Waiting requests whose blocks are being read from the second tier, until admission lands them. */
  private readonly loads = new Map<R, TierLoad>();

  constructor(
    private readonly kv: KVCacheManager,
    private readonly opts: SchedulerOptions<R>,
    /** The second tier's reads; null without one. */
    private readonly tier: TierLoader<R> | null = null,
  ) {}

  /**
   * Queue a request; `extraSeats` samples will be forked from it after its prefill (startFork).
   * With a second tier, the blocks it holds for the request start loading now.
   */
  add(req: R, extraSeats = 0): void {
    this.waiting.push(req);
    if (extraSeats > 0) this.extraSeats.set(req, extraSeats);
    const load = this.tier?.start(req) ?? null;
    if (load !== null) this.loads.set(req, load);
  }

  /** Whether a step could schedule anything now: a running request, or a waiting one not reading from the tier. */
  get hasRunnable(): boolean {
    return this.running.length > 0 || this.waiting.some((req) => !this.isLoading(req));
  }

  /** Resolves when the first of the tier reads in flight finishes (at once when none is). */
  async tierProgress(): Promise<void> {
    const pending = [...this.loads.values()].filter((load) => !load.settled);
    if (pending.length > 0) await Promise.race(pending.map((load) => load.done));
  }

  /**
   * A sample forked from running `parent` takes one of the parent's reserved seats: it runs on
   * (holdsBlocks: it holds the parent's KV, see KVCacheManager.fork), or, when the pool had no
   * block for it, waits at the head of the queue to recompute its prompt like a preempted request.
   */
  startFork(parent: R, child: R, holdsBlocks: boolean): void {
    this.releaseSeats(parent, 1);
    if (holdsBlocks) this.running.push(child);
    else this.waiting.unshift(child);
  }

  /** Give back one of running `parent`'s reserved seats (a sample that ended before it was forked). */
  dropFork(parent: R): void {
    this.releaseSeats(parent, 1);
  }

  /** Seats held, running plus reserved: at most maxNumSeqs. */
  get numSeats(): number {
    return this.running.length + this.numReserved;
  }

  get hasUnfinished(): boolean {
    return this.waiting.length > 0 || this.running.length > 0;
  }

  schedule(): SchedulerOutput<R> {
    const out: SchedulerOutput<R> = { scheduled: [], preempted: [], numScheduledTokens: 0 };
    let budget = this.opts.maxNumBatchedTokens;
    let prefillBudget = this.prefillBudget();

    // ---- running requests: decode tokens and the next chunks of prompts already admitted
    for (let i = 0; i < this.running.length && budget > 0; i++) {
      const req = this.running[i]!;
      const decoding = isDecoding(req);
      const numNew = wholeSpans(req, req.numComputedTokens, Math.min(req.numTokens - req.numComputedTokens, budget, decoding ? Infinity : prefillBudget), budget);
      if (numNew <= 0) continue;
      if (!this.allocateOrPreempt(req, numNew, out)) break;
      out.scheduled.push({ req, numNewTokens: numNew });
      budget -= numNew;
      if (!decoding) prefillBudget -= numNew;
    }

    // ---- draft tokens of running requests, with what is left
    budget = this.scheduleDrafts(budget, out);

    // ---- waiting requests, only when nothing had to be preempted
    if (out.preempted.length === 0) this.admit(Math.min(budget, prefillBudget), out);
    out.numScheduledTokens = out.scheduled.reduce((n, s) => n + s.numNewTokens, 0);
    return out;
  }

  /**
   * Prompt tokens this step may compute: the whole budget when no running request decodes, else
   * maxPrefillWhileDecoding, less what keeps a token for every decoding request.
   */
  private prefillBudget(): number {
    const budget = this.opts.maxNumBatchedTokens;
    const bound = this.opts.maxPrefillWhileDecoding;
    const decoding = this.running.reduce((n, req) => n + (isDecoding(req) ? 1 : 0), 0);
    if (bound === undefined || decoding === 0) return budget;
    return Math.max(0, Math.min(bound, budget - decoding));
  }

  /**
   * After the step ran: every scheduled request has computed its tokens. The engine appends
   * sampled tokens and finishes requests separately.
   */
  update(out: SchedulerOutput<R>): void {
    for (const { req, numNewTokens } of out.scheduled) req.numComputedTokens += numNewTokens;
  }

  /** Remove a finished (or aborted) request and free its blocks. */
  finish(req: R): void {
    const r = this.running.indexOf(req);
    if (r >= 0) {
      this.releaseSeats(req, Infinity);
      this.running.splice(r, 1);
    }
    this.extraSeats.delete(req);
    this.loads.delete(req);
    const w = this.waiting.indexOf(req);
    if (w >= 0) this.waiting.splice(w, 1);
    this.kv.free(req);
  }

  /** Allocate slots for req, preempting the latest admitted requests until it fits. False if req itself was preempted. */
  private allocateOrPreempt(req: R, numNew: number, out: SchedulerOutput<R>): boolean {
    while (this.kv.allocateSlots(req, numNew) === null) {
      const victim = this.running.pop()!;
      this.preempt(victim, out);
      if (victim === req) return false;
    }
    return true;
  }

  /**
   * Extend each scheduled request whose known tokens all run this step by as much of its draft as
   * the budget and the free blocks allow (never by preempting). Returns the budget left.
   */
  private scheduleDrafts(budget: number, out: SchedulerOutput<R>): number {
    for (const s of out.scheduled) {
      const req = s.req;
      if (budget <= 0) break;
      if (req.draftTokenIds.length === 0 || req.numComputedTokens + s.numNewTokens !== req.numTokens) continue;
      let n = Math.min(req.draftTokenIds.length, budget);
      while (n > 0 && this.kv.freeBlocksAfter(req, s.numNewTokens + n) < 0) n--;
      if (n === 0) continue;
      this.kv.allocateSlots(req, s.numNewTokens + n);
      s.numNewTokens += n;
      budget -= n;
    }
    return budget;
  }

  private preempt(victim: R, out: SchedulerOutput<R>): void {
    // Its reservation is taken again when it is admitted again.
    this.numReserved -= this.extraSeats.get(victim) ?? 0;
    this.kv.free(victim);
    victim.numComputedTokens = 0;
    victim.draftTokenIds = [];
    this.waiting.unshift(victim);
    out.preempted.push(victim);
    // A victim scheduled earlier in this step loses its slot in the batch.
    const s = out.scheduled.findIndex((x) => x.req === victim);
    if (s >= 0) out.scheduled.splice(s, 1);
    this.numPreemptions++;
  }

  private admit(budget: number, out: SchedulerOutput<R>): void {
    if (this.opts.policy === "lpm") this.sortByCachedPrefix();
    for (let w = 0; w < this.waiting.length && budget > 0; ) {
      const req = this.waiting[w]!;
      // Reading from the tier: it keeps its place and the requests behind it may go first.
      if (this.isLoading(req)) {
        w++;
        continue;
      }
      // A further load (reads around a failed one): it keeps its place and waits for that too.
      if (this.landLoad(req)) {
        w++;
        continue;
      }
      const extra = this.extraSeats.get(req) ?? 0;
      if (this.numSeats + 1 + extra > this.opts.maxNumSeqs) break;
      const hit = this.kv.getComputedBlocks(req);
      const numNew = wholeSpans(req, hit.numComputedTokens, Math.min(req.numTokens - hit.numComputedTokens, budget), budget);
      if (numNew <= 0) break;
      const free = this.kv.freeBlocksAfter(req, numNew, hit.numComputedTokens, hit.groups);
      if (free < this.reserveFor(extra) || free < this.roomToFinish(req, hit.numComputedTokens + numNew, extra)) break;
      this.kv.allocateSlots(req, numNew, hit.numComputedTokens, hit.groups);
      this.waiting.splice(w, 1);
      this.numReserved += extra;
      req.numComputedTokens = hit.numComputedTokens;
      this.running.push(req);
      out.scheduled.push({ req, numNewTokens: numNew });
      budget -= numNew;
    }
  }

  /**
   * Free blocks an admission must leave: one per KV cache group for every seat taken and each of
   * the `extra` samples to fork from the request (a fork takes a block of each group for the
   * prompt's partly filled last block); none while no seat is taken (see the class).
   */
  private reserveFor(extra: number): number {
    if (this.numSeats === 0) return 0;
    return (this.numSeats + extra) * this.kv.groups.groups.length;
  }

  /**
   * Free blocks that must stay after admitting `req` (holding `positions` then, with `extra` samples
   * to fork) for it and every admitted request to reach its final positions; 0 without
   * finalPositions, or while no seat is taken (a lone request always fits: checkFits).
   */
  private roomToFinish(req: R, positions: number, extra: number): number {
    const final = this.opts.finalPositions;
    if (final === undefined || this.numSeats === 0) return 0;
    let blocks = this.growth(final(req), positions) + extra * this.forkGrowth(req, final(req));
    for (const r of this.running) {
      blocks += Math.max(0, this.blocksFor(final(r)) - this.heldBlocks(r));
      blocks += (this.extraSeats.get(r) ?? 0) * this.forkGrowth(r, final(r));
    }
    return blocks;
  }

  /** Blocks (every KV cache group) a sequence at `positions` needs to reach `final`. */
  private growth(final: number, positions: number): number {
    return Math.max(0, this.blocksFor(final) - this.blocksFor(positions));
  }

  /** Blocks a sample forked from `req` takes to reach `final`: all but the prompt's full blocks, which it shares. */
  private forkGrowth(req: R, final: number): number {
    const shared = Math.floor(req.numPromptTokens / this.kv.blockSize) * this.kv.blockSize;
    return this.growth(final, shared);
  }

  private blocksFor(positions: number): number {
    return this.kv.groups.blocksPerSequence(positions, this.kv.blockSize, this.opts.maxNumBatchedTokens);
  }

  /** Blocks `req` holds now, over every KV cache group. */
  private heldBlocks(req: R): number {
    let held = 0;
    for (let g = 0; g < this.kv.groups.groups.length; g++) for (const block of this.kv.getBlocks(req, g)) if (block !== null) held++;
    return held;
  }

  /** Whether `req` waits for tier reads still in flight. */
  private isLoading(req: R): boolean {
    const load = this.loads.get(req);
    return load !== undefined && !load.settled;
  }

  /**
   * Adopts the blocks of `req`'s settled tier load into the pool (nothing when it has none); true
   * when that started a further load, which `req` now waits for.
   */
  private landLoad(req: R): boolean {
    const load = this.loads.get(req);
    if (load === undefined) return false;
    this.loads.delete(req);
    const next = this.tier!.land(req, load);
    if (next === null) return false;
    this.loads.set(req, next);
    return true;
  }

  /** Release up to `count` of running `req`'s reserved seats. */
  private releaseSeats(req: R, count: number): void {
    const held = this.extraSeats.get(req) ?? 0;
    const n = Math.min(held, count);
    if (n === 0) return;
    this.numReserved -= n;
    if (held === n) this.extraSeats.delete(req);
    else this.extraSeats.set(req, held - n);
  }

  /** LPM: most cached tokens first, arrival order among equals (the sort is stable). */
  private sortByCachedPrefix(): void {
    const cached = new Map<R, number>();
    for (const req of this.waiting) cached.set(req, this.kv.peekCachedTokens(req));
    this.waiting.sort((a, b) => cached.get(b)! - cached.get(a)!);
  }
}

/**
 * Whether a running request decodes: its prompt is computed and one sampled token is left to
 * compute. A request catching up (a prompt's chunks, or a preempted request recomputing its prompt
 * and earlier output) prefills.
 */
function isDecoding(req: Request): boolean {
  return req.numComputedTokens >= req.numPromptTokens && req.numTokens - req.numComputedTokens === 1;
}

/**
 * `numNew` tokens of `req` from `start`, cut so that no step splits a span whose tokens attend to
 * each other (an image in Gemma 3, StepBatch): before it, or through its end within `budget`.
 * Unchanged for a request without such spans.
 */
function wholeSpans(req: Request, start: number, numNew: number, budget: number): number {
  if (req.mmItems.length === 0 || numNew <= 0) return numNew;
  return spanChunkEnd(start, start + numNew, req.mmItems, budget, false) - start;
}
