/**
 * `POST /api/chat`: ollama's chat over the same front door as /v1/chat/completions. The messages
 * (`role`, `content`, an assistant's `thinking` and `tool_calls` with their arguments as objects,
 * a tool result's `tool_name` and `tool_call_id`) go through the chat template; `tools` are
 * OpenAI's function tools, as ollama takes them. The reply is a `message` with `content`,
 * `thinking` (a model that reasons: on unless `think` is false) and `tool_calls` (each call whole,
 * its arguments an object), streamed as NDJSON lines unless `stream` is false. No messages: the
 * model is loaded (done_reason "load"). Images are not implemented (a 400 naming them).
 */
import type { ChatMessage, ChatToolCall } from "../../chat/jinja-template.ts";
import type { PreparedRequest } from "../../llm/input-processor.ts";
import type { ReplyDelta } from "../../tools/reply-reader.ts";
import { ApiError } from "../api-error.ts";
import { isObject, type BodyFields, type Json } from "../body-fields.ts";
import { requestError } from "../generation-fields.ts";
import type { Choice } from "../generation-run.ts";
import type { OllamaContext } from "./context.ts";
import { loaded, setUpGeneration } from "./generation-setup.ts";
import { ollamaToolCall, runReply, type ReplyShape } from "./reply-run.ts";

const ROLES = new Set(["system", "user", "assistant", "tool"]);
const MESSAGE_FIELDS = new Set(["role", "content", "thinking", "images", "tool_calls", "tool_name", "tool_call_id"]);

export async function ollamaChat(ctx: OllamaContext, f: BodyFields): Promise<Response> {
  const setup = setUpGeneration(ctx, f, "chat");
  const messages = f.raw("messages");
  const tools = f.raw("tools");
  f.rejectUnknown();
  if (messages === undefined || (Array.isArray(messages) && messages.length === 0)) return loaded(setup, { message: { role: "assistant", content: "" } });
  const { spec } = setup;
  if (tools !== undefined && !(Array.isArray(tools) && tools.length === 0)) spec.fields.tools = tools;
  let prepared: PreparedRequest;
  try {
    prepared = setup.gen.client.prepare({ ...spec.fields, messages: readMessages(messages), chatTemplateKwargs: setup.think?.kwargs }, { maxSamples: 1 });
  } catch (e) {
    throw requestError(e, spec, "messages");
  }
  return runReply(setup.gen, prepared, spec, CHAT_SHAPE, setup.clock);
}

const CHAT_SHAPE: ReplyShape = {
  part: (d: ReplyDelta) => ({ message: withThinking({ role: "assistant", content: d.content }, d.reasoning) }),
  whole: (c: Choice) => {
    const m = c.message;
    const message = withThinking({ role: "assistant", content: m.content }, m.reasoning);
    if (m.toolCalls.length > 0) message.tool_calls = m.toolCalls.map(ollamaToolCall);
    return { message };
  },
  calls: (c: Choice) => {
    const calls = c.message.toolCalls;
    return calls.length === 0 ? null : { message: { role: "assistant", content: "", tool_calls: calls.map(ollamaToolCall) } };
  },
  last: { message: { role: "assistant", content: "" } },
};

/** `message` with `thinking` when there is reasoning (ollama leaves the field out when empty). */
function withThinking(message: Record<string, unknown>, reasoning: string): Record<string, unknown> {
  return reasoning === "" ? message : { ...message, thinking: reasoning };
}

function readMessages(v: Json): ChatMessage[] {
  if (!Array.isArray(v)) throw ApiError.badField("messages", "'messages' must be an array of messages");
  return v.map((m, i) => readMessage(m, `messages[${i}]`));
}

function readMessage(m: Json, at: string): ChatMessage {
  if (!isObject(m)) throw ApiError.badField(at, `'${at}' must be an object`);
  for (const key of Object.keys(m)) if (!MESSAGE_FIELDS.has(key)) throw ApiError.unsupported(`${at}.${key}`, `the field '${at}.${key}'`);
  const role = m.role;
  if (typeof role !== "string" || !ROLES.has(role)) throw ApiError.badField(`${at}.role`, `'${at}.role' must be one of system, user, assistant, tool`);
  const content = optionalString(m.content, `${at}.content`) ?? "";
  if (Array.isArray(m.images) && m.images.length > 0) throw ApiError.unsupported(`${at}.images`, "images in messages");
  if (role === "tool") {
    const name = optionalString(m.tool_name, `${at}.tool_name`);
    const id = optionalString(m.tool_call_id, `${at}.tool_call_id`);
    const message: ChatMessage = { role, content, tool_call_id: id ?? name ?? "" };
    return name === undefined ? message : { ...message, name };
  }
  const message: ChatMessage = { role, content };
  if (role !== "assistant") return message;
  const thinking = optionalString(m.thinking, `${at}.thinking`);
  if (thinking !== undefined && thinking !== "") message.reasoning_content = thinking;
  const calls = readToolCalls(m.tool_calls, `${at}.tool_calls`);
  if (calls.length > 0) message.tool_calls = calls;
  return message;
}

/** An assistant's calls as ollama writes them (`{"function": {"name", "arguments": {...}}}`), with the arguments as the JSON text templates take. */
function readToolCalls(v: Json | undefined, at: string): ChatToolCall[] {
  if (v === undefined || v === null) return [];
  if (!Array.isArray(v)) throw ApiError.badField(at, `'${at}' must be an array`);
  return v.map((c, i) => {
    const where = `${at}[${i}]`;
    if (!isObject(c) || !isObject(c.function) || typeof c.function.name !== "string") {
      throw ApiError.badField(where, `'${where}' must be {"function": {"name": string, "arguments": object}}`);
    }
    const args = c.function.arguments ?? {};
    if (!isObject(args)) throw ApiError.badField(`${where}.function.arguments`, `'${where}.function.arguments' must be an object`);
    const id = optionalString(c.id, `${where}.id`) ?? `call_${i}`;
    return { id, type: "function" as const, function: { name: c.function.name, arguments: JSON.stringify(args) } };
  });
}

function optionalString(v: Json | undefined, at: string): string | undefined {
  if (v === undefined || v === null) return undefined;
  if (typeof v !== "string") throw ApiError.badField(at, `'${at}' must be a string`);
  return v;
}
