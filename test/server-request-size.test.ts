/**
 * How much one request may ask of `pagellm serve`: a /v1/completions request
 * holds at most --max-prompts prompts (a 400 naming `prompt`, before any is tokenized); a request
 * whose sequences (prompts x n) alone are more than --max-queue can never be admitted and is a 400
 * naming `n` (or `prompt`), not a 429 a client would retry; the largest request that fits runs
 * whole. A request far past both (25,000 prompts, n 8) leaves the server's resident memory where it
 * was, measured on the server as a process.
 */
import { afterAll, beforeAll, expect, test } from "bun:test";
import { LLM } from "../src/llm/llm.ts";
import { PagellmServer, SERVER_DEFAULTS, type ServerOptions } from "../src/server/server.ts";
import { waitIdle } from "./helpers/serve.ts";
import { spawnServe } from "./helpers/serve-process.ts";
import { describeShared } from "./helpers/shared.ts";
import { testThreads } from "./helpers/threads.ts";

const STORIES = "models/gguf/stories260K.gguf";
/** Per-test limit: a model load, a few short generations and a server process on a busy 2-core machine. */
const LIMIT_MS = 180_000;

interface ErrorBody {
  error: { message: string; type: string; param: string | null; code: string | null };
}

interface CompletionBody {
  choices: { index: number; text: string }[];
}

async function post(url: string, path: string, body: unknown): Promise<{ status: number; text: string }> {
  const r = await fetch(`${url}${path}`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
  return { status: r.status, text: await r.text() };
}

/** The 400's error, checked to be one. */
function badRequest(r: { status: number; text: string }): ErrorBody["error"] {
  if (r.status !== 400) throw new Error(`expected a 400, got ${r.status}: ${r.text.slice(0, 300)}`);
  return (JSON.parse(r.text) as ErrorBody).error;
}

const prompts = (count: number) => Array.from({ length: count }, (_, i) => `Once upon a time ${i}`);

describeShared("serve: the size of one request", [STORIES], ([model]) => {
  let llm!: LLM;
  beforeAll(() => {
    llm = LLM.load({ model: model!, engine: { threads: testThreads() } });
  }, LIMIT_MS);
  afterAll(() => llm?.close());

  async function withServer(opts: Partial<ServerOptions>, use: (url: string) => Promise<void>): Promise<void> {
    const server = new PagellmServer({
      host: "127.0.0.1", port: 0, apiKey: null, maxBodyBytes: 8 << 20, maxQueue: 256, logRequests: false, modelName: "m", log: () => {}, ...opts,
    });
    server.ready(llm);
    try {
      await use(server.url);
    } finally {
      await server.close();
    }
  }

  test("--max-prompts: one prompt more is a 400 naming prompt; at the bound every prompt is answered; a token-id array is one prompt", async () => {
    await withServer({ maxPrompts: 4 }, async (url) => {
      const over = badRequest(await post(url, "/v1/completions", { prompt: prompts(5), max_tokens: 1 }));
      expect(over.param).toBe("prompt");
      expect(over.message).toBe("'prompt' holds 5 prompts; this server takes at most 4 in one request (--max-prompts): send them in several");
      const ids = badRequest(await post(url, "/v1/completions", { prompt: Array.from({ length: 5 }, () => [1, 2]), max_tokens: 1 }));
      expect(ids.param).toBe("prompt");
      const at = await post(url, "/v1/completions", { prompt: prompts(4), max_tokens: 1, temperature: 0 });
      expect(at.status).toBe(200);
      expect((JSON.parse(at.text) as CompletionBody).choices.map((c) => c.index)).toEqual([0, 1, 2, 3]);
      const tokenIds = await post(url, "/v1/completions", { prompt: Array.from({ length: 40 }, (_, i) => 100 + i), max_tokens: 1 });
      expect(tokenIds.status).toBe(200);
    });
  }, LIMIT_MS);

  test("the default --max-prompts is 128", async () => {
    await withServer({}, async (url) => {
      expect(SERVER_DEFAULTS.maxPrompts).toBe(128);
      expect(badRequest(await post(url, "/v1/completions", { prompt: prompts(129), max_tokens: 1 })).param).toBe("prompt");
    });
  }, LIMIT_MS);

  test("sequences (prompts x n) past --max-queue alone: a 400 naming n, or prompt when n is 1; at the bound the request runs whole", async () => {
    await withServer({ maxQueue: 6, maxPrompts: 16 }, async (url) => {
      const byN = badRequest(await post(url, "/v1/completions", { prompt: prompts(2), n: 4, max_tokens: 1 }));
      expect(byN.param).toBe("n");
      expect(byN.message).toContain("8 sequences (2 prompts x n 4)");
      expect(byN.message).toContain("--max-queue 6");
      expect(badRequest(await post(url, "/v1/completions", { prompt: prompts(7), max_tokens: 1 })).param).toBe("prompt");
      expect(badRequest(await post(url, "/v1/chat/completions", { messages: [{ role: "user", content: "Hi" }], n: 7, max_tokens: 1 })).param).toBe("n");
      // A bad n is named for what it is, not counted.
      expect(badRequest(await post(url, "/v1/completions", { prompt: prompts(2), n: 9, max_tokens: 1 })).message).not.toContain("sequences");
      const whole = await post(url, "/v1/completions", { prompt: prompts(2), n: 3, max_tokens: 2, seed: 1 });
      expect(whole.status).toBe(200);
      expect((JSON.parse(whole.text) as CompletionBody).choices.map((c) => c.index)).toEqual([0, 1, 2, 3, 4, 5]);
      await waitIdle(url);
    });
  }, LIMIT_MS);

  test("a request far past both limits (25,000 prompts, n 8, --max-queue 16) is a 400 at once, and the server's resident memory stays where it was", async () => {
    const server = await spawnServe(model!, ["--max-queue", "16"]);
    try {
      const big = { prompt: prompts(25_000), n: 8, max_tokens: 16 };
      // The working size first: the largest request that fits, twice, then the baseline.
      const fits = { prompt: prompts(2), n: 8, max_tokens: 16, seed: 3 };
      for (let i = 0; i < 2; i++) expect((await post(server.url, "/v1/completions", fits)).status).toBe(200);
      const baseline = server.rssBytes();
      for (let i = 0; i < 4; i++) {
        const error = badRequest(await post(server.url, "/v1/completions", big));
        expect(error.param).toBe("prompt");
        expect(error.message).toContain("25000 prompts");
      }
      expect((await post(server.url, "/v1/completions", fits)).status).toBe(200);
      await waitIdle(server.url);
      // The request bodies' garbage goes at the server's next collection: poll for it (a deadline,
      // never the expected path). Before the bound, the prompts were tokenized and their requests
      // built before the 429, and the resident memory stayed some 180 MB above the baseline.
      let rss = server.rssBytes();
      for (let i = 0; i < 200 && rss > baseline * 1.1; i++) {
        await Bun.sleep(50);
        rss = server.rssBytes();
      }
      expect(rss).toBeLessThanOrEqual(baseline * 1.1);
      expect(await server.stop()).toBe(0);
    } finally {
      server.proc.kill("SIGKILL");
    }
  }, LIMIT_MS);
});
