/**
 * Where `generate` gets its requests: --prompt, --prompt-file (repeatable), --prompts-dir (every
 * *.txt), --prompts (JSONL, one request per line). Missing files given on the command line are
 * errors before anything runs; a JSONL request that cannot be read becomes a rejected result.
 */
import { existsSync, readdirSync, readFileSync, statSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { InputError } from "../errors.ts";
import type { GenerateRequest } from "../engine/llm.ts";
import type { ChatMessage } from "../chat/jinja-template.ts";

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

export type RequestDefaults = Omit<GenerateRequest, "id" | "prompt">;

/** A request ready to run, or one that was rejected while reading it. */
export type InputRequest = { request: GenerateRequest } | { rejected: { id: string; error: string } };

function readPromptFile(path: string, what = "prompt file"): string {
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
  return { request: { ...defaults, id: "prompt", prompt } };
}

export function promptFileRequests(paths: readonly string[], defaults: RequestDefaults): InputRequest[] {
  return paths.map((path) => ({ request: { ...defaults, id: path, prompt: readPromptFile(path) } }));
}

export function promptsDirRequests(dir: string, defaults: RequestDefaults): InputRequest[] {
  if (!existsSync(dir) || !statSync(dir).isDirectory()) throw new InputError(`${dir}: prompts directory not found`);
  const files = readdirSync(dir).filter((f) => f.endsWith(".txt")).sort();
  if (files.length === 0) throw new InputError(`${dir}: no *.txt prompt files in the directory`);
  return files.map((f) => ({ request: { ...defaults, id: f, prompt: readPromptFile(join(dir, f)) } }));
}

/**
 * One request per line: {"id", "prompt" | "prompt_file" | "messages", "max_tokens", "temperature", "top_p",
 * "top_k", "seed", "stop", "cache_salt", "logprobs"}; absent fields take the command-line defaults; a
 * prompt_file is relative to the JSONL file. Blank lines are skipped.
 */
export function jsonlRequests(path: string, defaults: RequestDefaults): InputRequest[] {
  const text = readPromptFile(path, "requests file");
  const out: InputRequest[] = [];
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
    try {
      out.push({ request: jsonRequest(fields, id, defaults, dirname(resolve(path)), where) });
    } catch (e) {
      if (!(e instanceof InputError)) throw e;
      out.push({ rejected: { id, error: e.message } });
    }
  });
  if (out.length === 0) throw new InputError(`${path}: no requests in the file`);
  return out;
}

function jsonRequest(f: Record<string, unknown>, id: string, defaults: RequestDefaults, baseDir: string, where: string): GenerateRequest {
  const num = (key: string): number | undefined => {
    const v = f[key];
    if (v === undefined || v === null) return undefined;
    if (typeof v !== "number" || !Number.isFinite(v)) throw new InputError(`${where}: "${key}" must be a number`);
    return v;
  };
  let prompt: string | undefined;
  let messages: ChatMessage[] | undefined;
  if (typeof f.prompt === "string") prompt = f.prompt;
  else if (typeof f.prompt_file === "string") prompt = readPromptFile(resolve(baseDir, f.prompt_file));
  else if (f.messages !== undefined) messages = chatMessages(f.messages, where);
  else throw new InputError(`${where}: a request needs "prompt", "prompt_file" or "messages"`);
  let stop = defaults.stop;
  if (f.stop !== undefined) {
    const s = f.stop;
    if (typeof s === "string") stop = [s];
    else if (Array.isArray(s) && s.every((x): x is string => typeof x === "string")) stop = s;
    else throw new InputError(`${where}: "stop" must be a string or an array of strings`);
  }
  if (f.cache_salt !== undefined && typeof f.cache_salt !== "string") throw new InputError(`${where}: "cache_salt" must be a string`);
  return {
    ...defaults,
    id,
    ...(messages !== undefined ? { messages } : { prompt }),
    maxTokens: num("max_tokens") ?? defaults.maxTokens,
    temperature: num("temperature") ?? defaults.temperature,
    topP: num("top_p") ?? defaults.topP,
    topK: num("top_k") ?? defaults.topK,
    minP: num("min_p") ?? defaults.minP,
    seed: num("seed") ?? defaults.seed,
    stop,
    cacheSalt: typeof f.cache_salt === "string" ? f.cache_salt : defaults.cacheSalt,
    logprobs: num("logprobs") ?? defaults.logprobs,
  };
}
