/**
 * The library's front door: load a model with its tokenizer, then generate text for one or many
 * prompts through the continuous-batching engine. The CLI is a thin layer over this class.
 */
import type { EmbeddedSpan } from "../model/batch.ts";
import { InputError, ModelCapabilityError, ModelFormatError, RequestFieldError, RequestTooLongError } from "../errors.ts";
import { quoteFileText } from "../util/file-text.ts";
import type { Checkpoint } from "../model/checkpoint.ts";
import type { ModelConfig } from "../model/config.ts";
import type { LoadProgress } from "../backend/wasm/weights.ts";
import { isGGUF, openCheckpoint } from "../model/load.ts";
import { readGGUF } from "../model/gguf.ts";
import { loadTokenizer } from "../tokenizer/load.ts";
import type { Tokenizer } from "../tokenizer/tokenizer.ts";
import { decodeWritten, tokenPieceText } from "../tokenizer/token-text.ts";
import { chatFormat, messagesPromptIds, newConversation, untemplatedNote, type ChatFormat, type UntemplatedFormat } from "../chat/formats.ts";
import type { Conversation } from "../chat/conversation.ts";
import type { ChatMessage } from "../chat/jinja-template.ts";
import { chatPrompt } from "../tools/chat-prompt.ts";
import type { CheckedTools } from "../tools/tool-types.ts";
import type { BackendOptions, WebGpuBackend } from "../backend/webgpu/backend.ts";
import type { DeviceChoice } from "../backend/webgpu/device.ts";
import { chooseDevice, chooseEncoderDevice } from "../backend/device-choice.ts";
import type { KVWriteMode } from "../kv/second-tier.ts";
import type { KVLayout } from "../kv/kv-layout.ts";
import { openDiskTier } from "../kv-disk/open.ts";
import { GrammarConstraints } from "../grammar/constraints.ts";
import { reasoningMarkers, textReasoningMarkers } from "../chat/reasoning-markers.ts";
import type { BlockFileOps } from "../kv-disk/file-ops.ts";
import type { LLMEngine } from "../engine/engine.ts";
import { buildEngine } from "../engine/engine-builder.ts";
import { EngineClient, type ClientStats, type EngineInfo, type ScoreResult } from "./engine-client.ts";
import { PreparedRequest } from "./input-processor.ts";
import { DEFAULT_ENGINE_OPTIONS, type EngineOptions } from "../engine/engine-options.ts";
import { CompletionBuilder, rejectedResult, type CompletionResult } from "./completion.ts";
import type { GenerateRequest } from "./generate-request.ts";
import { DEFAULT_SPECULATIVE, type SpeculativeMethod } from "../engine/speculative.ts";
import type { NgramRange } from "../engine/ngram-proposer.ts";
import { withTokenLimit } from "../tokenizer/token-limit.ts";
import { readGGUFCheckpoint } from "../model/gguf-checkpoint.ts";
import { isEncoderFile, readEncoderCheckpoint, type EncoderCheckpoint } from "../model/encoder.ts";
import type { Embedder, EmbedInput, EmbedOptions, EmbedResult, ModelCapabilities, Pooling, RerankOptions, RerankResult } from "../embed/embed-types.ts";
import { EncoderEmbedder } from "../embed/encoder-embedder.ts";
import { decoderEmbedder, decoderPooling } from "../embed/decoder-embedder.ts";
import { filePooling } from "../model/pooling-type.ts";
import { readDecoderRankHead, type DecoderRankHead } from "../model/rank-head.ts";
import { embedSequences, rerankSequences, type SequenceText } from "../embed/embed-request.ts";
import { checkDimensions, checkNormalize, finishEmbedding } from "../embed/normalize.ts";

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
   * The chat format of a model without a chat template when chatTemplate names none: "chatml"
   * (default: llama-server's fallback) or "raw" (plain continuation, as `pagellm chat` keeps for
   * base models). `chatFormatNote` then says which stands in.
   */
  untemplatedChatFormat?: UntemplatedFormat;
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
  /** How embeddings pool token vectors (llama.cpp's --pooling); absent: as the model's file says. */
  pooling?: Pooling;
}

/** LLM.open's options: the model, and which backend may run it. */
export interface OpenOptions extends Omit<LoadOptions, "gpu"> {
  /** auto (default): WebGPU on a hardware adapter, else WebAssembly; wasm; webgpu (any adapter, or DeviceError). */
  device?: DeviceChoice;
  /** How the WebGPU backend computes (f16 products: on where the adapter offers shader-f16 unless set). */
  gpuOptions?: BackendOptions;
}

/** What a generation stream yields: text as it becomes showable, and each request's result when it ends. */
export type GenerationEvent =
  /** Text that became showable: the reply's content, and (for a conversation whose replies reason) its reasoning apart. */
  | { kind: "text"; id: string; index: number; delta: string; reasoning?: string }
  | { kind: "done"; result: CompletionResult };

export interface StreamOptions {
  /** Abort every unfinished request (they end with finish_reason "abort"). */
  signal?: AbortSignal;
}

/** What generates: the decoder's checkpoint, its engine and the engine's front door (absent for a model that only embeds). */
interface Generation {
  checkpoint: Checkpoint;
  engine: LLMEngine;
  client: EngineClient;
}

/** What embeds and reranks: the model kind's Embedder, the texts' special tokens, the vocabulary's size. */
interface EmbedderSetup {
  embedder: Embedder;
  text: SequenceText;
  vocabSize: number;
}

export class LLM {
  private constructor(
    /** Null: an encoder, which only embeds (generate, stream, score throw ModelCapabilityError). */
    private readonly generation: Generation | null,
    readonly tokenizer: Tokenizer,
    /** Whether prompts start with BOS. */
    readonly addBos: boolean,
    /** Null: a model that does not embed (a decoder without pooling). */
    private readonly embedding: EmbedderSetup | null,
    /** What the model can be asked for. */
    readonly capabilities: ModelCapabilities,
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
    /** A line saying which format stands in for a model without a chat template (none named), or null. */
    readonly chatFormatNote: string | null,
    /** The paths of the files it was loaded from (the model, its vocabulary, a chat template file): what a server keeps from its clients. */
    readonly files: readonly string[],
  ) {}

  /**
   * Load a model and its tokenizer and set up the engine on WebAssembly, or on opts.gpu. Throws
   * ModelFormatError for bad files.
   */
  static load(opts: LoadOptions): LLM {
    const t0 = performance.now();
    const model = openModel(opts.model);
    if (model.kind === "encoder") return LLM.buildEncoder(model.checkpoint, opts, t0, null, opts.gpu === undefined ? "device: wasm" : "device: webgpu");
    return LLM.build(model, opts, t0, null, null);
  }

  /**
   * Load a model on the backend `opts.device` picks (see chooseDevice): DeviceError when
   * "webgpu" was asked for and cannot run it.
   */
  static async open(opts: OpenOptions): Promise<LLM> {
    const t0 = performance.now();
    const model = openModel(opts.model);
    const chosen = model.kind === "encoder"
      ? await chooseEncoderDevice(opts.device ?? "auto", model.checkpoint, opts.gpuOptions)
      : await chooseDevice(opts.device ?? "auto", model.checkpoint, opts.gpuOptions);
    let llm: LLM;
    try {
      const chosenOpts = { ...opts, gpu: chosen.gpu ?? undefined };
      llm = model.kind === "encoder"
        ? LLM.buildEncoder(model.checkpoint, chosenOpts, t0, chosen.gpu, chosen.reason)
        : LLM.build(model, chosenOpts, t0, chosen.gpu, chosen.reason);
    } catch (e) {
      chosen.gpu?.close();
      throw e;
    }
    return llm;
  }

  /** Set up tokenizer, chat format, engine and its front door; `ownedGpu` is closed with the LLM; `reason` says why this device. */
  private static build(model: DecoderModel, opts: LoadOptions, t0: number, ownedGpu: WebGpuBackend | null, reason: string | null): LLM {
    const checkpoint = model.checkpoint;
    // Before anything loads: a pooling a decoder cannot run is refused at once.
    const pooling = decoderPooling(model.filePooling, opts.pooling ?? null, model.rankHead !== null);
    const tokenizerPath = opts.tokenizer ?? (isGGUF(opts.model) ? opts.model : undefined);
    if (tokenizerPath === undefined) throw new InputError(`${opts.model}: a llama2.c checkpoint carries no vocabulary; name a tokenizer`);
    const { tokenizer, addBos, addEos, chatTemplate } = loadTokenizer(tokenizerPath, { modelVocabSize: checkpoint.config.vocabSize });
    // A tokenizer file without a template (a tokenizer.json with no tokenizer_config.json beside
    // it) leaves the GGUF model's own template in force.
    const template = chatTemplate ?? (tokenizerPath !== opts.model && isGGUF(opts.model) ? ggufChatTemplate(opts.model) : null);
    const untemplated = opts.untemplatedChatFormat ?? "chatml";
    // Thinking is on unless a request says otherwise, as llama.cpp passes enable_thinking (a template
    // that tests `not enable_thinking`, as llama.cpp's DeepSeek-R1 ones, would otherwise close it).
    const format = chatFormat(opts.chatTemplate, template, opts.model, tokenizer, { enable_thinking: true, ...opts.chatTemplateKwargs }, untemplated);
    const engineOptions = { ...DEFAULT_ENGINE_OPTIONS, ...opts.engine };
    if (opts.speculative !== undefined) engineOptions.speculative = opts.speculative === null ? null : { ...DEFAULT_SPECULATIVE, ...opts.speculative };
    const kvCacheDir = opts.kvCacheDir;
    const secondTier = kvCacheDir === undefined ? undefined : (layout: KVLayout, kvProducer: string) => openDiskTier(checkpoint, layout, kvProducer, {
      dir: kvCacheDir, write: opts.kvCacheWrite, diskMb: opts.kvCacheDiskMb, onWarning: opts.onWarning, fileOps: opts.kvCacheFileOps,
    });
    const engine = buildEngine(checkpoint, tokenizer, engineOptions, { onLoadProgress: opts.onLoadProgress, gpu: opts.gpu, secondTier });
    const prompts = {
      encode: (text: string, maxTokens?: number) => encodeText(limited(tokenizer, maxTokens), addBos, tokenizerPath, text),
      encodeWritten: (text: string, o: { addSpecial: boolean; parseSpecial: boolean }) => tokenizer.encode(text, { addBos: o.addSpecial && addBos, parseSpecial: o.parseSpecial }),
      decodeWritten: (ids: readonly number[]) => decodeWritten(tokenizer, ids),
      piece: (id: number) => tokenPieceText(tokenizer, id),
      messages: (messages: readonly ChatMessage[], kwargs: Readonly<Record<string, unknown>> | null, tools: CheckedTools | null, maxTokens?: number) =>
        chatPrompt(format, limited(tokenizer, maxTokens), addBos, messages, kwargs, tools),
    };
    const client = new EngineClient(engine, {
      prompts, constraints: new GrammarConstraints(tokenizer, checkpoint.config.vocabSize), reasoning: reasoningMarkers(tokenizer), reasoningText: textReasoningMarkers(tokenizer),
    });
    const device = reason ?? `device: ${engine.model.description}`;
    const note = untemplatedNote(opts.chatTemplate, template, untemplated);
    // A named format other than ChatML and the built-in ones is a Jinja file (chatFormat).
    const templateFile = format.kind === "jinja" && opts.chatTemplate !== undefined && opts.chatTemplate !== "chatml" ? [opts.chatTemplate] : [];
    const files = [...new Set([opts.model, tokenizerPath, ...templateFile])];
    // A decoder that pools (its file's pooling_type, or --pooling last) embeds through its engine;
    // with pooling rank it reranks through its head, formatting pairs with the file's template.
    const rankHead = pooling === "rank" ? model.rankHead : null;
    const embedding: EmbedderSetup | null = pooling === null ? null : {
      embedder: decoderEmbedder(client, checkpoint.config.dim, rankHead),
      text: { tokenizer, addBos, addEos, rerankTemplate: rankHead?.template ?? null },
      vocabSize: checkpoint.config.vocabSize,
    };
    const capabilities = capabilitiesOf(true, embedding, checkpoint.config.dim);
    return new LLM(
      { checkpoint, engine, client }, tokenizer, addBos, embedding, capabilities, performance.now() - t0, format, ownedGpu, device, tokenizerPath, note, files,
    );
  }

  /** An encoder's LLM: its tokenizer and Embedder (on opts.gpu when given), no engine; `ownedGpu` is closed with the LLM. */
  private static buildEncoder(encoder: EncoderCheckpoint, opts: LoadOptions, t0: number, ownedGpu: WebGpuBackend | null, device: string): LLM {
    const tokenizerPath = opts.tokenizer ?? opts.model;
    const { tokenizer, addBos, addEos } = loadTokenizer(tokenizerPath, { modelVocabSize: encoder.config.vocabSize });
    const threads = opts.engine?.threads ?? DEFAULT_ENGINE_OPTIONS.threads;
    const embedder = EncoderEmbedder.load(encoder, { threads, pooling: opts.pooling, gpu: opts.gpu });
    const embedding: EmbedderSetup = { embedder, text: { tokenizer, addBos, addEos }, vocabSize: encoder.config.vocabSize };
    const format = chatFormat("raw", null, opts.model, tokenizer, {}, "raw");
    const files = [...new Set([opts.model, tokenizerPath])];
    return new LLM(null, tokenizer, addBos, embedding, capabilitiesOf(false, embedding, encoder.config.dim), performance.now() - t0, format, ownedGpu, device, tokenizerPath, null, files);
  }

  /** The decoder's checkpoint (ModelCapabilityError for a model that only embeds). */
  get checkpoint(): Checkpoint {
    return this.generating().checkpoint;
  }

  /** The front door of generation: every request, score and statistic goes through it (ModelCapabilityError for a model that only embeds). */
  get client(): EngineClient {
    return this.generating().client;
  }

  private get engine(): LLMEngine {
    return this.generating().engine;
  }

  private generating(): Generation {
    if (this.generation !== null) return this.generation;
    const what = this.capabilities.rerank ? "reranks" : "embeds";
    throw new ModelCapabilityError("generate", `${this.files[0]} is an encoder model: it only ${what}, it cannot generate text`);
  }

  /**
   * Embeddings of `inputs` (texts, tokenized with the special tokens the model's file asks for,
   * or arrays of token ids run as given), in input order: pooled, cut to `dimensions` and
   * normalized (default Euclidean). A bad field is a RequestFieldError naming it (`input[3]`,
   * `dimensions`, `normalize`); a model that cannot embed, a ModelCapabilityError.
   */
  async embed(inputs: readonly EmbedInput[], options: EmbedOptions = {}): Promise<EmbedResult> {
    const { embedder, text, vocabSize } = this.embedding ?? this.cannot("embed");
    if (embedder.pooling === "rank") throw new ModelCapabilityError("embed", `${this.files[0]} is a reranker (pooling rank): ask it to rerank, or load it with another pooling`);
    const normalize = checkNormalize(options.normalize);
    const dimensions = checkDimensions(options.dimensions, embedder.width);
    const sequences = embedSequences(inputs, text, { vocabSize, maxTokens: embedder.maxTokens, truncate: options.truncate === true });
    const vectors = await embedder.embed(sequences);
    const embeddings = vectors.map((v, index) => ({ index, values: finishEmbedding(v, embedder.width, normalize, dimensions), tokenCount: sequences[index]!.length }));
    return { embeddings, promptTokens: sequences.reduce((sum, s) => sum + s.length, 0) };
  }

  /**
   * Scores of each document against the query by the model's rerank head, best first (ties by
   * index), the best `topN` when given: `score` llama.cpp's (a BERT head's raw logit, or
   * Qwen3-Reranker's p("yes")), and `relevanceScore` in 0-1 (vLLM's, Jina's, Cohere's: the
   * logit's sigmoid, or the probability itself).
   */
  async rerank(query: string, documents: readonly string[], options: RerankOptions = {}): Promise<RerankResult> {
    const { embedder, text, vocabSize } = this.embedding ?? this.cannot("rerank");
    if (embedder.pooling !== "rank") throw new ModelCapabilityError("rerank", `${this.files[0]} has no rerank head in use (pooling ${embedder.pooling}): it embeds, it does not rerank`);
    const topN = options.topN;
    if (topN !== undefined && (!Number.isInteger(topN) || topN < 1)) throw new RequestFieldError("topN", `must be a positive integer, got ${topN}`);
    const sequences = rerankSequences(query, documents, text, { vocabSize, maxTokens: embedder.maxTokens, truncate: false });
    const scores = await embedder.embed(sequences);
    const probability = embedder.rankScore === "probability";
    const results = scores.map((s, index) => ({ index, score: s[0]!, relevanceScore: probability ? s[0]! : 1 / (1 + Math.exp(-s[0]!)) }));
    results.sort((a, b) => b.score - a.score || a.index - b.index);
    return { results: topN === undefined ? results : results.slice(0, topN), promptTokens: sequences.reduce((sum, s) => sum + s.length, 0) };
  }

  /**
   * The tokens LLM.embed runs for `text`: its special tokens as the model's file asks ([CLS] and
   * [SEP], or the EOS a decoder embedder appends); control tokens written in the text matched when
   * `parseSpecial` (as /tokenize shows a text).
   */
  embedTokenIds(text: string, parseSpecial = false): number[] {
    const { text: sequence } = this.embedding ?? this.cannot("embed");
    return sequence.tokenizer.encode(text, { addBos: sequence.addBos, addEos: sequence.addEos, parseSpecial });
  }

  private cannot(capability: "embed" | "rerank"): never {
    throw new ModelCapabilityError(capability, `${this.files[0]} does not ${capability}: a generation model without pooling (load it with a pooling to ${capability})`);
  }

  /** The model's shape at the context it runs at. */
  get config(): ModelConfig {
    return this.engine.config;
  }

  /** What the engine runs on and with: device, context, KV cache, placement. */
  get info(): EngineInfo {
    return this.client.info;
  }

  /** The engine's counters, as of now. */
  stats(): ClientStats {
    return this.client.stats();
  }

  /**
   * Waits until the disk tier (kvCacheDir) holds every block computed so far; resolves at once
   * without one. Call it before the process exits, or a restart recomputes what was not written.
   */
  flush(): Promise<void> {
    return this.client.flush();
  }

  /**
   * Ends every request, stops the engine's worker threads, frees the model's GPU buffers and
   * releases a device LLM.open chose. The engine is released now when no step is computing (the
   * usual case: nothing runs), else as soon as the step in flight ends.
   */
  close(): void {
    if (this.closing !== null) return;
    this.embedding?.embedder.close();
    if (this.generation === null) {
      this.closing = Promise.resolve();
      return;
    }
    const ended = this.client.close();
    const release = () => {
      this.engine.close();
      this.ownedGpu?.close();
    };
    // Nothing computing (the usual case): released now, so that the next model a caller opens
    // finds its threads and GPU buffers gone. A step in flight finishes first.
    if (this.client.computing) {
      this.closing = ended.then(release);
    } else {
      release();
      this.closing = ended;
    }
  }

  /** Resolves once close() has released everything. */
  closed(): Promise<void> {
    return this.closing ?? Promise.resolve();
  }

  private closing: Promise<void> | null = null;

  /** Prompt token ids of `text`, BOS first when the model expects it. */
  encode(text: string): number[] {
    return encodeText(this.tokenizer, this.addBos, this.tokenizerFile, text);
  }

  /** A new conversation in the chat format. */
  conversation(opts: { system?: string | null; onNote?: (line: string) => void } = {}): Conversation {
    return newConversation(this.chatFormat, this.tokenizer, { addBos: this.addBos, ...opts });
  }

  /** The prompt ids of a list of messages in the chat format (with more template variables, `kwargs`). */
  messagesPromptIds(messages: readonly ChatMessage[], kwargs: Readonly<Record<string, unknown>> | null = null): number[] {
    return messagesPromptIds(this.chatFormat, this.tokenizer, this.addBos, messages, kwargs);
  }

  /**
   * Teacher-forced log-probabilities of a text (or of token ids, BOS included if wanted), as
   * llama-perplexity scores it: in windows of `window` tokens (default: the context), each starting
   * with an empty KV cache; every position predicts the token after it, the last of a window the
   * first of the next, so each of the n - 1 transitions is scored exactly once. `embeds`: spans of
   * token ids whose input rows are given (an image prompt's, src/vision/), scored in one window.
   */
  score(input: string | readonly number[], window?: number, embeds?: readonly EmbeddedSpan[]): Promise<ScoreResult> {
    const tokens = typeof input === "string" ? this.encode(input) : [...input];
    return this.client.score({ tokens, window, ...(embeds === undefined ? {} : { embeds }) });
  }

  /** Run requests to completion and return their results in request order (a request of n samples: n results, by index). */
  async generate(requests: readonly GenerateRequest[], opts: StreamOptions = {}): Promise<CompletionResult[]> {
    this.generating(); // a model that only embeds refuses the call itself, not each request
    // Give id-less requests their id here, so that their results can be put in request order.
    const withIds = requests.map((r) => (r.id === undefined ? { ...r, id: this.newId() } : r));
    const rank = new Map(withIds.map((r, i) => [r.id!, i]));
    const results: CompletionResult[] = [];
    for await (const event of this.stream(withIds, opts)) if (event.kind === "done") results.push(event.result);
    return results.sort((a, b) => rank.get(a.id)! - rank.get(b.id)! || (a.index ?? 0) - (b.index ?? 0));
  }

  /**
   * Run requests together, yielding text deltas as they are generated and each result as soon as
   * its request (sample) finishes. A request that can never run, or has a field out of range, is
   * reported at once with finish_reason "error" and the reason; the others run.
   */
  async *stream(requests: readonly (GenerateRequest | PreparedRequest)[], opts: StreamOptions = {}): AsyncGenerator<GenerationEvent> {
    this.generating();
    const prepared: PreparedRequest[] = [];
    for (const request of requests) {
      if (request instanceof PreparedRequest) {
        prepared.push(request);
        continue;
      }
      try {
        prepared.push(this.client.prepare(request.id === undefined ? { ...request, id: this.newId() } : request));
      } catch (e) {
        if (!(e instanceof RequestTooLongError || e instanceof InputError)) throw e;
        yield { kind: "done", result: rejectedResult(request.id ?? this.newId(), 0, e) };
      }
    }
    if (prepared.length === 0) return;
    const stream = this.client.submit(prepared, { signal: opts.signal });
    const builders = new Map<string, CompletionBuilder>();
    for (const p of prepared) {
      for (let i = 0; i < p.n; i++) builders.set(`${p.id}#${i}`, new CompletionBuilder(this.tokenizer, p.promptTokenIds.at(-1), p.n > 1, p.reply));
    }
    for await (const output of stream) {
      // The engine failed (a worker died): the error itself, not results that would say "error".
      if (output.finishReason === "error" && stream.error !== null) throw stream.error;
      const builder = builders.get(`${output.requestId}#${output.index}`)!;
      const delta = builder.add(output);
      if (delta.reasoning !== "") yield { kind: "text", id: output.requestId, index: output.index, delta: delta.content, reasoning: delta.reasoning };
      else if (delta.content !== "") yield { kind: "text", id: output.requestId, index: output.index, delta: delta.content };
      if (output.finishReason !== null) yield { kind: "done", result: builder.result() };
    }
  }

  private nextId = 0;

  /** An id for a request given none: unique in this LLM's life. */
  private newId(): string {
    return `req-${this.nextId++}`;
  }
}

/** The tokenizer, refusing texts over `maxTokens` before tokenizing them (none: as it is). */
function limited(tokenizer: Tokenizer, maxTokens: number | undefined): Tokenizer {
  return maxTokens === undefined ? tokenizer : withTokenLimit(tokenizer, maxTokens);
}

/** Prompt ids of `text`, BOS first when the model expects it. */
function encodeText(tokenizer: Tokenizer, addBos: boolean, tokenizerFile: string, text: string): number[] {
  const ids = tokenizer.encode(text, { addBos });
  // A vocabulary that spells none of a text (a crafted 3-token one; byte-level BPE drops bytes it
  // has no token for): the empty prompt is the file's fault, not the user's.
  if (text.length > 0 && ids.every((id) => id === tokenizer.bosId)) {
    throw new ModelFormatError(tokenizerFile, `the vocabulary (${tokenizer.vocabSize} tokens) has no token for any of the text ${quoteFileText(text)}`);
  }
  return ids;
}

/** The `tokenizer.chat_template` of a GGUF file, or null. */
function ggufChatTemplate(path: string): string | null {
  const file = readGGUF(path);
  return file.has("tokenizer.chat_template") ? file.getString("tokenizer.chat_template") : null;
}

export type { CompletionResult, SpeculationResult, TokenLogprobResult, TopLogprobResult } from "./completion.ts";
export type { GenerateRequest } from "./generate-request.ts";
export type { ScoreResult } from "./engine-client.ts";
export { MAX_LOGPROBS } from "./generate-request.ts";

/** The model at `path`: an encoder (GGUF bert, nomic-bert) or a decoder (any other GGUF, a llama2.c checkpoint); a GGUF header is read once. */
function openModel(path: string): { kind: "encoder"; checkpoint: EncoderCheckpoint } | DecoderModel {
  if (!isGGUF(path)) return { kind: "decoder", checkpoint: openCheckpoint(path), filePooling: null, rankHead: null };
  const file = readGGUF(path);
  if (isEncoderFile(file)) return { kind: "encoder", checkpoint: readEncoderCheckpoint(path, file) };
  const checkpoint = readGGUFCheckpoint(path, file);
  const arch = file.getString("general.architecture");
  return { kind: "decoder", checkpoint, filePooling: filePooling(file, arch), rankHead: readDecoderRankHead(file, arch, checkpoint.config.dim) };
}

/** A decoder's checkpoint and the pooling its file declares (a decoder embedder's; null: a chat model). */
interface DecoderModel {
  kind: "decoder";
  checkpoint: Checkpoint;
  filePooling: Pooling | null;
  /** A reranker's head (cls.output) and rerank template, or null. */
  rankHead: DecoderRankHead | null;
}

/** What a model can be asked for: generation when it has an engine; embed or rerank as its Embedder pools. */
function capabilitiesOf(generate: boolean, embedding: EmbedderSetup | null, width: number): ModelCapabilities {
  const pooling = embedding?.embedder.pooling ?? null;
  return { generate, embed: pooling !== null && pooling !== "rank", rerank: pooling === "rank", pooling, embeddingWidth: embedding?.embedder.width ?? width };
}
