/**
 * `POST /v1/messages`: Anthropic's Messages API over the same front door, tools and reasoning as
 * chat completions (as llama-server, ollama and vLLM offer it), so that tools written for it run
 * on a local model. The reply comes back as content blocks (`thinking`, `text`, `tool_use` with
 * the arguments as `input`), `stop_reason` (`end_turn`, `max_tokens`, `stop_sequence` with the
 * sequence, `tool_use`) and Anthropic's usage (prompt tokens the prefix cache served are
 * `cache_read_input_tokens`); streamed, as Anthropic's events: `message_start`, `ping`, for each
 * block `content_block_start`, its deltas (`thinking_delta`, `text_delta`, `input_json_delta`)
 * and `content_block_stop`, then `message_delta` (the stop reason and usage) and `message_stop`.
 * `POST /v1/messages/count_tokens` counts a body's prompt. Errors have Anthropic's shape
 * (anthropicErrorResponse).
 */
import { RequestFieldError } from "../errors.ts";
import type { EngineOutput } from "../engine/engine-output.ts";
import type { PreparedRequest } from "../llm/input-processor.ts";
import type { Tokenizer } from "../tokenizer/tokenizer.ts";
import type { ReplyDelta } from "../tools/reply-reader.ts";
import { jsonObjectOf } from "../util/json-object.ts";
import { ApiError, type ApiErrorType } from "./api-error.ts";
import { readAnthropicRequest, type AnthropicRequest } from "./anthropic-request.ts";
import type { BodyFields } from "./body-fields.ts";
import { requestError } from "./generation-fields.ts";
import { collectGeneration, NO_ECHO, pumpGeneration, responseId, submitGeneration, type Choice, type GenerationContext, type Usage } from "./generation-run.ts";
import { checkModel } from "./models.ts";
import { SseStream } from "./sse.ts";

export async function anthropicMessages(tokenizer: Tokenizer, ctx: GenerationContext, fields: BodyFields): Promise<Response> {
  const request = readAnthropicRequest(fields, ctx.defaults);
  checkModel(request.model, ctx.model);
  const prepared = prepare(ctx, request);
  const { stream, choices } = submitGeneration(ctx, [prepared], [NO_ECHO], request.spec);
  const choice = choices.all[0]!;
  const id = responseId("msg", "_");
  const ending = new Ending(tokenizer, request.stopSequences);
  if (!request.spec.stream) {
    const usage = await collectGeneration(ctx, stream, choices, (output) => ending.see(output));
    if (choice.finishReason === "error") throw new ApiError(500, "the engine failed while generating", "server_error");
    const stop = ending.of(choice);
    return Response.json({
      id, type: "message", role: "assistant", model: ctx.model, content: contentBlocks(choice), stop_reason: stop.reason, stop_sequence: stop.sequence, usage: anthropicUsage(usage),
    });
  }
  const sse = new SseStream(() => stream.abort());
  const blocks = new BlockStream(sse);
  sse.event("message_start", {
    type: "message_start",
    message: {
      id, type: "message", role: "assistant", model: ctx.model, content: [], stop_reason: null, stop_sequence: null,
      usage: { input_tokens: prepared.promptTokenIds.length, cache_creation_input_tokens: 0, cache_read_input_tokens: 0, output_tokens: 0 },
    },
  });
  sse.event("ping", { type: "ping" });
  pumpGeneration(ctx, stream, choices, (output, { delta }) => {
    ending.see(output);
    blocks.add(delta.reply ?? { content: delta.text, reasoning: "", toolCalls: [] });
  }, (usage) => {
    blocks.close();
    if (choice.finishReason === "error") {
      sse.event("error", anthropicErrorBody(new ApiError(500, "the engine failed while generating", "server_error")));
    } else {
      const stop = ending.of(choice);
      sse.event("message_delta", { type: "message_delta", delta: { stop_reason: stop.reason, stop_sequence: stop.sequence }, usage: anthropicUsage(usage) });
      sse.event("message_stop", { type: "message_stop" });
    }
    sse.close();
  });
  return sse.response();
}

/** `POST /v1/messages/count_tokens`: the prompt's tokens, rendered as a message would be. */
export function anthropicCountTokens(ctx: GenerationContext, fields: BodyFields): Response {
  const request = readAnthropicRequest(fields, ctx.defaults, true);
  checkModel(request.model, ctx.model);
  return Response.json({ input_tokens: prepare(ctx, request).promptTokenIds.length });
}

function prepare(ctx: GenerationContext, request: AnthropicRequest): PreparedRequest {
  try {
    return ctx.client.prepare({ ...request.spec.fields, messages: request.messages, chatTemplateKwargs: request.templateKwargs ?? undefined }, { maxSamples: 1 });
  } catch (e) {
    // Anthropic's tools have no `function` level: their fields are named as the body has them.
    if (e instanceof RequestFieldError && e.property === "tools") {
      const field = e.field.replace(/\.function\.(name|description)/, ".$1").replace(/\.function\.parameters/, ".input_schema").replace(/\.function$/, "");
      throw ApiError.badField(field, `'${field}' ${e.problem}`);
    }
    throw requestError(e, request.spec, "messages");
  }
}

/** The reply's content blocks: thinking, text, then one tool_use per call. */
function contentBlocks(choice: Choice): Record<string, unknown>[] {
  if (choice.reply === null) return [{ type: "text", text: choice.text }];
  const m = choice.reply.message;
  const blocks: Record<string, unknown>[] = [];
  if (m.reasoning !== "") blocks.push({ type: "thinking", thinking: m.reasoning, signature: "" });
  if (m.content !== "" || m.toolCalls.length === 0) blocks.push({ type: "text", text: m.content });
  for (const call of m.toolCalls) blocks.push({ type: "tool_use", id: toolUseId(call.id), name: call.function.name, input: callInput(call.function.arguments) });
  return blocks;
}

/** A call's arguments as the object `input` holds; arguments that are no JSON object (a model's broken JSON) are kept as text. */
function callInput(args: string): unknown {
  return jsonObjectOf(args) ?? { arguments: args };
}

/** Anthropic's tool-use ids begin with toolu_. */
function toolUseId(id: string): string {
  return id.startsWith("call_") ? `toolu_${id.slice(5)}` : id;
}

/** The content blocks of a stream: a block opens when its kind of text begins, and closes when another begins or the reply ends. */
class BlockStream {
  private index = -1;
  private open: "text" | "thinking" | "tool_use" | null = null;
  /** The open tool_use block's call index. */
  private call = -1;

  constructor(private readonly sse: SseStream) {}

  add(d: ReplyDelta): void {
    if (d.reasoning !== "") {
      this.begin("thinking", { type: "thinking", thinking: "", signature: "" });
      this.delta({ type: "thinking_delta", thinking: d.reasoning });
    }
    if (d.content !== "") {
      this.begin("text", { type: "text", text: "" });
      this.delta({ type: "text_delta", text: d.content });
    }
    for (const c of d.toolCalls) {
      if (c.name !== undefined) {
        this.close();
        this.begin("tool_use", { type: "tool_use", id: toolUseId(c.id!), name: c.name, input: {} });
        this.call = c.index;
      }
      if (c.arguments !== "" && c.index === this.call) this.delta({ type: "input_json_delta", partial_json: c.arguments });
    }
  }

  close(): void {
    if (this.open === null) return;
    this.sse.event("content_block_stop", { type: "content_block_stop", index: this.index });
    this.open = null;
  }

  private begin(kind: "text" | "thinking" | "tool_use", block: Record<string, unknown>): void {
    if (this.open === kind && kind !== "tool_use") return;
    this.close();
    this.index++;
    this.open = kind;
    this.sse.event("content_block_start", { type: "content_block_start", index: this.index, content_block: block });
  }

  private delta(delta: Record<string, unknown>): void {
    this.sse.event("content_block_delta", { type: "content_block_delta", index: this.index, delta });
  }
}

/**
 * Why a reply stopped, as Anthropic says it: an end-of-generation token ended the turn, a stop
 * string (which one: found in the reply's tokens just past its text), max_tokens, or a call.
 */
class Ending {
  private byToken = false;

  constructor(private readonly tokenizer: Tokenizer, private readonly stops: readonly string[]) {}

  /** The sample's last output says whether a token it sampled ended it (an end-of-generation token). */
  see(output: EngineOutput): void {
    if (output.finishReason !== null) this.byToken = output.numSampled > output.tokenIds.length;
  }

  of(choice: Choice): { reason: string; sequence: string | null } {
    if (choice.finishReason === "length") return { reason: "max_tokens", sequence: null };
    if (choice.madeCalls) return { reason: "tool_use", sequence: null };
    if (choice.finishReason === "stop" && !this.byToken && this.stops.length > 0) {
      const full = this.tokenizer.decode(choice.tokenIds);
      let found: { at: number; stop: string } | null = null;
      for (const stop of this.stops) {
        const at = full.indexOf(stop, Math.max(0, choice.text.length - stop.length));
        if (at >= 0 && (found === null || at < found.at)) found = { at, stop };
      }
      if (found !== null) return { reason: "stop_sequence", sequence: found.stop };
    }
    return { reason: "end_turn", sequence: null };
  }
}

/** Anthropic's usage: prompt tokens the prefix cache served are cache reads, the rest input. */
function anthropicUsage(u: Usage): Record<string, number> {
  const cached = u.prompt_tokens_details.cached_tokens;
  return { input_tokens: u.prompt_tokens - cached, cache_creation_input_tokens: 0, cache_read_input_tokens: cached, output_tokens: u.completion_tokens };
}

/** Anthropic's error type for a status. */
function anthropicErrorType(e: ApiError): string {
  const byStatus: Record<number, string> = { 400: "invalid_request_error", 401: "authentication_error", 403: "permission_error", 404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error", 503: "overloaded_error" };
  return byStatus[e.status] ?? (e.type === ("server_error" satisfies ApiErrorType) ? "api_error" : "invalid_request_error");
}

export function anthropicErrorBody(e: ApiError): { type: "error"; error: { type: string; message: string } } {
  return { type: "error", error: { type: anthropicErrorType(e), message: e.param === null || e.message.includes(e.param) ? e.message : `${e.param}: ${e.message}` } };
}

/** An error as Anthropic's API answers one: `{"type": "error", "error": {"type", "message"}}`, the status and headers kept. */
export function anthropicErrorResponse(e: ApiError): Response {
  return Response.json(anthropicErrorBody(e), { status: e.status, headers: e.headers });
}
