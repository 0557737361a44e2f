/**
 * `pagellm serve` as an attacker or a careless client uses it: each test keeps one
 * defect fixed, over HTTP on 127.0.0.1.
 *
 * - Bodies: one that never finishes, or trickles in, gets a 408 in OpenAI's error shape within
 *   --body-timeout and its connection closed; requests in progress are bounded (--max-connections,
 *   a stream counted until its end) and so are the bytes of bodies still arriving
 *   (--max-pending-body-mb); a client gone mid-body is not a server failure.
 * - /health says 503 (with the reason) while the engine loop makes no progress with work pending.
 * - Nesting: a body 100,000 arrays deep is a 400, not a 500; no error message quotes more than an
 *   excerpt of the input. A body that is not UTF-8 is a 400.
 * - HEAD is answered on every GET route; a 503 while shutting down is not logged as a failure.
 * - Pipelining: what Bun does with a request pipelined behind a generation (docs/server.md), and
 *   that the server is unharmed by it.
 */
import { afterAll, beforeAll, expect, spyOn, test } from "bun:test";
import { rmSync } from "node:fs";
import { LLM } from "../src/llm/llm.ts";
import { nodeBlockFileOps, type BlockFileOps } from "../src/kv-disk/file-ops.ts";
import { PagellmServer, type ServerOptions } from "../src/server/server.ts";
import { MAX_JSON_DEPTH } from "../src/server/body-fields.ts";
import { metric, waitIdle } from "./helpers/serve.ts";
import { rawExchange, rawRequest } from "./helpers/raw-http.ts";
import { describeShared } from "./helpers/shared.ts";
import { testThreads } from "./helpers/threads.ts";
import { scratchDir } from "./helpers/kv-disk.ts";
import { TEXTS } from "./helpers/prefix.ts";

const STORIES = "models/gguf/stories260K.gguf";
/** Per-test limit: a few short generations and raw connections on a busy 2-core machine. */
const LIMIT_MS = 120_000;
/** A raw exchange that has not ended by then has hung (the bounds under test are far below it). */
const DEADLINE_MS = 30_000;

interface ErrorBody {
  error: { message: string; type: string; param: string | null; code: string | null };
}

/** Polls `read` until `done` holds (a deadline, never the expected path). */
async function until<T>(read: () => T | Promise<T>, done: (v: T) => boolean, what: string): Promise<T> {
  for (let i = 0; i < 3000; i++) {
    const v = await read();
    if (done(v)) return v;
    await Bun.sleep(10);
  }
  throw new Error(`timed out waiting for ${what}`);
}

function errorOf(text: string): ErrorBody["error"] {
  const body = JSON.parse(text) as ErrorBody;
  expect(Object.keys(body.error).sort()).toEqual(["code", "message", "param", "type"]);
  return body.error;
}

describeShared("serve under abuse", [STORIES], ([model]) => {
  let llm!: LLM;
  beforeAll(() => {
    llm = LLM.load({ model: model!, engine: { threads: testThreads() } });
  }, LIMIT_MS);
  afterAll(() => llm?.close());

  /** A server on the shared model with `opts`, stopped after `use`. */
  async function withServer<T>(opts: Partial<ServerOptions>, use: (server: PagellmServer, port: number) => Promise<T>, on: LLM = llm): Promise<T> {
    const server = new PagellmServer({
      host: "127.0.0.1", port: 0, apiKey: null, maxBodyBytes: 8 << 20, maxQueue: 64, logRequests: false, modelName: "m", log: () => {}, ...opts,
    });
    server.ready(on);
    try {
      return await use(server, Number(new URL(server.url).port));
    } finally {
      await server.close();
    }
  }

  const completion = (url: string, body: Record<string, unknown>) =>
    fetch(`${url}/v1/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });

  test("a body that never finishes, or trickles in, gets a 408 in OpenAI's shape within --body-timeout and its connection closed", async () => {
    await withServer({ bodyTimeoutMs: 300 }, async (server, port) => {
      const head = rawRequest("POST", "/v1/completions", null, { "Content-Length": "1000", "Content-Type": "application/json" });
      const stalled = await rawExchange(port, [Buffer.concat([head, Buffer.from('{"prompt": "Once')])], { deadlineMs: DEADLINE_MS });
      // A byte every 50 ms keeps the connection busy but the body never in on time.
      const trickle = await rawExchange(port, [head, ...'{"prompt": "Once upon a time"'.split("")], { gapMs: 50, deadlineMs: DEADLINE_MS });
      for (const exchange of [stalled, trickle]) {
        expect(exchange.responses.map((r) => r.status)).toEqual([408]);
        expect(exchange.responses[0]!.headers.connection).toBe("close");
        expect(exchange.closed).toBe(true);
        const error = errorOf(exchange.responses[0]!.body);
        expect(error.code).toBe("request_timeout");
        expect(error.message).toContain("--body-timeout");
      }
      expect(server.requestsInProgress).toBe(0);
    });
  }, LIMIT_MS);

  test("requests in progress are bounded by --max-connections; a client gone mid-body is no server failure", async () => {
    const stderr = spyOn(process.stderr, "write");
    try {
      await withServer({ maxConnections: 2 }, async (server, port) => {
        const hangUp = new AbortController();
        const head = rawRequest("POST", "/v1/completions", null, { "Content-Length": "1000" });
        const held = [0, 1].map(() => rawExchange(port, [Buffer.concat([head, Buffer.from("{")])], { deadlineMs: DEADLINE_MS, signal: hangUp.signal }));
        await until(() => server.requestsInProgress, (n) => n === 2, "two requests in progress");
        const refused = await completion(server.url, { prompt: "Once", max_tokens: 2 });
        expect(refused.status).toBe(429);
        expect(refused.headers.get("retry-after")).toBe("1");
        expect(errorOf(await refused.text()).code).toBe("too_many_connections");
        // Health checks and scrapes are never refused for load.
        expect((await fetch(`${server.url}/health`)).status).toBe(200);
        expect((await fetch(`${server.url}/metrics`)).status).toBe(200);
        hangUp.abort();
        for (const h of await Promise.all(held)) expect(h.responses).toEqual([]);
        await until(() => server.requestsInProgress, (n) => n === 0, "the abandoned requests to end");
        expect((await completion(server.url, { prompt: "Once", max_tokens: 2, temperature: 0 })).status).toBe(200);
      });
      const lines = stderr.mock.calls.map((c) => String(c[0]));
      expect(lines.filter((l) => l.startsWith("pagellm serve:"))).toEqual([]);
    } finally {
      stderr.mockRestore();
    }
  }, LIMIT_MS);

  test("a stream counts against --max-connections until its end", async () => {
    await withServer({ maxConnections: 1 }, async (server) => {
      const stream = await completion(server.url, { prompt: "Once upon a time", max_tokens: 40, temperature: 0, ignore_eos: true, stream: true });
      expect(stream.status).toBe(200);
      const reader = stream.body!.getReader();
      await reader.read();
      expect(server.requestsInProgress).toBe(1);
      expect((await completion(server.url, { prompt: "Once", max_tokens: 2 })).status).toBe(429);
      while (!(await reader.read()).done);
      await until(() => server.requestsInProgress, (n) => n === 0, "the stream's end to be counted");
      expect((await completion(server.url, { prompt: "Once", max_tokens: 2 })).status).toBe(200);
    });
  }, LIMIT_MS);

  test("the bytes of bodies still arriving are bounded by --max-pending-body-mb (429, the connection closed)", async () => {
    await withServer({ maxPendingBodyBytes: 1 << 20 }, async (server, port) => {
      const hangUp = new AbortController();
      const head = rawRequest("POST", "/v1/completions", null, { "Content-Length": String(4 << 20) });
      const first = rawExchange(port, [Buffer.concat([head, Buffer.alloc(700 << 10, 0x20)])], { deadlineMs: DEADLINE_MS, signal: hangUp.signal });
      await until(() => server.pendingBodyBytes, (n) => n === 700 << 10, "the first body's bytes to arrive");
      const second = await rawExchange(port, [Buffer.concat([head, Buffer.alloc(500 << 10, 0x20)])], { deadlineMs: DEADLINE_MS });
      expect(second.responses.map((r) => r.status)).toEqual([429]);
      expect(second.closed).toBe(true);
      expect(errorOf(second.responses[0]!.body).code).toBe("server_busy");
      hangUp.abort();
      await first;
      await until(() => server.pendingBodyBytes + server.requestsInProgress, (n) => n === 0, "the held body to be let go");
    });
  }, LIMIT_MS);

  test("/health answers 503 with the reason while the engine loop makes no progress with work pending", async () => {
    const dir = scratchDir("stall");
    try {
      const prompt = { prompt: `${TEXTS[0]} ${TEXTS[1]}`, max_tokens: 4, temperature: 0 };
      // A first server writes the prompt's blocks to the disk cache.
      const writer = LLM.load({ model: model!, engine: { threads: testThreads() }, kvCacheDir: dir });
      const expected = await withServer({}, async (server) => {
        const text = ((await (await completion(server.url, prompt)).json()) as { choices: { text: string }[] }).choices[0]!.text;
        await writer.flush();
        return text;
      }, writer).finally(() => writer.close());
      // A second one reads them from a disk that stops answering until released.
      let release: () => void = () => undefined;
      const answering = new Promise<void>((resolve) => (release = resolve));
      const hung: BlockFileOps = { ...nodeBlockFileOps, read: async (path, bytes) => (await answering, nodeBlockFileOps.read(path, bytes)) };
      const reader = LLM.load({ model: model!, engine: { threads: testThreads() }, kvCacheDir: dir, kvCacheFileOps: hung });
      await withServer({ stallTimeoutMs: 200 }, async (server) => {
        expect((await fetch(`${server.url}/health`)).status).toBe(200);
        const pending = completion(server.url, prompt);
        const stalled = await until(() => fetch(`${server.url}/health`), (r) => r.status === 503, "/health to say 503");
        const body = (await stalled.json()) as { status: string; reason: string };
        expect(body.status).toBe("stalled");
        expect(body.reason).toMatch(/^the engine loop has made no progress for \d+\.\d s with 1 requests pending \(--stall-timeout 0\.2\)$/);
        release();
        const answer = await pending;
        expect(answer.status).toBe(200);
        expect(((await answer.json()) as { choices: { text: string }[] }).choices[0]!.text).toBe(expected);
        expect((await fetch(`${server.url}/health`)).status).toBe(200);
      }, reader).finally(() => reader.close());
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }, LIMIT_MS);

  test("nesting: 100,000 and 30,000 arrays deep are 400s that quote nothing of the input; the depth bound is exact", async () => {
    await withServer({}, async (server) => {
      const nested = (depth: number) => `{"prompt": ${"[".repeat(depth - 1)}${"]".repeat(depth - 1)}}`;
      for (const depth of [100_000, 30_000, MAX_JSON_DEPTH + 1]) {
        const r = await fetch(`${server.url}/v1/completions`, { method: "POST", body: nested(depth) });
        expect(r.status).toBe(400);
        const error = errorOf(await r.text());
        expect(error.code).toBe("invalid_json");
        expect(error.message).toBe(`request body nests arrays and objects deeper than ${MAX_JSON_DEPTH} levels`);
      }
      // At the bound the body is parsed, and refused for what it says, briefly.
      const atBound = await fetch(`${server.url}/v1/completions`, { method: "POST", body: nested(MAX_JSON_DEPTH) });
      expect(atBound.status).toBe(400);
      expect(errorOf(await atBound.text()).message.length).toBeLessThan(600);
      // Brackets inside strings are not nesting.
      const inString = await completion(server.url, { prompt: "[".repeat(1000), max_tokens: 1 });
      expect(inString.status).toBe(200);
    });
  }, LIMIT_MS);

  test("an error message quotes at most an excerpt of the input", async () => {
    await withServer({}, async (server) => {
      const long = "x".repeat(200_000);
      for (const body of [{ prompt: "Hi", [long]: 1 }, { prompt: [[1, long]] }, { prompt: [long, 7] }]) {
        const r = await completion(server.url, body);
        expect(r.status).toBe(400);
        const error = errorOf(await r.text());
        expect(error.message.length).toBeLessThan(600);
        expect((error.param ?? "").length).toBeLessThan(200);
      }
    });
  }, LIMIT_MS);

  test("a body declared far past --max-body-mb gets the 413 in OpenAI's shape (not Bun's bare one), the connection closed", async () => {
    await withServer({ maxBodyBytes: 1 << 20 }, async (_server, port) => {
      for (const declared of [2 << 20, 100 << 20, 100 * 2 ** 30]) {
        const r = await rawExchange(port, [rawRequest("POST", "/v1/completions", null, { "Content-Length": String(declared) }), "{"], { deadlineMs: DEADLINE_MS });
        expect(r.responses.map((a) => a.status)).toEqual([413]);
        expect(errorOf(r.responses[0]!.body).code).toBe("request_too_large");
        expect(r.closed).toBe(true);
      }
    });
  }, LIMIT_MS);

  test("a body that is not UTF-8 is a 400, not silently changed", async () => {
    await withServer({}, async (_server, port) => {
      const body = Buffer.concat([Buffer.from('{"prompt": "caf'), Buffer.from([0xe9]), Buffer.from('", "max_tokens": 1}')]);
      const r = await rawExchange(port, [rawRequest("POST", "/v1/completions", body)], { responses: 1, deadlineMs: DEADLINE_MS });
      expect(r.responses[0]!.status).toBe(400);
      expect(errorOf(r.responses[0]!.body).message).toBe("request body is not valid UTF-8");
    });
  }, LIMIT_MS);

  test("HEAD is answered like GET on /health, /metrics and /v1/models; other methods get 405 naming both", async () => {
    await withServer({}, async (server, port) => {
      for (const path of ["/health", "/metrics", "/v1/models"]) {
        const get = await fetch(`${server.url}${path}`);
        const head = await rawExchange(port, [rawRequest("HEAD", path)], { responses: 1, head: true, deadlineMs: DEADLINE_MS });
        expect(head.responses[0]!.status).toBe(200);
        expect(head.responses[0]!.headers["content-type"]).toBe(get.headers.get("content-type")!);
        expect(head.bytes).toBeLessThan(400); // the head only
        const put = await fetch(`${server.url}${path}`, { method: "PUT" });
        expect(put.status).toBe(405);
        expect(put.headers.get("allow")).toBe("GET, HEAD");
      }
    });
  }, LIMIT_MS);

  test("/metrics follows promtool's naming rules: a counter ends in _total, nothing else does; every sample is declared", async () => {
    await withServer({}, async (server) => {
      const text = await (await fetch(`${server.url}/metrics`)).text();
      const types = new Map([...text.matchAll(/^# TYPE (\S+) (\S+)$/gm)].map((m) => [m[1]!, m[2]!]));
      expect(types.get("pagellm:kv_cache_num_blocks")).toBe("gauge");
      for (const [name, type] of types) {
        if (type === "counter") expect(name).toEndWith("_total");
        else expect(name.endsWith("_total")).toBe(false);
      }
      for (const line of text.split("\n").filter((l) => l !== "" && !l.startsWith("#"))) {
        const name = /^[^{ ]+/.exec(line)![0];
        const family = types.has(name) ? name : name.replace(/_(bucket|sum|count)$/, "");
        expect(types.has(family)).toBe(true);
      }
    });
  }, LIMIT_MS);

  test("a 503 while shutting down is answered, and not logged as a server failure", async () => {
    const stderr = spyOn(process.stderr, "write");
    try {
      await withServer({}, async (server) => {
        expect(await server.drain(1000)).toBe(true);
        const r = await completion(server.url, { prompt: "Hi", max_tokens: 1 });
        expect(r.status).toBe(503);
        expect(errorOf(await r.text()).code).toBe("shutting_down");
      });
      expect(stderr.mock.calls.map((c) => String(c[0])).filter((l) => l.startsWith("pagellm serve:"))).toEqual([]);
    } finally {
      stderr.mockRestore();
    }
  }, LIMIT_MS);

  test("pipelining: quick routes are both answered; behind a generation Bun drops both (docs/server.md), and the server is unharmed", async () => {
    await withServer({}, async (server, port) => {
      const quick = await rawExchange(port, [Buffer.concat([rawRequest("GET", "/health"), rawRequest("GET", "/v1/models")])], { responses: 2, deadlineMs: DEADLINE_MS });
      expect(quick.responses.map((r) => r.status)).toEqual([200, 200]);
      expect(JSON.parse(quick.responses[1]!.body)).toMatchObject({ object: "list" });

      const ask = { prompt: "Once upon a time", max_tokens: 8, temperature: 0 };
      const before = ((await (await completion(server.url, ask)).json()) as { choices: { text: string }[] }).choices[0]!.text;
      const aborted = await metric(server.url, "request_success_total", 'finished_reason="abort"');
      const pipelined = await rawExchange(port, [Buffer.concat([rawRequest("POST", "/v1/completions", JSON.stringify(ask)), rawRequest("GET", "/health")])], { deadlineMs: DEADLINE_MS });
      // Bun closes the connection when a request arrives behind one whose handler is still
      // running: nothing is sent for either. When this fails, Bun answers them: update
      // docs/server.md (Pipelining) and this test.
      expect(pipelined).toEqual({ responses: [], closed: true, bytes: 0 });
      // The abandoned generation is aborted and frees its blocks; the next answer is the same.
      await waitIdle(server.url);
      expect(await metric(server.url, "request_success_total", 'finished_reason="abort"')).toBe(aborted + 1);
      expect(server.requestsInProgress).toBe(0);
      const after = ((await (await completion(server.url, ask)).json()) as { choices: { text: string }[] }).choices[0]!.text;
      expect(after).toBe(before);
    });
  }, LIMIT_MS);
});
