/**
 * Function tools as OpenAI's API spells them (the shape every front end takes: the library's
 * GenerateRequest, a JSONL line, an HTTP body), the calls a reply makes, and the one check of both
 * request fields. A tool's `parameters` is a JSON Schema object, taken as given: it is rendered
 * into the prompt by the chat template and, once the structured-output engine is wired in, it
 * constrains the call's arguments (call-syntax.ts).
 */
import { RequestFieldError } from "../errors.ts";

/** A JSON value as parsed from a request. */
export type JsonValue = null | boolean | number | string | readonly JsonValue[] | { readonly [key: string]: JsonValue };

/** One function the model may call. */
export interface ToolFunction {
  /** 1-64 characters of a-z, A-Z, 0-9, _, - and . (OpenAI's rule). */
  name: string;
  description?: string;
  /** A JSON Schema for the arguments object; absent: every object. */
  parameters?: { readonly [key: string]: JsonValue };
  /** OpenAI's strict mode: the arguments must follow the schema exactly (what the constraint will give). */
  strict?: boolean;
}

/** `{"type": "function", "function": {...}}`, as in OpenAI's `tools`. */
export interface ToolDefinition {
  type: "function";
  function: ToolFunction;
}

/**
 * Whether and which tool to call: `auto` (the model decides), `none` (no call is parsed), `required`
 * (at least one call), or one named function (OpenAI's `{"type": "function", "function": {"name"}}`).
 */
export type ToolChoice = "auto" | "none" | "required" | { type: "function"; function: { name: string } };

/** A call a reply makes, as OpenAI returns it: the arguments are JSON text. */
export interface ToolCall {
  id: string;
  type: "function";
  function: { name: string; arguments: string };
}

/** The tool fields of a request, checked. */
export interface CheckedTools {
  tools: readonly ToolDefinition[];
  choice: ToolChoice;
  /** Whether a reply may make several calls (OpenAI's parallel_tool_calls; default true). */
  parallel: boolean;
}

/** Most tools one request may offer (OpenAI's limit). */
export const MAX_TOOLS = 128;

const TOOL_NAME = /^[A-Za-z0-9_.-]{1,64}$/;

/**
 * The request's tools, tool choice and parallel switch, checked (RequestFieldError naming the
 * field as the request type spells it: tools[1].function.name, toolChoice), or null without tools.
 */
export function checkTools(tools: unknown, choice: unknown, parallel: unknown): CheckedTools | null {
  if (parallel !== undefined && parallel !== null && typeof parallel !== "boolean") throw new RequestFieldError("parallelToolCalls", "must be a boolean");
  const list = tools === undefined || tools === null ? [] : checkToolList(tools);
  const checkedChoice = checkChoice(choice, list);
  if (list.length === 0) return null;
  return { tools: list, choice: checkedChoice, parallel: parallel !== false };
}

function checkToolList(tools: unknown): ToolDefinition[] {
  if (!Array.isArray(tools)) throw new RequestFieldError("tools", "must be an array of {\"type\": \"function\", \"function\": {...}}");
  if (tools.length > MAX_TOOLS) throw new RequestFieldError("tools", `may hold at most ${MAX_TOOLS} tools, got ${tools.length}`);
  const names = new Set<string>();
  return tools.map((t: unknown, i): ToolDefinition => {
    const at = `tools[${i}]`;
    if (!isObject(t)) throw new RequestFieldError(at, "must be an object");
    if (t.type !== "function") throw new RequestFieldError(`${at}.type`, `must be "function"`);
    const f = t.function;
    if (!isObject(f)) throw new RequestFieldError(`${at}.function`, "must be an object with a name");
    const name = f.name;
    if (typeof name !== "string" || !TOOL_NAME.test(name)) {
      throw new RequestFieldError(`${at}.function.name`, "must be 1 to 64 characters of a-z, A-Z, 0-9, underscores, dashes and dots");
    }
    if (names.has(name)) throw new RequestFieldError(`${at}.function.name`, `"${name}" names two tools`);
    names.add(name);
    const fn: ToolFunction = { name };
    if (f.description !== undefined && f.description !== null) {
      if (typeof f.description !== "string") throw new RequestFieldError(`${at}.function.description`, "must be a string");
      fn.description = f.description;
    }
    if (f.parameters !== undefined && f.parameters !== null) {
      if (!isObject(f.parameters)) throw new RequestFieldError(`${at}.function.parameters`, "must be a JSON Schema object");
      fn.parameters = f.parameters as { readonly [key: string]: JsonValue };
    }
    if (f.strict !== undefined && f.strict !== null) {
      if (typeof f.strict !== "boolean") throw new RequestFieldError(`${at}.function.strict`, "must be a boolean");
      fn.strict = f.strict;
    }
    return { type: "function", function: fn };
  });
}

function checkChoice(choice: unknown, tools: readonly ToolDefinition[]): ToolChoice {
  if (choice === undefined || choice === null) return "auto";
  if (choice === "auto" || choice === "none") return choice;
  if (choice === "required") {
    if (tools.length === 0) throw new RequestFieldError("toolChoice", `"required" needs tools`);
    return choice;
  }
  if (isObject(choice) && choice.type === "function" && isObject(choice.function) && typeof choice.function.name === "string") {
    const name = choice.function.name;
    if (!tools.some((t) => t.function.name === name)) throw new RequestFieldError("toolChoice", `names "${name.slice(0, 64)}", which is not among the tools`);
    return { type: "function", function: { name } };
  }
  throw new RequestFieldError("toolChoice", `must be "auto", "none", "required" or {"type": "function", "function": {"name": ...}}`);
}

export function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}
