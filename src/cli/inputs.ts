/**
 * Where `generate` gets its requests: --prompt, --prompt-file (repeatable), --prompts-dir (every
 * *.txt), --prompts (JSONL, one request per line). Missing files given on the command line are
 * errors before anything runs; a JSONL request that cannot be read becomes a rejected result.
 */
import { existsSync, readdirSync, readFileSync, statSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { InputError, RequestFieldError, RequestTooLongError } from "../errors.ts";
import { checkRequest, jsonFieldName, seedDigitsProblem, type GenerateRequest } from "../llm/generate-request.ts";
import { topLevelNumberText } from "../util/json-number-text.ts";
import type { ChatMessage } from "../chat/jinja-template.ts";
import { optionErrorText, type RequestDefaults } from "./options.ts";
import { readStructuredOutput } from "../grammar/request-fields.ts";

/** A "messages" field: [{"role", "content"}, ...], as the OpenAI API and a saved chat write it. */
export function chatMessages(value: unknown, where: string): ChatMessage[] {
  const bad = () => new InputError(`${where}: "messages" must be an array of {"role", "content"} with string values`);
  if (!Array.isArray(value) || value.length === 0) throw bad();
  return value.map((m: unknown) => {
    if (typeof m !== "object" || m === null) throw bad();
    const { role, content } = m as { role?: unknown; content?: unknown };
    if (typeof role !== "string" || typeof content !== "string") throw bad();
    return { role, content };
  });
}

/**
 * A request ready to run (with `where` it came from: a JSONL line names its fields, options the
 * rest), or one that was rejected while reading it.
 */
export type InputRequest =
  | {
    request: GenerateRequest; where: string | null; line: Readonly<Record<string, unknown>> | null;
    /** Names where the request's constraint came from in errors (`requests.jsonl:3: "grammar"`), when a line gave it. */
    constraintLabel?: string;
  }
  | { rejected: { id: string; error: string } };

/**
 * A request error as the command line says it: a field of a JSONL line by its JSON name
 * ("requests.jsonl:3: \"top_p\" must be ..."), any other by the option that set it; a constraint
 * that cannot be compiled by `constraintLabel` (the line's field or the option that gave it).
 */
export function requestErrorText(
  e: RequestFieldError | RequestTooLongError | InputError, where: string | null, line: Readonly<Record<string, unknown>> | null, constraintLabel?: string,
): string {
  if (!(e instanceof RequestFieldError)) return where === null ? e.message : `${where}: ${e.message}`;
  if (e.field === "constraint" && constraintLabel !== undefined) return `${constraintLabel} ${e.problem}`;
  const fromLine = line !== null && line[jsonFieldName(e.property)] !== undefined;
  if (fromLine || (where !== null && (e.property === "messages" || e.property === "prompt"))) return `${where}: ${e.renamed((p) => `"${jsonFieldName(p)}"`)}`;
  return optionErrorText(e);
}

/** A file's text (`-`: stdin), or an InputError naming it and `what` it was for. */
export function readPromptFile(path: string, what = "prompt file"): string {
  if (path === "-") return readFileSync(0, "utf8");
  if (!existsSync(path)) throw new InputError(`${path}: ${what} not found`);
  if (statSync(path).isDirectory()) throw new InputError(`${path}: ${what} is a directory`);
  try {
    return readFileSync(path, "utf8");
  } catch (e) {
    throw new InputError(`${path}: cannot read ${what}: ${(e as Error).message}`);
  }
}

export function promptRequest(prompt: string, defaults: RequestDefaults): InputRequest {
  return { request: { ...defaults, id: "prompt", prompt }, where: null, line: null };
}

export function promptFileRequests(paths: readonly string[], defaults: RequestDefaults): InputRequest[] {
  return paths.map((path) => ({ request: { ...defaults, id: path, prompt: readPromptFile(path) }, where: null, line: null }));
}

export function promptsDirRequests(dir: string, defaults: RequestDefaults): InputRequest[] {
  if (!existsSync(dir) || !statSync(dir).isDirectory()) throw new InputError(`${dir}: prompts directory not found`);
  const files = readdirSync(dir).filter((f) => f.endsWith(".txt")).sort();
  if (files.length === 0) throw new InputError(`${dir}: no *.txt prompt files in the directory`);
  return files.map((f) => ({ request: { ...defaults, id: f, prompt: readPromptFile(join(dir, f)) }, where: null, line: null }));
}

/**
 * One request per line: {"id", "prompt" | "prompt_file" | "messages", "max_tokens", "temperature",
 * "top_p", "top_k", "min_p", "repetition_penalty", "repeat_last_n", "frequency_penalty",
 * "presence_penalty", "logit_bias", "seed", "stop", "cache_salt", "logprobs", "ignore_eos",
 * "chat_template_kwargs", "tools", "tool_choice", "parallel_tool_calls", "reasoning_budget", and structured output as
 * the server takes it: "response_format", "json_schema", "grammar", "structured_outputs",
 * "guided_json" / "guided_regex" / "guided_choice" / "guided_grammar", or the engine's own
 * "constraint"}; absent fields take the command-line defaults; a prompt_file is relative
 * to the JSONL file. Blank lines are skipped. A line whose fields fail the request's checks is a
 * rejected request naming the field.
 */
export function jsonlRequests(path: string, defaults: RequestDefaults): InputRequest[] {
  const out: InputRequest[] = [];
  for (const { fields, id, where, line } of jsonlLines(path)) {
    try {
      const seedProblem = seedDigitsProblem(fields.seed, () => topLevelNumberText(line, "seed"));
      if (seedProblem !== null) throw new RequestFieldError("seed", seedProblem);
      const { request, constraintField } = jsonRequest(fields, id, defaults, dirname(resolve(path)), where);
      // The checks that need no model now (token ids are checked once it is loaded).
      checkRequest(request, { vocabSize: Number.MAX_SAFE_INTEGER, maxSamples: Number.MAX_SAFE_INTEGER });
      out.push({ request, where, line: fields, ...(constraintField === null ? {} : { constraintLabel: `${where}: "${constraintField}"` }) });
    } catch (e) {
      if (!(e instanceof InputError)) throw e;
      out.push({ rejected: { id, error: e instanceof RequestFieldError ? requestErrorText(e, where, fields) : e.message } });
    }
  }
  return out;
}

/** One line of a JSONL requests file: its fields, its id (`line-N` when it gives none), where it is (`path:N`) and its text. */
export interface JsonlLine {
  fields: Record<string, unknown>;
  id: string;
  where: string;
  line: string;
}

/**
 * The JSON objects of a requests file, blank lines skipped: a line that is not a JSON object, a
 * repeated id, or a file without a request is an InputError naming the file (and line).
 */
export function jsonlLines(path: string): JsonlLine[] {
  const text = readPromptFile(path, "requests file");
  const out: JsonlLine[] = [];
  const ids = new Set<string>();
  text.split("\n").forEach((line, i) => {
    if (line.trim() === "") return;
    const where = `${path}:${i + 1}`;
    let fields: Record<string, unknown>;
    try {
      const parsed: unknown = JSON.parse(line);
      if (typeof parsed !== "object" || parsed === null || Array.isArray(parsed)) throw new Error("not a JSON object");
      fields = parsed as Record<string, unknown>;
    } catch (e) {
      throw new InputError(`${where}: invalid JSON request (${(e as Error).message})`);
    }
    const id = fields.id === undefined ? `line-${i + 1}` : String(fields.id);
    if (ids.has(id)) throw new InputError(`${where}: duplicate request id "${id}"`);
    ids.add(id);
    out.push({ fields, id, where, line });
  });
  if (out.length === 0) throw new InputError(`${path}: no requests in the file`);
  return out;
}

/** JSONL fields that map to a request field of the same meaning, by their JSON name. */
const JSONL_FIELDS = [
  "maxTokens", "temperature", "topP", "topK", "minP", "repetitionPenalty", "repeatLastN", "frequencyPenalty", "presencePenalty", "logitBias", "seed",
  "stop", "cacheSalt", "logprobs", "ignoreEos", "chatTemplateKwargs", "tools", "toolChoice", "parallelToolCalls", "reasoningBudget",
] as const;

/**
 * A JSONL line as a request: the prompt's forms resolved, the other fields as given (checkRequest
 * checks them), defaults beneath; and the field its constraint came from (a structured output
 * field as the server takes it, or the engine's own "constraint"), null when the line gives none.
 */
function jsonRequest(
  f: Record<string, unknown>, id: string, defaults: RequestDefaults, baseDir: string, where: string,
): { request: GenerateRequest; constraintField: string | null } {
  const request: Record<string, unknown> = { ...defaults, id };
  if (typeof f.prompt === "string") request.prompt = f.prompt;
  else if (typeof f.prompt_file === "string") request.prompt = readPromptFile(resolve(baseDir, f.prompt_file));
  // Messages in OpenAI's shape (tool calls and results included): checkRequest checks them.
  else if (f.messages !== undefined) request.messages = f.messages;
  else throw new InputError(`${where}: a request needs "prompt", "prompt_file" or "messages"`);
  for (const key of JSONL_FIELDS) {
    const v = f[jsonFieldName(key)];
    if (v !== undefined && v !== null) request[key] = key === "stop" && typeof v === "string" ? [v] : v;
  }
  const constraintField = lineConstraint(f, request, where);
  return { request: request as GenerateRequest, constraintField };
}

/** The line's structured output field into `request.constraint` (over the options'); the field's path, or null. */
function lineConstraint(f: Record<string, unknown>, request: Record<string, unknown>, where: string): string | null {
  let requested: ReturnType<typeof readStructuredOutput>;
  try {
    requested = readStructuredOutput((name) => f[name] ?? undefined);
  } catch (e) {
    if (e instanceof RequestFieldError) throw new InputError(`${where}: "${e.field}" ${e.problem}`);
    throw e;
  }
  const own = f.constraint ?? undefined;
  if (requested !== null && own !== undefined) throw new InputError(`${where}: give "constraint" or a structured output field, not both`);
  if (own !== undefined) {
    request.constraint = own;
    return "constraint";
  }
  if (requested === null) return null;
  request.constraint = requested.spec;
  return requested.path;
}
