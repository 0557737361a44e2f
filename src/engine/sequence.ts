/**
 * One sample of a generation request as the engine sees it: the scheduler's Request (tokens,
 * computed count, cache isolation) plus how to sample, when to stop, the text streamed so far and
 * its timings. Sequences never leave the engine: what others see of one is an EngineOutput
 * snapshot (engine-output.ts).
 */
import type { StreamDecoder, Tokenizer } from "../tokenizer/tokenizer.ts";
import type { EndCheck, TokenConstraint } from "../constraint/token-constraint.ts";
import type { SampledLogprob } from "./logprobs.ts";
import { Request, type RequestOptions } from "../kv/request.ts";
import { Sampler, type SamplerWork, type SamplingParams } from "./sampler.ts";
import { StopStringMatcher } from "./stop-strings.ts";
import type { Drafter } from "./speculative.ts";

/** Why a sample ended. */
export type FinishReason =
  /** EOS (or another stop token) or a stop string. */
  | "stop"
  /** max_tokens, or the model's context is full. */
  | "length"
  /** Cancelled (Ctrl-C, or the caller aborted). */
  | "abort"
  /** Rejected before running, or failed; `error` says why. */
  | "error";

export interface GenerationParams {
  /** Most tokens to generate; null = until a stop or the context is full. */
  maxTokens: number | null;
  /** Strings that end the generation; the text is cut before the first one. */
  stop: readonly string[];
  sampling: SamplingParams;
  /** Report each generated token's log-probability and this many most likely alternatives; absent = off. */
  logprobs?: number;
  /**
   * Keep generating through end-of-generation tokens (llama.cpp's and vLLM's `ignore_eos`): the
   * token is output like any other, so only max_tokens, a stop string or the context ends the
   * request. Benchmarks use it to fix output lengths.
   */
  ignoreEos?: boolean;
  /**
   * Control tokens whose text the reply shows (llama.cpp's preserved tokens): a tool-call format's
   * markers, such as Llama 3's `<|python_tag|>` and Mistral's `[TOOL_CALLS]`, which decode to
   * nothing otherwise. Absent: none.
   */
  shownTokenIds?: ReadonlySet<number>;
  /**
   * "last": an embedding, not a generation. The prompt is computed (its prefix from the cache
   * where it hits, as for every prompt) and the request ends with its last token's hidden state after
   * the output norm (EngineOutput.embedding), sampling nothing. Only last-token pooling runs here:
   * a cache hit keeps no hidden state of the tokens it skips, which mean or first-token pooling
   * would need. Absent: generate.
   */
  pooling?: "last";
}

/** What identifies a sequence to the outside: the request it samples and which sample it is. */
export interface SampleOf {
  requestId: string;
  /** 0 .. n - 1 for a request of n samples. */
  index: number;
}

export class Sequence extends Request {
  readonly sampler: Sampler;
  readonly requestId: string;
  readonly sampleIndex: number;
  finishReason: FinishReason | null = null;
  /** Why the request failed, when finishReason is "error". */
  error: string | null = null;
  readonly arrivalMs = performance.now();
  firstTokenMs: number | null = null;
  finishMs: number | null = null;
  /** One entry per generated token when params.logprobs is set. */
  readonly logprobs: SampledLogprob[] = [];
  /**
   * Tokens its constraint forced that a logprobs request takes next, one a step from its own row
   * (engine.ts, forcedAfter), in place of sampling; empty otherwise.
   */
  forcedTokenIds: number[] = [];
  /** With params.pooling, the pooled hidden state, set when the prompt has been computed; else null. */
  embedding: Float32Array | null = null;
  private readonly stops: StopStringMatcher;
  /** The length of the output's text after each output token (before a stop string cut it). */
  private readonly textEnds: number[] = [];

  constructor(
    opts: RequestOptions,
    readonly params: GenerationParams,
    private readonly decoder: StreamDecoder,
    /** Its drafts and their counts when the engine speculates, else null. */
    readonly drafter: Drafter | null = null,
    sample: SampleOf = { requestId: opts.id, index: 0 },
    /** What its output is held to (a grammar matcher), or null. */
    readonly constraint: TokenConstraint | null = null,
    /** Where a constrained output may end (for its stop strings); null: anywhere. */
    private readonly ends: EndCheck | null = null,
  ) {
    super(opts);
    this.requestId = sample.requestId;
    this.sampleIndex = sample.index;
    this.sampler = new Sampler(params.sampling);
    this.stops = new StopStringMatcher(params.stop, (at) => this.mayEndAt(at));
  }

  get isFinished(): boolean {
    return this.finishReason !== null;
  }

  /** The generated text, stop string excluded (complete once finished). */
  get text(): string {
    return this.stops.fullText;
  }

  /** Sample the next token from a row of logits (the penalties see this sequence's tokens; `mask`: the tokens a constraint allows). */
  sample(logits: Float32Array, work: SamplerWork, mask: Uint32Array | null = null): number {
    return this.sampler.sample(logits, this.allTokenIds, work, this.numPromptTokens, mask);
  }

  /** Append a sampled token (not a stop token); returns the text it makes showable. */
  appendToken(id: number): string {
    this.firstTokenMs ??= performance.now();
    this.appendOutputTokenIds([id]);
    const delta = this.stops.push(this.decoder.push(id));
    this.textEnds.push(this.stops.fullText.length);
    if (this.stops.stopped) this.finish("stop");
    return delta;
  }

  /**
   * Whether the output may end where a stop string starts, at `at` of its text: anywhere without a
   * constraint; with one, only after a token where the constraint allows the end (a stop string
   * that starts inside a token's text does not end constrained output: the constraint is not asked
   * about part of a token). The token being appended is not among those before it.
   */
  private mayEndAt(at: number): boolean {
    const constraint = this.constraint;
    if (constraint === null || this.ends === null) return true;
    let kept = this.textEnds.length;
    while (kept > 0 && this.textEnds[kept - 1]! > at) kept--;
    if ((kept === 0 ? 0 : this.textEnds[kept - 1]!) !== at) return false;
    return this.ends.mayEndAfter(constraint, this.outputTokenIds, kept);
  }

  /** End the generation; returns any text still held back (an unfinished stop-string prefix, a partial character). */
  finish(reason: FinishReason, error: string | null = null): string {
    if (this.finishReason !== null) return "";
    this.firstTokenMs ??= performance.now();
    this.finishReason = reason;
    this.error = error;
    this.finishMs = performance.now();
    if (this.stops.stopped) return "";
    return this.stops.push(this.decoder.flush()) + this.stops.flush();
  }
}

/**
 * The decoder of a reply that follows `prevId`: the tokenizer's, with the control tokens of `shown`
 * written as their text (whatever partial character came before one is flushed first).
 */
export function replyDecoder(tokenizer: Tokenizer, prevId: number | undefined, shown: ReadonlySet<number> | undefined): StreamDecoder {
  const decoder = tokenizer.createStreamDecoder(prevId);
  if (shown === undefined || shown.size === 0) return decoder;
  return {
    push: (id) => (shown.has(id) ? decoder.push(id) + decoder.flush() + tokenizer.tokenText(id) : decoder.push(id)),
    flush: () => decoder.flush(),
  };
}
