/**
 * A minimal streaming client of the OpenAI HTTP API, written for timing (fetch and the SSE parser,
 * no SDK): one request out, and back when each piece of text arrived, the usage the server
 * reported and the text itself. Works unchanged against pagellm serve, llama.cpp's llama-server
 * and vLLM:
 *
 * - completions with token-id prompts (`"prompt": [ids]`, which all three accept), so a prompt has
 *   exactly the intended tokens whatever the server's tokenizer;
 * - chat completions with text messages (a chat has no token-id form);
 * - `ignore_eos` (llama-server, vLLM and pagellm serve accept it) fixes output lengths; servers
 *   that reject unknown fields are run with it off;
 * - `stream_options.include_usage` asks for usage in the last chunk; the cached prompt tokens are
 *   `usage.prompt_tokens_details.cached_tokens`, else llama.cpp's `timings.cache_n`, else unknown.
 */
import { InputError, ServerError } from "../../errors.ts";
import { SseParser } from "./sse-parser.ts";

/** Where requests go. */
export interface ServerTarget {
  /** The API root, ending in /v1 (e.g. http://127.0.0.1:8080/v1). */
  apiBase: string;
  /** Sent as `Authorization: Bearer KEY`; null: no header. */
  apiKey: string | null;
  /** The `model` field of every request. */
  model: string;
}

export interface ChatMessage {
  role: "system" | "user" | "assistant";
  content: string;
}

/** What one request asks for: a token-id completion or a chat turn. */
export type RequestPrompt = { kind: "tokens"; tokenIds: readonly number[] } | { kind: "chat"; messages: readonly ChatMessage[] };

/** A request body field a server reads beyond the OpenAI ones (cache_salt, cache_prompt, id_slot). */
export type ExtraFields = Readonly<Record<string, string | number | boolean>>;

export interface BenchRequest {
  id: string;
  prompt: RequestPrompt;
  maxTokens: number;
  /** Sent as they are, after the bench's own fields (the cold probe's way past a server's cache). */
  extra?: ExtraFields;
}

/** A request that streamed to its end. */
export interface RequestTiming {
  id: string;
  /** When it was sent, ms after the run started. */
  sentMs: number;
  /** Time to the first non-empty piece of text. */
  ttftMs: number;
  /** Gaps between successive pieces of text (one per token on these servers), ms. */
  itlMs: number[];
  /** Time to the end of the stream. */
  e2eMs: number;
  /** usage.prompt_tokens; null when the server sent no usage. */
  promptTokens: number | null;
  /** usage.completion_tokens, else the pieces of text counted. */
  outputTokens: number;
  /** Prompt tokens the server served from its cache; null when it does not say. */
  cachedTokens: number | null;
  text: string;
}

/** A request that failed: the server's status (null: no answer, or cut by the time limit) and why. */
export interface RequestFailure {
  id: string;
  status: number | null;
  error: string;
  /** Stopped by the run's time limit, not by the server. */
  cut: boolean;
}

export type RequestOutcome = { ok: true; timing: RequestTiming } | { ok: false; failure: RequestFailure };

/** The API root of a URL the user gave: http(s)://host[:port][/path], with /v1 added unless it ends so. */
export function apiBaseOf(url: string): string {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    throw new InputError(`--url ${url}: not a URL (give e.g. http://127.0.0.1:8080)`);
  }
  if (parsed.protocol !== "http:" && parsed.protocol !== "https:") throw new InputError(`--url ${url}: not an http(s) URL`);
  const path = parsed.pathname.replace(/\/+$/, "");
  return `${parsed.origin}${path.endsWith("/v1") ? path : `${path}/v1`}`;
}

function headers(apiKey: string | null): Record<string, string> {
  return { "Content-Type": "application/json", ...(apiKey === null ? {} : { Authorization: `Bearer ${apiKey}` }) };
}

/** A fetch failure (refused, reset, DNS) as one line. */
function unreachable(url: string, e: unknown): string {
  const err = e as { code?: string; message?: string };
  return `cannot reach ${url}: ${err.code ?? err.message ?? String(e)}`;
}

/** The server's own message from an error body: OpenAI's {"error": {"message"}}, {"error": "..."}, {"detail": ...} or the text. */
export function errorMessageOf(body: string): string {
  try {
    const v = JSON.parse(body) as { error?: unknown; detail?: unknown; message?: unknown };
    const e = v.error;
    if (typeof e === "object" && e !== null && typeof (e as { message?: unknown }).message === "string") return (e as { message: string }).message;
    if (typeof e === "string") return e;
    if (typeof v.message === "string") return v.message;
    if (v.detail !== undefined) return typeof v.detail === "string" ? v.detail : JSON.stringify(v.detail);
  } catch {
    // Not JSON: the text itself.
  }
  const line = body.trim().split("\n")[0] ?? "";
  return line.length > 200 ? `${line.slice(0, 200)}...` : line;
}

/** The ids of GET /v1/models; a ServerError when the server is down or answers with an error. */
export async function listModels(apiBase: string, apiKey: string | null, timeoutMs = 30_000): Promise<string[]> {
  const url = `${apiBase}/models`;
  let res: Response;
  try {
    res = await fetch(url, { headers: headers(apiKey), signal: AbortSignal.timeout(timeoutMs) });
  } catch (e) {
    throw new ServerError(unreachable(url, e));
  }
  const body = await res.text();
  if (!res.ok) throw new ServerError(`GET ${url}: HTTP ${res.status}: ${errorMessageOf(body)}`);
  try {
    const data = (JSON.parse(body) as { data?: { id?: unknown }[] }).data;
    if (!Array.isArray(data)) throw new Error("no data list");
    return data.flatMap((m) => (typeof m.id === "string" ? [m.id] : []));
  } catch (e) {
    throw new ServerError(`GET ${url}: not an OpenAI model list (${(e as Error).message})`);
  }
}

/** The JSON body of a request, streamed, greedy. */
export function requestBody(target: ServerTarget, req: BenchRequest, ignoreEos: boolean): Record<string, unknown> {
  const common = {
    model: target.model,
    max_tokens: req.maxTokens,
    temperature: 0,
    stream: true,
    stream_options: { include_usage: true },
    ...(ignoreEos ? { ignore_eos: true } : {}),
    ...req.extra,
  };
  return req.prompt.kind === "tokens" ? { ...common, prompt: req.prompt.tokenIds } : { ...common, messages: req.prompt.messages };
}

/** The endpoint of a request. */
export function endpointOf(target: ServerTarget, req: BenchRequest): string {
  return `${target.apiBase}/${req.prompt.kind === "tokens" ? "completions" : "chat/completions"}`;
}

/** Fields of a stream chunk this client reads. */
interface StreamChunk {
  choices?: { text?: string | null; delta?: { content?: string | null } }[];
  usage?: { prompt_tokens?: number; completion_tokens?: number; prompt_tokens_details?: { cached_tokens?: number } | null } | null;
  /** llama.cpp's extension: prompt tokens reused from the slot's cache. */
  timings?: { cache_n?: number };
  error?: unknown;
}

/** A stream that breaks the protocol or carries the server's error: why, as one line. */
class StreamFault extends Error {}

/** What a stream delivered so far. */
class StreamRecord {
  readonly pieces: number[] = [];
  text = "";
  promptTokens: number | null = null;
  completionTokens: number | null = null;
  cachedTokens: number | null = null;
  cacheN: number | null = null;
  done = false;

  /** One SSE event's data; an error the server sent inside the stream is a StreamFault. */
  take(data: string, now: number): void {
    if (data === "[DONE]") {
      this.done = true;
      return;
    }
    let chunk: StreamChunk;
    try {
      chunk = JSON.parse(data) as StreamChunk;
    } catch {
      throw new StreamFault(`a stream event is not JSON: ${data.slice(0, 80)}`);
    }
    if (chunk.error !== undefined) throw new StreamFault(`error in the stream: ${errorMessageOf(JSON.stringify(chunk))}`);
    const choice = chunk.choices?.[0];
    const piece = choice?.text ?? choice?.delta?.content ?? "";
    if (piece !== "") {
      this.pieces.push(now);
      this.text += piece;
    }
    const u = chunk.usage;
    if (u !== undefined && u !== null) {
      if (typeof u.prompt_tokens === "number") this.promptTokens = u.prompt_tokens;
      if (typeof u.completion_tokens === "number") this.completionTokens = u.completion_tokens;
      const cached = u.prompt_tokens_details?.cached_tokens;
      if (typeof cached === "number") this.cachedTokens = cached;
    }
    if (typeof chunk.timings?.cache_n === "number") this.cacheN = chunk.timings.cache_n;
  }
}

/** A connection the server closed before answering: a kept-alive one it had timed out (llama-server closes idle ones after 5 s). */
function closedBeforeAnswer(e: unknown): boolean {
  return (e as { code?: string }).code === "ECONNRESET";
}

/**
 * Send one streaming request and time it. Never throws for what the server does: a refused
 * connection, an error status, a broken stream or the time limit (`signal`) give a failure.
 */
export async function sendRequest(
  target: ServerTarget, req: BenchRequest, opts: { ignoreEos: boolean; signal: AbortSignal; runStartMs: number },
): Promise<RequestOutcome> {
  const url = endpointOf(target, req);
  const fail = (status: number | null, error: string): RequestOutcome => ({ ok: false, failure: { id: req.id, status, error, cut: opts.signal.aborted } });
  const init = { method: "POST", headers: headers(target.apiKey), body: JSON.stringify(requestBody(target, req, opts.ignoreEos)), signal: opts.signal };
  let t0 = performance.now();
  const record = new StreamRecord();
  try {
    let res: Response;
    try {
      res = await fetch(url, init);
    } catch (e) {
      // Sent again once on a fresh connection, timed from then, as HTTP clients do when a kept-alive connection was closed under them.
      if (opts.signal.aborted || !closedBeforeAnswer(e)) throw e;
      t0 = performance.now();
      res = await fetch(url, init);
    }
    if (!res.ok) return fail(res.status, `HTTP ${res.status}: ${errorMessageOf(await res.text())}`);
    if (res.body === null) return fail(res.status, "empty response");
    const parser = new SseParser();
    const decoder = new TextDecoder();
    for await (const bytes of res.body) {
      const now = performance.now();
      for (const data of parser.push(decoder.decode(bytes, { stream: true }))) record.take(data, now);
    }
    const now = performance.now();
    for (const data of parser.end()) record.take(data, now);
  } catch (e) {
    if (e instanceof StreamFault) return fail(null, e.message);
    if (opts.signal.aborted) return fail(null, "cut at the time limit");
    return fail(null, record.pieces.length > 0 ? `stream broken: ${(e as Error).message}` : unreachable(url, e));
  }
  const end = performance.now();
  if (!record.done) return fail(null, `the stream ended before [DONE] (${record.pieces.length} pieces of text)`);
  // A reply whose tokens made no showable text (bytes of an unfinished character) still ended: its first token came at the end.
  const pieces = record.pieces.length > 0 ? record.pieces : [end];
  return {
    ok: true,
    timing: {
      id: req.id,
      sentMs: t0 - opts.runStartMs,
      ttftMs: pieces[0]! - t0,
      itlMs: pieces.slice(1).map((t, i) => t - pieces[i]!),
      e2eMs: end - t0,
      promptTokens: record.promptTokens,
      outputTokens: record.completionTokens ?? record.pieces.length,
      cachedTokens: record.cachedTokens ?? record.cacheN,
      text: record.text,
    },
  };
}
