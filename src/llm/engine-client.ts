/**
 * The front door to the engine (vLLM's EngineClient, llama.cpp's server task and result queues):
 * the one way the command line, the server, the benchmarks and the library reach it.
 *
 *   prepare(request)  checks a GenerateRequest in the one place requests are checked, renders and
 *                     tokenizes its prompt, and checks that it can ever run: a PreparedRequest, or
 *                     a typed error naming the field (RequestFieldError, RequestTooLongError).
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
import { EngineClosedError, InputError, ModelFormatError, QueueFullError, RequestFieldError } from "../errors.ts";
import type { ChatMessage } from "../chat/jinja-template.ts";
import type { ChatPrompt } from "../tools/chat-prompt.ts";
import { toolCallConstraint } from "./call-constraint.ts";
import type { ReplySetup } from "../tools/reply-reader.ts";
import type { CheckedTools } from "../tools/tool-types.ts";
import type { KVLayout } from "../kv/kv-layout.ts";
import type { DeviceKind } from "../backend/model-forward.ts";
import type { Placement } from "../backend/wasm/placement.ts";
import type { SpeculativeOptions } from "../engine/speculative.ts";
import type { ReasoningMarkers, TokenConstraint } from "../constraint/token-constraint.ts";
import type { ConstraintCompiler, ConstraintSpec } from "../grammar/constraint-spec.ts";
import type { EngineRequest, EngineStats, LLMEngine } from "../engine/engine.ts";
import type { EngineOutput } from "../engine/engine-output.ts";
import { checkRequest, checkTokenIds, sampleSeed, type CheckedRequest, type RequestInput } from "./generate-request.ts";
import { logSumExp, sampledLogprob, type SampledLogprob } from "../engine/logprobs.ts";
import { OutputStream, type SubmittedRequest } from "./output-stream.ts";
import { argmax } from "../engine/sampler.ts";
import type { GenerationParams } from "../engine/sequence.ts";

/** How prompts become token ids: the model's tokenizer and chat format (LLM provides them). */
export interface PromptEncoder {
  /**
   * Prompt ids of a text, BOS first when the model expects it; `maxTokens`: a text that must give
   * more is refused (RequestTooLongError) before it is tokenized.
   */
  encode(text: string, maxTokens?: number): number[];
  /**
   * Ids of a text as written (llama-server's /tokenize): BOS only with `addSpecial` and where the
   * model adds one; control tokens written in the text matched only with `parseSpecial`.
   */
  encodeWritten(text: string, opts: { addSpecial: boolean; parseSpecial: boolean }): number[];
  /** The text of ids (each in the vocabulary), control tokens written out (token-text.ts). */
  decodeWritten(ids: readonly number[]): string;
  /** One token's text: a string, or its bytes where they are not whole UTF-8 characters. */
  piece(id: number): string | number[];
  /**
   * A conversation in the chat format, with more template variables and the request's tools:
   * its prompt ids, and how its replies are read; RequestFieldError naming the message at fault.
   * `maxTokens` as encode's.
   */
  messages(messages: readonly ChatMessage[], kwargs: Readonly<Record<string, unknown>> | null, tools: CheckedTools | null, maxTokens?: number): ChatPrompt;
}

/** What the front door needs besides the engine: how prompts become ids, and how constraints compile. */
export interface ClientParts {
  prompts: PromptEncoder;
  /** Compiles a request's constraint; null: the model's vocabulary cannot be constrained (a request asking is refused). */
  constraints: ConstraintCompiler | null;
  /** The model's reasoning markers (`<think>`, `</think>` as tokens), when it reasons before it answers; a constraint starts after them. */
  reasoning: ReasoningMarkers | null;
  /** The tags' text as tokens: the markers of a template that thinks where `reasoning` is null. */
  reasoningText?: ReasoningMarkers | null;
  /** Why `constraints` is null, for the refusal. */
  constraintsUnavailable?: string;
}

/** Limits a front end puts on what it takes (a server's); the engine's own limits apply regardless. */
export interface PrepareOptions {
  /** Most samples (`n`) one request may ask for; default: the sequences one step holds. */
  maxSamples?: number;
}

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

/** A request checked, rendered and found to fit: only prepare() makes one. */
export class PreparedRequest {
  /** @internal */
  constructor(
    readonly request: EngineRequest,
    /** The request's fields as checked, defaults filled. */
    readonly checked: CheckedRequest,
    /** How its replies are read into content, reasoning and tool calls; null: as plain text. */
    readonly reply: ReplySetup | null = null,
  ) {}

  get id(): string {
    return this.request.id;
  }

  get promptTokenIds(): readonly number[] {
    return this.request.promptTokenIds;
  }

  /** Samples of the prompt. */
  get n(): number {
    return this.request.samples.length;
  }
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
  private nextId = 0;
  private wake: (() => void) | null = null;
  private stepping = false;
  private closed = false;
  private idleWaiters: (() => void)[] = [];
  /** When the loop last made progress (or went idle). */
  private progressMs = performance.now();
  private readonly done: Promise<void>;

  private readonly prompts: PromptEncoder;

  constructor(
    private readonly engine: LLMEngine,
    private readonly parts: ClientParts,
  ) {
    this.prompts = parts.prompts;
    this.info = engineInfo(engine);
    this.done = this.run();
  }

  /**
   * Checks `request` (a GenerateRequest, or one mapped from JSON whose values are not yet known to
   * be of their types: RequestFieldError naming the field), renders and tokenizes its prompt, and
   * checks that it can ever run (RequestTooLongError naming the field); queues nothing.
   */
  prepare(request: RequestInput, opts: PrepareOptions = {}): PreparedRequest {
    // More samples than a step holds can never run: checkFits says so (RequestTooLongError).
    const checked = checkRequest(request, { vocabSize: this.engine.config.vocabSize, maxSamples: opts.maxSamples ?? Infinity });
    // A prompt over the context is refused before its text is tokenized where its bytes show it.
    const { ids: promptTokenIds, reply, shownTokenIds } = this.prompt(checked, this.engine.config.seqLen);
    // An empty text on a model that adds no BOS is no tokens at all: nothing to run from.
    if (promptTokenIds.length === 0) {
      if (checked.prompt.kind === "messages") throw new RequestFieldError("messages", "render to an empty prompt");
      throw new RequestFieldError("prompt", "is empty, and this model adds no BOS token: there is no token to start from");
    }
    this.engine.checkFits(promptTokenIds.length, checked.maxTokens, checked.n);
    const id = checked.id ?? `req-${this.nextId++}`;
    const shown = shownTokenIds.length === 0 ? undefined : new Set(shownTokenIds);
    const samples = Array.from({ length: checked.n }, (_, i) => generationParams(checked, i, shown));
    const spec = this.constraintOf(checked, reply);
    const reasoning = this.reasoningMarkers(reply);
    // A reasoning budget needs markers; without them there is no reasoning to bound.
    const budget = reasoning === null ? null : checked.reasoningBudget;
    const constraint = spec === null && budget === null ? null
      : { create: spec === null ? null : this.compile(spec), reasoning, reasoningBudget: budget };
    return new PreparedRequest({ id, promptTokenIds, samples, cacheSalt: checked.cacheSalt, constraint }, checked, reply);
  }

  /**
   * The reasoning markers of a request's replies: the vocabulary's tag tokens, else (a template
   * that thinks, its tags written as text) the tags' text tokens; null: the replies do not reason.
   */
  private reasoningMarkers(reply: ReplySetup | null): ReasoningMarkers | null {
    if (this.parts.reasoning !== null) return this.parts.reasoning;
    const thinks = reply !== null && (reply.reasoning === "tags" || reply.reasoning === "open");
    return thinks ? this.parts.reasoningText ?? null : null;
  }

  /**
   * The prompt token ids of `request` as prepare() renders them, after the same checks but without
   * the check that it fits: what a /tokenize endpoint counts, a prompt longer than the context
   * included.
   */
  promptTokenIds(request: RequestInput): number[] {
    const checked = checkRequest(request, { vocabSize: this.engine.config.vocabSize, maxSamples: Infinity });
    return [...this.prompt(checked).ids];
  }

  /** Ids of a text as written, with or without BOS and control tokens (PromptEncoder.encodeWritten). */
  tokenizeText(text: string, opts: { addSpecial: boolean; parseSpecial: boolean }): number[] {
    return this.prompts.encodeWritten(text, opts);
  }

  /**
   * The text of token ids, control tokens written out, as llama-server's and vLLM's /detokenize
   * give it; RequestFieldError naming `field[i]` for a value that is no id of the vocabulary.
   */
  detokenize(ids: readonly unknown[], field = "tokens"): string {
    return ids.length === 0 ? "" : this.prompts.decodeWritten(checkTokenIds(ids, field, this.engine.config.vocabSize));
  }

  /** Each token's own text (PromptEncoder.piece), for ids a tokenize call gave. */
  tokenPieces(ids: readonly number[]): (string | number[])[] {
    return ids.map((id) => this.prompts.piece(id));
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
    this.checkQueue(prepared, opts.maxQueue ?? Infinity);
    const ids = new Set<string>();
    for (const p of prepared) {
      if (this.streams.has(p.id) || ids.has(p.id)) throw new RequestFieldError("id", `"${p.id}" is already in flight`);
      ids.add(p.id);
    }
    const submitted: SubmittedRequest[] = prepared.map((p) => ({ id: p.id, promptTokenIds: p.promptTokenIds, n: p.n }));
    const stream = new OutputStream(submitted, () => {
      for (const id of stream.runningIds) this.abort(id);
    });
    for (const p of prepared) {
      this.engine.add(p.request);
      this.streams.set(p.id, stream);
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
        }),
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

  /**
   * What holds a request's output: its own constraint, or, for a request that offers tools, its
   * calls (toolCallConstraint). Both at once: with tool_choice "auto" the request's constraint
   * holds the reply and calls are read from it unconstrained (vLLM's behaviour); with "required"
   * or a named function the reply must be calls, which no other constraint can allow, so the
   * request is refused (as llama-server refuses a grammar with tools).
   */
  private constraintOf(checked: CheckedRequest, reply: ReplySetup | null): ConstraintSpec | null {
    const calls = reply === null ? null : toolCallConstraint(reply);
    if (checked.constraint === null) return this.parts.constraints === null ? null : calls;
    const choice = reply?.tools?.choice;
    if (choice !== undefined && choice !== "auto" && choice !== "none") {
      throw new RequestFieldError("constraint", `cannot be combined with toolChoice ${typeof choice === "string" ? `"${choice}"` : "naming a function"}: the reply is then tool calls; send toolChoice "auto" or no constraint`);
    }
    return checked.constraint;
  }

  /** A factory of matchers for `spec` (compiled once per content by the compiler); RequestFieldError naming the field. */
  private compile(spec: ConstraintSpec): () => TokenConstraint {
    const compiler = this.parts.constraints;
    if (compiler === null) throw new RequestFieldError("constraint", this.parts.constraintsUnavailable ?? "cannot be applied to this model");
    return compiler.compile(spec);
  }

  private prompt(checked: CheckedRequest, maxTokens?: number): ChatPrompt {
    const p = checked.prompt;
    if (p.kind === "tokens") return { ids: [...p.ids], reply: null, shownTokenIds: [] };
    if (p.kind === "messages") return this.prompts.messages(p.messages, p.kwargs, checked.tools, maxTokens);
    try {
      return { ids: this.prompts.encode(p.text, maxTokens), reply: null, shownTokenIds: [] };
    } catch (e) {
      // A vocabulary that spells none of the text is the file's fault, not the request's.
      if (e instanceof ModelFormatError) throw e;
      throw e instanceof InputError ? new RequestFieldError("prompt", e.message) : e;
    }
  }

  /** QueueFullError when `prepared` would take the queue past `bound` (sequences: prompts x samples). */
  private checkQueue(prepared: readonly PreparedRequest[], bound: number): void {
    if (bound === Infinity) return;
    const queued = this.engine.stats.numWaiting;
    const adding = prepared.reduce((n, p) => n + p.n, 0);
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

/** Sample `index`'s engine params: the checked fields, its own seed, the control tokens its text shows. */
function generationParams(r: CheckedRequest, index: number, shownTokenIds: ReadonlySet<number> | undefined): GenerationParams {
  const params: GenerationParams = { maxTokens: r.maxTokens, stop: r.stop, sampling: { ...r.sampling, seed: sampleSeed(r.seed, index) } };
  if (shownTokenIds !== undefined) params.shownTokenIds = shownTokenIds;
  if (r.logprobs !== null) params.logprobs = r.logprobs;
  if (r.ignoreEos) params.ignoreEos = true;
  return params;
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
