/**
 * Seeded HTTP fuzz cases for `pagellm serve` (test/server-fuzz.test.ts) and the property every
 * answer keeps: a 2xx, or a 4xx with OpenAI's error shape, a short message and no stack trace.
 *
 * A case is drawn from a FuzzRandom and talks to the server over HTTP only (fetch, or a raw socket
 * for what fetch cannot send): random and mutated requests on every route (types, ranges, lone
 * surrogates, invalid UTF-8, nesting, sizes), bodies that stop or trickle, disconnects at random
 * points (counted in bytes and chunks, never in time), and pipelined requests. Each returns the
 * answers it got, for checkAnswer.
 */
import { closeSync, lstatSync, mkdirSync, openSync, readdirSync, rmSync, symlinkSync, truncateSync, writeSync } from "node:fs";
import { join } from "node:path";
import { FuzzRandom } from "./gguf-fuzz.ts";
import { rawExchange, rawRequest, type RawResponse } from "./raw-http.ts";
import { STRUCTURED_OUTPUT_FIELDS } from "../../src/grammar/request-fields.ts";
import { isOllamaPath } from "../../src/server/ollama/routes.ts";

/** A raw exchange that has not ended by then has hung: a deadline for failure, never the expected path. */
const DEADLINE_MS = 60_000;

export interface FuzzCase {
  what: string;
  /** Runs the case against the server at `url`; resolves with the answers it received. */
  run(url: string, port: number): Promise<RawResponse[]>;
}

/** The structured output spellings, on both endpoints. */
const STRUCTURED_FIELDS = STRUCTURED_OUTPUT_FIELDS;
const COMPLETION_FIELDS = [
  "model", "prompt", "max_tokens", "temperature", "top_p", "seed", "stop", "n", "stream", "stream_options", "cache_salt", "top_k", "min_p",
  "repetition_penalty", "repeat_penalty", "repeat_last_n", "ignore_eos", "echo", "logprobs", "suffix", "best_of", "frequency_penalty",
  "presence_penalty", "logit_bias", "user", "metadata", "store", "service_tier", ...STRUCTURED_FIELDS,
];
const CHAT_FIELDS = [
  "model", "messages", "max_tokens", "max_completion_tokens", "temperature", "top_p", "seed", "stop", "n", "stream", "stream_options",
  "cache_salt", "top_k", "min_p", "logprobs", "top_logprobs", "chat_template_kwargs", "tools", "tool_choice", "user",
  "ignore_eos", "repetition_penalty", "modalities", "audio", "prediction", "parallel_tool_calls", ...STRUCTURED_FIELDS,
];
const ROUTES = ["/v1/completions", "/v1/chat/completions", "/v1/models", "/v1/models/stories260K.gguf", "/health", "/metrics"];
const ODD_PATHS = ["/", "/v1", "/v1/", "/v1/models/", "/v1/models/x%2Fy", "/v1/models/%E0%A4%A", "/v1/models/a/b/c", "/v1/completions/", "/v1//models", "/v1/models?x=1", "/health/", "/%ff%fe", "/v1/chat", "/metrics?name[]=1", "/v2/completions"];
/** Origins a fuzzed request comes from: the one the fuzzed server allows (FUZZ_CORS_ORIGIN), others, odd values. */
export const FUZZ_CORS_ORIGIN = "http://localhost:3000";
const CORS_ORIGINS = [FUZZ_CORS_ORIGIN, "https://evil.example", "null", "", "\u00e9", "http://localhost:3000/"];
const METHODS = ["GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "HEAD"];

/** Strings a parser, a tokenizer or a hash gets wrong: empty, lone surrogates, U+FFFD, controls, bidi, emoji, long. */
const ODD_STRINGS = [
  "", "x", "Once upon a time", "\ud800", "\udfff", "x\udbff", "x\ud800", "\ufffd", "\ud83d\ude00", "\ude00\ud83d", "\u0000", "\n\r\t",
  "\u202e\u2066", "null", "[]", "{}", "\\", '"', "日本語", "a".repeat(3000),
];
const ODD_NUMBERS = [0, -0, 1, -1, 2, 7, 0.5, 1.5, 16, 512, 513, 1e308, -1e308, 5e-324, 2 ** 31, 2 ** 32, 2 ** 53, 2 ** 53 + 2, 2 ** 63, 2 ** 64, -(2 ** 63), -(2 ** 64), 65535];

/** A JSON value of any type, a few levels deep at most (see nested() for depth). */
export function wildValue(r: FuzzRandom, depth = 0): unknown {
  const kind = r.int(depth > 2 ? 4 : 7);
  switch (kind) {
    case 0: return r.pick([null, true, false]);
    case 1: return r.pick(ODD_NUMBERS);
    case 2: return r.pick(ODD_STRINGS);
    case 3: return randomText(r, 1 + r.int(40));
    case 4: return Array.from({ length: r.int(5) }, () => wildValue(r, depth + 1));
    case 5: return Object.fromEntries(Array.from({ length: r.int(4) }, () => [r.pick(["type", "text", "role", "content", "x", "\ud800", ""]), wildValue(r, depth + 1)]));
    default: return nested(r, 1 + r.int(140), r.pick(["[", "{\"a\":"]));
  }
}

/** Random UTF-16: code units of every range, lone surrogates and controls included. */
function randomText(r: FuzzRandom, length: number): string {
  const units: number[] = [];
  for (let i = 0; i < length; i++) units.push(r.pick([r.int(0x80), r.int(0x800), 0xd800 + r.int(0x800), r.int(0x10000), 0x20 + r.int(0x5f)]));
  return String.fromCharCode(...units);
}

/** `depth` levels of arrays (or one-key objects) around a number, as a parsed value. */
function nested(r: FuzzRandom, depth: number, open: string): unknown {
  const close = open === "[" ? "]" : "}";
  return JSON.parse(`${open.repeat(depth)}${r.int(10)}${close.repeat(depth)}`);
}

function baseCompletion(r: FuzzRandom): Record<string, unknown> {
  return { prompt: r.pick(["Once upon a time", "The little dog", "Lily and Ben went to the park. They", "\ud800 once"]), max_tokens: 1 + r.int(8), temperature: r.pick([0, 0.7, 1]) };
}

function baseChat(r: FuzzRandom): Record<string, unknown> {
  const messages: Record<string, unknown>[] = [];
  if (r.int(2) === 0) messages.push({ role: "system", content: "Be brief." });
  messages.push({ role: "user", content: r.pick(["Hi", "Tell me a story.", "\udbff?", "😀"]) });
  return { messages, max_tokens: 1 + r.int(8), temperature: r.pick([0, 1]) };
}

/** 1-3 mutations of a valid body: a field set to anything, removed, or added; a message or prompt bent out of shape. */
function mutateBody(r: FuzzRandom, body: Record<string, unknown>, fields: readonly string[]): string[] {
  const done: string[] = [];
  for (let m = 1 + r.int(3); m > 0; m--) {
    const op = r.int(6);
    if (op <= 1) {
      const field = r.pick(fields);
      body[field] = wildValue(r);
      done.push(`${field}=${short(body[field])}`);
    } else if (op === 2) {
      const field = r.pick(Object.keys(body).length > 0 ? Object.keys(body) : fields);
      delete body[field];
      done.push(`-${field}`);
    } else if (op === 3) {
      const field = r.pick(["unknown", "\ud800", "x".repeat(1 + r.int(500)), "__proto__", "constructor", "prompt ", "Messages"]);
      body[field] = wildValue(r);
      done.push(`+${short(field)}`);
    } else if (op === 4 && Array.isArray(body.messages)) {
      const message = { ...(r.pick(body.messages as Record<string, unknown>[]) ?? {}) };
      message[r.pick(["role", "content", "name", "refusal", "tool_calls", "x"])] = wildValue(r);
      (body.messages as unknown[]).push(message);
      done.push(`message ${short(message)}`);
    } else if (op === 4) {
      body.prompt = r.pick([[], [[]], [r.int(600) - 50, 1, 2], [[1, 2], [3]], ["a", "\ud800"], [1.5], [-1], [2 ** 40], wildValue(r)]);
      done.push(`prompt=${short(body.prompt)}`);
    } else {
      body.stream = true;
      if (r.int(2) === 0) body.stream_options = r.pick([{ include_usage: true }, { include_usage: 1 }, { x: 1 }, null]);
      done.push("stream");
    }
  }
  return done;
}

function short(v: unknown): string {
  const text = JSON.stringify(v) ?? String(v);
  return text.length > 40 ? `${text.slice(0, 40)}...` : text;
}

/** A JSON request through fetch: the answer read whole, or a stream read for some chunks then cancelled (a disconnect). */
function jsonCase(r: FuzzRandom): FuzzCase {
  const chat = r.int(2) === 0;
  const body: unknown = r.int(12) === 0 ? wildValue(r) : (() => {
    const b = chat ? baseChat(r) : baseCompletion(r);
    return Object.assign(b, { _what: mutateBody(r, b, chat ? CHAT_FIELDS : COMPLETION_FIELDS) });
  })();
  const what = typeof body === "object" && body !== null && "_what" in body ? (body as { _what: string[] })._what.join(", ") : `body ${short(body)}`;
  if (typeof body === "object" && body !== null) delete (body as { _what?: unknown })._what;
  const chunksBeforeLeaving = r.int(3) === 0 ? r.int(4) : null;
  const path = chat ? "/v1/chat/completions" : "/v1/completions";
  return {
    what: `${path} ${what}${chunksBeforeLeaving === null ? "" : ` (leaves after ${chunksBeforeLeaving} chunks)`}`,
    async run(url) {
      const response = await fetch(`${url}${path}`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
      const headers = Object.fromEntries(response.headers.entries());
      if (chunksBeforeLeaving !== null && response.body !== null && response.ok) {
        const reader = response.body.getReader();
        for (let i = 0; i < chunksBeforeLeaving; i++) if ((await reader.read()).done) break;
        await reader.cancel();
        return [{ status: response.status, headers, body: "" }];
      }
      return [{ status: response.status, headers, body: await response.text() }];
    },
  };
}

/** Bytes that are not the JSON they claim: invalid UTF-8, encoded lone surrogates, truncation, a BOM, binary, a deep nest. */
function rawBodyCase(r: FuzzRandom): FuzzCase {
  const valid = Buffer.from(JSON.stringify(baseCompletion(r)));
  const kinds: [string, () => Buffer][] = [
    ["invalid UTF-8", () => Buffer.concat([valid.subarray(0, 12), Buffer.from([r.pick([0x80, 0xc0, 0xff, 0xfe, 0xf8])]), valid.subarray(12)])],
    ["CESU-8 lone surrogate", () => Buffer.concat([Buffer.from('{"prompt": "a'), Buffer.from([0xed, 0xa0, 0x80]), Buffer.from('", "max_tokens": 2}')])],
    ["truncated JSON", () => valid.subarray(0, r.int(valid.length))],
    ["BOM", () => Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), valid])],
    ["binary", () => Buffer.from(Array.from({ length: 1 + r.int(300) }, () => r.int(256)))],
    ["deep nest", () => {
      const depth = r.pick([127, 128, 129, 1000, 100_000]);
      return Buffer.from(`{"prompt": ${"[".repeat(depth)}${"]".repeat(depth)}}`);
    }],
    ["NUL bytes", () => Buffer.concat([valid.subarray(0, 5), Buffer.alloc(1 + r.int(8)), valid.subarray(5)])],
  ];
  const [kind, make] = r.pick(kinds);
  const body = make();
  const path = r.pick(["/v1/completions", "/v1/chat/completions"]);
  return {
    what: `${path} ${kind} (${body.length} bytes)`,
    run: async (_url, port) => (await rawExchange(port, [rawRequest("POST", path, body, { "Content-Type": "application/json" })], { responses: 1, deadlineMs: DEADLINE_MS })).responses,
  };
}

/** Every method on every route and on paths near them. */
function methodCase(r: FuzzRandom): FuzzCase {
  const method = r.pick(METHODS);
  const path = r.int(3) === 0 ? r.pick(ODD_PATHS) : r.pick(ROUTES);
  const body = method === "GET" || method === "HEAD" ? null : r.int(2) === 0 ? "" : JSON.stringify(baseCompletion(r));
  // Sometimes from a browser page (the fuzzed server allows one origin: --cors), a preflight or not.
  const cors: Record<string, string> = r.int(3) === 0 ? { Origin: r.pick(CORS_ORIGINS) } : {};
  if (cors.Origin !== undefined && r.int(2) === 0) cors["Access-Control-Request-Method"] = r.pick(["POST", "GET", "DELETE", ""]);
  return {
    what: `${method} ${path} ${JSON.stringify(cors)}`,
    async run(_url, port) {
      const { responses } = await rawExchange(port, [rawRequest(method, path, body, cors)], { responses: 1, head: method === "HEAD", deadlineMs: DEADLINE_MS });
      // The allowed origin's answers carry it, whatever they are; no other origin's carry any CORS header.
      for (const answer of responses) {
        const allowed = answer.headers["access-control-allow-origin"];
        if (cors.Origin === FUZZ_CORS_ORIGIN ? allowed !== FUZZ_CORS_ORIGIN : Object.keys(answer.headers).some((h) => h.startsWith("access-control-"))) {
          throw new Error(`CORS headers ${JSON.stringify(answer.headers)} for origin ${JSON.stringify(cors.Origin)} (${answer.status})`);
        }
      }
      return responses;
    },
  };
}

/** A body that stops part way (the server's --body-timeout answers), trickles, or whose client hangs up at a random byte. */
function unfinishedCase(r: FuzzRandom): FuzzCase {
  const body = Buffer.from(JSON.stringify(baseCompletion(r)));
  const cut = r.int(body.length);
  const head = rawRequest("POST", "/v1/completions", null, { "Content-Length": String(body.length), "Content-Type": "application/json" });
  const kind = r.pick(["stops", "hangs up", "trickles"]);
  return {
    what: `a body that ${kind} at byte ${cut} of ${body.length}`,
    async run(_url, port) {
      const parts = kind === "trickles" ? [head, ...Array.from(body.subarray(0, cut), (b) => Buffer.from([b]))] : [Buffer.concat([head, body.subarray(0, cut)])];
      const exchange = await rawExchange(port, parts, { gapMs: kind === "trickles" ? 20 : 0, responses: 1, hangUpAfterWrite: kind === "hangs up", deadlineMs: DEADLINE_MS });
      // A body that never completes is answered within --body-timeout, and its connection closed.
      if (kind !== "hangs up" && (exchange.responses[0]?.status !== 408 || exchange.responses[0]?.headers.connection !== "close")) {
        throw new Error(`no 408 closing the connection (got ${exchange.responses.map((a) => a.status).join(", ") || "nothing"})`);
      }
      return exchange.responses;
    },
  };
}

/** A whole request whose client hangs up after writing it, or after the first bytes of the answer. */
function disconnectCase(r: FuzzRandom): FuzzCase {
  const stream = r.int(2) === 0;
  const request = rawRequest("POST", "/v1/completions", JSON.stringify({ ...baseCompletion(r), max_tokens: 4 + r.int(30), stream }));
  const afterBytes = r.int(2) === 0 ? 0 : 1 + r.int(400);
  return {
    what: `a ${stream ? "streamed" : "whole"} completion whose client leaves ${afterBytes === 0 ? "at once" : `after ${afterBytes} bytes`}`,
    async run(_url, port) {
      if (afterBytes === 0) await rawExchange(port, [request], { hangUpAfterWrite: true, deadlineMs: DEADLINE_MS });
      else await rawExchange(port, [request], { bytes: afterBytes, deadlineMs: DEADLINE_MS });
      return [];
    },
  };
}

/** Two or three requests in one write; quick routes and generations mixed. */
function pipelinedCase(r: FuzzRandom): FuzzCase {
  const requests = Array.from({ length: 2 + r.int(2) }, () => r.pick([
    () => rawRequest("GET", "/health"), () => rawRequest("GET", "/v1/models"), () => rawRequest("GET", "/metrics"),
    () => rawRequest("POST", "/v1/completions", JSON.stringify(baseCompletion(r))),
    () => rawRequest("POST", "/v1/completions", "{"),
  ])());
  return {
    what: `${requests.length} pipelined: ${requests.map((b) => b.toString("latin1").split(" ", 2).join(" ")).join(", ")}`,
    async run(_url, port) {
      const exchange = await rawExchange(port, [Buffer.concat(requests)], { responses: requests.length, deadlineMs: DEADLINE_MS });
      // Bun answers every one, or (behind a running handler) closes the connection: docs/server.md, Pipelining.
      if (exchange.responses.length < requests.length && !exchange.closed) throw new Error(`${exchange.responses.length} of ${requests.length} answered and the connection left open`);
      return exchange.responses;
    },
  };
}

/** Bodies over --max-body-mb: declared (a little or far over, only the head sent for the latter) or chunked. */
function oversizeCase(r: FuzzRandom, maxBodyBytes: number): FuzzCase {
  const kind = r.pick(["declared", "chunked", "declared far over"]);
  const declared = kind === "declared";
  return {
    what: `a body over the bound (${kind})`,
    async run(_url, port) {
      if (kind === "declared far over") {
        const head = rawRequest("POST", "/v1/completions", null, { "Content-Length": String(r.pick([100 << 20, 2 ** 40])) });
        return (await rawExchange(port, [head, "{"], { responses: 1, deadlineMs: DEADLINE_MS })).responses;
      }
      const body = Buffer.alloc(maxBodyBytes + 1 + r.int(1000), 0x20);
      const headers: Record<string, string> = declared ? {} : { "Transfer-Encoding": "chunked" };
      const payload = declared ? body : Buffer.concat([Buffer.from(`${body.length.toString(16)}\r\n`), body, Buffer.from("\r\n0\r\n\r\n")]);
      return (await rawExchange(port, [Buffer.concat([rawRequest("POST", "/v1/completions", null, headers), payload])], { responses: 1, deadlineMs: DEADLINE_MS })).responses;
    },
  };
}

/**
 * Many prompts in one /v1/completions request, with n: around --max-prompts, past it by far (25,000,
 * as one hostile request sent), and around --max-queue in sequences (prompts x n). Each answer must be the one
 * its size calls for: a 400 naming `prompt` past --max-prompts, a 400 naming `n` (or `prompt`) past
 * --max-queue, else every choice (p x n + i, in order) or a 429 while others wait.
 */
function manyPromptsCase(r: FuzzRandom, limits: FuzzLimits): FuzzCase {
  const count = r.pick([1, 2, limits.maxPrompts - 1, limits.maxPrompts, limits.maxPrompts + 1, 2 * limits.maxPrompts, 25_000]);
  const n = r.pick([1, 2, 3, 8]);
  const ids = r.int(3) === 0;
  const prompt = Array.from({ length: count }, (_, i) => (ids ? [1 + r.int(400), 1 + r.int(400)] : r.pick(["Once", "The dog", "", "\ud800", `${i}`])));
  const body = JSON.stringify({ prompt, n, max_tokens: 1 + r.int(2), temperature: r.pick([0, 1]), stream: r.int(4) === 0 });
  const expected = count > limits.maxPrompts ? "prompt" : count * n > limits.maxQueue ? (n > 1 ? "n" : "prompt") : null;
  return {
    what: `${count} ${ids ? "token-id" : "text"} prompts, n ${n}`,
    async run(_url, port) {
      const exchange = await rawExchange(port, [rawRequest("POST", "/v1/completions", body, { "Content-Type": "application/json" })], { responses: 1, deadlineMs: DEADLINE_MS });
      const answer = exchange.responses[0];
      if (answer === undefined) throw new Error("no answer");
      if (expected !== null) {
        const param = answer.status === 400 ? (JSON.parse(answer.body) as { error: { param: string | null } }).error.param : null;
        if (param !== expected) throw new Error(`expected a 400 naming ${expected}, got ${answer.status} (param ${param})`);
      } else if (answer.status === 200 && !answer.headers["content-type"]?.startsWith("text/event-stream")) {
        const indexes = (JSON.parse(answer.body) as { choices: { index: number }[] }).choices.map((c) => c.index);
        if (indexes.length !== count * n || indexes.some((index, i) => index !== i)) throw new Error(`${indexes.length} choices for ${count} x ${n}`);
      } else if (answer.status !== 200 && answer.status !== 429) {
        throw new Error(`expected every choice or a 429, got ${answer.status}`);
      }
      return exchange.responses;
    },
  };
}

/** The server's bounds the cases aim at (its --max-body-mb, --max-prompts and --max-queue). */
export interface FuzzLimits {
  maxBodyBytes: number;
  maxPrompts: number;
  maxQueue: number;
}

/** The next `count` cases of a seeded round. */
export function fuzzCases(r: FuzzRandom, count: number, limits: FuzzLimits): FuzzCase[] {
  const makers: [number, () => FuzzCase][] = [
    [10, () => jsonCase(r)], [3, () => rawBodyCase(r)], [3, () => methodCase(r)], [2, () => unfinishedCase(r)],
    [2, () => disconnectCase(r)], [2, () => pipelinedCase(r)], [1, () => oversizeCase(r, limits.maxBodyBytes)], [2, () => manyPromptsCase(r, limits)],
  ];
  const total = makers.reduce((n, [w]) => n + w, 0);
  return Array.from({ length: count }, () => {
    let pick = r.int(total);
    for (const [weight, make] of makers) {
      if (pick < weight) return make();
      pick -= weight;
    }
    throw new Error("unreachable");
  });
}

/** The path a case's description names ("OPTIONS / {}", "/v1/completions body ..."), or "". */
function pathOf(what: string): string {
  return what.split(" ").find((word) => word.startsWith("/")) ?? "";
}

/** Throws unless `answer` is a 2xx, or a 4xx with OpenAI's error shape (ollama's on its routes), and carries no stack trace. */
export function checkAnswer(what: string, answer: RawResponse): void {
  const fail = (why: string) => {
    throw new Error(`${what}: ${why} (${answer.status} ${answer.body.slice(0, 300)})`);
  };
  if (!(answer.status >= 200 && answer.status < 300) && !(answer.status >= 400 && answer.status < 500)) fail("neither a 2xx nor a 4xx");
  if (/\n\s+at |\bat .+:\d+:\d+\)/.test(answer.body)) fail("a stack trace");
  if (answer.status < 400) {
    if (answer.headers["content-type"]?.startsWith("text/event-stream") && answer.body !== "" && !answer.body.endsWith("data: [DONE]\n\n")) fail("a stream that did not end with [DONE]");
    return;
  }
  if (answer.body === "") return; // the answer to a HEAD request
  let parsed: unknown;
  try {
    parsed = JSON.parse(answer.body);
  } catch {
    fail("an error body that is not JSON");
  }
  const error = (parsed as { error?: Record<string, unknown> | string }).error;
  // ollama's routes answer as ollama does: {"error": "message"}.
  if (typeof error === "string" && isOllamaPath(pathOf(what))) {
    if (error.length > 600) fail("a message that quotes more than an excerpt");
    return;
  }
  if (typeof error !== "object" || error === null) return fail("no error object");
  if (Object.keys(error).sort().join() !== "code,message,param,type") fail("not OpenAI's error shape");
  if (typeof error.message !== "string" || typeof error.type !== "string") fail("message or type not a string");
  if (error.param !== null && typeof error.param !== "string") fail("param neither a string nor null");
  if (error.code !== null && typeof error.code !== "string") fail("code neither a string nor null");
  if ((error.message as string).length > 600) fail("a message that quotes more than an excerpt");
}

/**
 * Damages up to `count` block files of the cache folder `root` (a FIFO, a 1.5 GiB sparse file, a
 * directory or a link in place of one; one cut short, emptied or overwritten) and adds stray
 * entries; returns what it did.
 */
export function damageCacheFolder(r: FuzzRandom, root: string, count: number): string[] {
  const blocks = readdirSync(root, { withFileTypes: true })
    .filter((d) => d.isDirectory())
    .flatMap((d) => readdirSync(join(root, d.name)).filter((n) => n.endsWith(".kvb")).map((n) => join(root, d.name, n)))
    .filter((p) => lstatSync(p).isFile())
    .sort();
  const done: string[] = [];
  for (let i = 0; i < count && blocks.length > 0; i++) {
    const path = blocks.splice(r.int(blocks.length), 1)[0]!;
    const size = lstatSync(path).size;
    const kind = r.pick(["fifo", "sparse", "directory", "link", "cut", "empty", "overwritten"]);
    if (["fifo", "directory", "link"].includes(kind)) rmSync(path);
    if (kind === "fifo" && Bun.spawnSync(["mkfifo", path]).exitCode !== 0) throw new Error(`mkfifo ${path} failed`);
    if (kind === "directory") mkdirSync(path);
    if (kind === "link") symlinkSync(blocks[0] ?? "/dev/zero", path);
    if (kind === "sparse") truncateSync(path, 1.5 * 2 ** 30);
    if (kind === "cut") truncateSync(path, r.int(Math.max(1, size)));
    if (kind === "empty") truncateSync(path, 0);
    if (kind === "overwritten") {
      const fd = openSync(path, "r+");
      writeSync(fd, Buffer.from(Array.from({ length: 64 }, () => r.int(256))), 0, 64, r.int(Math.max(1, size - 64)));
      closeSync(fd);
    }
    done.push(kind);
  }
  const stray = join(root, r.pick(["notes.txt", "x.kvb"]));
  rmSync(stray, { force: true, recursive: true });
  if (Bun.spawnSync(["mkfifo", stray]).exitCode !== 0) throw new Error(`mkfifo ${stray} failed`);
  return done;
}
