/**
 * CORS for browser clients (`--cors`): real preflight requests and answers of every kind (a
 * generation, a stream, errors, 404s, the 429 of --max-connections), for an allowed origin, another
 * origin and none, with an API key in force (a preflight never carries it); `*`; CORS off. Then a
 * page served on localhost calling the server with fetch in headless Chromium (skipped outside CI
 * without a Chromium, as test/bench-chart.test.ts).
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { LLM } from "../src/llm/llm.ts";
import { CorsPolicy, corsOriginProblem } from "../src/server/cors.ts";
import { PagellmServer, type ServerOptions } from "../src/server/server.ts";
import { LONG_PROCESS_TEST_MS, PROCESS_TEST_MS } from "./helpers/limits.ts";
import { runPagellm } from "./helpers/cli.ts";
import { browserTestsRun, requireBrowser } from "./helpers/chromium.ts";
import { describeShared } from "./helpers/shared.ts";
import { testThreads } from "./helpers/threads.ts";

const STORIES = "models/gguf/stories260K.gguf";
const LIMIT_MS = 120_000;
const PAGE = "http://localhost:3000";
const KEY = "sk-test";

const corsHeaders = (r: Response) => [...r.headers.keys()].filter((k) => k.startsWith("access-control-"));

function preflight(url: string, origin: string, extra: Record<string, string> = {}): Promise<Response> {
  return fetch(url, { method: "OPTIONS", headers: { Origin: origin, "Access-Control-Request-Method": "POST", ...extra } });
}

function post(url: string, body: unknown, headers: Record<string, string>): Promise<Response> {
  return fetch(url, { method: "POST", headers: { "content-type": "application/json", ...headers }, body: JSON.stringify(body) });
}

test("--cors takes origins and *, and refuses what is not an origin", () => {
  expect(corsOriginProblem("http://localhost:3000")).toBeNull();
  expect(corsOriginProblem("https://chat.example.com")).toBeNull();
  expect(corsOriginProblem("https://chat.example.com/")).toBeNull();
  expect(corsOriginProblem("*")).toBeNull();
  expect(corsOriginProblem("localhost:3000")).toContain("is not an http or https origin");
  expect(corsOriginProblem("example.com")).toContain("is not an origin");
  expect(corsOriginProblem("https://example.com/app")).toBe('"https://example.com/app" is not an origin: give scheme://host[:port] only (https://example.com)');
  expect(() => new CorsPolicy(["ftp://x"])).toThrow(RangeError);
  const r = runPagellm(["serve", "--model", "unused.gguf", "--cors", "http://localhost:3000,example.com"]);
  expect(r.exitCode).toBe(2);
  expect(r.stderr).toBe('pagellm: error: --cors "example.com" is not an origin (scheme://host[:port], e.g. http://localhost:3000) or *\n');
}, PROCESS_TEST_MS);

describeShared("serve --cors", [STORIES], ([model]) => {
  let llm!: LLM;
  const servers: PagellmServer[] = [];
  const start = (opts: Partial<ServerOptions>) => {
    const server = new PagellmServer({
      host: "127.0.0.1", port: 0, apiKey: KEY, maxBodyBytes: 1 << 20, maxQueue: 64, logRequests: false, modelName: "m", log: () => {}, ...opts,
    });
    server.ready(llm);
    servers.push(server);
    return server.url;
  };
  beforeAll(() => {
    llm = LLM.load({ model: model!, engine: { threads: testThreads() } });
  }, LIMIT_MS);
  afterAll(async () => {
    for (const s of servers) await s.close();
    llm?.close();
  });

  test("a preflight from an allowed origin is answered 204 before the API key check, echoing the headers asked for", async () => {
    const url = start({ corsOrigins: [PAGE, "https://chat.example.com"] });
    const r = await preflight(`${url}/v1/chat/completions`, PAGE, { "Access-Control-Request-Headers": "authorization,content-type,x-stainless-os" });
    expect(r.status).toBe(204);
    expect(r.headers.get("access-control-allow-origin")).toBe(PAGE);
    expect(r.headers.get("access-control-allow-methods")).toBe("GET, HEAD, POST, OPTIONS");
    expect(r.headers.get("access-control-allow-headers")).toBe("authorization,content-type,x-stainless-os");
    expect(r.headers.get("access-control-max-age")).toBe("600");
    expect(r.headers.get("vary")).toContain("Origin");
    expect(r.headers.get("access-control-allow-private-network")).toBeNull();
    // A public page calling a local server (Chrome's private network access) asks for more.
    const pna = await preflight(`${url}/v1/models`, "https://chat.example.com", { "Access-Control-Request-Private-Network": "true" });
    expect(pna.status).toBe(204);
    expect(pna.headers.get("access-control-allow-private-network")).toBe("true");
    expect(pna.headers.get("access-control-allow-origin")).toBe("https://chat.example.com");
    // Another origin: a 403 without a single CORS header.
    const other = await preflight(`${url}/v1/chat/completions`, "https://evil.example");
    expect(other.status).toBe(403);
    expect(corsHeaders(other)).toEqual([]);
    expect(((await other.json()) as { error: { code: string } }).error.code).toBe("origin_not_allowed");
  }, LIMIT_MS);

  test("every answer to an allowed origin carries the headers: a generation, a stream, 400, 401, 404, 405, /health", async () => {
    const url = start({ corsOrigins: [PAGE] });
    const auth = { Authorization: `Bearer ${KEY}`, Origin: PAGE };
    const answers: [string, Response][] = [
      ["generation", await post(`${url}/v1/completions`, { prompt: "Once", max_tokens: 2 }, auth)],
      ["stream", await post(`${url}/v1/chat/completions`, { messages: [{ role: "user", content: "Hi" }], max_tokens: 2, stream: true }, auth)],
      ["400", await post(`${url}/v1/completions`, { prompt: "Once", top_p: 7 }, auth)],
      ["401", await post(`${url}/v1/completions`, { prompt: "Once" }, { Origin: PAGE })],
      ["404", await fetch(`${url}/v2/nothing`, { headers: auth })],
      ["405", await fetch(`${url}/v1/completions`, { headers: auth })],
      ["health", await fetch(`${url}/health`, { headers: { Origin: PAGE } })],
    ];
    const statuses = answers.map(([what, r]) => [what, r.status]);
    expect(statuses).toEqual([["generation", 200], ["stream", 200], ["400", 400], ["401", 401], ["404", 404], ["405", 405], ["health", 200]]);
    for (const [what, r] of answers) {
      expect([what, r.headers.get("access-control-allow-origin")]).toEqual([what, PAGE]);
      expect([what, r.headers.get("access-control-expose-headers")]).toEqual([what, "Retry-After, WWW-Authenticate"]);
      expect([what, r.headers.get("vary")]).toEqual([what, "Origin"]);
      await r.text();
    }
    expect(answers[1]![1].headers.get("content-type")).toStartWith("text/event-stream");
  }, LIMIT_MS);

  test("another origin, or none, gets no CORS header on any answer", async () => {
    const url = start({ corsOrigins: [PAGE] });
    for (const headers of [{ Origin: "https://evil.example" }, {}] as Record<string, string>[]) {
      const answers = [
        await post(`${url}/v1/completions`, { prompt: "Once", max_tokens: 2 }, { Authorization: `Bearer ${KEY}`, ...headers }),
        await post(`${url}/v1/completions`, { prompt: "Once" }, headers),
        await fetch(`${url}/nothing`, { headers }),
      ];
      expect(answers.map((r) => r.status)).toEqual([200, 401, 404]);
      for (const r of answers) {
        expect(corsHeaders(r)).toEqual([]);
        expect(r.headers.get("vary")).toBe("Origin");
        await r.text();
      }
    }
  }, LIMIT_MS);

  test("*: any origin, answered with *; the 429 of --max-connections carries it too", async () => {
    const url = start({ corsOrigins: ["*"], maxConnections: 1 });
    const r = await preflight(`${url}/v1/completions`, "https://anywhere.example");
    expect(r.status).toBe(204);
    expect(r.headers.get("access-control-allow-origin")).toBe("*");
    // A stream holds the one connection allowed until its end: 400 tokens, not stopped by an end of
    // text (4 could all be written before the next request came, freeing the connection).
    const stream = await post(
      `${url}/v1/completions`,
      { prompt: "Once", max_tokens: 400, ignore_eos: true, temperature: 0, stream: true },
      { Authorization: `Bearer ${KEY}`, Origin: "https://a.example" },
    );
    const busy = await fetch(`${url}/v1/models`, { headers: { Authorization: `Bearer ${KEY}`, Origin: "https://b.example" } });
    expect(busy.status).toBe(429);
    expect(busy.headers.get("access-control-allow-origin")).toBe("*");
    expect(busy.headers.get("vary")).toBeNull();
    await busy.text();
    expect(stream.headers.get("access-control-allow-origin")).toBe("*");
    await stream.text();
  }, LIMIT_MS);

  test("CORS off (the default): a preflight is no preflight (the key is asked for) and no answer has a CORS header", async () => {
    const url = start({});
    const r = await preflight(`${url}/v1/completions`, PAGE);
    expect(r.status).toBe(401);
    expect(corsHeaders(r)).toEqual([]);
    expect(r.headers.get("vary")).toBeNull();
    const models = await fetch(`${url}/v1/models`, { headers: { Authorization: `Bearer ${KEY}`, Origin: PAGE } });
    expect(models.status).toBe(200);
    expect(corsHeaders(models)).toEqual([]);
  }, LIMIT_MS);
});

const browserRuns = browserTestsRun("CORS in a browser");

/** The page's script: calls to the server with fetch, as a browser client makes them, then the results posted back to its own origin. */
function pageScript(api: string, blocked: string): string {
  return `
const results = {};
async function attempt(name, call) {
  try { results[name] = await call(); } catch (e) { results[name] = "blocked: " + e.name; }
}
const body = (extra) => JSON.stringify({ messages: [{ role: "user", content: "Hi" }], max_tokens: 3, ...extra });
const headers = { "Authorization": "Bearer ${KEY}", "Content-Type": "application/json" };
(async () => {
  await attempt("chat", async () => {
    const r = await fetch("${api}/v1/chat/completions", { method: "POST", headers, body: body({}) });
    return r.status + " " + (await r.json()).object;
  });
  await attempt("stream", async () => {
    const r = await fetch("${api}/v1/chat/completions", { method: "POST", headers, body: body({ stream: true }) });
    const text = await r.text();
    return r.status + " " + text.trim().endsWith("data: [DONE]");
  });
  await attempt("no key", async () => {
    const r = await fetch("${api}/v1/chat/completions", { method: "POST", headers: { "Content-Type": "application/json" }, body: body({}) });
    return r.status + " " + (await r.json()).error.code + " " + r.headers.get("WWW-Authenticate");
  });
  await attempt("not found", async () => {
    const r = await fetch("${api}/v1/nothing", { headers });
    return r.status + " " + (await r.json()).error.type;
  });
  await attempt("other server", async () => {
    const r = await fetch("${blocked}/v1/models", { headers });
    return r.status;
  });
  await fetch("/result", { method: "POST", body: JSON.stringify(results) });
})();`;
}

describeShared("serve --cors in headless Chromium", [STORIES], ([model]) => {
  describe.skipIf(!browserRuns)("a page on another origin", () => {
    test("calls the server with fetch: answers readable, errors too; a server that does not allow its origin is blocked", async () => {
      const browser = requireBrowser();
      const llm = LLM.load({ model: model!, engine: { threads: testThreads() } });
      const options = { host: "127.0.0.1", port: 0, apiKey: KEY, maxBodyBytes: 1 << 20, maxQueue: 64, logRequests: false, modelName: "m", log: () => {} };
      let reported!: (results: Record<string, unknown>) => void;
      const results = new Promise<Record<string, unknown>>((resolve) => (reported = resolve));
      let script = "";
      const page = Bun.serve({
        hostname: "127.0.0.1", port: 0,
        async fetch(req) {
          const path = new URL(req.url).pathname;
          if (path === "/result") {
            reported((await req.json()) as Record<string, unknown>);
            return new Response("ok");
          }
          return new Response(`<!doctype html><title>cors</title><script>${script}</script>`, { headers: { "Content-Type": "text/html" } });
        },
      });
      const origin = page.url.origin;
      const allowed = new PagellmServer({ ...options, corsOrigins: [origin] });
      const other = new PagellmServer({ ...options, corsOrigins: ["https://example.com"] });
      allowed.ready(llm);
      other.ready(llm);
      script = pageScript(allowed.url, other.url);
      const profile = mkdtempSync(join(tmpdir(), "pagellm-cors-chromium-"));
      const proc = Bun.spawn([browser, "--headless", "--no-sandbox", "--disable-gpu", `--user-data-dir=${profile}`, `${origin}/`], { stdout: "ignore", stderr: "pipe" });
      try {
        const exited = proc.exited.then(async (code) => {
          throw new Error(`chromium exited ${code} before the page reported: ${(await new Response(proc.stderr).text()).slice(-400)}`);
        });
        expect(await Promise.race([results, exited])).toEqual({
          chat: "200 chat.completion",
          stream: "200 true",
          "no key": "401 invalid_api_key Bearer",
          "not found": "404 not_found_error",
          "other server": "blocked: TypeError",
        });
      } finally {
        proc.kill("SIGKILL");
        await proc.exited;
        rmSync(profile, { recursive: true, force: true });
        page.stop(true);
        await allowed.close();
        await other.close();
        llm.close();
      }
    }, LONG_PROCESS_TEST_MS);
  });
});
