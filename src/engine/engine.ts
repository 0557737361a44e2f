/**
 * The engine: one model, one KV block pool, one scheduler. `step()` is schedule, run, sample: the
 * scheduler picks the tokens of this step, the model runner computes them in one batched forward
 * pass, and each sequence that got logits samples its next token (several, verifying a draft) and
 * checks its stops. Built by engine-builder.ts; driven only by the front door (engine-client.ts),
 * which owns the one loop that steps it. Nothing leaves it but EngineOutput snapshots.
 */
import { GrammarLimitError, InputError, RequestFieldError, RequestTooLongError } from "../errors.ts";
import type { KVCacheManager } from "../kv/kv-cache-manager.ts";
import type { KVLayout } from "../kv/kv-layout.ts";
import type { SecondTierStats } from "../kv/second-tier.ts";
import type { SecondTierLink } from "../kv/tier-link.ts";
import type { ModelForward } from "../backend/model-forward.ts";
import type { WasmMemories } from "../backend/wasm/wasm-memories.ts";
import { spanChunkEnd, stepSpans, type EmbeddedSpan } from "../model/batch.ts";
import type { Checkpoint } from "../model/checkpoint.ts";
import type { ModelConfig } from "../model/config.ts";
import type { Tokenizer } from "../tokenizer/tokenizer.ts";
import { Request } from "../kv/request.ts";
import type { EngineOptions } from "./engine-options.ts";
import { snapshot, type EngineOutput, type OutputMark } from "./engine-output.ts";
import { finiteLogits, NonFiniteDiagnosis } from "./logit-check.ts";
import { sampledLogprob } from "./logprobs.ts";
import type { MemoryPlan } from "./memory-plan.ts";
import type { ModelRunner } from "./model-runner.ts";
import { PendingForks } from "./parallel-sampling.ts";
import { SamplerWork } from "./sampler.ts";
import { EndCheck, type ReasoningMarkers, type TokenConstraint } from "../constraint/token-constraint.ts";
import { ReasoningGate } from "./reasoning-gate.ts";
import { Scheduler, type SchedulerOutput, type TierLoader } from "./scheduler.ts";
import { replyDecoder, Sequence, type GenerationParams } from "./sequence.ts";
import { Speculation } from "./speculation.ts";
import { Drafter } from "./speculative.ts";

/** Whether `mask` allows any of the first `n` tokens. */
function allowsAny(mask: Uint32Array, n: number): boolean {
  const words = n >>> 5;
  for (let w = 0; w < words; w++) if (mask[w] !== 0) return true;
  for (let t = words << 5; t < n; t++) if (((mask[t >>> 5]! >>> (t & 31)) & 1) === 1) return true;
  return false;
}

/** A request as the engine takes it: checked, tokenized, one GenerationParams per sample. */
export interface EngineRequest {
  readonly id: string;
  readonly promptTokenIds: readonly number[];
  /** Sample i's params (its own seed); at least one. */
  readonly samples: readonly GenerationParams[];
  readonly cacheSalt: string | null;
  /** What each sample's output is held to, or null. */
  readonly constraint: RequestConstraint | null;
  /** Spans of the prompt whose input rows are given (an image's), each keying the blocks it covers. */
  readonly embeds?: readonly EmbeddedSpan[];
}

/**
 * What a sample's tokens are held to: a compiled constraint (a fresh matcher per sample; null:
 * none), and for a model that reasons first its reasoning markers (the constraint starts after
 * them) and the most tokens its reasoning may take before `</think>` is forced (null: no bound).
 */
export interface RequestConstraint {
  readonly create: (() => TokenConstraint) | null;
  readonly reasoning: ReasoningMarkers | null;
  readonly reasoningBudget: number | null;
}

export interface EngineStats {
  /** Prefix cache lookups and hits, in tokens; evictions in blocks. */
  prefixQueries: number;
  prefixHits: number;
  /** Of prefixHits, the tokens read from the second tier (the disk) instead of computed. */
  prefixTierHits: number;
  /** The second tier's own counters; null when there is none. */
  tier: SecondTierStats | null;
  evictions: number;
  blocksInUse: number;
  /** Blocks that hold a cached prefix, in use or free. */
  blocksCached: number;
  numBlocks: number;
  preemptions: number;
  /**
   * Sequences holding KV blocks in the batch, and sequences waiting for a place in it (those
   * reading their cached blocks from disk, and samples to be forked once their prompt is computed,
   * included).
   */
  numRunning: number;
  numWaiting: number;
  /** Speculative decoding, over the engine's life: draft tokens verified, and those accepted. */
  draftedTokens: number;
  acceptedTokens: number;
  /** Bytes of the WebAssembly memories (logits, activations, the KV arena on WebAssembly, the weights). */
  memoryBytes: number;
  /** Forward steps run, and the most tokens one of them computed. */
  steps: number;
  maxStepTokens: number;
  /** Parallel samples forked sharing their prompt's KV, and those that recomputed it for want of a free block. */
  samplesForked: number;
  samplesRecomputed: number;
  /** Prompt chunks that did not finish their prompt (chunked prefill), and steps that ran such a chunk beside decodes. */
  partialPrefills: number;
  mixedSteps: number;
}

/** What the builder hands the engine: the model on its backend, the KV pool and what sizes them. */
export interface EngineParts {
  readonly checkpoint: Checkpoint;
  readonly tokenizer: Tokenizer;
  /** The model's shape at the context this engine runs at. */
  readonly config: ModelConfig;
  /** The options as asked, but maxNumSeqs fitted to the vocabulary. */
  readonly options: EngineOptions;
  readonly memories: WasmMemories;
  /** Which memory holds what (null on WebGPU: the weights are in GPU buffers). */
  readonly memoryPlan: MemoryPlan | null;
  readonly model: ModelForward;
  readonly kv: KVCacheManager;
  readonly kvLayout: KVLayout;
  /** Why the KV type is not the one asked for (q8_0 on heads that are not whole blocks), or null. */
  readonly kvTypeNote: string | null;
  readonly numBlocks: number;
  readonly runner: ModelRunner;
  /** The second tier under the memory pool; null without one. */
  readonly tierLink: SecondTierLink | null;
}

export class LLMEngine {
  readonly config: ModelConfig;
  readonly options: EngineOptions;
  readonly memories: WasmMemories;
  readonly memoryPlan: MemoryPlan | null;
  readonly model: ModelForward;
  readonly kvLayout: KVLayout;
  readonly kvTypeNote: string | null;
  readonly numBlocks: number;
  /** Positions one sequence can reach: the context, or less when the whole pool holds less. */
  readonly maxPositions: number;
  private readonly kv: KVCacheManager;
  private readonly runner: ModelRunner;
  private readonly tierLink: SecondTierLink | null;
  private readonly scheduler: Scheduler<Sequence>;
  private readonly forks: PendingForks;
  private readonly speculation: Speculation;
  private readonly tokenizer: Tokenizer;
  /** Every end-of-generation token of the vocabulary (EOS, EOT, <|im_end|>, ...), as llama.cpp's is_eog. */
  private readonly stopTokenIds: ReadonlySet<number>;
  /**
   * Ids a step may sample: the tokenizer's. A model may have more embedding rows than its
   * vocabulary has tokens (padding: a tokenizer file of its own, a converter that rounded the rows
   * up); those rows are never sampled, since no text stands for them, and never end a generation
   * with an error. (llama.cpp sizes the vocabulary by the file's tokens and pads them instead.)
   */
  private readonly sampledIds: number;
  private readonly nonFinite: NonFiniteDiagnosis;
  /** The model file and the context it declares (errors name it when it is the limit). */
  private readonly modelContext: { file: string; positions: number };
  /** Every unfinished request's samples, by request id. */
  private readonly requests = new Map<string, Sequence[]>();
  /** Where each unfinished sequence's last output ended. */
  private readonly marks = new Map<Sequence, OutputMark>();
  /** Work arrays of sampling, one vocabulary long, shared by every sequence (a step samples one at a time). */
  private readonly samplerWork = new SamplerWork();
  /** A constraint's token mask, filled for one sequence at a time (one bit per token of the larger of model and tokenizer). */
  private readonly mask: Uint32Array;
  /** Where constrained outputs may end, for their stop strings (on the mask buffer). */
  private readonly ends: EndCheck;
  private readonly counts = { steps: 0, maxStepTokens: 0, partialPrefills: 0, mixedSteps: 0, scored: 0 };
  /**
   * Tokens the last step computed: of requests past their prompt (sampled and draft tokens), and of
   * prompts (chunks, an admission's first, a preempted request's recomputation); zeros when it ran nothing.
   */
  lastStepTokens: { decode: number; prompt: number } = { decode: 0, prompt: 0 };

  constructor(parts: EngineParts) {
    this.config = parts.config;
    this.options = parts.options;
    this.memories = parts.memories;
    this.memoryPlan = parts.memoryPlan;
    this.model = parts.model;
    this.kvLayout = parts.kvLayout;
    this.kvTypeNote = parts.kvTypeNote;
    this.numBlocks = parts.numBlocks;
    this.kv = parts.kv;
    this.runner = parts.runner;
    this.tierLink = parts.tierLink;
    this.tokenizer = parts.tokenizer;
    const o = parts.options;
    this.maxPositions = parts.kv.groups.maxPositions(parts.numBlocks, o.blockSize, o.maxNumBatchedTokens, parts.config.seqLen);
    this.scheduler = new Scheduler<Sequence>(this.kv, {
      maxNumBatchedTokens: o.maxNumBatchedTokens, maxNumSeqs: o.maxNumSeqs, policy: o.schedule, maxPrefillWhileDecoding: o.maxPrefillWhileDecoding,
      ...(o.admission === "finish" ? { finalPositions: (seq: Sequence) => this.finalPositions(seq) } : {}),
    }, this.tierLoader());
    this.forks = new PendingForks(this.kv, this.scheduler, this.model);
    this.speculation = new Speculation(this.kv, this.maxPositions);
    const stops = new Set([...parts.checkpoint.extraStopTokenIds, ...parts.tokenizer.eogIds]);
    if (parts.tokenizer.eosId !== null) stops.add(parts.tokenizer.eosId);
    this.stopTokenIds = stops;
    this.sampledIds = Math.min(parts.tokenizer.vocabSize, parts.config.vocabSize);
    this.mask = new Uint32Array(Math.ceil(Math.max(parts.tokenizer.vocabSize, parts.config.vocabSize) / 32));
    this.ends = new EndCheck(this.mask, this.stopTokenIds);
    this.nonFinite = new NonFiniteDiagnosis(parts.checkpoint);
    this.modelContext = { file: parts.checkpoint.file, positions: parts.checkpoint.config.seqLen };
  }

  /**
   * Throws RequestTooLongError (naming the field at fault) when a request could never run: its
   * prompt plus max_tokens exceeds the context, the KV blocks it would need exceed the whole pool,
   * or its samples exceed what a step holds. (The last generated token is never fed back, so it
   * needs no position: prompt + max_tokens may be context + 1, as llama2.c's `-n` counts.)
   */
  checkFits(numPromptTokens: number, maxTokens: number | null, numSamples: number): void {
    const c = this.config;
    const P = numPromptTokens;
    // When the model's own context is the limit, the file is what says so: name it.
    const own = c.seqLen === this.modelContext.positions ? `${this.modelContext.file} declares a context of ${c.seqLen === 1 ? "only 1 token" : `${c.seqLen} tokens`}` : null;
    if (P > c.seqLen) {
      throw new RequestTooLongError(`prompt of ${P} tokens is longer than the context of ${c.seqLen} (${own === null ? "a larger --ctx-size, up to the model's own, or a shorter prompt" : `${own}; a shorter prompt`})`, "prompt");
    }
    if (maxTokens !== null && P + maxTokens - 1 > c.seqLen) {
      throw new RequestTooLongError(
        `prompt (${P} tokens) plus max_tokens (${maxTokens}) exceeds the context of ${c.seqLen} tokens (${own === null ? "a smaller --max-tokens or a larger --ctx-size" : `${own}; a smaller --max-tokens`})`,
        "maxTokens",
      );
    }
    // Without max_tokens a request stops when it reaches maxPositions; it only needs its prompt to fit.
    const positions = maxTokens === null ? P : P + maxTokens - 1;
    if (positions > this.maxPositions) {
      const blocks = this.kv.groups.blocksPerSequence(positions, this.options.blockSize, this.options.maxNumBatchedTokens);
      throw new RequestTooLongError(
        `needs ${blocks} KV blocks of ${this.options.blockSize} tokens, the whole pool has ${this.numBlocks} (a larger --kv-cache-mb or --num-blocks)`,
        maxTokens === null || P > this.maxPositions ? "prompt" : "maxTokens",
      );
    }
    if (numSamples > this.options.maxNumSeqs) {
      throw new RequestTooLongError(`${numSamples} samples of one prompt need more sequences than a step holds (${this.options.maxNumSeqs}; a larger --max-num-seqs)`, "n");
    }
  }

  /**
   * Queue a request: its first sample like any request, the others forked from it once its prompt
   * is computed (parallel-sampling.ts). Throws as checkFits does, and InputError for an id that is
   * already in flight.
   */
  add(request: EngineRequest): void {
    if (this.requests.has(request.id)) throw new InputError(`request id "${request.id}" is already in flight`);
    this.checkTokenIds(request.promptTokenIds);
    const maxTokens = request.samples[0]?.maxTokens ?? null;
    this.checkFits(request.promptTokenIds.length, maxTokens, request.samples.length);
    if (request.samples.some((p) => p.pooling !== undefined)) this.checkPooling(request);
    for (const e of request.embeds ?? []) this.checkSpan(e, request.promptTokenIds.length);
    const n = request.samples.length;
    const seqs = request.samples.map((params, i) => this.newSequence(request, params, i, n));
    const [parent, ...children] = seqs as [Sequence, ...Sequence[]];
    this.requests.set(request.id, seqs);
    for (const seq of seqs) this.marks.set(seq, { tokens: 0, logprobs: 0 });
    this.scheduler.add(parent, children.length);
    this.forks.add(parent, children);
  }

  /** A span of given input rows: inside the prompt, rows of the model's width, and (bidirectional) no longer than a step. */
  private checkSpan(e: EmbeddedSpan, promptLength: number): void {
    if (!Number.isInteger(e.offset) || !Number.isInteger(e.length) || e.offset < 0 || e.length < 1 || e.offset + e.length > promptLength) {
      throw new RequestFieldError("embeds", `hold a span [${e.offset}, ${e.offset + e.length}) outside the ${promptLength}-token prompt`);
    }
    if (!(e.rows instanceof Float32Array) || e.rows.length !== e.length * this.config.dim) throw new RequestFieldError("embeds", `must hold ${e.length} rows of ${this.config.dim} values (a Float32Array)`);
    if (e.bidirectional && e.length > this.options.maxNumBatchedTokens) {
      throw new RequestTooLongError(`an image of ${e.length} tokens does not fit one step of ${this.options.maxNumBatchedTokens} tokens (a larger --batch-size)`, "prompt");
    }
  }

  /** An embedding request (GenerationParams.pooling) computes its prompt and nothing after it: one sample, no constraint. */
  private checkPooling(request: EngineRequest): void {
    if (request.samples.length !== 1 || request.samples[0]!.pooling === undefined) throw new RequestFieldError("n", "must be 1 for an embedding");
    if (request.constraint !== null) throw new RequestFieldError("constraint", "cannot hold an embedding: it generates nothing");
    if (request.promptTokenIds.length === 0) throw new RequestFieldError("promptTokenIds", "must not be empty for an embedding");
  }

  get hasUnfinished(): boolean {
    return this.scheduler.hasUnfinished;
  }

  /**
   * Positions `seq` holds when it ends: its prompt and max_tokens, less the last sampled token (its
   * KV is never computed), at most maxPositions (where a request without max_tokens stops).
   */
  private finalPositions(seq: Sequence): number {
    const maxTokens = seq.params.maxTokens;
    return maxTokens === null ? this.maxPositions : Math.min(this.maxPositions, seq.numPromptTokens + maxTokens - 1);
  }

  /** One step: draft, schedule, run the batch, sample (verifying drafts) and check stops. */
  async step(): Promise<EngineOutput[]> {
    if (!this.scheduler.hasRunnable) await this.scheduler.tierProgress();
    // An embedding is never decoded, so it takes no draft.
    this.speculation.propose(this.scheduler.running, (seq) => this.forks.has(seq) || seq.params.pooling !== undefined);
    const plan = this.scheduler.schedule();
    if (plan.scheduled.length === 0) {
      this.lastStepTokens = { decode: 0, prompt: 0 };
      this.checkIdle();
      return [];
    }
    const logits = await this.runner.execute(plan.scheduled, (seq) => seq.params.pooling !== undefined);
    this.tierLink?.saveComputed();
    this.scheduler.update(plan);
    this.count(plan);
    const outputs = plan.scheduled.flatMap(({ req }, i) => this.sampleAll(req, logits[i]!));
    // Blocks that accepted draft tokens filled were cached by the rollback, after the forward.
    this.tierLink?.saveComputed();
    return outputs;
  }

  /**
   * Sample `seq` from its logit rows (none for a prompt chunk that does not end its prompt) and,
   * when its prompt was just computed, the samples forked from it from its first row.
   */
  private sampleAll(seq: Sequence, rows: readonly Float32Array[]): EngineOutput[] {
    if (rows.length === 0) return [];
    if (seq.params.pooling !== undefined) return [this.pooled(seq, rows[0]!)];
    // Only the tokenizer's ids are sampled (see sampledIds).
    const sampled = rows.map((row) => (row.length > this.sampledIds ? row.subarray(0, this.sampledIds) : row));
    const outputs = this.forks.fork(seq).map((child) => this.sample(child, sampled.slice(0, 1)));
    outputs.push(this.sample(seq, sampled));
    return outputs;
  }

  /** An embedding's prompt is computed: it ends with its hidden row (copied: the view lasts until the next forward). */
  private pooled(seq: Sequence, hidden: Float32Array): EngineOutput {
    seq.embedding = hidden.slice();
    const text = seq.finish("stop");
    return this.output(seq, text, 0);
  }

  /**
   * Sample seq's next token (more, verifying a draft) from its logit rows, append them and check
   * the stops; then the tokens its constraint forces, if any (computed as a chunk next step).
   */
  private sample(seq: Sequence, rows: readonly Float32Array[]): EngineOutput {
    let text = "";
    let forced: number[] = [];
    const draw = (row: Float32Array): number | null => {
      // A forced token a logprobs request still owes is taken as it is: no draw, as appendForced takes it.
      const queued = seq.forcedTokenIds.shift();
      const token = queued ?? this.draw(seq, row);
      if (token === null) return null;
      if (queued !== undefined && !seq.constraint!.acceptToken(token)) throw new Error(`the constraint refused token ${token}, which it had forced`);
      if (seq.params.logprobs !== undefined && !this.isStopToken(seq, token)) seq.logprobs.push(sampledLogprob(row, token, seq.params.logprobs));
      text += this.postprocess(seq, token);
      forced = queued === undefined ? this.forcedAfter(seq) : [];
      return token;
    };
    // Tokens forced after a drawn token come next, as decoding one at a time would have them.
    const numSampled = this.speculation.verify(seq, rows, draw, () => forced.length > 0);
    if (seq.params.logprobs === undefined) text += this.appendForced(seq, forced);
    else if (forced.length > 0) seq.forcedTokenIds = forced;
    return this.output(seq, text, numSampled);
  }

  /**
   * One token from a row of logits, within seq's constraint (which then accepts it); null, with
   * the sequence ended on an error, when the row is not finite or the constraint allows nothing.
   */
  private draw(seq: Sequence, row: Float32Array): number | null {
    if (!finiteLogits(row)) {
      seq.finish("error", this.nonFinite.explain());
      return null;
    }
    const constraint = seq.constraint;
    if (constraint === null) return seq.sample(row, this.samplerWork);
    try {
      constraint.fillNextTokenBitmask(this.mask);
      if (!allowsAny(this.mask, row.length)) {
        seq.finish("error", "the constraint allows no token here (a grammar that cannot continue)");
        return null;
      }
      const token = seq.sample(row, this.samplerWork, this.mask);
      if (!constraint.acceptToken(token)) throw new Error(`the constraint refused token ${token}, which its own mask allowed`);
      return token;
    } catch (e) {
      return this.constraintOverLimit(seq, e);
    }
  }

  /** A grammar whose masks went over their bounds (grammar/limits.ts) ends its sequence on the error; anything else is a bug. */
  private constraintOverLimit(seq: Sequence, e: unknown): null {
    if (!(e instanceof GrammarLimitError)) throw e;
    seq.finish("error", `the constraint went over a bound: ${e.message}`);
    return null;
  }

  /**
   * Jump-forward: where seq's constraint allows exactly one continuation (`{"name": "` after an
   * object opens), its tokens; [] when there is a choice. A request without logprobs appends them
   * at once (appendForced: the next step computes them as a chunk); one with logprobs needs each
   * one's row, so it takes them one a step (Sequence.forcedTokenIds), never drawing for them
   * either: the same tokens, the same random draws, the same bits.
   */
  private forcedAfter(seq: Sequence): number[] {
    const constraint = seq.constraint;
    if (constraint === null || seq.isFinished) return [];
    try {
      return constraint.forcedTokens();
    } catch (e) {
      return this.constraintOverLimit(seq, e) ?? [];
    }
  }

  /** Appends `forced` to seq without sampling (the next step computes them as a chunk); the text they make showable. */
  private appendForced(seq: Sequence, forced: readonly number[]): string {
    let text = "";
    for (const token of forced) {
      if (seq.isFinished || !seq.constraint!.acceptToken(token)) break;
      text += this.postprocess(seq, token);
    }
    return text;
  }

  /** An end-of-generation token that ends `seq` (none does with ignoreEos). */
  private isStopToken(seq: Sequence, token: number): boolean {
    return seq.params.ignoreEos !== true && this.stopTokenIds.has(token);
  }

  /** Append `token` to `seq` and end it on a stop token, a stop string, max_tokens or a full context; returns the text it makes showable. */
  private postprocess(seq: Sequence, token: number): string {
    if (this.isStopToken(seq, token)) return seq.finish("stop");
    let text = seq.appendToken(token);
    if (seq.isFinished) return text;
    const maxTokens = seq.params.maxTokens;
    // The next step would feed the token just sampled at position numTokens - 1.
    if ((maxTokens !== null && seq.outputTokenIds.length >= maxTokens) || seq.numTokens > this.maxPositions) {
      text += seq.finish("length");
    }
    return text;
  }

  /** The snapshot of what `seq` gained since its last output; a finished sequence leaves the engine. */
  private output(seq: Sequence, text: string, numSampled: number): EngineOutput {
    const mark = this.marks.get(seq)!;
    const out = snapshot(seq, mark, text, numSampled);
    if (seq.isFinished) this.retire(seq);
    return out;
  }

  /** A finished sequence: its blocks freed, and its request forgotten once every sample has ended. */
  private retire(seq: Sequence): void {
    this.scheduler.finish(seq);
    this.forks.forget(seq);
    this.marks.delete(seq);
    const samples = this.requests.get(seq.requestId);
    if (samples !== undefined && samples.every((s) => s.isFinished)) this.requests.delete(seq.requestId);
  }

  /** Ends every unfinished sample of request `id` with finish_reason "abort" (or `reason`); their last outputs. */
  abort(id: string, reason: "abort" | "error" = "abort", error: string | null = null): EngineOutput[] {
    const live = (this.requests.get(id) ?? []).filter((seq) => !seq.isFinished);
    const texts = live.map((seq) => seq.finish(reason, error));
    return live.map((seq, i) => this.output(seq, texts[i]!, 0));
  }

  /** Ends every unfinished request (Ctrl-C, a failed step); their last outputs. */
  abortAll(reason: "abort" | "error" = "abort", error: string | null = null): EngineOutput[] {
    return [...this.requests.keys()].flatMap((id) => this.abort(id, reason, error));
  }

  /**
   * Teacher-forced scoring: runs `tokens` through the model from position 0 and calls
   * onLogits(i, row) with the logits that follow tokens[0..i], for every i in order (the view is
   * valid only during the call). Computed in chunks through the paged KV cache like any prompt,
   * and batch invariance makes the logits the same bits as one pass would give. The tokens must
   * fit the context and the free blocks of the pool; run it between steps.
   */
  async score(tokens: readonly number[], onLogits: (position: number, logits: Float32Array) => void, embeds: readonly EmbeddedSpan[] = []): Promise<void> {
    if (tokens.length === 0) return;
    if (tokens.length > this.maxPositions) {
      throw new RequestTooLongError(`${tokens.length} tokens do not fit the context of ${this.maxPositions} (a larger --ctx-size)`, "prompt");
    }
    if (this.blocksToScore(tokens.length) > this.kv.numFreeBlocks) {
      throw new RequestTooLongError(`${tokens.length} tokens need more KV blocks than are free (${this.kv.numFreeBlocks} of ${this.options.blockSize} tokens; a larger --kv-cache-mb or --num-blocks)`, "prompt");
    }
    // Embedded spans (an image's rows) are multimodal items of the request: their ids key its blocks' hashes.
    const req = new Request({ id: `score-${this.counts.scored++}`, promptTokenIds: tokens, mmItems: embeds });
    try {
      const chunk = this.runner.maxScoredTokens;
      for (let start = 0; start < tokens.length;) {
        const end = spanChunkEnd(start, Math.min(tokens.length, start + chunk), embeds);
        const piece = tokens.slice(start, end);
        // Chunk by chunk, so that a sliding window's blocks behind the chunk are released (kv-cache-manager.ts).
        if (this.kv.allocateSlots(req, piece.length) === null) throw new Error(`score: ${piece.length} tokens found no free KV blocks`);
        const rows = await this.runner.scoreChunk(piece, start, this.kv.getBlockTables(req), stepSpans(embeds, start, end));
        rows.forEach((row, i) => onLogits(start + i, row));
        req.numComputedTokens += piece.length;
        start = end;
      }
      this.tierLink?.saveComputed();
    } finally {
      this.kv.free(req);
    }
  }

  /** KV blocks that scoring `numTokens` tokens holds at most (a sliding window's groups only the window and a chunk). */
  blocksToScore(numTokens: number): number {
    return this.kv.groups.blocksPerSequence(numTokens, this.options.blockSize, this.runner.maxScoredTokens);
  }

  /** KV blocks free now (a scoring task waits for as many as it needs). */
  get numFreeBlocks(): number {
    return this.kv.numFreeBlocks;
  }

  /**
   * Waits until the second tier holds every block computed so far: in "evict" mode the blocks still
   * cached in memory are saved first. Nothing to do without a tier. Call it before the process exits.
   */
  async flushTier(): Promise<void> {
    if (this.tierLink === null) return;
    if (this.tierLink.tier.writeMode === "evict") this.tierLink.saveAll(this.kv.cachedBlocks());
    await this.tierLink.settle();
    await this.tierLink.tier.flush();
  }

  get stats(): EngineStats {
    return {
      prefixQueries: this.kv.stats.queries,
      prefixHits: this.kv.stats.hits,
      prefixTierHits: this.kv.tierHits,
      tier: this.tierLink === null ? null : { ...this.tierLink.tier.stats },
      evictions: this.kv.stats.evictions,
      blocksInUse: this.kv.numUsedBlocks,
      blocksCached: this.kv.numCachedBlocks,
      numBlocks: this.numBlocks,
      preemptions: this.scheduler.numPreemptions,
      numRunning: this.scheduler.running.length,
      numWaiting: this.scheduler.waiting.length + this.forks.numPending,
      draftedTokens: this.speculation.drafted,
      acceptedTokens: this.speculation.accepted,
      memoryBytes: this.memories.backends.reduce((n, b) => n + b.mem.memory.buffer.byteLength, 0),
      samplesForked: this.forks.numShared,
      samplesRecomputed: this.forks.numRecomputed,
      steps: this.counts.steps,
      maxStepTokens: this.counts.maxStepTokens,
      partialPrefills: this.counts.partialPrefills,
      mixedSteps: this.counts.mixedSteps,
    };
  }

  /** Forget every cached block; false (nothing changes) while any request holds blocks. */
  resetPrefixCache(): boolean {
    return this.kv.resetPrefixCache();
  }

  /** Stop the worker threads and free the model's GPU buffers; the engine cannot run afterwards. */
  close(): void {
    this.model.close();
    this.memories.close();
  }

  private newSequence(request: EngineRequest, params: GenerationParams, index: number, n: number): Sequence {
    const ids = request.promptTokenIds;
    const constraint = request.constraint === null ? null : this.constraintFor(request.constraint, ids);
    return new Sequence(
      { id: n === 1 ? request.id : `${request.id}#${index}`, promptTokenIds: ids, cacheSalt: request.cacheSalt ?? undefined, mmItems: request.embeds },
      params,
      replyDecoder(this.tokenizer, ids[ids.length - 1], params.shownTokenIds),
      this.options.speculative === null ? null : new Drafter(this.options.speculative),
      { requestId: request.id, index },
      constraint,
      constraint === null ? null : this.ends,
    );
  }

  /**
   * A sample's constraint: a fresh one, gated by the model's reasoning when it reasons first (and
   * its budget); null when there is neither. Without a constraint of its own, the reply may end
   * inside its reasoning, as it would unconstrained.
   */
  private constraintFor(c: RequestConstraint, prompt: readonly number[]): TokenConstraint | null {
    const inner = c.create === null ? null : c.create();
    if (c.reasoning === null) return inner;
    if (inner === null && c.reasoningBudget === null) return null;
    const eog = inner === null ? new Set<number>() : this.stopTokenIds;
    return new ReasoningGate(inner, c.reasoning, eog, ReasoningGate.initialState(prompt, c.reasoning), c.reasoningBudget);
  }

  /** Input ids index the embedding: one past its rows would read outside it. */
  private checkTokenIds(tokens: readonly number[]): void {
    const rows = this.config.vocabSize;
    const at = tokens.findIndex((t) => !(Number.isInteger(t) && t >= 0 && t < rows));
    if (at >= 0) throw new RequestFieldError(`promptTokenIds[${at}]`, `must be a token id from 0 to ${rows - 1}, got ${tokens[at]}`);
  }

  /** The second tier's reads of a waiting request's blocks, for the scheduler (null without a tier). */
  private tierLoader(): TierLoader<Sequence> | null {
    const link = this.tierLink;
    if (link === null) return null;
    return {
      start: (req) => link.startLoad(this.kv.blocksToLoad(req, (hash, group) => link.holds(hash, group))),
      land: (req, load) => {
        this.kv.adoptBlocks(req, load.numHitBlocks, (i, g) => load.kvOf(i, g), (blockId, g, bytes) => link.writeBlock(blockId, g, bytes));
        // A failed read shortens the hit, and with sliding-window layers the shorter hit needs other
        // window blocks than those read: plan once more around the damage (its files are gone).
        if (load.numFailed === 0 || load.retry) return null;
        return link.startLoad(this.kv.blocksToLoad(req, (hash, group) => link.holds(hash, group)), true);
      },
    };
  }

  /**
   * With nothing running every block is free, and add() only accepts requests that fit the pool:
   * an empty step with work waiting (and none of it reading from the tier) would be a scheduler
   * bug, not a busy pool.
   */
  private checkIdle(): void {
    if (this.scheduler.waiting.length > 0 && this.scheduler.running.length === 0 && this.scheduler.hasRunnable) {
      throw new Error(`scheduler admitted none of ${this.scheduler.waiting.length} waiting requests into an idle pool`);
    }
  }

  /** How the step was composed, for stats. */
  private count(plan: SchedulerOutput<Sequence>): void {
    let decodes = 0;
    let partial = 0;
    const tokens = { decode: 0, prompt: 0 };
    for (const { req, numNewTokens } of plan.scheduled) {
      const before = req.numComputedTokens - numNewTokens;
      if (before >= req.numPromptTokens) decodes++;
      else if (req.numComputedTokens < req.numPromptTokens) partial++;
      if (before >= req.numPromptTokens) tokens.decode += numNewTokens;
      else tokens.prompt += numNewTokens;
    }
    this.lastStepTokens = tokens;
    const c = this.counts;
    c.steps++;
    c.maxStepTokens = Math.max(c.maxStepTokens, plan.numScheduledTokens);
    c.partialPrefills += partial;
    if (decodes > 0 && partial > 0) c.mixedSteps++;
  }
}
