/**
 * The engine: one model, one KV block pool, one scheduler. `step()` is schedule, run, postprocess:
 * the scheduler picks the tokens of this step, the model runner computes them in one batched
 * forward pass, and each request that got logits samples its next token and checks its stops.
 */
import { availableParallelism } from "node:os";
import { CpuBackend } from "../backend/cpu.ts";
import { InputError, RequestTooLongError } from "../errors.ts";
import { KVCacheManager, type BlockCopy } from "../kv/kv-cache-manager.ts";
import { kvLayout, resolveKVType, type KVLayout, type KVType } from "../kv/kv-layout.ts";
import type { EvictionPolicyName } from "../kv/eviction.ts";
import type { HashAlgorithm } from "../kv/block-hash.ts";
import type { KVSecondTier, SecondTierStats } from "../kv/second-tier.ts";
import { SecondTierLink, type TierLoad } from "../kv/tier-link.ts";
import { StepBatch } from "../model/batch.ts";
import type { Checkpoint } from "../model/checkpoint.ts";
import type { ModelConfig } from "../model/config.ts";
import { loadPlacedWeights, type LoadProgress } from "../model/weights.ts";
import { FileWeights } from "../backend/webgpu/file-weights.ts";
import { memoryLimitBytes } from "../backend/placement.ts";
import { WasmMemories } from "../backend/wasm-memories.ts";
import { planMemory, type MemoryPlan } from "./memory-plan.ts";
import { WasmForward } from "../backend/wasm-forward.ts";
import type { WebGpuBackend } from "../backend/webgpu/backend.ts";
import { WebGpuForward } from "../backend/webgpu/webgpu-forward.ts";
import type { ModelForward } from "./model-forward.ts";
import type { Tokenizer } from "../tokenizer/tokenizer.ts";
import { sampledLogprob } from "./logprobs.ts";
import { SamplerWork } from "./sampler.ts";
import { firstNonFiniteTensor } from "../model/weight-scan.ts";
import { quoteFileText } from "../util/file-text.ts";
import { ModelRunner } from "./model-runner.ts";
import { Request } from "./request.ts";
import { Scheduler, type SchedulePolicy } from "./scheduler.ts";
import { Sequence, type GenerationParams } from "./sequence.ts";
import { checkSpeculative, Drafter, type SpeculativeOptions } from "./speculative.ts";

export interface EngineOptions {
  /**
   * Context size: positions a sequence may reach, which size the RoPE tables and cap the KV pool.
   * null = DEFAULT_CONTEXT or the model's own if smaller; 0 = the model's full context.
   */
  ctxSize: number | null;
  /** Tokens per KV block. */
  blockSize: number;
  /** KV pool size in blocks; null = from kvCacheMb. */
  numBlocks: number | null;
  /** KV pool size in MiB when numBlocks is null. */
  kvCacheMb: number;
  enablePrefixCaching: boolean;
  evictionPolicy: EvictionPolicyName;
  prefixHash: HashAlgorithm;
  /** Token budget of one step (prefill chunks and decode tokens together). */
  maxNumBatchedTokens: number;
  /** Sequences one step may hold. */
  maxNumSeqs: number;
  schedule: SchedulePolicy;
  /** Threads the kernels run on (1 = the calling thread only). */
  threads: number;
  /**
   * Speculative decoding (speculative.ts): drafts verified several tokens a step, the output the
   * same bits as without; null = off.
   */
  speculative: SpeculativeOptions | null;
  /**
   * The largest WebAssembly memory in MiB (a model larger is placed over several); null =
   * PAGELLM_WASM_MEMORY_MB, else 4 GiB less what the runtime needs.
   */
  wasmMemoryMb: number | null;
  /**
   * Element type of the KV cache (llama.cpp's --cache-type-k/-v); null = the model's default: f16
   * for GGUF models, f32 for llama2.c checkpoints (see src/kv/kv-layout.ts).
   */
  kvType: KVType | null;
}

/** Context used when none is asked for: enough for chat, far less memory than a 128K-token maximum. */
export const DEFAULT_CONTEXT = 4096;

export const DEFAULT_ENGINE_OPTIONS: EngineOptions = {
  ctxSize: null,
  blockSize: 16,
  numBlocks: null,
  kvCacheMb: 512,
  enablePrefixCaching: true,
  evictionPolicy: "lru-keep-cached",
  prefixHash: "sha256",
  maxNumBatchedTokens: 512,
  maxNumSeqs: 64,
  schedule: "fcfs",
  threads: availableParallelism(),
  speculative: null,
  wasmMemoryMb: null,
  kvType: null,
};

export interface NewRequest {
  id: string;
  promptTokenIds: number[];
  params: GenerationParams;
  cacheSalt?: string;
}

/** What one step did for one request. */
export interface StepEvent {
  seq: Sequence;
  /** Tokens sampled this step (a stop token included): 1, or more when draft tokens were accepted; 0 when aborted. */
  numSampled: number;
  /** Text that became showable this step. */
  delta: string;
  finished: boolean;
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
  numBlocks: number;
  preemptions: number;
  /** Sequences holding KV blocks in the batch, and sequences queued for a place in it (those reading their cached blocks from disk included). */
  numRunning: number;
  numWaiting: number;
  /** Speculative decoding, over the engine's life: draft tokens verified, and those accepted. */
  draftedTokens: number;
  acceptedTokens: number;
}

export class LLMEngine {
  readonly config: ModelConfig;
  /** The WebAssembly memories (several for a model larger than one), their kernels and threads. */
  readonly memories: WasmMemories;
  /** The first memory: the step batch, and on WebAssembly the first part of the model. */
  readonly backend: CpuBackend;
  /** Which memory holds what, and how the weights are stored (null on WebGPU: the weights are in GPU buffers). */
  readonly memoryPlan: MemoryPlan | null;
  /** The forward pass's backend: WebAssembly, or WebGPU when constructed with a GPU. */
  readonly model: ModelForward;
  readonly kv: KVCacheManager;
  readonly numBlocks: number;
  /** How the KV cache stores its values: element type, bytes of a row and of a block. */
  readonly kvLayout: KVLayout;
  /** Why the KV type is not the one asked for (q8_0 on heads that are not whole blocks), or null. */
  readonly kvTypeNote: string | null;
  /** Positions one sequence can reach: the context, or less when the whole pool holds less. */
  readonly maxPositions: number;
  private readonly scheduler: Scheduler<Sequence>;
  private readonly runner: ModelRunner;
  private readonly stopTokenIds: ReadonlySet<number>;
  /**
   * Ids a step may sample: the tokenizer's. A model may have more embedding rows than its
   * vocabulary has tokens (padding: a tokenizer file of its own, a converter that rounded the rows
   * up); those rows are never sampled, since no text stands for them, and never end a generation
   * with an error. (llama.cpp sizes the vocabulary by the file's tokens and pads them instead.)
   */
  private readonly sampledIds: number;
  /** Said when a step's logits are not finite (nonFiniteLogitsProblem), found once. */
  private nonFiniteProblem: string | null = null;
  /** The model file and the context it declares (errors name it when it is the limit). */
  private readonly modelContext: { file: string; positions: number };
  private numScored = 0;
  /** Parallel sampling: the samples to fork from a request once its prompt is computed, by request. */
  private readonly pendingForks = new Map<Sequence, Sequence[]>();
  private readonly spec = { drafted: 0, accepted: 0 };
  /** The second tier under the memory pool; null without one. */
  private readonly tierLink: SecondTierLink | null;
  /** Requests whose blocks are being read from the second tier; they join the scheduler when the reads land. */
  private readonly loading = new Map<Sequence, { load: TierLoad; forks: number }>();
  /** The options this engine runs with: as asked, but maxNumSeqs fitted to the vocabulary (fitToVocabulary). */
  readonly options: EngineOptions;
  /** Work arrays of sampling, one vocabulary long, shared by every sequence (a step samples one at a time). */
  private readonly samplerWork = new SamplerWork();

  constructor(
    private readonly checkpoint: Checkpoint,
    readonly tokenizer: Tokenizer,
    requested: EngineOptions = DEFAULT_ENGINE_OPTIONS,
    onLoadProgress?: LoadProgress,
    /** Run the forward pass on this WebGPU backend (its owner closes it after the engine); absent: WebAssembly. */
    gpu?: WebGpuBackend,
    /**
     * Opens a second tier of cached KV blocks under the memory pool (the disk tier) for this
     * engine's KV layout and the backend that computes its KV (ModelForward.kvProducer).
     */
    secondTier?: (layout: KVLayout, kvProducer: string) => KVSecondTier,
  ) {
    const c = withContext(checkpoint.config, requested.ctxSize);
    this.config = c;
    const o = fitToVocabulary(requested, c);
    this.options = o;
    if (o.speculative !== null) checkSpeculative(o.speculative);
    const kvType = resolveKVType(c, checkpoint.format, o.kvType ?? null);
    this.kvLayout = kvLayout(c, o.blockSize, kvType.type);
    this.kvTypeNote = kvType.note;
    this.numBlocks = o.numBlocks ?? defaultNumBlocks(c, o, this.kvLayout, gpu === undefined ? Infinity : WebGpuForward.maxBlocks(gpu, this.kvLayout));
    if (gpu === undefined) {
      const shape = {
        maxTokens: o.maxNumBatchedTokens, maxSeqs: o.maxNumSeqs, maxLogits: logitRows(o), blockSize: o.blockSize, numBlocks: this.numBlocks,
        kvBlockBytes: this.kvLayout.blockBytes, threads: o.threads,
      };
      this.memoryPlan = planMemory(checkpoint, c, shape, memoryLimitBytes(o.wasmMemoryMb));
      this.memories = new WasmMemories(this.memoryPlan.placement.memories.length, o.threads);
    } else {
      // On WebGPU the weights and the KV cache are in GPU buffers; linear memory holds the step
      // batch and a ggml embedding table (its rows are looked up by WebAssembly): one memory, no threads.
      this.memoryPlan = null;
      this.memories = new WasmMemories(1, 1);
    }
    this.backend = this.memories.backends[0]!;
    this.maxPositions = Math.min(c.seqLen, this.numBlocks * o.blockSize);
    try {
      const batch = new StepBatch(this.backend.mem, o.maxNumBatchedTokens, o.maxNumSeqs, Math.ceil(c.seqLen / o.blockSize), o.blockSize, logitRows(o));
      this.model = this.memoryPlan === null
        ? createGpuForward(c, checkpoint, this.backend, batch, this.numBlocks, this.kvLayout, gpu!, onLoadProgress)
        : this.createWasmForward(checkpoint, this.memoryPlan, batch, onLoadProgress);
      this.tierLink = secondTier === undefined ? null : createTierLink(secondTier(this.kvLayout, this.model.kvProducer), this.model, o, this.numBlocks);
      this.kv = this.createKV(o);
      this.tierLink?.attach(this.kv);
      this.runner = new ModelRunner(this.model, this.kv, batch);
    } catch (e) {
      this.memories.close();
      throw e;
    }
    this.scheduler = new Scheduler<Sequence>(this.kv, {
      maxNumBatchedTokens: o.maxNumBatchedTokens,
      maxNumSeqs: o.maxNumSeqs,
      policy: o.schedule,
    });
    // Every end-of-generation token of the vocabulary (EOS, EOT, <|im_end|>, ...), as llama.cpp's is_eog.
    const stops = new Set([...checkpoint.extraStopTokenIds, ...tokenizer.eogIds]);
    if (tokenizer.eosId !== null) stops.add(tokenizer.eosId);
    this.stopTokenIds = stops;
    this.sampledIds = Math.min(tokenizer.vocabSize, c.vocabSize);
    this.modelContext = { file: checkpoint.file, positions: checkpoint.config.seqLen };
  }

  /**
   * Queue a request. Throws RequestTooLongError when it could never run: its prompt plus
   * max_tokens exceeds the context, or the KV blocks it would need exceed the whole pool. (The
   * last generated token is never fed back, so it needs no position: prompt + max_tokens may be
   * context + 1, as llama2.c's `-n` counts.)
   */
  addRequest(input: NewRequest): Sequence {
    const seq = this.newSequence(input);
    this.checkFits(seq);
    const load = this.tierLink?.startLoad(seq) ?? null;
    if (load === null) this.scheduler.add(seq);
    else this.loading.set(seq, { load, forks: 0 });
    return seq;
  }

  /**
   * Parallel sampling (the OpenAI API's `n`): several samples of one prompt, each with its own id
   * and generation params (its own seed), computing the prompt once. The first is queued like any
   * request; when its prompt is computed, the others are forked from it: they share its prompt's
   * KV blocks (KVCacheManager.fork) and draw their first token from the same logits. Each is then
   * a request of its own (finished, aborted, preempted alone). Throws as addRequest does, and
   * InputError when the inputs differ in prompt or cache salt.
   */
  addParallelSampling(inputs: readonly NewRequest[]): Sequence[] {
    const [first, ...rest] = inputs;
    if (first === undefined) throw new InputError("parallel sampling needs at least one request");
    for (const other of rest) {
      const samePrompt = other.promptTokenIds.length === first.promptTokenIds.length && other.promptTokenIds.every((t, i) => t === first.promptTokenIds[i]);
      if (!samePrompt || (other.cacheSalt ?? "") !== (first.cacheSalt ?? "")) {
        throw new InputError(`parallel samples ${first.id} and ${other.id} differ in prompt or cache salt`);
      }
    }
    if (inputs.length > this.options.maxNumSeqs) {
      throw new RequestTooLongError(`${inputs.length} samples of one prompt need more sequences than a step holds (${this.options.maxNumSeqs}; a larger --max-num-seqs)`);
    }
    const seqs = inputs.map((input) => this.newSequence(input));
    for (const seq of seqs) this.checkFits(seq);
    const [parent, ...children] = seqs as [Sequence, ...Sequence[]];
    const load = this.tierLink?.startLoad(parent) ?? null;
    if (load === null) this.scheduler.add(parent, children.length);
    else this.loading.set(parent, { load, forks: children.length });
    if (children.length > 0) this.pendingForks.set(parent, children);
    return seqs;
  }

  private newSequence(input: NewRequest): Sequence {
    this.checkTokenIds(input.id, input.promptTokenIds);
    return new Sequence(
      { id: input.id, promptTokenIds: input.promptTokenIds, cacheSalt: input.cacheSalt },
      input.params,
      this.tokenizer.createStreamDecoder(input.promptTokenIds[input.promptTokenIds.length - 1]),
      this.options.speculative === null ? null : new Drafter(this.options.speculative),
    );
  }

  get hasUnfinished(): boolean {
    return this.scheduler.hasUnfinished || this.loading.size > 0;
  }

  /** One step: draft, schedule, run the batch, sample (verifying drafts) and check stops. */
  async step(): Promise<StepEvent[]> {
    await this.landTierLoads();
    this.proposeDrafts();
    const out = this.scheduler.schedule();
    if (out.scheduled.length === 0) {
      // With nothing running every block is free, and addRequest only accepts requests that fit
      // the pool: an empty step with work waiting would be a scheduler bug, not a busy pool.
      if (this.scheduler.waiting.length > 0 && this.scheduler.running.length === 0) {
        throw new Error(`scheduler admitted none of ${this.scheduler.waiting.length} waiting requests into an idle pool`);
      }
      return [];
    }
    const logits = await this.runner.execute(out.scheduled);
    this.tierLink?.saveComputed();
    this.scheduler.update(out);
    const events: StepEvent[] = [];
    out.scheduled.forEach(({ req: seq }, i) => {
      // Only the tokenizer's ids are sampled (see sampledIds).
      const rows = logits[i]!.map((row) => (row.length > this.sampledIds ? row.subarray(0, this.sampledIds) : row));
      if (rows.length === 0) return;
      const forks = this.pendingForks.get(seq);
      if (forks !== undefined) {
        // A request with samples to fork never drafts (proposeDrafts): rows is its one row.
        this.pendingForks.delete(seq);
        for (const child of this.fork(seq, forks)) events.push(this.sampleAndCheck(child, rows.slice(0, 1)));
      }
      events.push(this.sampleAndCheck(seq, rows));
    });
    // Blocks that accepted draft tokens filled were cached by the rollback, after the forward.
    this.tierLink?.saveComputed();
    return events;
  }

  /** Sample seq's next token (more, verifying a draft) from its logit rows, append them and check the stops. */
  private sampleAndCheck(seq: Sequence, rows: readonly Float32Array[]): StepEvent {
    const { delta, numSampled } = this.sampleRows(seq, rows);
    if (seq.isFinished) this.scheduler.finish(seq);
    return { seq, delta, finished: seq.isFinished, numSampled };
  }

  /**
   * Fork the unfinished `children` from `parent`, whose prompt was just computed: each gets the
   * parent's KV (shared full blocks, a copy of a partly filled last one, copied here before the
   * next step) and runs on; without a free block for the copy it recomputes its prompt instead.
   * Returns the forked children, to sample from the parent's logits.
   */
  private fork(parent: Sequence, children: readonly Sequence[]): Sequence[] {
    const copies: BlockCopy[] = [];
    const forked: Sequence[] = [];
    for (const child of children) {
      if (child.isFinished) {
        this.scheduler.dropFork(parent);
        continue;
      }
      const shared = this.kv.fork(parent, child);
      if (shared?.copy) copies.push(shared.copy);
      child.numComputedTokens = shared === null ? 0 : parent.numComputedTokens;
      this.scheduler.startFork(parent, child, shared !== null);
      forked.push(child);
    }
    this.model.copyBlocks(copies);
    return forked;
  }

  /**
   * Give every running sequence its draft for this step ([] when it does not speculate, pauses or
   * finds none). A sequence still reading its prompt gets one too: the scheduler runs it only with
   * the prompt's last chunk, so the first tokens after a prompt can already come from it. Not a
   * sequence whose samples are forked once its prompt is computed: they take its KV as computed.
   */
  private proposeDrafts(): void {
    for (const seq of this.scheduler.running) {
      const drafts = seq.drafter !== null && !this.pendingForks.has(seq);
      seq.draftTokenIds = drafts ? seq.drafter!.propose(seq.allTokenIds, this.draftLimit(seq)) : [];
    }
  }

  /**
   * Most draft tokens a sequence may verify: accepted whole, with the token sampled after them, they
   * must not take it past max_tokens, and their positions must fit the context.
   */
  private draftLimit(seq: Sequence): number {
    const maxTokens = seq.params.maxTokens;
    const byLength = maxTokens === null ? Infinity : maxTokens - seq.outputTokenIds.length - 1;
    return Math.max(0, Math.min(byLength, this.maxPositions - seq.numTokens));
  }

  /**
   * Sample a sequence's logit rows in order, exactly as decoding one token at a time would: row j
   * follows draft token j - 1, so it is only used while every draw so far equalled the draft.
   * Then the draft's rejected positions are rolled back: the sequence keeps the KV of its known
   * tokens up to the last one, which the next step feeds, as after a plain decode.
   */
  private sampleRows(seq: Sequence, rows: readonly Float32Array[]): { delta: string; numSampled: number } {
    const draft = seq.draftTokenIds;
    const numDrafted = rows.length - 1;
    let delta = "";
    let accepted = 0;
    let numSampled = 0;
    for (let j = 0; j < rows.length; j++) {
      const row = rows[j]!;
      if (!finiteLogits(row)) {
        delta += seq.finish("error", this.nonFiniteLogitsProblem());
        break;
      }
      const token = seq.sampler.sample(row, seq.allTokenIds, this.samplerWork);
      if (seq.params.logprobs !== undefined && !this.isStopToken(seq, token)) seq.logprobs.push(sampledLogprob(row, token, seq.params.logprobs));
      numSampled++;
      delta += this.postprocess(seq, token);
      const hit = j < numDrafted && token === draft[j];
      if (hit) accepted++;
      if (!hit || seq.isFinished) break;
    }
    seq.draftTokenIds = [];
    if (numDrafted > 0) {
      seq.drafter!.record(numDrafted, accepted);
      this.spec.drafted += numDrafted;
      this.spec.accepted += accepted;
      if (!seq.isFinished) {
        seq.numComputedTokens = seq.numTokens - 1;
        this.kv.rollback(seq, seq.numComputedTokens);
      }
    }
    return { delta, numSampled };
  }

  /**
   * Teacher-forced scoring: runs `tokens` through the model from position 0 and calls
   * onLogits(i, row) with the logits that follow tokens[0..i], for every i in order (the view is
   * valid only during the call). Computed in chunks through the paged KV cache like any prompt,
   * and batch invariance makes the logits the same bits as one pass would give. The tokens must
   * fit the context and the free blocks of the pool.
   */
  async score(tokens: readonly number[], onLogits: (position: number, logits: Float32Array) => void): Promise<void> {
    if (tokens.length === 0) return;
    if (tokens.length > this.maxPositions) {
      throw new RequestTooLongError(`${tokens.length} tokens do not fit the context of ${this.maxPositions} (a larger --ctx-size)`);
    }
    const req = new Request({ id: `score-${this.numScored++}`, promptTokenIds: tokens });
    this.checkTokenIds(req.id, tokens);
    if (this.kv.allocateSlots(req, tokens.length) === null) {
      throw new RequestTooLongError(`${tokens.length} tokens need more KV blocks than are free (${this.kv.numFreeBlocks} of ${this.options.blockSize} tokens; a larger --kv-cache-mb or --num-blocks)`);
    }
    try {
      const blockTable = this.kv.getBlockIds(req);
      const chunk = this.runner.maxScoredTokens;
      for (let start = 0; start < tokens.length; start += chunk) {
        const rows = await this.runner.scoreChunk(tokens.slice(start, start + chunk), start, blockTable);
        rows.forEach((row, i) => onLogits(start + i, row));
      }
      this.tierLink?.saveComputed();
    } finally {
      this.kv.free(req);
    }
  }

  /** Stop a request wherever it is; returns its final event. */
  abort(seq: Sequence): StepEvent {
    const delta = seq.finish("abort");
    this.loading.delete(seq);
    this.scheduler.finish(seq);
    // Samples still to be forked from it become requests of their own.
    const forks = this.pendingForks.get(seq);
    this.pendingForks.delete(seq);
    for (const child of forks ?? []) if (!child.isFinished) this.scheduler.add(child);
    return { seq, delta, finished: true, numSampled: 0 };
  }

  /** Abort every unfinished request (Ctrl-C). */
  abortAll(): StepEvent[] {
    const events: StepEvent[] = [...this.loading.keys()].map((seq) => this.abort(seq));
    // Aborting a parallel-sampling parent queues its unforked samples: loop until none is left.
    while (this.scheduler.hasUnfinished) {
      for (const seq of [...this.scheduler.running, ...this.scheduler.waiting]) events.push(this.abort(seq));
    }
    return events;
  }

  /**
   * Waits until the second tier holds every block computed so far: in "evict" mode the blocks still
   * cached in memory are saved first. Nothing to do without a tier. Call it before the process exits.
   */
  async flushTier(): Promise<void> {
    if (this.tierLink === null) return;
    if (this.tierLink.tier.writeMode === "evict") this.tierLink.saveAll();
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
      numBlocks: this.numBlocks,
      preemptions: this.scheduler.numPreemptions,
      numRunning: this.scheduler.running.length,
      numWaiting: this.scheduler.waiting.length + this.loading.size,
      draftedTokens: this.spec.drafted,
      acceptedTokens: this.spec.accepted,
    };
  }

  /** Stop the worker threads and free the model's GPU buffers; the engine cannot run afterwards. */
  close(): void {
    this.model.close();
    this.memories.close();
  }

  /** The weights loaded into the planned memories, and the forward pass over them. */
  private createWasmForward(checkpoint: Checkpoint, plan: MemoryPlan, batch: StepBatch, onLoadProgress?: LoadProgress): ModelForward {
    const placement = plan.placement;
    const weights = loadPlacedWeights(checkpoint, this.memories.targets, placement.weights, onLoadProgress, plan.storage);
    const parts = placement.memories.map((m) => m.part);
    return new WasmForward(this.config, weights, this.memories.backends, parts, batch, batch.maxLogitRows, this.numBlocks, this.kvLayout);
  }

  private createKV(o: EngineOptions): KVCacheManager {
    return new KVCacheManager({
      numBlocks: this.numBlocks,
      blockSize: o.blockSize,
      enableCaching: o.enablePrefixCaching,
      evictionPolicy: o.evictionPolicy,
      hash: o.prefixHash,
      listener: this.tierLink ?? undefined,
    });
  }

  /** Forget every cached block; false (nothing changes) while any request holds blocks. */
  resetPrefixCache(): boolean {
    return this.kv.resetPrefixCache();
  }

  /**
   * Moves requests whose second-tier reads have finished into the scheduler, their blocks adopted
   * into the pool. When nothing else could run this step, waits for the first read to finish
   * instead (otherwise reads overlap with the steps of other requests).
   */
  private async landTierLoads(): Promise<void> {
    if (this.loading.size === 0) return;
    if (!this.scheduler.hasUnfinished) await Promise.race([...this.loading.values()].map((entry) => entry.load.done));
    for (const [seq, { load, forks }] of this.loading) {
      if (!load.settled) continue;
      this.loading.delete(seq);
      this.tierLink?.land(seq, load);
      this.scheduler.add(seq, forks);
    }
  }

  /** An end-of-generation token that ends `seq` (none does with ignoreEos). */
  private isStopToken(seq: Sequence, token: number): boolean {
    return seq.params.ignoreEos !== true && this.stopTokenIds.has(token);
  }

  private postprocess(seq: Sequence, token: number): string {
    if (this.isStopToken(seq, token)) return seq.finish("stop");
    let delta = seq.appendToken(token);
    if (seq.isFinished) return delta;
    const maxTokens = seq.params.maxTokens;
    // The next step would feed the token just sampled at position numTokens - 1.
    if ((maxTokens !== null && seq.outputTokenIds.length >= maxTokens) || seq.numTokens > this.maxPositions) {
      delta += seq.finish("length");
    }
    return delta;
  }

  /**
   * Why the model computed NaN or infinite logits, found once: the first weight tensor of the
   * file that holds such a value (weight-scan.ts reads the file for it), or, when every weight is
   * finite, activations that overflowed.
   */
  private nonFiniteLogitsProblem(): string {
    if (this.nonFiniteProblem === null) {
      const tensor = firstNonFiniteTensor(this.checkpoint);
      this.nonFiniteProblem = `${this.checkpoint.file}: the model computed NaN or infinite logits: ` +
        (tensor === null ? "every weight is finite, so its activations overflowed (a broken model?)" : `tensor ${quoteFileText(tensor)} holds NaN or infinite values`);
    }
    return this.nonFiniteProblem;
  }

  /** Input ids index the embedding: one past its rows would read outside it. */
  private checkTokenIds(id: string, tokens: readonly number[]): void {
    const rows = this.config.vocabSize;
    const at = tokens.findIndex((t) => !(t >= 0 && t < rows));
    if (at >= 0) throw new InputError(`request ${id}: token id ${tokens[at]} at index ${at} is outside the model's vocabulary (0..${rows - 1})`);
  }

  private checkFits(seq: Sequence): void {
    const c = this.config;
    const P = seq.numPromptTokens;
    const maxTokens = seq.params.maxTokens;
    // When the model's own context is the limit, the file is what says so: name it.
    const own = c.seqLen === this.modelContext.positions ? `${this.modelContext.file} declares a context of ${c.seqLen === 1 ? "only 1 token" : `${c.seqLen} tokens`}` : null;
    if (P > c.seqLen) {
      throw new RequestTooLongError(`prompt of ${P} tokens is longer than the context of ${c.seqLen} (${own === null ? "a larger --ctx-size, up to the model's own, or a shorter prompt" : `${own}; a shorter prompt`})`);
    }
    if (maxTokens !== null && P + maxTokens - 1 > c.seqLen) {
      throw new RequestTooLongError(
        `prompt (${P} tokens) plus max_tokens (${maxTokens}) exceeds the context of ${c.seqLen} tokens (${own === null ? "a smaller --max-tokens or a larger --ctx-size" : `${own}; a smaller --max-tokens`})`,
      );
    }
    // Without max_tokens a request stops when it reaches maxPositions; it only needs its prompt to fit.
    const positions = maxTokens === null ? P : P + maxTokens - 1;
    if (positions > this.maxPositions) {
      const blocks = Math.ceil(positions / this.options.blockSize);
      throw new RequestTooLongError(
        `needs ${blocks} KV blocks of ${this.options.blockSize} tokens, the whole pool has ${this.numBlocks} (a larger --kv-cache-mb or --num-blocks)`,
      );
    }
  }
}

/** The link to a second tier, refused where it cannot work (the fast hash, no prefix cache). */
function createTierLink(tier: KVSecondTier, model: ModelForward, o: EngineOptions, numBlocks: number): SecondTierLink {
  if (!o.enablePrefixCaching) throw new InputError("a KV cache directory needs the prefix cache: drop --no-prefix-cache");
  if (o.prefixHash !== "sha256") throw new InputError(`a KV cache directory keys blocks by sha256 block hashes; --prefix-hash ${o.prefixHash} cannot be used with it`);
  return new SecondTierLink(tier, model.kvBlocks, numBlocks);
}

/** The forward pass on WebGPU, weights read from the file to GPU buffers, its buffers sized for the engine's largest step. */
function createGpuForward(
  c: ModelConfig, checkpoint: Checkpoint, cpu: CpuBackend, batch: StepBatch, numBlocks: number, kv: KVLayout, gpu: WebGpuBackend,
  onLoadProgress?: LoadProgress,
): ModelForward {
  return new WebGpuForward(c, new FileWeights({ ...checkpoint, config: c }, onLoadProgress), cpu, gpu, {
    maxTokens: batch.maxTokens,
    // A step's logit rows are some of its tokens.
    maxLogits: Math.min(batch.maxLogitRows, batch.maxTokens),
    maxSeqs: batch.maxSeqs,
    maxBlocksPerSeq: batch.maxBlocksPerSeq,
    numBlocks,
    blockSize: batch.blockSize,
    kv,
  });
}

/** Most bytes of logits one step may hold (fitToVocabulary). */
export const LOGIT_BUDGET_BYTES = 256 << 20;

/**
 * The options with maxNumSeqs lowered, when need be, so that the logit rows of a step (one per
 * sequence, more when speculating: logitRows) stay within LOGIT_BUDGET_BYTES. A real vocabulary
 * never needs it (Gemma 3's 262144 tokens: 64 rows are 64 MiB); a vocabulary of millions would
 * otherwise take gigabytes of logits, and the sampler's work arrays as much again.
 */
export function fitToVocabulary(o: EngineOptions, c: ModelConfig): EngineOptions {
  const rowsPerSeq = o.speculative === null ? 1 : 1 + o.speculative.tokens;
  const rows = Math.floor(LOGIT_BUDGET_BYTES / (4 * (c.vocabSize + c.dim)));
  const seqs = Math.max(1, Math.min(o.maxNumSeqs, Math.floor(rows / rowsPerSeq)));
  return seqs === o.maxNumSeqs ? o : { ...o, maxNumSeqs: seqs };
}

/**
 * Logit rows one step may ask for: one per sequence, or, when speculating, its last token's and
 * one per draft token (never more than the step's tokens).
 */
function logitRows(o: EngineOptions): number {
  if (o.speculative === null) return o.maxNumSeqs;
  return Math.max(o.maxNumSeqs, Math.min(o.maxNumBatchedTokens, o.maxNumSeqs * (1 + o.speculative.tokens)));
}

/**
 * Whether a logit row is free of NaN and +infinity (NaN weights give NaN logits, which argmax
 * and the sampler would turn into some token, silently). One pass over the row, as cheap as the
 * argmax that sampling does anyway.
 */
function finiteLogits(row: Float32Array): boolean {
  for (let i = 0; i < row.length; i++) if (!(row[i]! < Infinity)) return false;
  return true;
}

/** The KV cache in words, for the load line: "KV cache f16, 512 blocks of 16 tokens, 24.0 MiB". */
export function kvCacheSummary(engine: LLMEngine): string {
  const kv = engine.kvLayout;
  const mib = (engine.numBlocks * kv.blockBytes) / 2 ** 20;
  return `KV cache ${kv.type}, ${engine.numBlocks} blocks of ${kv.blockSize} tokens, ${mib.toFixed(1)} MiB`;
}

/** The model's config with seqLen set to the context this engine runs at. */
export function withContext(c: ModelConfig, ctxSize: number | null): ModelConfig {
  if (ctxSize !== null && (!Number.isInteger(ctxSize) || ctxSize < 0)) {
    throw new InputError(`context size must be a non-negative integer, got ${ctxSize}`);
  }
  const seqLen = contextLength(c.seqLen, ctxSize);
  return seqLen === c.seqLen ? c : { ...c, seqLen };
}

/** The context a run gets for --ctx-size `ctxSize` on a model of `modelContext` positions (see EngineOptions.ctxSize). */
export function contextLength(modelContext: number, ctxSize: number | null): number {
  return ctxSize === 0 ? modelContext : Math.min(ctxSize ?? DEFAULT_CONTEXT, modelContext);
}

/**
 * Blocks for kvCacheMb, but no more than every sequence at full context could use, nor than the
 * backend holds per layer (maxBlocks: one GPU storage binding per layer's K or V).
 */
export function defaultNumBlocks(c: ModelConfig, o: EngineOptions, kv: KVLayout, maxBlocks: number): number {
  const perBlock = kv.blockBytes;
  const fromBudget = Math.floor((o.kvCacheMb * 2 ** 20) / perBlock);
  const forAllSeqs = o.maxNumSeqs * Math.ceil(c.seqLen / o.blockSize);
  return Math.max(1, Math.min(fromBudget, forAllSeqs, maxBlocks));
}
