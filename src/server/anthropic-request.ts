/**
 * `POST /v1/messages` bodies (Anthropic's Messages API) read onto the same request type as chat
 * completions: `system` (a string or text blocks) as a system message; `messages` whose content is
 * a string or blocks (`text`; an assistant's `tool_use` as a call, its `thinking` as reasoning; a
 * user's `tool_result` as a tool message before the user's text); `max_tokens` (required, as
 * Anthropic requires it), `stop_sequences`, `temperature`, `top_p`, `top_k` (left out: the
 * server's defaults, else 1, 1 and none), `stream`; `tools`
 * (`{name, description, input_schema}`) and `tool_choice` (`auto`, `any`, `tool` with a name,
 * `none`; `disable_parallel_tool_use`); `thinking` (`{"type": "disabled"}` sets enable_thinking
 * false; `{"type": "enabled", "budget_tokens": N}` bounds the reasoning to N tokens, the engine's
 * reasoningBudget, N an integer from 1024 to max_tokens - 1 as Anthropic requires, else a 400
 * naming `thinking.budget_tokens`; `adaptive` leaves thinking on, unbounded); `output_config.format`
 * (or the beta's `output_format`) `{"type": "json_schema", "schema"}` as the request's constraint,
 * held after any reasoning (structured-output.ts). `metadata` and `service_tier` are accepted and change nothing;
 * images, documents, server tools and any other field are a 400 naming it.
 */
import type { ChatMessage, ChatToolCall } from "../chat/jinja-template.ts";
import { ApiError, excerpt } from "./api-error.ts";
import { isObject, type BodyFields, type Json } from "./body-fields.ts";
import { fieldsOverDefaults, type GenerationSpec, type ServerRequestDefaults } from "./generation-fields.ts";
import { readAnthropicStructuredOutput } from "./structured-output.ts";

export interface AnthropicRequest {
  model: string | undefined;
  messages: ChatMessage[];
  spec: GenerationSpec;
  /** More template variables (enable_thinking from `thinking`), or null. */
  templateKwargs: Record<string, Json> | null;
  /** The stop sequences, to say which one ended a reply. */
  stopSequences: string[];
}

/** A body; `counting` (count_tokens) needs no max_tokens. `defaults`: the server's, for the sampling fields left out. */
export function readAnthropicRequest(f: BodyFields, defaults: ServerRequestDefaults, counting = false): AnthropicRequest {
  const model = f.string("model");
  const maxTokens = f.raw("max_tokens");
  if (maxTokens === undefined && !counting) throw ApiError.badField("max_tokens", "'max_tokens' is required");
  const system = readSystem(f.raw("system"));
  const messages = [...system, ...readMessages(f.raw("messages"))];
  const stops = f.raw("stop_sequences");
  if (stops !== undefined && !(Array.isArray(stops) && stops.every((s) => typeof s === "string"))) {
    throw ApiError.badField("stop_sequences", "'stop_sequences' must be an array of strings");
  }
  const stream = f.boolean("stream") ?? false;
  const given = { maxTokens, stop: stops, temperature: f.raw("temperature"), topP: f.raw("top_p"), topK: f.raw("top_k") };
  const spec: GenerationSpec = {
    fields: fieldsOverDefaults(given, null, defaults),
    n: 1, logprobs: null, stream, includeUsage: false, aliases: { stop: "stop_sequences" },
  };
  readTools(f, spec);
  const structured = readAnthropicStructuredOutput(f);
  if (structured !== null) {
    spec.fields.constraint = structured.spec;
    spec.aliases.constraint = structured.path;
  }
  const kwargs = readThinking(f.raw("thinking"), maxTokens, spec);
  if (kwargs !== null) spec.aliases.chatTemplateKwargs = "thinking";
  // Accepted with Anthropic's types, changing nothing here.
  readMetadata(f.object("metadata"));
  f.string("service_tier");
  f.rejectUnknown();
  return { model, messages, spec, templateKwargs: kwargs, stopSequences: (stops as string[] | undefined) ?? [] };
}

function readSystem(v: Json | undefined): ChatMessage[] {
  if (v === undefined) return [];
  const text = typeof v === "string" ? v : textOfBlocks(v, "system");
  return text === "" ? [] : [{ role: "system", content: text }];
}

/** Text blocks joined (a system prompt, a tool result's content). */
function textOfBlocks(v: Json, at: string): string {
  if (!Array.isArray(v)) throw ApiError.badField(at, `'${at}' must be a string or an array of text blocks`);
  return v.map((b, i) => {
    if (!isObject(b) || b.type !== "text" || typeof b.text !== "string") {
      throw ApiError.unsupported(`${at}[${i}].type`, `'${at}[${i}]' other than a text block`);
    }
    refuseCitations(b, `${at}[${i}]`);
    return b.text;
  }).join("");
}

function readMessages(v: Json | undefined): ChatMessage[] {
  if (v === undefined) throw ApiError.badField("messages", "'messages' is required");
  if (!Array.isArray(v) || v.length === 0) throw ApiError.badField("messages", "'messages' must be a non-empty array");
  return v.flatMap((m, i) => readMessage(m, `messages[${i}]`));
}

/** One Anthropic message as chat messages: a user's tool results become tool messages before its text. */
function readMessage(m: Json, at: string): ChatMessage[] {
  if (!isObject(m)) throw ApiError.badField(at, `'${at}' must be an object`);
  const role = m.role;
  if (role !== "user" && role !== "assistant") throw ApiError.badField(`${at}.role`, `'${at}.role' must be "user" or "assistant"`);
  for (const key of Object.keys(m)) if (key !== "role" && key !== "content") throw ApiError.unsupported(`${at}.${key}`, `the field '${at}.${key}'`);
  const content = m.content;
  if (typeof content === "string") return [{ role, content }];
  if (!Array.isArray(content)) throw ApiError.badField(`${at}.content`, `'${at}.content' must be a string or an array of content blocks`);
  let text = "";
  let reasoning = "";
  const calls: ChatToolCall[] = [];
  const results: ChatMessage[] = [];
  content.forEach((block, j) => {
    const where = `${at}.content[${j}]`;
    if (!isObject(block) || typeof block.type !== "string") throw ApiError.badField(`${where}.type`, `'${where}' must be a content block with a 'type'`);
    const allowed = role === "user" ? ["text", "tool_result"] : ["text", "tool_use", "thinking", "redacted_thinking"];
    if (!allowed.includes(block.type)) throw ApiError.unsupported(`${where}.type`, `content blocks of type '${block.type}' in ${role} messages`);
    switch (block.type) {
      case "text":
        refuseCitations(block, where);
        text += stringField(block, "text", where);
        break;
      case "thinking":
        reasoning += stringField(block, "thinking", where);
        break;
      case "tool_use": {
        if (!isObject(block.input)) throw ApiError.badField(`${where}.input`, `'${where}.input' must be an object`);
        calls.push({ id: stringField(block, "id", where), type: "function", function: { name: stringField(block, "name", where), arguments: JSON.stringify(block.input) } });
        break;
      }
      case "tool_result": {
        const result = block.content;
        const resultText = result === undefined || result === null ? "" : typeof result === "string" ? result : textOfBlocks(result, `${where}.content`);
        const isError = block.is_error ?? false;
        if (typeof isError !== "boolean") throw ApiError.badField(`${where}.is_error`, `'${where}.is_error' must be a boolean`);
        results.push({ role: "tool", tool_call_id: stringField(block, "tool_use_id", where), content: isError ? `Error: ${resultText}` : resultText });
        break;
      }
    }
  });
  if (role === "user") return text === "" && results.length > 0 ? results : [...results, { role, content: text }];
  const message: ChatMessage = { role, content: text };
  if (calls.length > 0) message.tool_calls = calls;
  if (reasoning !== "") message.reasoning_content = reasoning;
  return [message];
}

/** A text block's citations are not implemented: a 400 naming them (null or none, as a reply's blocks echo them, is fine). */
function refuseCitations(block: { [key: string]: Json }, where: string): void {
  const citations = block.citations;
  if (citations !== undefined && citations !== null && !(Array.isArray(citations) && citations.length === 0)) throw ApiError.unsupported(`${where}.citations`, "citations");
}

/** `metadata`: Anthropic's only field in it is `user_id`, a string. */
function readMetadata(v: { [key: string]: Json } | undefined): void {
  if (v === undefined) return;
  for (const [key, value] of Object.entries(v)) {
    if (key !== "user_id") throw ApiError.unsupported(`metadata.${excerpt(key)}`, `'metadata.${excerpt(key)}'`);
    if (value !== null && typeof value !== "string") throw ApiError.badField("metadata.user_id", "'metadata.user_id' must be a string");
  }
}

function stringField(block: { [key: string]: Json }, key: string, where: string): string {
  const v = block[key];
  if (typeof v !== "string") throw ApiError.badField(`${where}.${key}`, `'${where}.${key}' must be a string`);
  return v;
}

/** Anthropic's tools and tool_choice, onto the request's tools. */
function readTools(f: BodyFields, spec: GenerationSpec): void {
  const tools = f.raw("tools");
  const choice = f.raw("tool_choice");
  if (tools !== undefined) {
    if (!Array.isArray(tools)) throw ApiError.badField("tools", "'tools' must be an array");
    spec.fields.tools = tools.map((t, i) => {
      const at = `tools[${i}]`;
      if (!isObject(t)) throw ApiError.badField(at, `'${at}' must be an object`);
      if (t.type !== undefined && t.type !== null && t.type !== "custom") throw ApiError.unsupported(`${at}.type`, `server tools ('${String(t.type).slice(0, 40)}')`);
      if (!isObject(t.input_schema)) throw ApiError.badField(`${at}.input_schema`, `'${at}.input_schema' must be a JSON Schema object`);
      return { type: "function", function: { name: t.name, description: t.description ?? undefined, parameters: t.input_schema } };
    });
  }
  if (choice === undefined) return;
  if (!isObject(choice) || typeof choice.type !== "string") throw ApiError.badField("tool_choice", "'tool_choice' must be {\"type\": \"auto\" | \"any\" | \"tool\" | \"none\"}");
  if (choice.type === "tool" && typeof choice.name !== "string") throw ApiError.badField("tool_choice.name", "'tool_choice.name' must be the name of one of the tools");
  const kinds: Record<string, Json> = { auto: "auto", any: "required", none: "none", tool: { type: "function", function: { name: choice.name ?? null } } };
  const mapped = kinds[choice.type];
  if (mapped === undefined) throw ApiError.badField("tool_choice.type", "'tool_choice.type' must be auto, any, tool or none");
  if (spec.fields.tools === undefined) {
    if (choice.type === "auto" || choice.type === "none") return;
    throw ApiError.badField("tool_choice", `'tool_choice' ${choice.type} needs 'tools'`);
  }
  spec.fields.toolChoice = mapped;
  if (choice.disable_parallel_tool_use === true) spec.fields.parallelToolCalls = false;
}

/** Anthropic's least thinking budget. */
export const MIN_THINKING_BUDGET = 1024;

/**
 * `thinking`: disabled turns the template's thinking off; enabled and adaptive turn it on, enabled
 * bounded to `budget_tokens` (spec's reasoningBudget), which Anthropic requires to be at least 1024
 * and below max_tokens.
 */
function readThinking(v: Json | undefined, maxTokens: Json | undefined, spec: GenerationSpec): Record<string, Json> | null {
  if (v === undefined) return null;
  if (!isObject(v) || (v.type !== "enabled" && v.type !== "disabled" && v.type !== "adaptive")) {
    throw ApiError.badField("thinking", "'thinking' must be {\"type\": \"enabled\", \"budget_tokens\": N} or {\"type\": \"disabled\"}");
  }
  if (v.type === "disabled") return { enable_thinking: false };
  if (v.type === "enabled") {
    const budget = v.budget_tokens;
    const at = "thinking.budget_tokens";
    if (typeof budget !== "number" || !Number.isInteger(budget) || budget < MIN_THINKING_BUDGET) {
      throw ApiError.badField(at, `'${at}' must be an integer of at least ${MIN_THINKING_BUDGET}`);
    }
    if (typeof maxTokens === "number" && budget >= maxTokens) throw ApiError.badField(at, `'${at}' must be less than 'max_tokens' (${maxTokens})`);
    spec.fields.reasoningBudget = budget;
    spec.aliases.reasoningBudget = at;
  }
  // Asked for: on, even where the server's --chat-template-kwargs turned it off.
  return { enable_thinking: true };
}
