/**
 * What ollama's chat and generate share once a request is prepared: one sample through the same
 * submission the OpenAI routes use (generation-run.ts), answered as one JSON object (`stream:
 * false`) or as NDJSON lines, each with what a step added, then a last line with `done: true`, the
 * `done_reason` (stop, length) and ollama's counts and durations in nanoseconds: total_duration
 * (from the request's arrival), load_duration (until the model was at hand: the model is loaded
 * before the server serves, so it is the time to reach it), prompt_eval_count (the prompt's
 * tokens), prompt_eval_duration (from admission to the first token), eval_count and
 * eval_duration (from the first token to the last). A failure once lines were sent is a last line
 * `{"error": "..."}`, as ollama ends a stream that failed.
 */
import type { PreparedRequest } from "../../llm/input-processor.ts";
import type { ReplyDelta } from "../../tools/reply-reader.ts";
import type { ToolCall } from "../../tools/tool-types.ts";
import { jsonObjectOf } from "../../util/json-object.ts";
import { ApiError } from "../api-error.ts";
import type { GenerationSpec } from "../generation-fields.ts";
import { collectGeneration, NO_ECHO, pumpGeneration, submitGeneration, type Choice, type GenerationContext } from "../generation-run.ts";
import { NdjsonStream } from "./ndjson.ts";

/** How a route shapes the reply's fields (chat: a `message`; generate: `response` and `thinking`). */
export interface ReplyShape {
  /** A streamed line's fields for what a step added. */
  part(delta: ReplyDelta): Record<string, unknown>;
  /** The whole reply's fields (content, reasoning, calls). */
  whole(choice: Choice): Record<string, unknown>;
  /** The calls a stream sends in one line once the reply is done (ollama sends each call whole); null when it made none. */
  calls(choice: Choice): Record<string, unknown> | null;
  /** The last line's fields (an empty message or response). */
  last: Record<string, unknown>;
}

/** When the request arrived and when its model was at hand (performance.now() ms). */
export interface RequestClock {
  arrivedMs: number;
  modelReadyMs: number;
}

/** The envelope every line and answer of ollama's carries: the model as the request named it, and the time. */
export function envelope(model: string): { model: string; created_at: string } {
  return { model, created_at: new Date().toISOString() };
}

export async function runReply(ctx: GenerationContext, prepared: PreparedRequest, spec: GenerationSpec, shape: ReplyShape, clock: RequestClock): Promise<Response> {
  const { stream, choices } = submitGeneration(ctx, [prepared], [NO_ECHO], spec);
  const choice = choices.all[0]!;
  if (!spec.stream) {
    await collectGeneration(ctx, stream, choices);
    if (choice.finishReason === "error") throw new ApiError(500, choice.last?.error ?? "the model failed to generate a response", "server_error");
    return Response.json({ ...envelope(ctx.model), ...shape.whole(choice), done: true, done_reason: doneReason(choice), ...metrics(choice, clock) });
  }
  const lines = new NdjsonStream(() => stream.abort());
  pumpGeneration(ctx, stream, choices, (_output, { delta }) => {
    const d = delta.reply ?? { content: delta.text, reasoning: "", toolCalls: [] };
    if (d.content !== "" || d.reasoning !== "") lines.send({ ...envelope(ctx.model), ...shape.part(d), done: false });
  }, () => {
    if (choice.finishReason === "error") {
      lines.send({ error: choice.last?.error ?? "the model failed to generate a response" });
    } else {
      const calls = shape.calls(choice);
      if (calls !== null) lines.send({ ...envelope(ctx.model), ...calls, done: false });
      lines.send({ ...envelope(ctx.model), ...shape.last, done: true, done_reason: doneReason(choice), ...metrics(choice, clock) });
    }
    lines.close();
  });
  return lines.response();
}

/** ollama's done_reason: length when the token limit or the context ended the reply, else stop (a call included). */
function doneReason(choice: Choice): string {
  return choice.finishReason === "length" ? "length" : "stop";
}

const NS_PER_MS = 1e6;

function nanoseconds(ms: number): number {
  return Math.max(0, Math.round(ms * NS_PER_MS));
}

function metrics(choice: Choice, clock: RequestClock): Record<string, number> {
  const now = performance.now();
  const timing = choice.last?.timing;
  const arrival = timing?.arrivalMs ?? clock.modelReadyMs;
  const first = timing?.firstTokenMs ?? now;
  const finish = timing?.finishMs ?? now;
  return {
    total_duration: nanoseconds(now - clock.arrivedMs),
    load_duration: nanoseconds(clock.modelReadyMs - clock.arrivedMs),
    prompt_eval_count: choice.last?.usage.promptTokens ?? 0,
    prompt_eval_duration: nanoseconds(first - arrival),
    eval_count: choice.tokenIds.length,
    eval_duration: nanoseconds(finish - first),
  };
}

/** A call as ollama sends it: its arguments as an object (a model's broken JSON kept as text under `arguments`), its place in `index`. */
export function ollamaToolCall(call: ToolCall, index: number): Record<string, unknown> {
  const args = call.function.arguments;
  return { id: call.id, function: { index, name: call.function.name, arguments: jsonObjectOf(args) ?? { arguments: args } } };
}
