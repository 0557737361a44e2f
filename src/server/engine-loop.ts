/**
 * The one loop that drives the engine for every client: step after step while any request is
 * unfinished, waiting for work otherwise. HTTP handlers submit requests at any time (adding only
 * queues them: the next step's schedule admits them into the running batch) and ask for aborts,
 * which are applied between steps, never while one is computing, so an abort frees its blocks at
 * most one step later. Each step's events go to the listener of the submission they belong to.
 * Work that uses the engine outside the batch (scoring a prompt's log-probabilities) runs between
 * two steps too, when the pool has the blocks it needs.
 */
import type { LLMEngine, NewRequest, StepEvent } from "../engine/engine.ts";
import type { Sequence } from "../engine/sequence.ts";
import { ApiError } from "./api-error.ts";
import type { ServeMetrics } from "./metrics.ts";

/** Told, after each step, what the step did for a submission's sequences (in step order). */
export type SubmissionListener = (events: readonly StepEvent[]) => void;

/** The sequences of one HTTP request: per prompt, its samples (sample 0 first). */
export class Submission {
  readonly sequences: readonly Sequence[];
  constructor(
    readonly groups: readonly (readonly Sequence[])[],
    readonly listener: SubmissionListener,
  ) {
    this.sequences = groups.flat();
  }

  get finished(): boolean {
    return this.sequences.every((s) => s.isFinished);
  }
}

export interface EngineLoopOptions {
  /** Sequences that may wait for a place in the batch before new requests get 429. */
  maxQueue: number;
}

/** Work run between two steps with the engine to itself, once `blocks` KV blocks are free. */
interface ExclusiveJob {
  blocks: number;
  run: () => Promise<void>;
  cancel: (e: Error) => void;
}

export class EngineLoop {
  private readonly live = new Set<Submission>();
  private readonly jobs: ExclusiveJob[] = [];
  private readonly bySequence = new Map<Sequence, Submission>();
  private readonly abortRequests = new Set<Submission>();
  private wake: (() => void) | null = null;
  private stepping = false;
  private stopped = false;
  private idleWaiters: (() => void)[] = [];
  private readonly done: Promise<void>;
  /** performance.now() when the loop last finished a step or a job, or woke to new work. */
  private lastProgressMs = performance.now();

  constructor(
    private readonly engine: LLMEngine,
    private readonly metrics: ServeMetrics,
    private readonly opts: EngineLoopOptions,
  ) {
    this.done = this.run();
  }

  /** Whether work is pending (requests being served, jobs queued) and when the loop last moved (/health). */
  get progress(): { pending: boolean; lastProgressMs: number } {
    return { pending: this.live.size > 0 || this.jobs.length > 0, lastProgressMs: this.lastProgressMs };
  }

  /** Requests being served (submitted and not yet finished). */
  get numLive(): number {
    return this.live.size;
  }

  /**
   * Queue the groups of one request (each group: samples of one prompt, see
   * LLMEngine.addParallelSampling) and send their step events to `listener`. Throws ApiError 429
   * when the queue is full, and the engine's errors (a request that can never fit) before
   * anything is queued.
   */
  submit(groups: readonly (readonly NewRequest[])[], listener: SubmissionListener): Submission {
    if (this.stopped) throw new ApiError(503, "the server is shutting down", "service_unavailable");
    const queued = this.engine.stats.numWaiting;
    const adding = groups.reduce((n, g) => n + g.length, 0);
    if (queued + adding > this.opts.maxQueue && queued > 0) {
      throw new ApiError(429, `the queue is full (${queued} sequences waiting, --max-queue ${this.opts.maxQueue}); retry later`, "rate_limit_error", null, "queue_full", { "Retry-After": "1" });
    }
    const added: Sequence[][] = [];
    try {
      for (const group of groups) added.push(this.engine.addParallelSampling(group));
    } catch (e) {
      // All or nothing: a later prompt that cannot fit takes back the ones queued before it.
      for (const seq of added.flat()) this.engine.abort(seq);
      throw e;
    }
    const submission = new Submission(added, listener);
    this.live.add(submission);
    for (const seq of submission.sequences) this.bySequence.set(seq, submission);
    this.metrics.requestArrived(added.map((g) => g[0]!));
    this.wake?.();
    return submission;
  }

  /** Abort a submission's unfinished sequences: now when no step is computing, else right after it. */
  abort(submission: Submission): void {
    if (!this.live.has(submission)) return;
    this.abortRequests.add(submission);
    if (!this.stepping) this.applyAborts();
  }

  /**
   * Run `job` between two steps, with the engine to itself, once `blocks` KV blocks are free
   * (running requests free theirs as they finish; a job needing more than the pool is refused by
   * the engine when it runs on an idle pool).
   */
  exclusive<T>(blocks: number, job: () => Promise<T>): Promise<T> {
    if (this.stopped) return Promise.reject(new ApiError(503, "the server is shutting down", "service_unavailable"));
    return new Promise<T>((resolve, reject) => {
      this.jobs.push({ blocks, run: () => job().then(resolve, reject), cancel: reject });
      this.wake?.();
    });
  }

  /** Resolves once no request is being served. */
  whenIdle(): Promise<void> {
    if (this.live.size === 0) return Promise.resolve();
    return new Promise((resolve) => this.idleWaiters.push(resolve));
  }

  /** Abort everything and end the loop (the engine is then the caller's to close). */
  async stop(): Promise<void> {
    this.stopped = true;
    for (const job of this.jobs.splice(0)) job.cancel(new ApiError(503, "the server is shutting down", "service_unavailable"));
    for (const s of this.live) this.abortRequests.add(s);
    if (!this.stepping) this.applyAborts();
    this.wake?.();
    await this.done;
  }

  private async run(): Promise<void> {
    while (!this.stopped) {
      await this.runJobs();
      if (!this.engine.hasUnfinished) {
        if (this.jobs.length > 0) continue;
        await new Promise<void>((resolve) => (this.wake = resolve));
        this.wake = null;
        this.lastProgressMs = performance.now();
        continue;
      }
      this.stepping = true;
      let events: StepEvent[];
      try {
        events = await this.engine.step();
      } catch (e) {
        events = this.failAll(e);
      } finally {
        this.stepping = false;
      }
      this.lastProgressMs = performance.now();
      this.dispatch(events);
      this.applyAborts();
      // Let HTTP handlers run between steps (a one-thread step never yields by itself).
      await new Promise((resolve) => setImmediate(resolve));
    }
  }

  /** The queued jobs whose blocks are free now (all of them when nothing runs), in order. */
  private async runJobs(): Promise<void> {
    for (let i = 0; i < this.jobs.length; ) {
      const job = this.jobs[i]!;
      if (this.engine.hasUnfinished && this.engine.kv.numFreeBlocks < job.blocks) {
        i++;
        continue;
      }
      this.jobs.splice(i, 1);
      this.stepping = true;
      try {
        await job.run();
      } finally {
        this.stepping = false;
        this.lastProgressMs = performance.now();
      }
      this.applyAborts();
    }
  }

  /** A step that threw (a worker died): every request ends with the error; the server goes on. */
  private failAll(e: unknown): StepEvent[] {
    const message = e instanceof Error ? e.message.split("\n")[0]! : String(e);
    process.stderr.write(`pagellm serve: engine step failed: ${message}\n`);
    return this.engine.abortAll().map((event) => {
      event.seq.finishReason = "error";
      event.seq.error = message;
      return event;
    });
  }

  private applyAborts(): void {
    const events: StepEvent[] = [];
    for (const submission of this.abortRequests) {
      for (const seq of submission.sequences) if (!seq.isFinished) events.push(this.engine.abort(seq));
    }
    this.abortRequests.clear();
    this.dispatch(events);
  }

  private dispatch(events: readonly StepEvent[]): void {
    if (events.length === 0) return;
    const now = performance.now();
    const bySubmission = new Map<Submission, StepEvent[]>();
    for (const event of events) {
      this.metrics.stepEvent(event, now);
      const submission = this.bySequence.get(event.seq);
      if (submission === undefined) continue;
      let list = bySubmission.get(submission);
      if (list === undefined) bySubmission.set(submission, (list = []));
      list.push(event);
    }
    for (const [submission, list] of bySubmission) {
      try {
        submission.listener(list);
      } catch (e) {
        // A listener's failure (a closed stream) ends its own request, never the loop.
        this.abortRequests.add(submission);
        process.stderr.write(`pagellm serve: ${(e as Error).message}\n`);
      }
      if (submission.finished) this.retire(submission);
    }
  }

  private retire(submission: Submission): void {
    this.live.delete(submission);
    this.abortRequests.delete(submission);
    for (const seq of submission.sequences) this.bySequence.delete(seq);
    if (this.live.size === 0) {
      const waiters = this.idleWaiters;
      this.idleWaiters = [];
      for (const resolve of waiters) resolve();
    }
  }
}
