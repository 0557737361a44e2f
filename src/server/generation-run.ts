/**
 * What chat and text completions share once a request is read: its prompts go through the
 * engine's front door as one submission (per prompt, n samples computed from one prefill), and the
 * result goes back either whole, as one JSON body when every sample has finished, or streamed as
 * server-sent events, a chunk per choice per step. A client that goes away (the request's signal,
 * or the stream cancelled) aborts the submission: its blocks are free one step later.
 */
import { EngineClosedError, QueueFullError } from "../errors.ts";
import type { EngineClient } from "../llm/engine-client.ts";
import type { PreparedRequest } from "../llm/input-processor.ts";
import type { EngineOutput } from "../engine/engine-output.ts";
import type { OutputStream } from "../llm/output-stream.ts";
import type { ReplySetup } from "../tools/reply-reader.ts";
import { SampleFold, type LogprobEntry, type SampleDelta } from "../llm/sample-fold.ts";
import { ApiError } from "./api-error.ts";
import type { GenerationSpec, ServerRequestDefaults } from "./generation-fields.ts";
import type { ServeMetrics } from "./metrics.ts";
import type { PromptLogprobs } from "./prompt-logprobs.ts";
import { SseStream } from "./sse.ts";

/**
 * One choice of the response as it stands: sample `index` of its prompt (prompt p, sample i:
 * p × n + i), its reply folded as every front end folds one (text, tokens, logprobs, finish
 * reason, content, reasoning and calls).
 */
export class Choice extends SampleFold {
  constructor(
    readonly index: number,
    /** What comes before the generated text (the prompt, with `echo`). */
    readonly echo: Echo,
    promptLast: number | undefined,
    setup: ReplySetup | null,
  ) {
    super(promptLast, setup);
  }
}

/** What one output added to a choice: its text, its tokens' logprobs, and what its reply reader made of it. */
export type ChoiceDelta = SampleDelta;

/** A prompt as echoed: its text and, with `logprobs`, its tokens' log-probabilities. */
export interface Echo {
  text: string;
  logprobs: PromptLogprobs | null;
}

export const NO_ECHO: Echo = { text: "", logprobs: null };

export interface Usage {
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
  prompt_tokens_details: { cached_tokens: number };
}

/** How one endpoint shapes its responses. */
export interface ResponseShape {
  /** `chat.completion` / `text_completion`. */
  object: string;
  /** `chat.completion.chunk` / `text_completion`. */
  chunkObject: string;
  /** The choice object of the whole response. */
  choice(c: Choice): Record<string, unknown>;
  /** The choices a stream opens with (chat: the role), before any token. */
  openingChoice(c: Choice): Record<string, unknown> | null;
  /** A streamed choice: what became showable, the logprobs of this step's tokens, the finish reason when it ended. */
  chunkChoice(c: Choice, delta: ChoiceDelta, logprobs: readonly LogprobEntry[], finishReason: string | null): Record<string, unknown>;
}

export interface GenerationContext {
  client: EngineClient;
  metrics: ServeMetrics;
  /** Sequences that may wait for the batch before requests get 429 (--max-queue); a request with more is a 400. */
  maxQueue: number;
  /** Prompts one /v1/completions request may hold (--max-prompts); more is a 400 before any is tokenized. */
  maxPrompts: number;
  /** The model name responses carry. */
  model: string;
  /** The server's defaults for the fields a request leaves out (--temperature, ...). */
  defaults: ServerRequestDefaults;
  /** Aborted when the client disconnects. */
  signal: AbortSignal;
  /** Told once the response is complete (for --log-requests). */
  onDone: (usage: Usage) => void;
}

let nextRequest = 0;

/** A new response id: `chatcmpl-…` / `cmpl-…` (`msg_…`, `resp_…` with "_"), unique in this process and across restarts. */
export function responseId(prefix: string, separator = "-"): string {
  return `${prefix}${separator}${Date.now().toString(36)}${(nextRequest++).toString(36).padStart(4, "0")}`;
}

/**
 * Submit the prepared prompts (`echoes[p]`: what prompt p echoes) and answer: a JSON body or a
 * stream. Throws ApiErrors before anything is sent: a full queue (429), a server shutting down (503).
 */
export async function runGeneration(
  ctx: GenerationContext, idPrefix: string, prompts: readonly PreparedRequest[], echoes: readonly Echo[], spec: GenerationSpec, shape: ResponseShape,
): Promise<Response> {
  const { stream, choices } = submitGeneration(ctx, prompts, echoes, spec);
  const id = responseId(idPrefix);
  const created = Math.floor(Date.now() / 1000);
  const envelope = (object: string) => ({ id, object, created, model: ctx.model });
  if (spec.stream) return streamGeneration(ctx, stream, choices, spec, shape, envelope(shape.chunkObject));
  const usage = await collectGeneration(ctx, stream, choices);
  return Response.json({ ...envelope(shape.object), choices: choices.all.map((c) => shape.choice(c)), usage });
}

/**
 * Submits the prepared prompts, as one submission, and returns their output stream and the
 * choices their outputs fold into (a non-streamed one is aborted when its client goes; a stream's
 * owner aborts it). Throws ApiErrors before anything is queued: a request larger than the queue
 * (400), a full queue (429), a server shutting down (503).
 */
export function submitGeneration(
  ctx: GenerationContext, prompts: readonly PreparedRequest[], echoes: readonly Echo[], spec: GenerationSpec,
): { stream: OutputStream; choices: Choices } {
  checkSequences(prompts, spec, ctx.maxQueue);
  let stream: OutputStream;
  try {
    stream = ctx.client.submit(prompts, { maxQueue: ctx.maxQueue, signal: spec.stream ? undefined : ctx.signal });
  } catch (e) {
    throw submitError(e);
  }
  ctx.metrics.requestArrived(stream.requests);
  return { stream, choices: new Choices(stream, echoes, prompts) };
}

/** Folds every output of a non-streamed submission into its choices (`each` sees each output too); its usage, reported done. */
export async function collectGeneration(ctx: GenerationContext, stream: OutputStream, choices: Choices, each?: (output: EngineOutput) => void): Promise<Usage> {
  for await (const output of stream) {
    ctx.metrics.observe(output, performance.now());
    choices.add(output);
    each?.(output);
  }
  const usage = choices.usage();
  ctx.onDone(usage);
  return usage;
}

/**
 * Runs a streamed submission in the background: each output is folded into its choice and given
 * to `each` with what it added (to send as events); `end` gets the usage once the outputs end (to
 * send the last events and close the stream), then it is reported done. The engine's work is
 * aborted when the client goes.
 */
export function pumpGeneration(
  ctx: GenerationContext, stream: OutputStream, choices: Choices, each: (output: EngineOutput, added: ChoiceAdded) => void, end: (usage: Usage) => void,
): void {
  const onAbort = () => stream.abort();
  ctx.signal.addEventListener("abort", onAbort);
  if (ctx.signal.aborted) onAbort();
  void (async () => {
    try {
      for await (const output of stream) {
        ctx.metrics.observe(output, performance.now());
        each(output, choices.add(output));
      }
      const usage = choices.usage();
      end(usage);
      ctx.onDone(usage);
    } finally {
      ctx.signal.removeEventListener("abort", onAbort);
    }
  })();
}

/**
 * A request whose sequences (prompts x n) alone are more than --max-queue can never be admitted,
 * however long its client waits: a 400 naming `n` (or `prompt` when n is 1), not a 429 that
 * clients retry (the OpenAI client retries a 429 by itself).
 */
function checkSequences(prompts: readonly PreparedRequest[], spec: GenerationSpec, maxQueue: number): void {
  const sequences = prompts.reduce((n, p) => n + p.n, 0);
  if (sequences <= maxQueue) return;
  const asked = prompts.length === 1 ? `n ${spec.n}` : `${prompts.length} prompts x n ${spec.n}`;
  throw ApiError.badField(
    spec.n > 1 ? "n" : "prompt",
    `the request asks for ${sequences} sequences (${asked}), more than this server queues at once (--max-queue ${maxQueue}): it can never be admitted; send fewer prompts or a smaller 'n'`,
  );
}

/** The front door's refusals of a submission as HTTP errors. */
function submitError(e: unknown): unknown {
  if (e instanceof QueueFullError) return new ApiError(429, e.message, "rate_limit_error", null, "queue_full", { "Retry-After": "1" });
  if (e instanceof EngineClosedError) return new ApiError(503, "the server is shutting down", "service_unavailable", null, "shutting_down", { "Retry-After": "1" });
  return e;
}

function streamGeneration(
  ctx: GenerationContext, stream: OutputStream, choices: Choices, spec: GenerationSpec, shape: ResponseShape, envelope: Record<string, unknown>,
): Response {
  const sse = new SseStream(() => stream.abort());
  // With include_usage every chunk carries "usage": null and a last chunk the usage.
  const usageField = spec.includeUsage ? { usage: null } : {};
  for (const choice of choices.all) {
    const opening = shape.openingChoice(choice);
    if (opening !== null) sse.send({ ...envelope, choices: [opening], ...usageField });
  }
  pumpGeneration(ctx, stream, choices, (output, { choice, logprobs, delta }) => {
    if (output.text === "" && output.tokenIds.length === 0 && output.finishReason === null) return;
    sse.send({ ...envelope, choices: [shape.chunkChoice(choice, delta, logprobs, output.finishReason)], ...usageField });
  }, (usage) => {
    if (spec.includeUsage) sse.send({ ...envelope, choices: [], usage });
    sse.finish();
  });
  return sse.response();
}

/** What one output added to its choice: the choice, its tokens' log-probabilities, its delta. */
export interface ChoiceAdded {
  choice: Choice;
  logprobs: LogprobEntry[];
  delta: ChoiceDelta;
}

/** Every choice of a submission, as its outputs come in, and the usage they add up to. */
export class Choices {
  readonly all: Choice[] = [];
  private readonly byOutput = new Map<string, Choice>();
  /** Per prompt: its tokens, and its cached tokens (as its first sample reports them). */
  private readonly prompts: { tokens: number; cached: number }[];

  constructor(stream: OutputStream, echoes: readonly Echo[], prepared: readonly PreparedRequest[]) {
    this.prompts = stream.requests.map((r) => ({ tokens: r.promptTokenIds.length, cached: 0 }));
    stream.requests.forEach((r, p) => {
      const setup = prepared[p]?.reply ?? null;
      for (let i = 0; i < r.n; i++) {
        const choice = new Choice(this.all.length, echoes[p] ?? NO_ECHO, r.promptTokenIds.at(-1), setup);
        this.all.push(choice);
        this.byOutput.set(`${r.id}#${i}`, choice);
      }
    });
    this.promptOf = new Map(stream.requests.map((r, p) => [r.id, p]));
  }

  private readonly promptOf: Map<string, number>;

  /** Adds an output to its choice; returns the choice, the logprob entries of this output's tokens and what it added. */
  add(output: EngineOutput): ChoiceAdded {
    const choice = this.byOutput.get(`${output.requestId}#${output.index}`)!;
    const delta = choice.add(output);
    if (output.index === 0) this.prompts[this.promptOf.get(output.requestId)!]!.cached = output.usage.cachedTokens;
    return { choice, logprobs: delta.logprobs, delta };
  }

  /** Each prompt counted once (its samples share it), every sample's tokens. */
  usage(): Usage {
    const prompt = this.prompts.reduce((n, p) => n + p.tokens, 0);
    const cached = this.prompts.reduce((n, p) => n + p.cached, 0);
    const completion = this.all.reduce((n, c) => n + c.tokenIds.length, 0);
    return { prompt_tokens: prompt, completion_tokens: completion, total_tokens: prompt + completion, prompt_tokens_details: { cached_tokens: cached } };
  }
}
