/**
 * A small OpenAI-compatible server for client tests: Bun.serve on 127.0.0.1, a free port, streamed
 * completions and chat completions whose "tokens" are words, and a prefix cache that counts the
 * longest whole-16-token prefix shared with any earlier prompt of the same `cache_salt` (none with
 * llama.cpp's `cache_prompt: false`). It records what it was sent and
 * how many requests ran at once, and can answer with errors, omit cached tokens, or cut its SSE
 * into awkward pieces (events split mid-line and between CR and LF, several in one write).
 */
import type { Server } from "bun";

export interface StubOptions {
  /** How cached tokens are reported: OpenAI's usage field, llama.cpp's timings.cache_n, or not at all. */
  cached?: "usage" | "timings" | "none";
  /** The status to answer the n-th request (from 0) with, or null to serve it. */
  failWith?: (n: number, body: StubBody) => number | null;
  /** Cut the stream into awkward pieces. */
  awkwardChunks?: boolean;
  /** Milliseconds between tokens. */
  tokenDelayMs?: number;
}

export interface StubBody {
  model?: string;
  prompt?: number[];
  messages?: { role: string; content: string }[];
  max_tokens?: number;
  stream?: boolean;
  ignore_eos?: boolean;
  stream_options?: { include_usage?: boolean };
  cache_salt?: string;
  cache_prompt?: boolean;
  id_slot?: number;
}

export interface Stub {
  url: string;
  /** Every body received at /v1/completions or /v1/chat/completions, in arrival order. */
  bodies: StubBody[];
  /** Replies given, by request number. */
  replies: string[];
  maxConcurrent: number;
  stop(): void;
}

const BLOCK = 16;

/** A chat's "tokens": 4 per message for the template, then its words. */
function chatTokens(messages: readonly { role: string; content: string }[]): string[] {
  return messages.flatMap((m) => ["<|start|>", m.role, "<|sep|>", ...m.content.split(/\s+/).filter((w) => w !== ""), "<|end|>"]);
}

export function startStub(o: StubOptions = {}): Stub {
  const seen: string[][] = [];
  const stub: Stub = { url: "", bodies: [], replies: [], maxConcurrent: 0, stop: () => server.stop(true) };
  let running = 0;
  const server: Server<undefined> = Bun.serve({
    hostname: "127.0.0.1",
    port: 0,
    async fetch(req) {
      const path = new URL(req.url).pathname;
      if (path === "/v1/models") return Response.json({ object: "list", data: [{ id: "stub-model", object: "model" }] });
      if (path !== "/v1/completions" && path !== "/v1/chat/completions") return Response.json({ error: { message: `no route ${path}` } }, { status: 404 });
      const body = (await req.json()) as StubBody;
      const n = stub.bodies.length;
      stub.bodies.push(body);
      const status = o.failWith?.(n, body) ?? null;
      if (status !== null) return Response.json({ error: { message: `stub refuses request ${n}`, type: "invalid_request_error" } }, { status });
      const chat = path === "/v1/chat/completions";
      const tokens = chat ? chatTokens(body.messages ?? []) : (body.prompt ?? []).map(String);
      // A salt is part of every block's key: the cache is looked up and filled per salt.
      const key = [`salt:${body.cache_salt ?? ""}`, ...tokens];
      let shared = 0;
      for (const earlier of body.cache_prompt === false ? [] : seen) {
        let k = 0;
        while (k < key.length && k < earlier.length && key[k] === earlier[k]) k++;
        shared = Math.max(shared, k - 1);
      }
      seen.push(key);
      const cached = Math.min(Math.floor(shared / BLOCK) * BLOCK, Math.max(0, tokens.length - 1));
      const count = body.max_tokens ?? 16;
      const pieces = Array.from({ length: count }, (_, i) => ` r${n}x${i}`);
      stub.replies[n] = pieces.join("");
      const usage = {
        prompt_tokens: tokens.length, completion_tokens: count, total_tokens: tokens.length + count,
        ...(o.cached === "usage" || o.cached === undefined ? { prompt_tokens_details: { cached_tokens: cached } } : {}),
      };
      const events = [
        ...(chat ? [{ choices: [{ index: 0, delta: { role: "assistant", content: "" } }] }] : []),
        ...pieces.map((p) => ({ choices: [{ index: 0, ...(chat ? { delta: { content: p } } : { text: p }), finish_reason: null }] })),
        { choices: [{ index: 0, ...(chat ? { delta: {} } : { text: "" }), finish_reason: "length" }], ...(o.cached === "timings" ? { timings: { cache_n: cached } } : {}) },
        { choices: [], usage },
      ].map((e) => `data: ${JSON.stringify(e)}\r\n\r\n`);
      events.push("data: [DONE]\r\n\r\n");
      const writes = o.awkwardChunks === true ? awkward(events.join("")) : events;
      running++;
      stub.maxConcurrent = Math.max(stub.maxConcurrent, running);
      const encoder = new TextEncoder();
      const stream = new ReadableStream<Uint8Array>({
        async start(controller) {
          try {
            for (const w of writes) {
              controller.enqueue(encoder.encode(w));
              await Bun.sleep(o.tokenDelayMs ?? 1);
            }
            controller.close();
          } finally {
            running--;
          }
        },
      });
      return new Response(stream, { headers: { "Content-Type": "text/event-stream" } });
    },
  });
  stub.url = `http://127.0.0.1:${server.port}`;
  return stub;
}

/** Cut text into pieces of 1 to 97 characters, cycling, so cuts fall everywhere (mid-field, between CR and LF, across events). */
function awkward(text: string): string[] {
  const out: string[] = [];
  let size = 1;
  for (let i = 0; i < text.length; i += size, size = (size * 7) % 97 + 1) out.push(text.slice(i, i + size));
  return out;
}
