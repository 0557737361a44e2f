/**
 * `POST /v1/responses`: OpenAI's Responses API over the same front door, tools and reasoning as
 * chat completions, stateless (responses-request.ts says what that refuses). The reply is a
 * `response` object whose `output` holds a `reasoning` item (its text as `reasoning_text`
 * content), a `message` with one `output_text` part, and a `function_call` item per call
 * (`call_id`, `name`, `arguments` as JSON text), in that order; `status` is `completed`, or
 * `incomplete` with `incomplete_details.reason: "max_output_tokens"`. Streamed, as the Responses
 * API's events, each with its `sequence_number`: `response.created`, `response.in_progress`, for
 * each item `response.output_item.added`, its content events (`response.content_part.added`,
 * `response.reasoning_text.delta` / `response.output_text.delta` ... `.done`,
 * `response.content_part.done`; `response.function_call_arguments.delta` ... `.done`) and
 * `response.output_item.done`, then `response.completed` (or `response.incomplete`) with the
 * whole response. `GET /v1/responses/{id}` is a 404: nothing is stored.
 */
import type { ReplyDelta } from "../tools/reply-reader.ts";
import { ApiError } from "./api-error.ts";
import type { BodyFields } from "./body-fields.ts";
import { requestError } from "./generation-fields.ts";
import { collectGeneration, NO_ECHO, pumpGeneration, responseId, submitGeneration, type Choice, type GenerationContext, type Usage } from "./generation-run.ts";
import { checkModel } from "./models.ts";
import { readResponsesRequest, type ResponsesRequest } from "./responses-request.ts";
import { SseStream } from "./sse.ts";

type Item = Record<string, unknown>;

export async function responses(ctx: GenerationContext, fields: BodyFields): Promise<Response> {
  const request = readResponsesRequest(fields, ctx.defaults);
  checkModel(request.model, ctx.model);
  let prepared;
  try {
    prepared = ctx.client.prepare({ ...request.spec.fields, messages: request.messages, chatTemplateKwargs: request.templateKwargs ?? undefined }, { maxSamples: 1 });
  } catch (e) {
    throw flatToolField(requestError(e, request.spec, "input"));
  }
  const { stream, choices } = submitGeneration(ctx, [prepared], [NO_ECHO], request.spec);
  const choice = choices.all[0]!;
  const shell = responseShell(responseId("resp", "_"), ctx.model, request);
  if (!request.spec.stream) {
    const usage = await collectGeneration(ctx, stream, choices);
    if (choice.finishReason === "error") throw new ApiError(500, "the engine failed while generating", "server_error");
    return Response.json(finished(shell, outputItems(choice), choice, usage));
  }
  const sse = new SseStream(() => stream.abort());
  const events = new ResponseEvents(sse);
  events.send("response.created", { response: shell });
  events.send("response.in_progress", { response: shell });
  pumpGeneration(ctx, stream, choices, (_output, { delta }) => events.add(delta.reply ?? { content: delta.text, reasoning: "", toolCalls: [] }), (usage) => {
    events.closeItem();
    if (choice.finishReason === "error") {
      events.send("response.failed", { response: { ...shell, status: "failed", error: { code: "server_error", message: "the engine failed while generating" } } });
    } else {
      const done = finished(shell, events.items, choice, usage);
      events.send(done.status === "completed" ? "response.completed" : "response.incomplete", { response: done });
    }
    sse.close();
  });
  return sse.response();
}

/**
 * The Responses API's tools and tool_choice have no `function` level: a field the engine names
 * inside one (`tools[0].function.name`) is named as the body has it (`tools[0].name`).
 */
function flatToolField(e: unknown): unknown {
  if (!(e instanceof ApiError) || e.param === null) return e;
  const param = e.param.replace(/^(tools\[\d+\]|tool_choice)\.function(?=\.|$)/, "$1");
  return param === e.param ? e : ApiError.badField(param, e.message.replaceAll(e.param, param));
}

/** `GET /v1/responses/{id}`: responses are not stored. */
export function storedResponse(id: string): never {
  throw new ApiError(404, `no response '${id.slice(0, 64)}': this server stores no responses (send the whole conversation as 'input')`, "not_found_error", null, "not_found");
}

/** The response object before its output: what the request asked for, echoed. */
function responseShell(id: string, model: string, r: ResponsesRequest): Item {
  const e = r.echo;
  return {
    id, object: "response", created_at: Math.floor(Date.now() / 1000), status: "in_progress", error: null, incomplete_details: null,
    instructions: e.instructions, max_output_tokens: e.maxOutputTokens, model, output: [], parallel_tool_calls: e.parallelToolCalls,
    previous_response_id: null, reasoning: { effort: null, summary: null }, store: false, temperature: e.temperature,
    text: { format: e.format }, tool_choice: e.toolChoice, tools: e.tools, top_p: e.topP, truncation: "disabled",
    usage: null, user: null, metadata: e.metadata,
  };
}

/** The response once its reply has ended. */
function finished(shell: Item, output: Item[], choice: Choice, u: Usage): Item {
  const incomplete = choice.finishReason === "length";
  return {
    ...shell, status: incomplete ? "incomplete" : "completed", incomplete_details: incomplete ? { reason: "max_output_tokens" } : null, output,
    usage: {
      input_tokens: u.prompt_tokens, input_tokens_details: { cached_tokens: u.prompt_tokens_details.cached_tokens },
      output_tokens: u.completion_tokens, output_tokens_details: { reasoning_tokens: 0 }, total_tokens: u.total_tokens,
    },
  };
}

const reasoningItem = (id: string, text: string, status: string): Item => ({ type: "reasoning", id, summary: [], content: [{ type: "reasoning_text", text }], status });
const messageItem = (id: string, text: string, status: string): Item => ({
  type: "message", id, status, role: "assistant", content: text === "" && status === "in_progress" ? [] : [{ type: "output_text", text, annotations: [], logprobs: [] }],
});
const callItem = (id: string, callId: string, name: string, args: string, status: string): Item => ({ type: "function_call", id, call_id: callId, name, arguments: args, status });

/** The output items of a whole reply. */
function outputItems(choice: Choice): Item[] {
  const done = "completed";
  if (choice.reply === null) return [messageItem(responseId("msg", "_"), choice.text, done)];
  const m = choice.reply.message;
  const items: Item[] = [];
  if (m.reasoning !== "") items.push(reasoningItem(responseId("rs", "_"), m.reasoning, done));
  if (m.content !== "" || m.toolCalls.length === 0) items.push(messageItem(responseId("msg", "_"), m.content, done));
  for (const c of m.toolCalls) items.push(callItem(responseId("fc", "_"), c.id, c.function.name, c.function.arguments, done));
  return items;
}

/** The events of a streamed response: one output item open at a time, opened when its kind of text begins. */
class ResponseEvents {
  readonly items: Item[] = [];
  private sequence = 0;
  private open: { kind: "reasoning" | "message" | "call"; id: string; text: string; callId: string; name: string; call: number } | null = null;

  constructor(private readonly sse: SseStream) {}

  send(type: string, fields: Item): void {
    this.sse.event(type, { type, sequence_number: this.sequence++, ...fields });
  }

  add(d: ReplyDelta): void {
    if (d.reasoning !== "") this.text("reasoning", d.reasoning);
    if (d.content !== "") this.text("message", d.content);
    for (const c of d.toolCalls) {
      if (c.name !== undefined) {
        this.closeItem();
        this.open = { kind: "call", id: responseId("fc", "_"), text: "", callId: c.id!, name: c.name, call: c.index };
        this.send("response.output_item.added", { output_index: this.items.length, item: callItem(this.open.id, c.id!, c.name, "", "in_progress") });
      }
      const open = this.open;
      if (c.arguments === "" || open === null || open.kind !== "call" || open.call !== c.index) continue;
      open.text += c.arguments;
      this.send("response.function_call_arguments.delta", { item_id: open.id, output_index: this.items.length, delta: c.arguments });
    }
  }

  /** Ends the open item: its done events, and the item joins the output. */
  closeItem(): void {
    const open = this.open;
    if (open === null) return;
    this.open = null;
    const at = { item_id: open.id, output_index: this.items.length };
    let item: Item;
    if (open.kind === "call") {
      this.send("response.function_call_arguments.done", { ...at, name: open.name, arguments: open.text });
      item = callItem(open.id, open.callId, open.name, open.text, "completed");
    } else {
      const reasoning = open.kind === "reasoning";
      const part = reasoning ? { type: "reasoning_text", text: open.text } : { type: "output_text", text: open.text, annotations: [], logprobs: [] };
      this.send(reasoning ? "response.reasoning_text.done" : "response.output_text.done", { ...at, content_index: 0, text: open.text, ...(reasoning ? {} : { logprobs: [] }) });
      this.send("response.content_part.done", { ...at, content_index: 0, part });
      item = reasoning ? reasoningItem(open.id, open.text, "completed") : messageItem(open.id, open.text, "completed");
    }
    this.send("response.output_item.done", { output_index: this.items.length, item });
    this.items.push(item);
  }

  /** Text of a reasoning or message item: opens the item (and its one content part) first when needed. */
  private text(kind: "reasoning" | "message", text: string): void {
    if (this.open?.kind !== kind) {
      this.closeItem();
      const id = responseId(kind === "reasoning" ? "rs" : "msg", "_");
      this.open = { kind, id, text: "", callId: "", name: "", call: -1 };
      const at = { output_index: this.items.length };
      this.send("response.output_item.added", { ...at, item: kind === "reasoning" ? { type: "reasoning", id, summary: [], status: "in_progress" } : messageItem(id, "", "in_progress") });
      const part = kind === "reasoning" ? { type: "reasoning_text", text: "" } : { type: "output_text", text: "", annotations: [], logprobs: [] };
      this.send("response.content_part.added", { item_id: id, ...at, content_index: 0, part });
    }
    const open = this.open!;
    open.text += text;
    const at = { item_id: open.id, output_index: this.items.length, content_index: 0 };
    if (kind === "reasoning") this.send("response.reasoning_text.delta", { ...at, delta: text });
    else this.send("response.output_text.delta", { ...at, delta: text, logprobs: [] });
  }
}
