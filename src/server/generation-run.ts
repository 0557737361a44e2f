/**
 * What chat and text completions share once a request is read: its prompts go to the engine loop
 * as one submission (per prompt, n samples computed from one prefill), and the result goes back
 * either whole, as one JSON body when every sample has finished, or streamed as server-sent
 * events, a chunk per choice per step. A client that goes away (the request's signal, or the
 * stream cancelled) aborts the submission: its blocks are free one step later.
 */
import type { NewRequest, StepEvent } from "../engine/engine.ts";
import type { Sequence } from "../engine/sequence.ts";
import type { EngineLoop, Submission } from "./engine-loop.ts";
import { sampleParams, type GenerationSpec } from "./generation-fields.ts";
import type { PromptLogprobs } from "./prompt-logprobs.ts";
import { SseStream } from "./sse.ts";

/** One choice of the response: sample `seq`, at `index` (prompt p, sample i: p × n + i). */
export interface Choice {
  index: number;
  seq: Sequence;
  /** What comes before the generated text (the prompt, with `echo`). */
  echo: Echo;
}

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
  /** A streamed choice: text `delta`, generated tokens [from, to), the finish reason when it ended. */
  chunkChoice(c: Choice, delta: string, from: number, to: number, finishReason: string | null): Record<string, unknown>;
}

export interface GenerationContext {
  loop: EngineLoop;
  /** The model name responses carry. */
  model: string;
  /** Aborted when the client disconnects. */
  signal: AbortSignal;
  /** Told once the response is complete (for --log-requests). */
  onDone: (usage: Usage) => void;
}

let nextRequest = 0;

/** A new response id: `chatcmpl-…` / `cmpl-…`, unique in this process and across restarts. */
export function responseId(prefix: string): string {
  return `${prefix}-${Date.now().toString(36)}${(nextRequest++).toString(36).padStart(4, "0")}`;
}

/**
 * Submit the prompts (`echoes[p]`: what prompt p echoes) and answer: a JSON body or a stream.
 * Throws the loop's errors (429, a request that can never fit) before anything is sent.
 */
export async function runGeneration(
  ctx: GenerationContext, idPrefix: string, prompts: readonly number[][], echoes: readonly Echo[], spec: GenerationSpec, shape: ResponseShape,
): Promise<Response> {
  const id = responseId(idPrefix);
  const created = Math.floor(Date.now() / 1000);
  const groups: NewRequest[][] = prompts.map((promptTokenIds, p) =>
    Array.from({ length: spec.n }, (_, i) => ({ id: `${id}-${p}-${i}`, promptTokenIds, params: sampleParams(spec, i), cacheSalt: spec.cacheSalt })),
  );
  const envelope = (object: string) => ({ id, object, created, model: ctx.model });
  if (spec.stream) return streamGeneration(ctx, groups, echoes, spec, shape, envelope(shape.chunkObject));

  let resolveDone!: () => void;
  const done = new Promise<void>((resolve) => (resolveDone = resolve));
  const submission = ctx.loop.submit(groups, () => {
    if (submission.finished) resolveDone();
  });
  const onAbort = () => ctx.loop.abort(submission);
  ctx.signal.addEventListener("abort", onAbort);
  // Gone while its body was read: nothing to compute.
  if (ctx.signal.aborted) onAbort();
  try {
    await done;
  } finally {
    ctx.signal.removeEventListener("abort", onAbort);
  }
  const choices = choicesOf(submission, echoes);
  const usage = usageOf(submission);
  ctx.onDone(usage);
  return Response.json({ ...envelope(shape.object), choices: choices.map((c) => shape.choice(c)), usage });
}

function streamGeneration(
  ctx: GenerationContext, groups: NewRequest[][], echoes: readonly Echo[], spec: GenerationSpec, shape: ResponseShape, envelope: Record<string, unknown>,
): Response {
  let submission: Submission | null = null;
  const sse = new SseStream(() => {
    if (submission !== null) ctx.loop.abort(submission);
  });
  // With include_usage every chunk carries "usage": null and a last chunk the usage.
  const usageField = spec.includeUsage ? { usage: null } : {};
  const sent = new Map<Sequence, number>();
  let choices: Choice[] = [];
  const onEvents = (events: readonly StepEvent[]) => {
    for (const { seq, delta, finished } of events) {
      const choice = choices.find((c) => c.seq === seq)!;
      const from = sent.get(seq) ?? 0;
      const to = seq.outputTokenIds.length;
      sent.set(seq, to);
      if (delta === "" && from === to && !finished) continue;
      const reason = finished ? seq.finishReason : null;
      sse.send({ ...envelope, choices: [shape.chunkChoice(choice, delta, from, to, reason)], ...usageField });
    }
    if (submission?.finished) {
      const usage = usageOf(submission);
      if (spec.includeUsage) sse.send({ ...envelope, choices: [], usage });
      sse.finish();
      ctx.onDone(usage);
    }
  };
  submission = ctx.loop.submit(groups, onEvents);
  choices = choicesOf(submission, echoes);
  for (const choice of choices) {
    const opening = shape.openingChoice(choice);
    if (opening !== null) sse.send({ ...envelope, choices: [opening], ...usageField });
  }
  const sub = submission;
  ctx.signal.addEventListener("abort", () => ctx.loop.abort(sub));
  if (ctx.signal.aborted) ctx.loop.abort(sub);
  return sse.response();
}

function choicesOf(submission: Submission, echoes: readonly Echo[]): Choice[] {
  const choices: Choice[] = [];
  submission.groups.forEach((group, p) => group.forEach((seq) => choices.push({ index: choices.length, seq, echo: echoes[p] ?? NO_ECHO })));
  return choices;
}

/** Usage of a submission: each prompt counted once (its samples share it), every sample's tokens. */
export function usageOf(submission: Submission): Usage {
  let prompt = 0;
  let cached = 0;
  let completion = 0;
  for (const group of submission.groups) {
    prompt += group[0]!.numPromptTokens;
    cached += group[0]!.numCachedTokens ?? 0;
    for (const seq of group) completion += seq.outputTokenIds.length;
  }
  return { prompt_tokens: prompt, completion_tokens: completion, total_tokens: prompt + completion, prompt_tokens_details: { cached_tokens: cached } };
}
