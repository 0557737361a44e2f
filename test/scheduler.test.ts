/**
 * The Scheduler with a real KVCacheManager and hand-made Requests, no model. A small harness plays
 * the engine's part after each step: scheduler.update(out), then one sampled token appended to
 * every request whose scheduled tokens reached its end, and scheduler.finish(req) for those that
 * reached their max_tokens.
 */
import { describe, expect, test } from "bun:test";
import { Request } from "../src/kv/request.ts";
import { Scheduler, type SchedulePolicy, type SchedulerOutput } from "../src/engine/scheduler.ts";
import { KVCacheManager } from "../src/kv/kv-cache-manager.ts";
import { KVCacheGroups } from "../src/kv/kv-groups.ts";

const range = (start: number, count: number): number[] => Array.from({ length: count }, (_, i) => start + i);

interface HarnessOptions {
  numBlocks: number;
  blockSize: number;
  maxNumBatchedTokens: number;
  maxNumSeqs: number;
  policy?: SchedulePolicy;
  enableCaching?: boolean;
  maxPrefillWhileDecoding?: number;
  /** The model's KV cache groups; default one (every layer in every block). */
  groups?: KVCacheGroups;
  /** Give the scheduler each request's final positions (prompt + max tokens - 1), as the engine does. */
  roomToFinish?: boolean;
}

/** What one step scheduled, read before update(): where each request's tokens start and how many. */
interface StepRecord {
  scheduled: { id: string; start: number; n: number }[];
  preempted: string[];
  numScheduledTokens: number;
}

class Harness {
  readonly kv: KVCacheManager;
  readonly scheduler: Scheduler<Request>;
  readonly steps: StepRecord[] = [];
  readonly finished: Request[] = [];
  private readonly maxTokens = new Map<Request, number>();

  constructor(readonly opts: HarnessOptions) {
    this.kv = new KVCacheManager({
      numBlocks: opts.numBlocks, blockSize: opts.blockSize, enableCaching: opts.enableCaching ?? true, ...(opts.groups === undefined ? {} : { groups: opts.groups }),
    });
    this.scheduler = new Scheduler<Request>(this.kv, {
      maxNumBatchedTokens: opts.maxNumBatchedTokens,
      maxNumSeqs: opts.maxNumSeqs,
      policy: opts.policy ?? "fcfs",
      ...(opts.maxPrefillWhileDecoding === undefined ? {} : { maxPrefillWhileDecoding: opts.maxPrefillWhileDecoding }),
      ...(opts.roomToFinish === true ? { finalPositions: (req: Request) => req.numPromptTokens + this.maxTokens.get(req)! - 1 } : {}),
    });
  }

  /** Queues a request; `extraSeats` samples to fork from it keep their seats (the harness never forks them). */
  add(id: string, prompt: number[], maxTokens: number, extraSeats = 0): Request {
    const req = new Request({ id, promptTokenIds: prompt });
    this.maxTokens.set(req, maxTokens);
    this.scheduler.add(req, extraSeats);
    return req;
  }

  /** One engine step; checks the invariants every step must keep. */
  step(): StepRecord {
    const out: SchedulerOutput<Request> = this.scheduler.schedule();
    const record: StepRecord = {
      scheduled: out.scheduled.map(({ req, numNewTokens }) => ({ id: req.id, start: req.numComputedTokens, n: numNewTokens })),
      preempted: out.preempted.map((r) => r.id),
      numScheduledTokens: out.numScheduledTokens,
    };
    this.checkStep(out);
    this.scheduler.update(out);
    for (const { req } of out.scheduled) {
      if (req.numComputedTokens !== req.numTokens) continue; // a prompt chunk that is not the last: no logits
      req.appendOutputTokenIds([this.sample(req)]);
      if (req.outputTokenIds.length >= this.maxTokens.get(req)!) {
        this.scheduler.finish(req);
        this.finished.push(req);
      }
    }
    this.steps.push(record);
    return record;
  }

  /** Steps until nothing is left (fails after `limit` steps). */
  runToEnd(limit = 10_000): void {
    for (let i = 0; this.scheduler.hasUnfinished; i++) {
      if (i >= limit) throw new Error(`not done after ${limit} steps`);
      this.step();
    }
  }

  /** The "sampled" token: a function of the request's tokens so far, so equal histories continue equally. */
  private sample(req: Request): number {
    const t = req.allTokenIds;
    return 1000 + ((t[t.length - 1]! * 31 + t.length) % 97);
  }

  private checkStep(out: SchedulerOutput<Request>): void {
    const { maxNumBatchedTokens, maxNumSeqs, blockSize } = this.opts;
    const total = out.scheduled.reduce((n, s) => n + s.numNewTokens, 0);
    expect(out.numScheduledTokens).toBe(total);
    expect(total).toBeLessThanOrEqual(maxNumBatchedTokens);
    expect(this.scheduler.running.length).toBeLessThanOrEqual(maxNumSeqs);
    expect(new Set(out.scheduled.map((s) => s.req)).size).toBe(out.scheduled.length);
    for (const { req, numNewTokens } of out.scheduled) {
      expect(numNewTokens).toBeGreaterThan(0);
      expect(req.numComputedTokens + numNewTokens).toBeLessThanOrEqual(req.numTokens);
      expect(this.scheduler.running).toContain(req);
      // the block table covers the tokens computed this step
      expect(this.kv.getBlockIds(req).length * blockSize).toBeGreaterThanOrEqual(req.numComputedTokens + numNewTokens);
    }
    for (const req of out.preempted) {
      expect(this.scheduler.waiting).toContain(req);
      expect(req.numComputedTokens).toBe(0);
      expect(this.kv.getBlockIds(req)).toEqual([]);
    }
    // a block is held by every request whose table (of any group) lists it, and by no one else
    const holders = new Map<number, number>();
    for (const req of this.scheduler.running) {
      for (let g = 0; g < this.kv.groups.groups.length; g++) {
        for (const block of this.kv.getBlocks(req, g)) if (block !== null) holders.set(block.blockId, (holders.get(block.blockId) ?? 0) + 1);
      }
    }
    for (let id = 0; id < this.kv.numBlocks; id++) expect(this.kv.block(id).refCnt).toBe(holders.get(id) ?? 0);
    expect(this.kv.numFreeBlocks).toBe(this.kv.numBlocks - holders.size);
  }
}

/** n, n+1, … ids for request i's prompt, so that prompts share nothing unless built to. */
const prompt = (i: number, len: number): number[] => range(100 * (i + 1), len);

describe("token budget and step composition", () => {
  test("every step stays within the token budget, chunks are contiguous, every request completes", () => {
    const h = new Harness({ numBlocks: 200, blockSize: 4, maxNumBatchedTokens: 7, maxNumSeqs: 5 });
    const lengths = [3, 12, 1, 7, 20, 5, 9, 2, 15, 6, 4, 11];
    lengths.forEach((len, i) => h.add(`r${i}`, prompt(i, len), 1 + (i % 4) * 3));
    const computed = new Map<string, number>();
    h.runToEnd();
    for (const step of h.steps) {
      expect(step.numScheduledTokens).toBeLessThanOrEqual(7);
      expect(step.numScheduledTokens).toBeGreaterThan(0);
      for (const s of step.scheduled) {
        // each request's tokens are computed in order, each exactly once (no preemption here)
        expect(s.start).toBe(computed.get(s.id) ?? 0);
        computed.set(s.id, s.start + s.n);
      }
    }
    expect(h.finished.map((r) => r.id).sort()).toEqual(lengths.map((_, i) => `r${i}`).sort());
    for (const req of h.finished) {
      const i = Number(req.id.slice(1));
      expect(req.outputTokenIds.length).toBe(1 + (i % 4) * 3);
      // the last sampled token is never computed
      expect(computed.get(req.id)).toBe(req.numTokens - 1);
    }
    expect(h.scheduler.numPreemptions).toBe(0);
    expect(h.kv.numUsedBlocks).toBe(0);
    // the budget is used: most steps are full while enough work is waiting
    expect(h.steps.filter((s) => s.numScheduledTokens === 7).length).toBeGreaterThan(h.steps.length / 3);
  });

  test("running requests get their decode token first; waiting requests get what is left", () => {
    const h = new Harness({ numBlocks: 100, blockSize: 4, maxNumBatchedTokens: 8, maxNumSeqs: 8 });
    h.add("A", prompt(0, 3), 10);
    h.add("B", prompt(1, 3), 10);
    h.add("C", prompt(2, 10), 10);
    // step 1: A and B whole, C's first 2 tokens
    expect(h.step().scheduled).toEqual([
      { id: "A", start: 0, n: 3 },
      { id: "B", start: 0, n: 3 },
      { id: "C", start: 0, n: 2 },
    ]);
    h.add("D", prompt(3, 3), 10);
    // step 2: A and B decode first, C's prompt continues with the rest; D waits (no budget left)
    expect(h.step().scheduled).toEqual([
      { id: "A", start: 3, n: 1 },
      { id: "B", start: 3, n: 1 },
      { id: "C", start: 2, n: 6 },
    ]);
    // step 3: decodes, C's last 2 prompt tokens, then D is admitted with the 3 tokens left
    expect(h.step().scheduled).toEqual([
      { id: "A", start: 4, n: 1 },
      { id: "B", start: 4, n: 1 },
      { id: "C", start: 8, n: 2 },
      { id: "D", start: 0, n: 3 },
    ]);
    // step 4: four decodes
    expect(h.step().scheduled).toEqual([
      { id: "A", start: 5, n: 1 },
      { id: "B", start: 5, n: 1 },
      { id: "C", start: 10, n: 1 },
      { id: "D", start: 3, n: 1 },
    ]);
  });

  test("a budget smaller than the running decodes serves them in admission order", () => {
    const h = new Harness({ numBlocks: 100, blockSize: 4, maxNumBatchedTokens: 2, maxNumSeqs: 8 });
    h.add("A", prompt(0, 1), 3);
    h.add("B", prompt(1, 1), 3);
    h.add("C", prompt(2, 1), 3);
    expect(h.step().scheduled.map((s) => s.id)).toEqual(["A", "B"]);
    // A and B decode, C is not admitted until the budget allows
    expect(h.step().scheduled.map((s) => s.id)).toEqual(["A", "B"]);
    expect(h.scheduler.waiting.map((r) => r.id)).toEqual(["C"]);
    h.runToEnd();
    expect(h.finished.map((r) => r.id)).toEqual(["A", "B", "C"]);
  });

  test("a long prompt is prefilled in chunks over several steps, and samples only after the last", () => {
    const h = new Harness({ numBlocks: 100, blockSize: 4, maxNumBatchedTokens: 16, maxNumSeqs: 4 });
    const a = h.add("A", prompt(0, 50), 3);
    const chunks: { start: number; n: number }[] = [];
    for (let i = 0; i < 3; i++) {
      const step = h.step();
      expect(step.scheduled.length).toBe(1);
      chunks.push({ start: step.scheduled[0]!.start, n: step.scheduled[0]!.n });
      expect(a.outputTokenIds.length).toBe(0);
      expect(a.numComputedTokens).toBe(16 * (i + 1));
      // blocks are allocated as the chunks go, not all at admission
      expect(h.kv.getBlockIds(a).length).toBe(4 * (i + 1));
    }
    const b = h.add("B", prompt(1, 5), 2);
    const last = h.step();
    // A's last 2 prompt tokens, then B with 5: both sample
    expect(last.scheduled).toEqual([
      { id: "A", start: 48, n: 2 },
      { id: "B", start: 0, n: 5 },
    ]);
    expect(chunks).toEqual([
      { start: 0, n: 16 },
      { start: 16, n: 16 },
      { start: 32, n: 16 },
    ]);
    expect(a.outputTokenIds.length).toBe(1);
    expect(b.outputTokenIds.length).toBe(1);
    expect(h.step().scheduled).toEqual([
      { id: "A", start: 50, n: 1 },
      { id: "B", start: 5, n: 1 },
    ]);
    h.runToEnd();
    expect(h.finished.map((r) => r.id)).toEqual(["B", "A"]);
  });

  test("maxNumSeqs caps the running requests; the next is admitted when one finishes", () => {
    const h = new Harness({ numBlocks: 100, blockSize: 4, maxNumBatchedTokens: 64, maxNumSeqs: 2 });
    h.add("A", prompt(0, 4), 2);
    h.add("B", prompt(1, 4), 4);
    h.add("C", prompt(2, 4), 2);
    h.add("D", prompt(3, 4), 1);
    expect(h.step().scheduled.map((s) => s.id)).toEqual(["A", "B"]);
    expect(h.scheduler.waiting.map((r) => r.id)).toEqual(["C", "D"]);
    // A finishes in step 2 (its second token); C only comes in the step after
    expect(h.step().scheduled.map((s) => s.id)).toEqual(["A", "B"]);
    expect(h.finished.map((r) => r.id)).toEqual(["A"]);
    expect(h.step().scheduled.map((s) => s.id)).toEqual(["B", "C"]);
    h.runToEnd();
    expect(h.finished.map((r) => r.id)).toEqual(["A", "B", "C", "D"]);
    expect(Math.max(...h.steps.map((s) => s.scheduled.length))).toBe(2);
  });
});

describe("preemption", () => {
  /**
   * Block size 4, 5 blocks. A (8-token prompt) and B (6) take 2 blocks each in step 1. A's 9th
   * token takes the last free block in step 2; in step 4 B's 9th token finds no block: B, the
   * most recently admitted, is preempted (its 2 full blocks stay cached in the free queue).
   */
  function preemptionScenario(aMaxTokens: number) {
    const h = new Harness({ numBlocks: 5, blockSize: 4, maxNumBatchedTokens: 64, maxNumSeqs: 4 });
    const a = h.add("A", range(1, 8), aMaxTokens);
    const b = h.add("B", range(11, 6), 12); // 6 + 12 - 1 positions: fits the 5-block pool alone
    expect(h.step().scheduled).toEqual([
      { id: "A", start: 0, n: 8 },
      { id: "B", start: 0, n: 6 },
    ]);
    expect(h.kv.numFreeBlocks).toBe(1);
    h.step(); // A: a third block; B: its 7th token in its second block
    expect(h.kv.numFreeBlocks).toBe(0);
    h.step(); // B's second block is now full, so cached
    const bBlocks = h.kv.getBlockIds(b);
    expect(bBlocks.length).toBe(2);
    const s4 = h.step();
    expect(s4.preempted).toEqual(["B"]);
    expect(s4.scheduled).toEqual([{ id: "A", start: 10, n: 1 }]);
    expect(h.scheduler.numPreemptions).toBe(1);
    expect(h.scheduler.running).not.toContain(b);
    expect(h.scheduler.waiting).toEqual([b]);
    expect(h.scheduler.running.length + h.finished.length).toBe(1); // A, running or just finished
    expect(b.numComputedTokens).toBe(0);
    expect(b.outputTokenIds.length).toBe(3); // generated tokens are kept: B resumes, it does not restart
    expect(b.numCachedTokens).toBe(0);
    // its blocks are free but still cached
    for (const id of bBlocks) {
      expect(h.kv.block(id).refCnt).toBe(0);
      expect(h.kv.block(id).blockHash).not.toBeNull();
    }
    return { h, a, b, bBlocks };
  }

  test("the most recently admitted request is preempted and resumes hitting all its cached blocks", () => {
    const { h, b, bBlocks } = preemptionScenario(4); // A finishes in step 4
    expect(h.finished.map((r) => r.id)).toEqual(["A"]);
    const s5 = h.step();
    // B comes back: its 9 tokens (6 prompt + 3 generated) hit 2 full blocks, the 9th is computed
    expect(s5.scheduled).toEqual([{ id: "B", start: 8, n: 1 }]);
    expect(h.kv.getBlockIds(b).slice(0, 2)).toEqual(bBlocks);
    expect(b.numCachedTokens).toBe(0); // cached_tokens keeps the first admission's count
    expect(b.outputTokenIds.length).toBe(4);
    expect(h.kv.stats.evictions).toBe(0);
    h.runToEnd();
    expect(b.outputTokenIds.length).toBe(12);
  });

  test("a preempted request whose blocks were partly evicted recomputes from the first evicted one", () => {
    const { h, a, b, bBlocks } = preemptionScenario(7); // A runs on past the preemption
    // step 5: A fills its third block; B cannot come back (it needs a new block and none is free
    // besides its own cached ones)
    const s5 = h.step();
    expect(s5.scheduled.map((s) => s.id)).toEqual(["A"]);
    expect(h.scheduler.waiting).toEqual([b]);
    // step 6: A needs a fourth block: the free queue's head is B's second block (freed tail
    // first), which is evicted
    const s6 = h.step();
    expect(s6.scheduled.map((s) => s.id)).toEqual(["A"]);
    expect(h.kv.stats.evictions).toBe(1);
    expect(h.kv.getBlockIds(a)).toContain(bBlocks[1]!);
    expect(h.kv.peekCachedTokens(b)).toBe(4);
    // step 7: A's last token; B still does not fit while A holds its blocks
    expect(h.step().scheduled.map((s) => s.id)).toEqual(["A"]);
    expect(h.finished).toEqual([a]);
    // step 8: B comes back with only its first block
    const s8 = h.step();
    expect(s8.scheduled).toEqual([{ id: "B", start: 4, n: 5 }]);
    expect(h.kv.getBlockIds(b)[0]).toBe(bBlocks[0]!);
    h.runToEnd();
    expect(b.outputTokenIds.length).toBe(12);
    expect(h.scheduler.numPreemptions).toBe(1);
  });

  test("without prefix caching a preempted request recomputes everything", () => {
    const h = new Harness({ numBlocks: 5, blockSize: 4, maxNumBatchedTokens: 64, maxNumSeqs: 4, enableCaching: false });
    h.add("A", range(1, 8), 4);
    const b = h.add("B", range(11, 6), 6);
    for (let i = 0; i < 4; i++) h.step();
    expect(h.scheduler.numPreemptions).toBe(1);
    expect(h.step().scheduled).toEqual([{ id: "B", start: 0, n: 9 }]);
    h.runToEnd();
    expect(b.outputTokenIds.length).toBe(6);
  });

  test("admission keeps a free block per running request; the latest admitted is the victim, nothing is admitted that step", () => {
    // 8 blocks of 2 tokens: four 4-token prompts take 2 blocks each; the first decode step needs
    // a third block for each
    const h = new Harness({ numBlocks: 8, blockSize: 2, maxNumBatchedTokens: 64, maxNumSeqs: 8 });
    const reqs = ["A", "B", "C", "D"].map((id, i) => h.add(id, prompt(i, 4), 3));
    h.add("E", prompt(4, 1), 1);
    // A (6 free after), B (4 free, 1 running), C (2 free, 2 running); D would leave 0 free for 3 running
    expect(h.step().scheduled.map((s) => s.id)).toEqual(["A", "B", "C"]);
    expect(h.kv.numFreeBlocks).toBe(2);
    expect(h.scheduler.waiting.map((r) => r.id)).toEqual(["D", "E"]);
    const s2 = h.step();
    // A and B take the two free blocks; C needs one: C itself, the latest admitted, goes.
    // Nothing is admitted in a step that preempted, though C's two blocks are free again
    expect(s2.preempted).toEqual(["C"]);
    expect(s2.scheduled.map((s) => s.id)).toEqual(["A", "B"]);
    expect(h.scheduler.waiting.map((r) => r.id)).toEqual(["C", "D", "E"]);
    expect(h.scheduler.running).toEqual([reqs[0]!, reqs[1]!]);
    h.runToEnd();
    expect(h.finished.map((r) => r.id).sort()).toEqual(["A", "B", "C", "D", "E"]);
    for (const r of reqs) expect(r.outputTokenIds.length).toBe(3);
  });

  test("with several KV cache groups a free block of each group is kept per running request: no admission the next step would undo", () => {
    // rnd-gemma3's groups (one full, three windowed) with a window of 8 and blocks of 2: a 4-token
    // prompt takes 2 blocks in each group (8), its first decode a third in each (4 more).
    const groups = KVCacheGroups.fromLayers(4, (l) => (l === 2 ? { kind: "full" } : { kind: "sliding", window: 8 }));
    const h = new Harness({ numBlocks: 18, blockSize: 2, maxNumBatchedTokens: 64, maxNumSeqs: 8, groups });
    h.add("A", prompt(0, 4), 3);
    h.add("B", prompt(1, 4), 3);
    // A leaves 10 free; B would leave 2, fewer than A's next block in each of 4 groups (one per
    // group was kept before: B ran its prompt, and A's first decode preempted it).
    expect(h.step().scheduled.map((s) => s.id)).toEqual(["A"]);
    expect(h.kv.numFreeBlocks).toBe(10);
    expect(h.step().scheduled.map((s) => s.id)).toEqual(["A"]);
    expect(h.kv.numFreeBlocks).toBe(6);
    h.runToEnd();
    expect(h.steps.flatMap((s) => s.preempted)).toEqual([]);
    expect(h.finished.map((r) => r.id)).toEqual(["A", "B"]);
  });

  test("with nothing running a request that fits is admitted, though the samples to fork from it find no block", () => {
    // 4 blocks of 2 tokens, a 7-token prompt: the pool. Keeping a block for its fork kept it waiting for ever.
    const h = new Harness({ numBlocks: 4, blockSize: 2, maxNumBatchedTokens: 64, maxNumSeqs: 8 });
    h.add("A", prompt(0, 7), 2, 1);
    expect(h.step().scheduled.map((s) => s.id)).toEqual(["A"]);
    expect(h.kv.numFreeBlocks).toBe(0);
  });

  test("a long mixed workload on a small pool completes with every token computed in order", () => {
    const h = new Harness({ numBlocks: 12, blockSize: 4, maxNumBatchedTokens: 10, maxNumSeqs: 6 });
    const shared = range(500, 9);
    for (let i = 0; i < 16; i++) {
      const p = i % 3 === 0 ? [...shared, ...prompt(i, i % 5)] : prompt(i, 2 + ((i * 7) % 13));
      h.add(`r${i}`, p, 1 + ((i * 5) % 17));
    }
    h.runToEnd();
    expect(h.finished.length).toBe(16);
    expect(h.scheduler.numPreemptions).toBeGreaterThan(0);
    expect(h.kv.numUsedBlocks).toBe(0);
    // chunks of one request are contiguous, restarting at a cache hit after each preemption
    const computed = new Map<string, number>();
    for (const step of h.steps) {
      for (const id of step.preempted) computed.delete(id);
      for (const s of step.scheduled) {
        const prev = computed.get(s.id);
        if (prev !== undefined) expect(s.start).toBe(prev);
        else expect(s.start % 4).toBe(0);
        computed.set(s.id, s.start + s.n);
      }
    }
  });
});

describe("longest-prefix-match scheduling", () => {
  /** Caches W's 16-token prompt (4 blocks of 4), then queues X (no hit), Y (4 cached) and Z (12 cached). */
  function warmCache(policy: SchedulePolicy, maxNumSeqs: number) {
    const h = new Harness({ numBlocks: 64, blockSize: 4, maxNumBatchedTokens: 64, maxNumSeqs, policy });
    h.add("W", range(1, 16), 1);
    h.runToEnd();
    expect(h.kv.numCachedBlocks).toBe(4);
    h.add("X", range(50, 10), 2);
    h.add("Y", [...range(1, 4), ...range(60, 6)], 2);
    h.add("Z", [...range(1, 12), 70, 71], 2);
    return h;
  }

  test("LPM admits the longest cached prefix first; FCFS in arrival order", () => {
    const lpm = warmCache("lpm", 8).step();
    expect(lpm.scheduled).toEqual([
      { id: "Z", start: 12, n: 2 },
      { id: "Y", start: 4, n: 6 },
      { id: "X", start: 0, n: 10 },
    ]);
    const fcfs = warmCache("fcfs", 8).step();
    expect(fcfs.scheduled).toEqual([
      { id: "X", start: 0, n: 10 },
      { id: "Y", start: 4, n: 6 },
      { id: "Z", start: 12, n: 2 },
    ]);
  });

  test("LPM with one sequence at a time runs them longest prefix first", () => {
    const h = warmCache("lpm", 1);
    h.runToEnd();
    expect(h.finished.map((r) => r.id)).toEqual(["W", "Z", "Y", "X"]);
  });

  test("equal cached prefixes keep arrival order", () => {
    const h = new Harness({ numBlocks: 64, blockSize: 4, maxNumBatchedTokens: 64, maxNumSeqs: 8, policy: "lpm" });
    for (const id of ["P", "Q", "R"]) h.add(id, [...range(1, 3), id.charCodeAt(0)], 1);
    expect(h.step().scheduled.map((s) => s.id)).toEqual(["P", "Q", "R"]);
  });

  for (const policy of ["lpm", "fcfs"] as const) {
    test(`${policy}: a request sharing the prefix of one being prefilled in chunks waits, then hits its blocks`, () => {
      // budget 10, blocks of 4: A's 24-token prompt takes 3 steps; B shares A's first 18 tokens
      const h = new Harness({ numBlocks: 64, blockSize: 4, maxNumBatchedTokens: 10, maxNumSeqs: 8, policy });
      const shared = range(1, 18);
      const a = h.add("A", [...shared, ...range(40, 6)], 3);
      const b = h.add("B", [...shared, ...range(80, 4)], 3);
      expect(h.step().scheduled).toEqual([{ id: "A", start: 0, n: 10 }]);
      // B's prefix is not cached yet (A's blocks 2… are not even allocated): B is not admitted
      expect(h.kv.peekCachedTokens(b)).toBe(8);
      expect(h.step().scheduled).toEqual([{ id: "A", start: 10, n: 10 }]);
      expect(h.scheduler.waiting).toEqual([b]);
      // A's last chunk; B then hits the 4 full blocks the two prompts share (16 of 18 tokens)
      expect(h.step().scheduled).toEqual([
        { id: "A", start: 20, n: 4 },
        { id: "B", start: 16, n: 6 },
      ]);
      expect(b.numCachedTokens).toBe(16);
      expect(h.kv.getBlockIds(b).slice(0, 4)).toEqual(h.kv.getBlockIds(a).slice(0, 4));
      h.runToEnd();
      expect(h.finished.map((r) => r.id).sort()).toEqual(["A", "B"]);
    });
  }

  test("LPM: a request whose prefix another admitted request computes in the same step hits it in that step", () => {
    const h = new Harness({ numBlocks: 64, blockSize: 4, maxNumBatchedTokens: 64, maxNumSeqs: 8, policy: "lpm" });
    const shared = range(1, 13);
    h.add("A", [...shared, 90], 2);
    const b = h.add("B", [...shared, 91, 92], 2);
    // A's blocks are cached as soon as they are allocated, so B, admitted after it, hits 3 of them
    expect(h.step().scheduled).toEqual([
      { id: "A", start: 0, n: 14 },
      { id: "B", start: 12, n: 3 },
    ]);
    expect(b.numCachedTokens).toBe(12);
  });
});

describe("prefill while others decode (maxPrefillWhileDecoding)", () => {
  test("with nothing decoding a prompt takes the whole budget; once a request decodes, prompts get at most the bound a step", () => {
    const h = new Harness({ numBlocks: 100, blockSize: 4, maxNumBatchedTokens: 64, maxNumSeqs: 8, maxPrefillWhileDecoding: 8 });
    h.add("A", prompt(0, 20), 10);
    expect(h.step().scheduled).toEqual([{ id: "A", start: 0, n: 20 }]);
    h.add("B", prompt(1, 30), 10);
    // A decodes: B's 30 prompt tokens go 8 a step, A's token first in each
    for (const start of [0, 8, 16]) expect(h.step().scheduled).toEqual([{ id: "A", start: 20 + start / 8, n: 1 }, { id: "B", start, n: 8 }]);
    expect(h.step().scheduled).toEqual([{ id: "A", start: 23, n: 1 }, { id: "B", start: 24, n: 6 }]);
    // B's prompt is computed: two decodes
    expect(h.step().scheduled).toEqual([{ id: "A", start: 24, n: 1 }, { id: "B", start: 30, n: 1 }]);
  });

  test("the bound is for all prompts of a step together: a running prefill, then admissions with what is left", () => {
    const h = new Harness({ numBlocks: 100, blockSize: 4, maxNumBatchedTokens: 64, maxNumSeqs: 8, maxPrefillWhileDecoding: 8 });
    h.add("A", prompt(0, 4), 10);
    h.step();
    h.add("B", prompt(1, 12), 10);
    h.add("C", prompt(2, 6), 10);
    h.add("D", prompt(3, 5), 10);
    expect(h.step().scheduled).toEqual([{ id: "A", start: 4, n: 1 }, { id: "B", start: 0, n: 8 }]);
    expect(h.scheduler.waiting.map((r) => r.id)).toEqual(["C", "D"]);
    // B's last 4, then C admitted with the 4 left
    expect(h.step().scheduled).toEqual([{ id: "A", start: 5, n: 1 }, { id: "B", start: 8, n: 4 }, { id: "C", start: 0, n: 4 }]);
    // B decodes now; C's last 2, D's first 5 (with one to spare: 7 of 8)
    expect(h.step().scheduled).toEqual([{ id: "A", start: 6, n: 1 }, { id: "B", start: 12, n: 1 }, { id: "C", start: 4, n: 2 }, { id: "D", start: 0, n: 5 }]);
    expect(h.step().scheduled).toEqual([{ id: "A", start: 7, n: 1 }, { id: "B", start: 13, n: 1 }, { id: "C", start: 6, n: 1 }, { id: "D", start: 5, n: 1 }]);
  });

  test("every decode keeps its token: the prompts get the bound or what the decodes leave of the budget, whichever is less", () => {
    const h = new Harness({ numBlocks: 100, blockSize: 4, maxNumBatchedTokens: 10, maxNumSeqs: 8, maxPrefillWhileDecoding: 8 });
    for (const id of ["A", "B", "C", "D", "E"]) h.add(id, prompt(id.charCodeAt(0) - 65, 2), 20);
    expect(h.step().scheduled.map((s) => s.n)).toEqual([2, 2, 2, 2, 2]);
    h.add("F", prompt(9, 20), 5);
    const step = h.step();
    expect(step.scheduled).toEqual([
      { id: "A", start: 2, n: 1 }, { id: "B", start: 2, n: 1 }, { id: "C", start: 2, n: 1 }, { id: "D", start: 2, n: 1 }, { id: "E", start: 2, n: 1 },
      { id: "F", start: 0, n: 5 },
    ]);
  });

  test("a preempted request recomputing its prompt and earlier output is bounded as a prompt", () => {
    // 9 blocks of 4, no prefix cache: A decodes long, C and B grow until B (the latest admitted) is
    // preempted; when C finishes, B recomputes its prompt and output while A still decodes.
    const h = new Harness({ numBlocks: 9, blockSize: 4, maxNumBatchedTokens: 64, maxNumSeqs: 8, maxPrefillWhileDecoding: 3, enableCaching: false });
    h.add("A", prompt(0, 2), 30);
    h.add("C", prompt(1, 8), 6);
    const b = h.add("B", prompt(2, 8), 10);
    for (let i = 0; i < 200 && !h.steps.some((s) => s.preempted.includes("B")); i++) h.step();
    const lost = b.numTokens;
    expect(lost).toBeGreaterThan(8);
    const resumed: { id: string; start: number; n: number }[][] = [];
    for (let i = 0; i < 200 && b.numComputedTokens < lost; i++) {
      const step = h.step();
      if (step.scheduled.some((s) => s.id === "B")) resumed.push(step.scheduled);
    }
    // Every step of the recomputation: A's decode token first, then at most 3 of B's tokens in order.
    let at = 0;
    for (const scheduled of resumed) {
      expect(scheduled[0]).toMatchObject({ id: "A", n: 1 });
      const chunk = scheduled.find((s) => s.id === "B")!;
      expect(chunk).toEqual({ id: "B", start: at, n: Math.min(3, lost - at) });
      at += chunk.n;
    }
    expect(at).toBe(lost);
  });

  test("a long mixed workload: every step with a decode holds at most the bound of prompt tokens, and every request ends with the tokens it ends with unbounded", () => {
    const run = (bound: number | undefined) => {
      const h = new Harness({ numBlocks: 40, blockSize: 4, maxNumBatchedTokens: 24, maxNumSeqs: 6, maxPrefillWhileDecoding: bound });
      let next = 0;
      const shared = range(5000, 9);
      const promptLength = new Map<string, number>();
      // A step's prompt tokens: all but the single tokens of requests past their prompts.
      const prefillTokens = (step: StepRecord) => step.scheduled.reduce((n, s) => n + (s.n === 1 && s.start >= promptLength.get(s.id)! ? 0 : s.n), 0);
      for (let step = 0; step < 400 && (next < 30 || h.scheduler.hasUnfinished); step++) {
        if (next < 30 && step % 3 === 0) {
          const len = 1 + ((next * 37) % 29);
          const req = h.add(`r${next}`, next % 4 === 0 ? [...shared, ...prompt(next, len)] : prompt(next, len), 1 + ((next * 11) % 9));
          promptLength.set(req.id, req.numPromptTokens);
          next++;
        }
        if (h.scheduler.hasUnfinished) {
          const decoding = h.scheduler.running.some((r) => r.numComputedTokens >= r.numPromptTokens && r.numTokens - r.numComputedTokens === 1);
          const record = h.step();
          if (decoding && bound !== undefined && record.preempted.length === 0) expect(prefillTokens(record)).toBeLessThanOrEqual(bound);
        }
      }
      expect(h.finished.length).toBe(30);
      return new Map(h.finished.map((r) => [r.id, r.allTokenIds]));
    };
    const unbounded = run(undefined);
    for (const bound of [1, 5, 16]) expect(run(bound)).toEqual(unbounded);
  });

  test("a request sharing the prefix of one being prefilled under the bound waits, then hits its blocks", () => {
    const h = new Harness({ numBlocks: 64, blockSize: 4, maxNumBatchedTokens: 64, maxNumSeqs: 8, maxPrefillWhileDecoding: 6 });
    h.add("A", prompt(0, 2), 20);
    h.step();
    const shared = range(1, 18);
    const b = h.add("B", [...shared, ...range(40, 2)], 3);
    const c = h.add("C", [...shared, ...range(80, 3)], 3);
    // B's 20 tokens go 6 a step; C waits behind it (the bound is spent) until B's shared blocks are allocated
    for (const start of [0, 6, 12]) {
      expect(h.step().scheduled).toEqual([{ id: "A", start: 2 + start / 6, n: 1 }, { id: "B", start, n: 6 }]);
      expect(h.scheduler.waiting).toEqual([c]);
    }
    // B's last 2; C hits the 4 full shared blocks (16 tokens) and computes 4 of its 5 others
    expect(h.step().scheduled).toEqual([{ id: "A", start: 5, n: 1 }, { id: "B", start: 18, n: 2 }, { id: "C", start: 16, n: 4 }]);
    expect(c.numCachedTokens).toBe(16);
    expect(h.kv.getBlockIds(c).slice(0, 4)).toEqual(h.kv.getBlockIds(b).slice(0, 4));
  });
});

describe("room to finish: no stream starves on a pool too small for every request", () => {
  /**
   * 32 streams (16-token prompts, 128 tokens each) arriving together on a pool that holds about half
   * of them whole, prompts bounded while others decode as the server runs them. A stream's gap is
   * the steps from one of its sampled tokens to the next.
   */
  function run(roomToFinish: boolean): { worstGap: number; h: Harness; firstTokens: number[] } {
    const h = new Harness({ numBlocks: 150, blockSize: 16, maxNumBatchedTokens: 512, maxNumSeqs: 64, maxPrefillWhileDecoding: 16, roomToFinish });
    const streams = Array.from({ length: 32 }, (_, i) => h.add(`S${i}`, prompt(i, 16), 128));
    const last = new Map<Request, number>();
    const firstTokens: number[] = [];
    let worstGap = 0;
    for (let step = 1; h.scheduler.hasUnfinished; step++) {
      if (step > 10_000) throw new Error("not done after 10000 steps");
      const before = streams.map((r) => r.outputTokenIds.length);
      h.step();
      streams.forEach((r, i) => {
        if (r.outputTokenIds.length === before[i]) return;
        if (last.has(r)) worstGap = Math.max(worstGap, step - last.get(r)!);
        else firstTokens.push(step);
        last.set(r, step);
      });
    }
    expect(h.finished.length).toBe(32);
    for (const r of h.finished) expect(r.outputTokenIds.length).toBe(128);
    return { worstGap, h, firstTokens };
  }

  test("admitted with room to finish, a stream is never preempted and gets a token every step; the others wait for their first", () => {
    const { worstGap, h, firstTokens } = run(true);
    expect(h.scheduler.numPreemptions).toBe(0);
    expect(worstGap).toBe(1);
    // about half start at once; the rest start as those finish, in arrival order
    expect(firstTokens.filter((step) => step <= 2).length).toBeGreaterThan(8);
    expect(Math.max(...firstTokens)).toBeGreaterThan(128);
  });

  test("with the watermark alone (no final positions) streams are preempted part way and wait for the others to finish", () => {
    const { worstGap, h } = run(false);
    expect(h.scheduler.numPreemptions).toBeGreaterThan(0);
    expect(worstGap).toBeGreaterThan(64);
  });
});
