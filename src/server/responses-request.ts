/**
 * `POST /v1/responses` bodies (OpenAI's Responses API), stateless as ollama serves it: nothing is
 * stored, so `previous_response_id`, `conversation`, item references and `background` are a 400
 * naming them, and a conversation is sent whole as `input`. Read onto the same request type as
 * chat completions: `instructions` as a system message; `input` as text (one user message) or
 * items (messages with text parts, `function_call` items as an assistant's calls, merged into the
 * assistant message before them, `function_call_output` items as tool results, `reasoning` items
 * as the next assistant message's reasoning); `max_output_tokens`, `temperature`, `top_p` (left
 * out: the server's defaults, else no limit, 1 and 1), `stream`; function `tools` (`{type: "function", name, description, parameters}`),
 * `tool_choice`, `parallel_tool_calls`; `reasoning.effort` (`none` turns enable_thinking off,
 * low/medium/high go to the template as `reasoning_effort`, which gpt-oss's reads); `text.format`
 * (text, json_object, json_schema) as the request's constraint, as chat's response_format. `store`,
 * `metadata`, `user`, `truncation`, `include`, `service_tier`, `prompt_cache_key` and
 * `safety_identifier` are accepted with OpenAI's types and change nothing; any other field, and
 * built-in tools, are a 400 naming it.
 */
import type { ChatMessage, ChatToolCall } from "../chat/jinja-template.ts";
import { ApiError } from "./api-error.ts";
import { isObject, type BodyFields, type Json } from "./body-fields.ts";
import { readResponsesTextFormat } from "./structured-output.ts";
import { fieldsOverDefaults, type GenerationSpec, type ServerRequestDefaults } from "./generation-fields.ts";

export interface ResponsesRequest {
  model: string | undefined;
  messages: ChatMessage[];
  spec: GenerationSpec;
  templateKwargs: Record<string, Json> | null;
  /** Echoed in the response object, as OpenAI echoes them. */
  echo: { instructions: string | null; tools: Json[]; toolChoice: Json; parallelToolCalls: boolean; temperature: number; topP: number; maxOutputTokens: number | null; metadata: Json; format: Json };
}

/** A body; `defaults`: the server's, for the sampling fields and max_output_tokens left out. */
export function readResponsesRequest(f: BodyFields, defaults: ServerRequestDefaults): ResponsesRequest {
  for (const stateful of ["previous_response_id", "conversation", "background", "prompt"]) {
    const v = f.raw(stateful);
    if (v !== undefined && v !== false) {
      throw ApiError.unsupported(stateful, `'${stateful}' (this server keeps no responses: send the whole conversation as 'input')`);
    }
  }
  const model = f.string("model");
  const instructions = f.string("instructions");
  const input = readInput(f.raw("input"));
  const messages = instructions === undefined || instructions === "" ? input : [{ role: "system", content: instructions }, ...input];
  const stream = f.boolean("stream") ?? false;
  const maxOutputTokens = f.raw("max_output_tokens");
  // OpenAI's range for the Responses API (the engine takes any temperature from 0).
  const fields = fieldsOverDefaults({ maxTokens: maxOutputTokens, temperature: f.number("temperature", { min: 0, max: MAX_TEMPERATURE }), topP: f.raw("top_p") }, null, defaults);
  const spec: GenerationSpec = { fields, n: 1, logprobs: null, stream, includeUsage: false, aliases: { maxTokens: "max_output_tokens" } };
  const { temperature, topP } = fields;
  const tools = f.raw("tools");
  const toolChoice = f.raw("tool_choice");
  const parallel = f.boolean("parallel_tool_calls");
  readTools(tools, toolChoice, parallel, spec);
  const kwargs = readReasoning(f.object("reasoning"));
  // A template that fails on the variables reasoning.effort sets is that field's fault.
  if (kwargs !== null) spec.aliases.chatTemplateKwargs = "reasoning.effort";
  const text = f.object("text");
  const format = readText(text, spec);
  f.boolean("store");
  const metadata = f.stringMap("metadata") ?? {};
  for (const name of ["user", "truncation", "service_tier", "prompt_cache_key", "safety_identifier"]) f.string(name);
  const include = f.raw("include");
  if (include !== undefined && !(Array.isArray(include) && include.every((i) => typeof i === "string"))) throw ApiError.badField("include", "'include' must be an array of strings");
  f.onlyNeutral("top_logprobs", "'top_logprobs' (log-probabilities in responses)", (v) => v === 0);
  f.rejectUnknown();
  return {
    model, messages, spec, templateKwargs: kwargs,
    echo: {
      instructions: instructions ?? null, tools: Array.isArray(tools) ? tools : [], toolChoice: toolChoice ?? "auto", parallelToolCalls: parallel ?? true,
      temperature: typeof temperature === "number" ? temperature : 1, topP: typeof topP === "number" ? topP : 1,
      maxOutputTokens: typeof fields.maxTokens === "number" ? fields.maxTokens : null, metadata, format,
    },
  };
}

function readInput(v: Json | undefined): ChatMessage[] {
  if (v === undefined) throw ApiError.badField("input", "'input' is required");
  if (typeof v === "string") return [{ role: "user", content: v }];
  if (!Array.isArray(v) || v.length === 0) throw ApiError.badField("input", "'input' must be a string or a non-empty array of items");
  const out: ChatMessage[] = [];
  let reasoning = "";
  v.forEach((item, i) => {
    const at = `input[${i}]`;
    if (!isObject(item)) throw ApiError.badField(at, `'${at}' must be an item object`);
    const type = item.type ?? "message";
    switch (type) {
      case "message": {
        const message = readMessageItem(item, at);
        if (message.role === "assistant" && reasoning !== "") message.reasoning_content = reasoning;
        if (message.role === "assistant") reasoning = "";
        out.push(message);
        break;
      }
      case "function_call": {
        const call: ChatToolCall = { id: stringOf(item, "call_id", at), type: "function", function: { name: stringOf(item, "name", at), arguments: stringOf(item, "arguments", at) } };
        const last = out.at(-1);
        if (last?.role === "assistant") last.tool_calls = [...(last.tool_calls ?? []), call];
        else out.push({ role: "assistant", content: "", tool_calls: [call], ...(reasoning === "" ? {} : { reasoning_content: reasoning }) });
        reasoning = "";
        break;
      }
      case "function_call_output": {
        const output = item.output;
        const content = typeof output === "string" ? output : textOfParts(output ?? null, `${at}.output`);
        out.push({ role: "tool", tool_call_id: stringOf(item, "call_id", at), content });
        break;
      }
      case "reasoning":
        reasoning += reasoningText(item, at);
        break;
      default:
        throw ApiError.unsupported(`${at}.type`, `input items of type '${String(type).slice(0, 40)}'`);
    }
  });
  return out;
}

function readMessageItem(item: { [key: string]: Json }, at: string): ChatMessage {
  const role = item.role;
  if (role !== "user" && role !== "system" && role !== "developer" && role !== "assistant") {
    throw ApiError.badField(`${at}.role`, `'${at}.role' must be user, system, developer or assistant`);
  }
  const content = typeof item.content === "string" ? item.content : textOfParts(item.content ?? null, `${at}.content`);
  return { role: role === "developer" ? "system" : role, content };
}

/** Text parts (input_text, output_text, a refusal) joined; other kinds (images, files) are not implemented. */
function textOfParts(v: Json, at: string): string {
  if (!Array.isArray(v)) throw ApiError.badField(at, `'${at}' must be a string or an array of content parts`);
  return v.map((part, j) => {
    const where = `${at}[${j}]`;
    if (!isObject(part) || typeof part.type !== "string") throw ApiError.badField(`${where}.type`, `'${where}' must be a content part with a 'type'`);
    if (part.type === "refusal") return typeof part.refusal === "string" ? part.refusal : "";
    if (part.type !== "input_text" && part.type !== "output_text" && part.type !== "text") throw ApiError.unsupported(`${where}.type`, `content parts of type '${part.type}'`);
    return stringOf(part, "text", where);
  }).join("");
}

/** A reasoning item's text: its reasoning_text content, else its summary. */
function reasoningText(item: { [key: string]: Json }, at: string): string {
  const parts = Array.isArray(item.content) && item.content.length > 0 ? item.content : item.summary;
  if (parts === undefined || parts === null) return "";
  if (!Array.isArray(parts)) throw ApiError.badField(`${at}.summary`, `'${at}.summary' must be an array`);
  return parts.map((p, j) => (isObject(p) && typeof p.text === "string" ? p.text : (() => {
    throw ApiError.badField(`${at}.summary[${j}]`, `'${at}.summary[${j}]' must have a 'text'`);
  })())).join("");
}

function stringOf(o: { [key: string]: Json }, key: string, at: string): string {
  const v = o[key];
  if (typeof v !== "string") throw ApiError.badField(`${at}.${key}`, `'${at}.${key}' must be a string`);
  return v;
}

/** Function tools (flat, as the Responses API writes them) onto the request's tools. */
function readTools(tools: Json | undefined, choice: Json | undefined, parallel: boolean | undefined, spec: GenerationSpec): void {
  if (tools !== undefined) {
    if (!Array.isArray(tools)) throw ApiError.badField("tools", "'tools' must be an array");
    if (tools.length > 0) {
      spec.fields.tools = tools.map((t, i) => {
        if (!isObject(t)) throw ApiError.badField(`tools[${i}]`, `'tools[${i}]' must be an object`);
        if (t.type !== "function") throw ApiError.unsupported(`tools[${i}].type`, `built-in tools ('${String(t.type).slice(0, 40)}')`);
        const { type: _type, ...fn } = t;
        return { type: "function", function: fn };
      });
    }
  }
  if (choice !== undefined) {
    if (isObject(choice) && choice.type === "function" && typeof choice.name !== "string") {
      throw ApiError.badField("tool_choice.name", "'tool_choice.name' must be the name of one of the tools");
    }
    const mapped = isObject(choice) && choice.type === "function" ? { type: "function", function: { name: choice.name } } : choice;
    if (spec.fields.tools !== undefined) spec.fields.toolChoice = mapped;
    else if (choice !== "auto" && choice !== "none") throw ApiError.badField("tool_choice", "'tool_choice' needs 'tools'");
  }
  if (parallel !== undefined && spec.fields.tools !== undefined) spec.fields.parallelToolCalls = parallel;
}

/** `reasoning.effort`: none turns thinking off; a level goes to the template as reasoning_effort (gpt-oss). */
function readReasoning(v: { [key: string]: Json } | undefined): Record<string, Json> | null {
  if (v === undefined) return null;
  const effort = v.effort;
  if (effort === undefined || effort === null) return null;
  if (effort === "none" || effort === "minimal") return { enable_thinking: false };
  if (effort === "low" || effort === "medium" || effort === "high") return { reasoning_effort: effort };
  throw ApiError.badField("reasoning.effort", "'reasoning.effort' must be none, minimal, low, medium or high");
}

/** OpenAI's `text.verbosity` values. */
const VERBOSITIES: readonly Json[] = ["low", "medium", "high"];

/** OpenAI's highest temperature. */
const MAX_TEMPERATURE = 2;

/** `text`: its `format` as the request's constraint (json_object, json_schema); the format, to echo. `verbosity` changes nothing. */
function readText(v: { [key: string]: Json } | undefined, spec: GenerationSpec): Json {
  const plain = { type: "text" };
  if (v === undefined) return plain;
  for (const key of Object.keys(v)) if (key !== "format" && key !== "verbosity") throw ApiError.unsupported(`text.${key}`, `'text.${key}'`);
  const verbosity = v.verbosity;
  if (verbosity !== undefined && verbosity !== null && !VERBOSITIES.includes(verbosity)) throw ApiError.badField("text.verbosity", "'text.verbosity' must be low, medium or high");
  const format = v.format;
  if (format === undefined || format === null) return plain;
  const constraint = readResponsesTextFormat(format);
  if (constraint !== null) {
    spec.fields.constraint = constraint.spec;
    spec.aliases.constraint = constraint.path;
  }
  return format;
}
