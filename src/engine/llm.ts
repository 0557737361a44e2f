/**
 * The library's front door: load a model with its tokenizer, then generate text for one or many
 * prompts through the continuous-batching engine. The CLI is a thin layer over this class.
 */
import { InputError, ModelFormatError, PagellmError, RequestTooLongError } from "../errors.ts";
import { quoteFileText } from "../util/file-text.ts";
import type { Checkpoint } from "../model/checkpoint.ts";
import type { ModelConfig } from "../model/config.ts";
import type { LoadProgress } from "../model/weights.ts";
import { isGGUF, openCheckpoint } from "../model/load.ts";
import { readGGUF } from "../model/gguf.ts";
import { loadTokenizer } from "../tokenizer/load.ts";
import type { Tokenizer } from "../tokenizer/tokenizer.ts";
import { DEFAULT_ENGINE_OPTIONS, LLMEngine, type EngineOptions, type StepEvent } from "./engine.ts";
import { DEFAULT_SAMPLING, type SamplingParams } from "./sampler.ts";
import { chatFormat, messagesPromptIds, newConversation, type ChatFormat } from "../chat/formats.ts";
import type { Conversation } from "../chat/conversation.ts";
import { ChatTemplateError, type ChatMessage } from "../chat/jinja-template.ts";
import { logSumExp } from "./logprobs.ts";
import { argmax } from "./sampler.ts";
import type { FinishReason, GenerationParams, Sequence } from "./sequence.ts";
import type { BackendOptions, WebGpuBackend } from "../backend/webgpu/backend.ts";
import type { DeviceChoice } from "../backend/webgpu/device.ts";
import { chooseDevice } from "../backend/device-choice.ts";
import { DEFAULT_SPECULATIVE, type SpeculationCounts, type SpeculativeMethod } from "./speculative.ts";
import type { NgramRange } from "./ngram-proposer.ts";
import type { KVWriteMode } from "../kv/second-tier.ts";
import type { KVLayout } from "../kv/kv-layout.ts";
import { openDiskTier } from "../kv-disk/open.ts";
import type { BlockFileOps } from "../kv-disk/file-ops.ts";

export interface LoadOptions {
  /** Path of the model file (GGUF, or a llama2.c checkpoint). */
  model: string;
  /**
   * Path of the tokenizer (a GGUF file or llama2.c tokenizer.bin). Absent: a GGUF model's own
   * vocabulary; a llama2.c checkpoint has none and must name one.
   */
  tokenizer?: string;
  engine?: Partial<EngineOptions>;
  /**
   * Speculative decoding (the same as engine.speculative, which it overrides): { method: "ngram" }
   * with optional tokens (K, default 4) and ngram ({ min, max }, default 1..4). Output is identical.
   */
  speculative?: { method: SpeculativeMethod; tokens?: number; ngram?: NgramRange; adaptive?: boolean } | null;
  /** Told as the weights load (for a progress bar). */
  onLoadProgress?: LoadProgress;
  /** The chat format of "messages" requests and chats: raw, llama2, chatml or a Jinja file (default: the model's own template). */
  chatTemplate?: string;
  /** More variables for the chat template (`enable_thinking`, ...), as llama.cpp's --chat-template-kwargs. */
  chatTemplateKwargs?: Readonly<Record<string, unknown>>;
  /**
   * Run the forward pass on this WebGPU backend (see chooseDevice); it stays the caller's (one
   * backend may run several models in turn; its compiled kernels are reused). Absent:
   * WebAssembly. LLM.open chooses one from a --device value, and closes it in close().
   */
  gpu?: WebGpuBackend;
  /**
   * Keep the prefix cache's blocks on disk too, in this folder (`auto`: $PAGELLM_CACHE/kv or
   * ~/.cache/pagellm/kv): a second tier under the memory pool that survives restarts and is shared
   * by every process using the folder. Absent: memory only.
   */
  kvCacheDir?: string;
  /** When blocks reach the disk: "through" (as soon as computed; default) or "evict" (when memory evicts them, and at flush). */
  kvCacheWrite?: KVWriteMode;
  /** Bound on the folder's size in MiB, all models together; least recently used blocks go first (default 4096). */
  kvCacheDiskMb?: number;
  /** Told one line per kind of trouble with the disk tier (a full disk, a corrupt block removed). Default: stderr. */
  onWarning?: (line: string) => void;
  /** The disk tier's file operations (tests stand in a failing disk); default node:fs. */
  kvCacheFileOps?: BlockFileOps;
}

/** LLM.open's options: the model, and which backend may run it. */
export interface OpenOptions extends Omit<LoadOptions, "gpu"> {
  /** auto (default): WebGPU on a hardware adapter, else WebAssembly; wasm; webgpu (any adapter, or DeviceError). */
  device?: DeviceChoice;
  /** How the WebGPU backend computes (f16 products: on where the adapter offers shader-f16 unless set). */
  gpuOptions?: BackendOptions;
}

/** One generation request; every field but `prompt`/`promptTokenIds` falls back to a default. */
export interface GenerateRequest {
  id?: string;
  prompt?: string;
  /** Token ids instead of `prompt` (BOS included if wanted). */
  promptTokenIds?: number[];
  /** A conversation instead of `prompt`, rendered with the chat format (the model's template by default). */
  messages?: ChatMessage[];
  /** null or absent: until a stop or the end of the context. */
  maxTokens?: number | null;
  stop?: string[];
  temperature?: number;
  topK?: number;
  topP?: number;
  minP?: number;
  repetitionPenalty?: number;
  repeatLastN?: number;
  seed?: number;
  cacheSalt?: string;
  /** Report each generated token's log-probability and this many most likely alternatives (0-20). */
  logprobs?: number;
  /** Generate through end-of-generation tokens until max_tokens (llama.cpp's and vLLM's `ignore_eos`). */
  ignoreEos?: boolean;
}

/** The result of one request: the `--json` schema, one object per request. */
export interface CompletionResult {
  id: string;
  prompt_tokens: number;
  /** Prompt tokens served from the prefix cache: cached_tokens_memory + cached_tokens_disk. */
  cached_tokens: number;
  /** Of cached_tokens, those found in the memory pool. */
  cached_tokens_memory: number;
  /** Of cached_tokens, those read from the disk tier (kvCacheDir) instead of computed. */
  cached_tokens_disk: number;
  completion_tokens: number;
  token_ids: number[];
  text: string;
  finish_reason: FinishReason;
  ttft_ms: number;
  latency_ms: number;
  /** Only when finish_reason is "error": why the request was rejected or failed. */
  error?: string;
  /** Only when the request asked for logprobs: one entry per generated token, as the OpenAI API returns them. */
  logprobs?: TokenLogprobResult[];
  /** Only when the engine speculates: draft tokens verified, those accepted, and their ratio (null when none was drafted). */
  speculative?: SpeculationResult;
}

/** What speculative decoding did for one request. */
export interface SpeculationResult {
  drafted: number;
  accepted: number;
  acceptance_rate: number | null;
}

/** A token's log-probability as a result reports it: id, text and log-probability. */
export interface TopLogprobResult {
  token_id: number;
  token: string;
  logprob: number;
}

/** A generated token's log-probability and its most likely alternatives at that position. */
export interface TokenLogprobResult extends TopLogprobResult {
  top_logprobs: TopLogprobResult[];
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
}

/** What a generation stream yields: text as it becomes showable, and each request's result when it ends. */
export type GenerationEvent =
  | { kind: "text"; id: string; delta: string }
  | { kind: "done"; result: CompletionResult };

export interface StreamOptions {
  /** Abort every unfinished request (they end with finish_reason "abort"). */
  signal?: AbortSignal;
}

/** Most alternatives a request may ask for per token (the OpenAI API's limit). */
export const MAX_LOGPROBS = 20;

/** Yield to the event loop at least this often, so signals and timers run during long batches. */
const YIELD_EVERY_MS = 20;

export class LLM {
  private nextId = 0;

  private constructor(
    readonly checkpoint: Checkpoint,
    readonly tokenizer: Tokenizer,
    /** Whether prompts start with BOS. */
    readonly addBos: boolean,
    readonly engine: LLMEngine,
    /** Milliseconds spent loading weights and setting up. */
    readonly loadMs: number,
    /** How chats and "messages" requests become prompts. */
    readonly chatFormat: ChatFormat,
    /** The GPU backend LLM.open chose, released by close(). */
    private readonly ownedGpu: WebGpuBackend | null,
    /** One line saying which backend runs the model and why ("device: wasm (auto: ...)"). */
    readonly device: string,
    /** The file the vocabulary came from (the model, or --tokenizer's). */
    readonly tokenizerFile: string,
  ) {}

  /**
   * Load a model and its tokenizer and set up the engine on WebAssembly, or on opts.gpu. Throws
   * ModelFormatError for bad files.
   */
  static load(opts: LoadOptions): LLM {
    return LLM.build(openCheckpoint(opts.model), opts, performance.now(), null, null);
  }

  /**
   * Load a model on the backend `opts.device` picks (see chooseDevice): DeviceError when
   * "webgpu" was asked for and cannot run it.
   */
  static async open(opts: OpenOptions): Promise<LLM> {
    const t0 = performance.now();
    const checkpoint = openCheckpoint(opts.model);
    const chosen = await chooseDevice(opts.device ?? "auto", checkpoint, opts.gpuOptions);
    let llm: LLM;
    try {
      llm = LLM.build(checkpoint, { ...opts, gpu: chosen.gpu ?? undefined }, t0, chosen.gpu, chosen.reason);
    } catch (e) {
      chosen.gpu?.close();
      throw e;
    }
    return llm;
  }

  /** Set up tokenizer, chat format and engine; `ownedGpu` is closed with the LLM; `reason` says why this device. */
  private static build(checkpoint: Checkpoint, opts: LoadOptions, t0: number, ownedGpu: WebGpuBackend | null, reason: string | null): LLM {
    const tokenizerPath = opts.tokenizer ?? (isGGUF(opts.model) ? opts.model : undefined);
    if (tokenizerPath === undefined) throw new InputError(`${opts.model}: a llama2.c checkpoint carries no vocabulary; name a tokenizer`);
    const { tokenizer, addBos, chatTemplate } = loadTokenizer(tokenizerPath, { modelVocabSize: checkpoint.config.vocabSize });
    // A tokenizer file without a template (a tokenizer.json with no tokenizer_config.json beside
    // it) leaves the GGUF model's own template in force.
    const template = chatTemplate ?? (tokenizerPath !== opts.model && isGGUF(opts.model) ? ggufChatTemplate(opts.model) : null);
    const format = chatFormat(opts.chatTemplate, template, opts.model, tokenizer, opts.chatTemplateKwargs);
    const engineOptions = { ...DEFAULT_ENGINE_OPTIONS, ...opts.engine };
    if (opts.speculative !== undefined) engineOptions.speculative = opts.speculative === null ? null : { ...DEFAULT_SPECULATIVE, ...opts.speculative };
    const kvCacheDir = opts.kvCacheDir;
    const tier = kvCacheDir === undefined ? undefined : (layout: KVLayout, kvProducer: string) => openDiskTier(checkpoint, layout, kvProducer, {
      dir: kvCacheDir, write: opts.kvCacheWrite, diskMb: opts.kvCacheDiskMb, onWarning: opts.onWarning, fileOps: opts.kvCacheFileOps,
    });
    const engine = new LLMEngine(checkpoint, tokenizer, engineOptions, opts.onLoadProgress, opts.gpu, tier);
    const device = reason ?? `device: ${engine.model.description}`;
    return new LLM(checkpoint, tokenizer, addBos, engine, performance.now() - t0, format, ownedGpu, device, tokenizerPath);
  }

  get config(): ModelConfig {
    return this.engine.config;
  }

  /**
   * Waits until the disk tier (kvCacheDir) holds every block computed so far; resolves at once
   * without one. Call it before the process exits, or a restart recomputes what was not written.
   */
  flush(): Promise<void> {
    return this.engine.flushTier();
  }

  /** Stop the engine's worker threads, free the model's GPU buffers and release a device LLM.open chose. */
  close(): void {
    this.engine.close();
    this.ownedGpu?.close();
  }

  /** Prompt token ids of `text`, BOS first when the model expects it. */
  encode(text: string): number[] {
    const ids = this.tokenizer.encode(text, { addBos: this.addBos });
    // A vocabulary that spells none of a text (a crafted 3-token one; byte-level BPE drops bytes it
    // has no token for): the empty prompt is the file's fault, not the user's.
    if (text.length > 0 && ids.every((id) => id === this.tokenizer.bosId)) {
      throw new ModelFormatError(this.tokenizerFile, `the vocabulary (${this.tokenizer.vocabSize} tokens) has no token for any of the text ${quoteFileText(text)}`);
    }
    return ids;
  }

  /** A new conversation in the chat format. */
  conversation(opts: { system?: string | null; onNote?: (line: string) => void } = {}): Conversation {
    return newConversation(this.chatFormat, this.tokenizer, { addBos: this.addBos, ...opts });
  }

  /** The prompt ids of a list of messages in the chat format. */
  messagesPromptIds(messages: readonly ChatMessage[]): number[] {
    return messagesPromptIds(this.chatFormat, this.tokenizer, this.addBos, messages);
  }

  /**
   * Teacher-forced log-probabilities of a text (or of token ids, BOS included if wanted), as
   * llama-perplexity scores it: in windows of `window` tokens (default: the context), each starting
   * with an empty KV cache; every position predicts the token after it, the last of a window the
   * first of the next, so each of the n - 1 transitions is scored exactly once.
   */
  async score(input: string | readonly number[], window = this.engine.maxPositions): Promise<ScoreResult> {
    const tokens = typeof input === "string" ? this.encode(input) : [...input];
    if (!Number.isInteger(window) || window < 1) throw new InputError(`scoring window must be a positive integer, got ${window}`);
    const tokenLogprobs: number[] = [];
    const topTokens: number[] = [];
    for (let start = 0; start + 1 < tokens.length; start += window) {
      await this.engine.score(tokens.slice(start, start + window), (i, logits) => {
        const next = tokens[start + i + 1];
        if (next === undefined) return;
        tokenLogprobs.push(logits[next]! - logSumExp(logits));
        topTokens.push(argmax(logits));
      });
    }
    const mean = tokenLogprobs.reduce((a, b) => a + b, 0) / Math.max(1, tokenLogprobs.length);
    return { tokens, token_logprobs: tokenLogprobs, top_tokens: topTokens, ppl: Math.exp(-mean), window };
  }

  /** Run requests to completion and return their results in request order. */
  async generate(requests: GenerateRequest[], opts: StreamOptions = {}): Promise<CompletionResult[]> {
    const results = new Map<string, CompletionResult>();
    // Give id-less requests their default id here, so that their results can be put in request order.
    const withIds = requests.map((r) => (r.id === undefined ? { ...r, id: `req-${this.nextId++}` } : r));
    const ids = withIds.map((r) => r.id);
    for await (const event of this.stream(withIds, opts)) {
      if (event.kind === "done") results.set(event.result.id, event.result);
    }
    return [...results.values()].sort((a, b) => ids.indexOf(a.id) - ids.indexOf(b.id));
  }

  /**
   * Run requests together, yielding text deltas as they are generated and each result as soon as
   * its request finishes. A request that can never fit is reported at once with finish_reason
   * "error" and the reason; the others run.
   */
  async *stream(requests: GenerateRequest[], opts: StreamOptions = {}): AsyncGenerator<GenerationEvent> {
    const admitted: Sequence[] = [];
    for (const request of requests) {
      const id = request.id ?? `req-${this.nextId++}`;
      let promptTokenIds: number[] = [];
      try {
        promptTokenIds = request.promptTokenIds ??
          (request.messages !== undefined ? this.messagesPromptIds(request.messages) : this.encode(request.prompt ?? ""));
        admitted.push(this.engine.addRequest({ id, promptTokenIds, params: generationParams(request), cacheSalt: request.cacheSalt }));
      } catch (e) {
        if (!(e instanceof RequestTooLongError || e instanceof InputError || e instanceof ChatTemplateError)) throw e;
        yield { kind: "done", result: rejectedResult(id, promptTokenIds.length, e) };
      }
    }
    let lastYield = performance.now();
    try {
      while (this.engine.hasUnfinished) {
        if (opts.signal?.aborted) {
          yield* this.report(this.engine.abortAll());
          break;
        }
        yield* this.report(await this.engine.step());
        if (performance.now() - lastYield > YIELD_EVERY_MS) {
          await new Promise((resolve) => setImmediate(resolve));
          lastYield = performance.now();
        }
      }
    } finally {
      // A consumer that stops early (or an error) must not leave requests holding KV blocks.
      for (const seq of admitted) if (!seq.isFinished) this.engine.abort(seq);
    }
  }

  private resultOf(seq: Sequence): CompletionResult {
    return resultOf(seq, (prev, id) => {
      const decoder = this.tokenizer.createStreamDecoder(prev);
      return decoder.push(id) + decoder.flush();
    });
  }

  private *report(events: StepEvent[]): Generator<GenerationEvent> {
    for (const { seq, delta, finished } of events) {
      if (delta.length > 0) yield { kind: "text", id: seq.id, delta };
      if (finished) yield { kind: "done", result: this.resultOf(seq) };
    }
  }
}

function generationParams(r: GenerateRequest): GenerationParams {
  const sampling: SamplingParams = {
    temperature: r.temperature ?? DEFAULT_SAMPLING.temperature,
    topK: r.topK ?? DEFAULT_SAMPLING.topK,
    topP: r.topP ?? DEFAULT_SAMPLING.topP,
    minP: r.minP ?? DEFAULT_SAMPLING.minP,
    repetitionPenalty: r.repetitionPenalty ?? DEFAULT_SAMPLING.repetitionPenalty,
    repeatLastN: r.repeatLastN ?? DEFAULT_SAMPLING.repeatLastN,
    seed: r.seed ?? randomSeed(),
  };
  checkSampling(sampling);
  const logprobs = r.logprobs;
  if (logprobs !== undefined && !(Number.isInteger(logprobs) && logprobs >= 0 && logprobs <= MAX_LOGPROBS)) {
    throw new InputError(`logprobs must be an integer from 0 to ${MAX_LOGPROBS}, got ${logprobs}`);
  }
  const maxTokens = r.maxTokens ?? null;
  if (maxTokens !== null && (!Number.isInteger(maxTokens) || maxTokens < 1)) {
    throw new InputError(`max_tokens must be a positive integer, got ${maxTokens}`);
  }
  return {
    maxTokens, stop: r.stop ?? [], sampling, ...(logprobs === undefined ? {} : { logprobs }), ...(r.ignoreEos === true ? { ignoreEos: true } : {}),
  };
}

function checkSampling(s: SamplingParams): void {
  const bad = (what: string, v: number) => new InputError(`${what} out of range: ${v}`);
  if (!(s.temperature >= 0)) throw bad("temperature", s.temperature);
  if (!(Number.isInteger(s.topK) && s.topK >= 0)) throw bad("top_k", s.topK);
  if (!(s.topP > 0 && s.topP <= 1)) throw bad("top_p", s.topP);
  if (!(s.minP >= 0 && s.minP <= 1)) throw bad("min_p", s.minP);
  if (!(s.repetitionPenalty > 0)) throw bad("repetition penalty", s.repetitionPenalty);
  if (!(Number.isInteger(s.repeatLastN) && s.repeatLastN >= 0)) throw bad("repeat_last_n", s.repeatLastN);
  if (!Number.isInteger(s.seed)) throw bad("seed", s.seed);
}

function randomSeed(): number {
  return (Math.random() * 2 ** 32) >>> 0;
}

/** Text of token `id` where it follows token `prev` (so a word's leading space shows). */
type TokenText = (prev: number | undefined, id: number) => string;

function resultOf(seq: Sequence, tokenText: TokenText): CompletionResult {
  const finish = seq.finishMs ?? performance.now();
  const result: CompletionResult = {
    id: seq.id,
    prompt_tokens: seq.numPromptTokens,
    cached_tokens: seq.numCachedTokens ?? 0,
    cached_tokens_memory: (seq.numCachedTokens ?? 0) - (seq.numTierCachedTokens ?? 0),
    cached_tokens_disk: seq.numTierCachedTokens ?? 0,
    completion_tokens: seq.outputTokenIds.length,
    token_ids: [...seq.outputTokenIds],
    text: seq.text,
    finish_reason: seq.finishReason ?? "abort",
    ttft_ms: round2((seq.firstTokenMs ?? finish) - seq.arrivalMs),
    latency_ms: round2(finish - seq.arrivalMs),
  };
  if (seq.error !== null) result.error = seq.error;
  if (seq.drafter !== null) result.speculative = speculationResult(seq.drafter.counts);
  if (seq.params.logprobs !== undefined) {
    result.logprobs = seq.logprobs.map((l, k) => {
      const prev = seq.allTokenIds[seq.numPromptTokens + k - 1];
      const entry = (id: number, logprob: number): TopLogprobResult => ({ token_id: id, token: tokenText(prev, id), logprob });
      return { ...entry(l.id, l.logprob), top_logprobs: l.top.map((t) => entry(t.id, t.logprob)) };
    });
  }
  return result;
}

export function speculationResult(c: SpeculationCounts): SpeculationResult {
  return { drafted: c.drafted, accepted: c.accepted, acceptance_rate: c.drafted === 0 ? null : round4(c.accepted / c.drafted) };
}

function round4(x: number): number {
  return Math.round(x * 1e4) / 1e4;
}

function rejectedResult(id: string, promptTokens: number, e: PagellmError): CompletionResult {
  return {
    id, prompt_tokens: promptTokens, cached_tokens: 0, cached_tokens_memory: 0, cached_tokens_disk: 0, completion_tokens: 0, token_ids: [], text: "",
    finish_reason: "error", ttft_ms: 0, latency_ms: 0, error: e.message,
  };
}

function round2(x: number): number {
  return Math.round(x * 100) / 100;
}

/** The `tokenizer.chat_template` of a GGUF file, or null. */
function ggufChatTemplate(path: string): string | null {
  const file = readGGUF(path);
  return file.has("tokenizer.chat_template") ? file.getString("tokenizer.chat_template") : null;
}
