/**
 * The front door to the engine (vLLM's EngineClient, llama.cpp's server task and result queues):
 * the one way the command line, the server, the benchmarks and the library reach it.
 *
 *   prepare(request)  checks a GenerateRequest, renders and tokenizes its prompt, and checks that
 *                     it can ever run (input-processor.ts): a PreparedRequest, or a typed error
 *                     naming the field (RequestFieldError, RequestTooLongError).
 *   submit(requests)  queues them (all or none) and returns their OutputStream: immutable
 *                     EngineOutput snapshots, step by step, until every sample has finished.
 *   abort(id)         ends a request wherever it is (its last output says "abort").
 *   score(request)    teacher-forced log-probabilities of a token sequence: a task of the same
 *                     queue, run between two steps once the KV blocks it needs are free.
 *   stats()           the engine's counters and the loop's progress, as a snapshot.
 *
 * It owns the only loop that steps the engine: step after step while any request is unfinished,
 * waiting for work otherwise. Submissions and aborts may come at any time; they take effect
 * between steps, never while one computes, so an abort frees its blocks at most one step later.
 * After each step the loop yields to the event loop, so that I/O, timers and signals run during
 * long batches. A step that throws (a worker died) ends every request with the error; the loop
 * goes on.
 */
import type { EmbeddedSpan } from "../model/batch.ts";
import { EngineClosedError, InputError, QueueFullError, RequestFieldError } from "../errors.ts";
import type { KVLayout } from "../kv/kv-layout.ts";
import type { DeviceKind } from "../backend/model-forward.ts";
import type { Placement } from "../backend/wasm/placement.ts";
import type { SpeculativeOptions } from "../engine/speculative.ts";
import type { EngineRequest, EngineStats, LLMEngine } from "../engine/engine.ts";
import type { EngineOutput } from "../engine/engine-output.ts";
import { logSumExp, sampledLogprob, type SampledLogprob } from "../engine/logprobs.ts";
import { argmax } from "../engine/sampler.ts";
import type { RequestInput } from "./generate-request.ts";
import { InputProcessor, PreparedRequest, type ClientParts, type PrepareOptions } from "./input-processor.ts";
import { OutputStream, type SubmittedRequest } from "./output-stream.ts";

export interface SubmitOptions extends PrepareOptions {
  /** Ends the submission's requests when it fires (finish_reason "abort"). */
  signal?: AbortSignal;
  /**
   * Sequences (prompts x samples) that may wait for a place in the batch, this submission's
   * included: past it the submission is refused with QueueFullError (a server's --max-queue).
   * Default: no bound.
   */
  maxQueue?: number;
}

/** What the engine runs, for people and reports: fixed once it is built. */
export interface EngineInfo {
  device: DeviceKind;
  /** "wasm (2 threads)", "webgpu on ... (...)". */
  description: string;
  /** Positions one sequence can reach: the context, or less when the whole pool holds less. */
  maxPositions: number;
  /** The context the model runs at. */
  contextLength: number;
  kvLayout: KVLayout;
  /** Why the KV type is not the one asked for, or null. */
  kvTypeNote: string | null;
  numBlocks: number;
  blockSize: number;
  maxNumSeqs: number;
  maxNumBatchedTokens: number;
  maxPrefillWhileDecoding: number;
  speculative: SpeculativeOptions | null;
  /** WebAssembly memories the model is placed over (1 on WebGPU). */
  numMemories: number;
  /** Which memory holds what; null on WebGPU. */
  placement: Placement | null;
  threads: number;
}

/** The engine's counters and the loop's state, as of the call. */
export interface ClientStats extends EngineStats {
  /** Requests submitted and not finished. */
  numRequests: number;
  /** Milliseconds since the loop last finished a step or task while work was pending; 0 when idle. */
  stalledMs: number;
}

/** What one step did, told to onStep listeners right after the step's outputs went to their streams. */
export interface StepReport {
  /** The engine's step count after this step (EngineStats.steps). */
  readonly step: number;
  /** Outputs of the step: one per sample it advanced or ended. */
  readonly outputs: number;
  /** Tokens sampled in the step, stop tokens and accepted draft tokens included. */
  readonly sampled: number;
  /** When the step began (performance.now()). */
  readonly startMs: number;
  /** When the step's outputs were handed over (performance.now()). */
  readonly endMs: number;
  /** Tokens the step computed for requests past their prompt (sampled and draft tokens). */
  readonly decodeTokens: number;
  /** Prompt tokens the step computed (prefill chunks, recomputation after a preemption). */
  readonly promptTokens: number;
}

/** A scoring task: the log-probabilities of `tokens`, in windows of `window` tokens each starting with an empty KV cache. */
export interface ScoreRequest {
  tokens: readonly number[];
  /** Tokens per window; default: the context (maxPositions). */
  window?: number;
  /** Also report this many most likely tokens at each position (0-20). */
  topLogprobs?: number;
  /** Also return the logits after each token (copies), every position of every window. */
  logits?: boolean;
  /** Spans of the tokens whose input rows are given (an image's, placeholder tokens in `tokens`); the prompt then fits one window. */
  embeds?: readonly EmbeddedSpan[];
}

/** `perplexity` over a text: its tokens and, for each position i, log p(tokens[i+1] | tokens[0..i]). */
export interface ScoreResult {
  tokens: number[];
  /** token_logprobs[i] = log p(tokens[i+1] | the tokens of its window up to i). */
  token_logprobs: number[];
  /** top_tokens[i] = the most likely token after tokens[0..i]. */
  top_tokens: number[];
  /** exp(-mean(token_logprobs)). */
  ppl: number;
  /** Tokens per window (the context size). */
  window: number;
  /** With topLogprobs: at each position i, tokens[i+1]'s log-probability and the most likely tokens there. */
  alternatives?: SampledLogprob[];
  /** With logits: the logits after each token of each window, in order (the last token's included). */
  logits?: Float32Array[];
}

/** Work run between two steps with the engine to itself, once `blocks` KV blocks are free. */
interface Task {
  blocks: number;
  run: () => Promise<void>;
  cancel: (e: Error) => void;
}

export class EngineClient {
  readonly info: EngineInfo;
  private readonly streams = new Map<string, OutputStream>();
  private readonly tasks: Task[] = [];
  private readonly pendingAborts = new Set<string>();
  private readonly stepListeners = new Set<(report: StepReport) => void>();
  private wake: (() => void) | null = null;
  private stepping = false;
  private closed = false;
  private idleWaiters: (() => void)[] = [];
  /** When the loop last made progress (or went idle). */
  private progressMs = performance.now();
  private readonly done: Promise<void>;
  /** Requests become what the engine runs here: checked, rendered, tokenized, constrained. */
  private readonly input: InputProcessor;

  constructor(
    private readonly engine: LLMEngine,
    parts: ClientParts,
  ) {
    this.input = new InputProcessor(engine, parts);
    this.info = engineInfo(engine);
    this.done = this.run();
  }

  /** A request checked, rendered, tokenized and found to fit; queues nothing (InputProcessor.prepare). */
  prepare(request: RequestInput, opts: PrepareOptions = {}): PreparedRequest {
    return this.input.prepare(request, opts);
  }

  /** The prompt token ids of `request` as prepare() renders them, without the check that it fits (what /tokenize counts). */
  promptTokenIds(request: RequestInput): number[] {
    return this.input.promptTokenIds(request);
  }

  /** Ids of a text as written, with or without BOS and control tokens (PromptEncoder.encodeWritten). */
  tokenizeText(text: string, opts: { addSpecial: boolean; parseSpecial: boolean }): number[] {
    return this.input.tokenizeText(text, opts);
  }

  /** The text of token ids, control tokens written out; RequestFieldError naming `field[i]` for a value that is no id. */
  detokenize(ids: readonly unknown[], field = "tokens"): string {
    return this.input.detokenize(ids, field);
  }

  /** Each token's own text (PromptEncoder.piece), for ids a tokenize call gave. */
  tokenPieces(ids: readonly number[]): (string | number[])[] {
    return this.input.tokenPieces(ids);
  }

  /**
   * Queues requests (prepared, or prepared here) together, all or none, and returns their stream.
   * Throws what prepare throws, EngineClosedError after close(), QueueFullError when their
   * sequences would take the queue past maxQueue (a submission is never refused while nothing
   * waits, unless it alone is larger than the bound), and InputError for an id already in flight.
   */
  submit(requests: RequestInput | PreparedRequest | readonly (RequestInput | PreparedRequest)[], opts: SubmitOptions = {}): OutputStream {
    if (this.closed) throw new EngineClosedError("the engine is shutting down");
    const list = (Array.isArray(requests) ? requests : [requests]) as readonly (RequestInput | PreparedRequest)[];
    const prepared = list.map((r) => (r instanceof PreparedRequest ? r : this.prepare(r, opts)));
    return this.enqueue(prepared.map((p) => p.request), opts);
  }

  /**
   * Queues requests the engine runs as they are (an embedder's: token ids, GenerationParams.pooling),
   * all or none, as submit does; throws what LLMEngine.add throws for them.
   */
  submitEngineRequests(requests: readonly EngineRequest[], opts: Pick<SubmitOptions, "signal" | "maxQueue"> = {}): OutputStream {
    if (this.closed) throw new EngineClosedError("the engine is shutting down");
    return this.enqueue(requests, opts);
  }

  /** Queues checked requests together, all or none, and returns their stream. */
  private enqueue(requests: readonly EngineRequest[], opts: Pick<SubmitOptions, "signal" | "maxQueue">): OutputStream {
    this.checkQueue(requests, opts.maxQueue ?? Infinity);
    const ids = new Set<string>();
    for (const r of requests) {
      if (this.streams.has(r.id) || ids.has(r.id)) throw new RequestFieldError("id", `"${r.id}" is already in flight`);
      ids.add(r.id);
    }
    const submitted: SubmittedRequest[] = requests.map((r) => ({ id: r.id, promptTokenIds: r.promptTokenIds, n: r.samples.length }));
    const stream = new OutputStream(submitted, () => {
      for (const id of stream.runningIds) this.abort(id);
    });
    try {
      for (const r of requests) {
        this.engine.add(r);
        this.streams.set(r.id, stream);
      }
    } catch (e) {
      // All or none: what was queued before the refused one is taken back.
      for (const id of stream.runningIds) if (this.streams.has(id)) this.dispatch(this.engine.abort(id));
      throw e;
    }
    const signal = opts.signal;
    if (signal !== undefined) {
      if (signal.aborted) stream.abort();
      else signal.addEventListener("abort", () => stream.abort(), { once: true });
    }
    this.wake?.();
    return stream;
  }

  /** Ends every request in flight (a server shutting down): their last outputs say "abort". */
  abortAll(): void {
    for (const id of this.streams.keys()) this.abort(id);
  }

  /** Ends request `id` wherever it is: now when no step is computing, else right after it. Unknown ids are ignored. */
  abort(id: string): void {
    if (!this.streams.has(id)) return;
    this.pendingAborts.add(id);
    if (!this.stepping) this.applyAborts();
  }

  /**
   * Teacher-forced log-probabilities (perplexity): each window runs between two steps, once the
   * blocks it needs are free, through the paged KV cache like a prompt (its full blocks stay in
   * the prefix cache). Throws RequestTooLongError when a window cannot fit the context or the pool.
   */
  async score(request: ScoreRequest): Promise<ScoreResult> {
    const tokens = [...request.tokens];
    const window = request.window ?? this.engine.maxPositions;
    if (!Number.isInteger(window) || window < 1) throw new InputError(`scoring window must be a positive integer, got ${window}`);
    const embeds = request.embeds ?? [];
    if (embeds.length > 0 && tokens.length > window) throw new InputError(`a prompt with images is scored in one window: its ${tokens.length} tokens exceed ${window}`);
    const top = request.topLogprobs;
    const tokenLogprobs: number[] = [];
    const topTokens: number[] = [];
    const alternatives: SampledLogprob[] = [];
    const rows: Float32Array[] = [];
    // One token has no transition to score, but its logits may be asked for.
    const last = request.logits === true ? tokens.length : tokens.length - 1;
    for (let start = 0; start < last; start += window) {
      const part = tokens.slice(start, start + window);
      await this.task(this.engine.blocksToScore(part.length), () =>
        this.engine.score(part, (i, logits) => {
          if (request.logits === true) rows.push(logits.slice());
          const next = tokens[start + i + 1];
          if (next === undefined) return;
          tokenLogprobs.push(logits[next]! - logSumExp(logits));
          topTokens.push(argmax(logits));
          if (top !== undefined) alternatives.push(sampledLogprob(logits, next, top));
        }, embeds),
      );
    }
    const mean = tokenLogprobs.reduce((a, b) => a + b, 0) / Math.max(1, tokenLogprobs.length);
    const result: ScoreResult = { tokens, token_logprobs: tokenLogprobs, top_tokens: topTokens, ppl: Math.exp(-mean), window };
    if (top !== undefined) result.alternatives = alternatives;
    if (request.logits === true) result.logits = rows;
    return result;
  }

  /** Forgets every cached block, once no request holds blocks (a task of the queue); false when some do. */
  resetPrefixCache(): Promise<boolean> {
    return this.taskValue(0, async () => this.engine.resetPrefixCache());
  }

  /** Waits until the disk tier holds every block computed so far (a task of the queue); at once without a tier. */
  flush(): Promise<void> {
    return this.taskValue(0, () => this.engine.flushTier());
  }

  stats(): ClientStats {
    const busy = this.engine.hasUnfinished || this.tasks.length > 0;
    return { ...this.engine.stats, numRequests: this.streams.size, stalledMs: busy ? performance.now() - this.progressMs : 0 };
  }

  /** Tells `listener` what each step did, until the returned function is called (benchmarks time steps with it). */
  onStep(listener: (report: StepReport) => void): () => void {
    this.stepListeners.add(listener);
    return () => this.stepListeners.delete(listener);
  }

  /** Resolves once no request is running. */
  whenIdle(): Promise<void> {
    if (this.streams.size === 0) return Promise.resolve();
    return new Promise((resolve) => this.idleWaiters.push(resolve));
  }

  /** Whether the engine is computing now (a step or a task): its owner must not close it before close() resolves. */
  get computing(): boolean {
    return this.stepping;
  }

  /** Aborts everything, refuses new work and ends the loop (the engine is then its owner's to close). */
  async close(): Promise<void> {
    if (this.closed) return this.done;
    this.closed = true;
    for (const task of this.tasks.splice(0)) task.cancel(new EngineClosedError("the engine is shutting down"));
    for (const id of this.streams.keys()) this.pendingAborts.add(id);
    if (!this.stepping) this.applyAborts();
    this.wake?.();
    await this.done;
  }

  /** Run `job` between two steps, with the engine to itself, once `blocks` KV blocks are free. */
  private task(blocks: number, job: () => Promise<void>): Promise<void> {
    return this.taskValue(blocks, job);
  }

  private taskValue<T>(blocks: number, job: () => Promise<T>): Promise<T> {
    if (this.closed) return Promise.reject(new EngineClosedError("the engine is shutting down"));
    return new Promise<T>((resolve, reject) => {
      this.tasks.push({ blocks, run: () => job().then(resolve, reject), cancel: reject });
      this.wake?.();
    });
  }

  /** QueueFullError when `prepared` would take the queue past `bound` (sequences: prompts x samples). */
  private checkQueue(requests: readonly EngineRequest[], bound: number): void {
    if (bound === Infinity) return;
    const queued = this.engine.stats.numWaiting;
    const adding = requests.reduce((n, r) => n + r.samples.length, 0);
    if (queued + adding > bound && (queued > 0 || adding > bound)) {
      throw new QueueFullError(`the queue is full (${queued} sequences waiting, ${adding} more asked for, --max-queue ${bound}); retry later`);
    }
  }

  private async run(): Promise<void> {
    while (!this.closed) {
      await this.runTasks();
      if (!this.engine.hasUnfinished) {
        if (this.tasks.length > 0) continue;
        await new Promise<void>((resolve) => (this.wake = resolve));
        this.wake = null;
        // Woken by new work: the time it has been pending counts from now.
        this.progressMs = performance.now();
        continue;
      }
      this.stepping = true;
      const startMs = performance.now();
      let outputs: EngineOutput[];
      try {
        outputs = await this.engine.step();
      } catch (e) {
        outputs = this.failAll(e);
      } finally {
        this.stepping = false;
      }
      this.progressMs = performance.now();
      this.dispatch(outputs);
      this.report(startMs, outputs);
      this.applyAborts();
      // Let I/O, timers and signals run between steps (a one-thread step never yields by itself).
      await new Promise((resolve) => setImmediate(resolve));
    }
  }

  /** The queued tasks whose blocks are free now (all of them when nothing runs), in order. */
  private async runTasks(): Promise<void> {
    for (let i = 0; i < this.tasks.length; ) {
      const task = this.tasks[i]!;
      if (this.engine.hasUnfinished && this.engine.numFreeBlocks < task.blocks) {
        i++;
        continue;
      }
      this.tasks.splice(i, 1);
      this.stepping = true;
      try {
        await task.run();
      } finally {
        this.stepping = false;
      }
      this.progressMs = performance.now();
      this.applyAborts();
    }
  }

  /** Tells the listeners about a step that computed tokens or ended requests. */
  private report(startMs: number, outputs: readonly EngineOutput[]): void {
    const tokens = this.engine.lastStepTokens;
    if (this.stepListeners.size === 0 || (outputs.length === 0 && tokens.decode + tokens.prompt === 0)) return;
    const report: StepReport = {
      step: this.engine.stats.steps, outputs: outputs.length, sampled: outputs.reduce((n, o) => n + o.numSampled, 0),
      startMs, endMs: performance.now(), decodeTokens: tokens.decode, promptTokens: tokens.prompt,
    };
    for (const listener of this.stepListeners) listener(report);
  }

  /**
   * A step that threw (a worker died): every request ends with the error, and each stream carries
   * the error itself (OutputStream.error: the library rethrows it); the loop goes on.
   */
  private failAll(e: unknown): EngineOutput[] {
    const error = e instanceof Error ? e : new Error(String(e));
    for (const stream of new Set(this.streams.values())) stream.fail(error);
    return this.engine.abortAll("error", error.message.split("\n")[0]!);
  }

  private applyAborts(): void {
    const ids = [...this.pendingAborts];
    this.pendingAborts.clear();
    for (const id of ids) this.dispatch(this.engine.abort(id));
  }

  private dispatch(outputs: readonly EngineOutput[]): void {
    for (const output of outputs) {
      const stream = this.streams.get(output.requestId);
      if (stream === undefined) continue;
      stream.push(output);
      if (!stream.runningIds.includes(output.requestId)) this.streams.delete(output.requestId);
    }
    if (this.streams.size === 0 && this.idleWaiters.length > 0) {
      const waiters = this.idleWaiters;
      this.idleWaiters = [];
      for (const resolve of waiters) resolve();
    }
  }
}

function engineInfo(engine: LLMEngine): EngineInfo {
  const o = engine.options;
  return {
    device: engine.model.device,
    description: engine.model.description,
    maxPositions: engine.maxPositions,
    contextLength: engine.config.seqLen,
    kvLayout: engine.kvLayout,
    kvTypeNote: engine.kvTypeNote,
    numBlocks: engine.numBlocks,
    blockSize: o.blockSize,
    maxNumSeqs: o.maxNumSeqs,
    maxNumBatchedTokens: o.maxNumBatchedTokens,
    maxPrefillWhileDecoding: o.maxPrefillWhileDecoding,
    speculative: o.speculative,
    numMemories: engine.memories.count,
    placement: engine.memoryPlan?.placement ?? null,
    threads: o.threads,
  };
}
