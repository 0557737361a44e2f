/**
 * `POST /v1/chat/completions` bodies: the messages, read into the chat template's ChatMessages
 * (tool results, assistant messages with calls), the tools (`tools`, `tool_choice`,
 * `parallel_tool_calls`, and the legacy `functions` and `function_call`, read as the tools they
 * stand for) and the generation fields (structured output among them). Audio and image parts are
 * not implemented: each is a 400 naming the field.
 */
import type { ChatMessage, ChatToolCall } from "../chat/jinja-template.ts";
import { ApiError } from "./api-error.ts";
import { isObject, type BodyFields, type Json } from "./body-fields.ts";
import { MAX_LOGPROBS } from "../llm/generate-request.ts";
import { readGenerationFields, type GenerationSpec, type ServerRequestDefaults } from "./generation-fields.ts";

export interface ChatRequest {
  model: string | undefined;
  messages: ChatMessage[];
  spec: GenerationSpec;
  /** vLLM's chat_template_kwargs: more template variables for this request (`enable_thinking`, ...). */
  templateKwargs: Record<string, Json> | null;
  /** The request used the legacy `functions`: the reply's call is answered as `function_call`. */
  legacyFunctions: boolean;
}

const ROLES = new Set(["system", "developer", "user", "assistant", "tool", "function"]);

export function readChatRequest(f: BodyFields, defaults: ServerRequestDefaults): ChatRequest {
  const model = f.string("model");
  const messages = readMessages(f.raw("messages"));
  const kwargs = f.object("chat_template_kwargs");
  const logprobs = f.boolean("logprobs") ?? false;
  const top = f.number("top_logprobs", { integer: true, min: 0, max: MAX_LOGPROBS });
  if (top !== undefined && !logprobs) throw ApiError.badField("top_logprobs", "'top_logprobs' needs 'logprobs': true");
  const spec = readGenerationFields(f, null, logprobs ? (top ?? 0) : null, defaults);
  // max_completion_tokens is the newer name of max_tokens; it wins when both are given.
  const maxCompletion = f.raw("max_completion_tokens");
  if (maxCompletion !== undefined) {
    spec.fields.maxTokens = maxCompletion;
    spec.aliases.maxTokens = "max_completion_tokens";
  }
  const legacyFunctions = readTools(f, spec);
  f.onlyNeutral("modalities", "'modalities' other than [\"text\"]", (v) => Array.isArray(v) && v.every((m) => m === "text"));
  f.onlyNeutral("audio", "'audio' output", () => false);
  f.onlyNeutral("prediction", "'prediction' (predicted outputs)", () => false);
  f.rejectUnknown();
  return { model, messages, spec, templateKwargs: kwargs ?? null, legacyFunctions };
}

/**
 * The tool fields into the spec (the engine checks them and names a field at fault); the legacy
 * `functions` are tools of type function, `function_call` their choice. Returns whether the
 * legacy fields were used.
 */
function readTools(f: BodyFields, spec: GenerationSpec): boolean {
  const tools = f.raw("tools");
  const functions = f.raw("functions");
  const choice = f.raw("tool_choice");
  const functionCall = f.raw("function_call");
  const parallel = f.boolean("parallel_tool_calls");
  if (functions !== undefined || functionCall !== undefined) {
    if (tools !== undefined || choice !== undefined) throw ApiError.badField("functions", "give 'tools' or the legacy 'functions', not both");
    if (functions !== undefined && (!Array.isArray(functions) || functions.length > 0)) {
      if (!Array.isArray(functions)) throw ApiError.badField("functions", "'functions' must be an array of functions");
      spec.fields.tools = functions.map((fn) => ({ type: "function", function: fn }));
      spec.aliases.tools = "functions";
    }
    if (functionCall !== undefined) {
      spec.fields.toolChoice = isObject(functionCall) ? { type: "function", function: functionCall } : functionCall;
      spec.aliases.toolChoice = "function_call";
    }
    return true;
  }
  // An empty list offers no tool (OpenAI refuses it; clients send it).
  if (tools !== undefined && !(Array.isArray(tools) && tools.length === 0)) spec.fields.tools = tools;
  if (choice !== undefined && spec.fields.tools !== undefined) spec.fields.toolChoice = choice;
  else if (choice !== undefined && choice !== "none" && choice !== "auto") throw ApiError.badField("tool_choice", `'tool_choice' ${JSON.stringify(choice).slice(0, 60)} needs 'tools'`);
  if (parallel !== undefined && spec.fields.tools !== undefined) spec.fields.parallelToolCalls = parallel;
  return false;
}

/** A body's `messages` as the chat template takes them (also vLLM's /tokenize's): a 400 naming the field at fault. */
export function readMessages(v: Json | undefined): ChatMessage[] {
  if (v === undefined) throw ApiError.badField("messages", "'messages' is required");
  if (!Array.isArray(v) || v.length === 0) throw ApiError.badField("messages", "'messages' must be a non-empty array");
  return v.map((m, i) => readMessage(m, `messages[${i}]`));
}

/** Fields a message may have besides role and content, by role. */
const MESSAGE_FIELDS: Record<string, readonly string[]> = {
  system: ["name"], developer: ["name"], user: ["name"],
  assistant: ["name", "refusal", "tool_calls", "function_call", "reasoning_content", "audio"],
  tool: ["tool_call_id", "name"],
  function: ["name"],
};

function readMessage(m: Json, at: string): ChatMessage {
  if (!isObject(m)) throw ApiError.badField(at, `'${at}' must be an object`);
  const role = m.role;
  if (typeof role !== "string") throw ApiError.badField(`${at}.role`, `'${at}.role' must be a string`);
  if (!ROLES.has(role)) throw ApiError.badField(`${at}.role`, `'${at}.role' must be one of system, developer, user, assistant, tool; got '${role}'`);
  for (const key of Object.keys(m)) {
    if (key !== "role" && key !== "content" && !MESSAGE_FIELDS[role]!.includes(key)) throw ApiError.unsupported(`${at}.${key}`, `the field '${at}.${key}'`);
  }
  if (m.audio !== undefined && m.audio !== null) throw ApiError.unsupported(`${at}.audio`, "audio in messages");
  const name = optionalString(m.name, `${at}.name`);
  optionalString(m.refusal, `${at}.refusal`);
  const content = readContent(m.content, `${at}.content`);
  if (role === "tool") {
    const id = m.tool_call_id;
    if (typeof id !== "string") throw ApiError.badField(`${at}.tool_call_id`, `'${at}.tool_call_id' must be a string: the call the result answers`);
    return withName({ role, content, tool_call_id: id }, name);
  }
  // A legacy function result is a tool result named after its function.
  if (role === "function") return withName({ role: "tool", content, tool_call_id: name ?? "" }, name);
  // The developer role is the system role of newer OpenAI models. A participant's name goes to
  // the template, as transformers passes it (a template may show it).
  const message = withName({ role: role === "developer" ? "system" : role, content }, name);
  if (role !== "assistant") return message;
  const calls = readToolCalls(m, at);
  if (calls !== null) message.tool_calls = calls;
  const reasoning = optionalString(m.reasoning_content, `${at}.reasoning_content`);
  if (reasoning !== undefined) message.reasoning_content = reasoning;
  return message;
}

function withName(message: ChatMessage, name: string | undefined): ChatMessage {
  return name === undefined ? message : { ...message, name };
}

/** A string, or undefined when absent or null; else a 400 naming `at`. */
function optionalString(v: Json | undefined, at: string): string | undefined {
  if (v === undefined || v === null) return undefined;
  if (typeof v !== "string") throw ApiError.badField(at, `'${at}' must be a string`);
  return v;
}

/** An assistant message's `tool_calls` (or legacy `function_call`), or null. */
function readToolCalls(m: { [key: string]: Json }, at: string): ChatToolCall[] | null {
  const legacy = m.function_call;
  if (legacy !== undefined && legacy !== null) {
    const where = `${at}.function_call`;
    if (!isObject(legacy) || typeof legacy.name !== "string" || typeof legacy.arguments !== "string") {
      throw ApiError.badField(where, `'${where}' must be {"name": string, "arguments": string}`);
    }
    return [{ id: legacy.name, type: "function", function: { name: legacy.name, arguments: legacy.arguments } }];
  }
  const calls = m.tool_calls;
  if (calls === undefined || calls === null) return null;
  if (!Array.isArray(calls)) throw ApiError.badField(`${at}.tool_calls`, `'${at}.tool_calls' must be an array`);
  if (calls.length === 0) return null;
  return calls.map((c, i) => {
    const where = `${at}.tool_calls[${i}]`;
    if (!isObject(c) || !isObject(c.function) || typeof c.function.name !== "string") {
      throw ApiError.badField(where, `'${where}' must be {"id", "type": "function", "function": {"name", "arguments"}}`);
    }
    if (c.type !== undefined && c.type !== "function") throw ApiError.badField(`${where}.type`, `'${where}.type' must be "function"`);
    if (typeof c.id !== "string") throw ApiError.badField(`${where}.id`, `'${where}.id' must be a string`);
    const args = c.function.arguments;
    if (typeof args !== "string") throw ApiError.badField(`${where}.function.arguments`, `'${where}.function.arguments' must be a string (the arguments' JSON)`);
    return { id: c.id, type: "function" as const, function: { name: c.function.name, arguments: args } };
  });
}

/** A string, or an array of text parts (joined); other part types are not implemented. */
function readContent(v: Json | undefined, at: string): string {
  if (typeof v === "string") return v;
  if (v === undefined || v === null) return "";
  if (!Array.isArray(v)) throw ApiError.badField(at, `'${at}' must be a string or an array of content parts`);
  return v
    .map((part, j) => {
      const where = `${at}[${j}]`;
      if (!isObject(part) || typeof part.type !== "string") throw ApiError.badField(`${where}.type`, `'${where}' must be a content part with a 'type'`);
      if (part.type !== "text") throw ApiError.unsupported(`${where}.type`, `content parts of type '${part.type}'`);
      if (typeof part.text !== "string") throw ApiError.badField(`${where}.text`, `'${where}.text' must be a string`);
      return part.text;
    })
    .join("");
}
