/**
 * `POST /v1/chat/completions` bodies: the messages, read into the chat template's ChatMessages,
 * and the generation fields. Tools, structured output, audio and image parts are not
 * implemented: each is a 400 naming the field.
 */
import type { ChatMessage } from "../chat/jinja-template.ts";
import { ApiError } from "./api-error.ts";
import { isObject, type BodyFields, type Json } from "./body-fields.ts";
import { MAX_LOGPROBS } from "../engine/generate-request.ts";
import { readGenerationFields, type GenerationSpec } from "./generation-fields.ts";

export interface ChatRequest {
  model: string | undefined;
  messages: ChatMessage[];
  spec: GenerationSpec;
  /** vLLM's chat_template_kwargs: more template variables for this request (`enable_thinking`, ...). */
  templateKwargs: Record<string, Json> | null;
}

const ROLES = new Set(["system", "developer", "user", "assistant"]);

export function readChatRequest(f: BodyFields): ChatRequest {
  const model = f.string("model");
  const messages = readMessages(f.raw("messages"));
  const kwargs = f.object("chat_template_kwargs");
  const logprobs = f.boolean("logprobs") ?? false;
  const top = f.number("top_logprobs", { integer: true, min: 0, max: MAX_LOGPROBS });
  if (top !== undefined && !logprobs) throw ApiError.badField("top_logprobs", "'top_logprobs' needs 'logprobs': true");
  const spec = readGenerationFields(f, null, logprobs ? (top ?? 0) : null);
  // max_completion_tokens is the newer name of max_tokens; it wins when both are given.
  const maxCompletion = f.raw("max_completion_tokens");
  if (maxCompletion !== undefined) {
    spec.fields.maxTokens = maxCompletion;
    spec.aliases.maxTokens = "max_completion_tokens";
  }
  f.onlyNeutral("tools", "'tools' (function calling)", (v) => Array.isArray(v) && v.length === 0);
  f.onlyNeutral("tool_choice", "'tool_choice' (function calling)", (v) => v === "none");
  f.onlyNeutral("functions", "'functions' (function calling)", () => false);
  f.onlyNeutral("function_call", "'function_call' (function calling)", (v) => v === "none");
  // Accepted as OpenAI types it, and without effect: no tools are ever called.
  f.boolean("parallel_tool_calls");
  f.onlyNeutral("response_format", "'response_format' other than {\"type\": \"text\"}", (v) => isObject(v) && v.type === "text" && Object.keys(v).length === 1);
  f.onlyNeutral("modalities", "'modalities' other than [\"text\"]", (v) => Array.isArray(v) && v.every((m) => m === "text"));
  f.onlyNeutral("audio", "'audio' output", () => false);
  f.onlyNeutral("prediction", "'prediction' (predicted outputs)", () => false);
  f.rejectUnknown();
  return { model, messages, spec, templateKwargs: kwargs ?? null };
}

function readMessages(v: Json | undefined): ChatMessage[] {
  if (v === undefined) throw ApiError.badField("messages", "'messages' is required");
  if (!Array.isArray(v) || v.length === 0) throw ApiError.badField("messages", "'messages' must be a non-empty array");
  return v.map((m, i) => readMessage(m, `messages[${i}]`));
}

function readMessage(m: Json, at: string): ChatMessage {
  if (!isObject(m)) throw ApiError.badField(at, `'${at}' must be an object`);
  const role = m.role;
  if (typeof role !== "string") throw ApiError.badField(`${at}.role`, `'${at}.role' must be a string`);
  if (role === "tool" || role === "function") throw ApiError.unsupported(`${at}.role`, `the role '${role}' (function calling)`);
  if (!ROLES.has(role)) throw ApiError.badField(`${at}.role`, `'${at}.role' must be one of system, developer, user, assistant; got '${role}'`);
  for (const key of Object.keys(m)) {
    if (key === "tool_calls" || key === "function_call") {
      if (m[key] !== null && !(Array.isArray(m[key]) && m[key].length === 0)) throw ApiError.unsupported(`${at}.${key}`, `'${at}.${key}' (function calling)`);
    } else if (key !== "role" && key !== "content" && key !== "name" && key !== "refusal") {
      throw ApiError.unsupported(`${at}.${key}`, `the field '${at}.${key}'`);
    }
  }
  const name = optionalString(m.name, `${at}.name`);
  optionalString(m.refusal, `${at}.refusal`);
  // The developer role is the system role of newer OpenAI models.
  const message: ChatMessage = { role: role === "developer" ? "system" : role, content: readContent(m.content, `${at}.content`) };
  // A participant's name goes to the template, as transformers passes it (a template may show it).
  if (name !== undefined) message.name = name;
  return message;
}

/** A string, or undefined when absent or null; else a 400 naming `at`. */
function optionalString(v: Json | undefined, at: string): string | undefined {
  if (v === undefined || v === null) return undefined;
  if (typeof v !== "string") throw ApiError.badField(at, `'${at}' must be a string`);
  return v;
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
