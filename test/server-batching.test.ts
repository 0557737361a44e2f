/**
 * `pagellm serve` under concurrent clients: requests arriving while others run join the batch
 * (a short one finishes before a long one that started first), the engine's batch invariance
 * carried over HTTP (a greedy request gives bitwise the same tokens and log-probabilities alone
 * and among 32 concurrent different prompts, with the prefix cache cold or warm), 64 streaming
 * clients of which a third disconnect at random points, with bad requests among them (no 5xx, the
 * bad ones refused alone, and afterwards no block is held, as /metrics shows), and cache_salt
 * isolation (two salts never share a block).
 */
import { expect, test } from "bun:test";
import type { Completion } from "openai/resources/completions";
import { Xoshiro128 } from "../src/util/random.ts";
import { describeShared } from "./helpers/shared.ts";
import { complete, completeStreamed, metric, serveForSuite, waitIdle, type TestServer } from "./helpers/serve.ts";
import { TEXTS } from "./helpers/prefix.ts";

const STORIES = "models/gguf/stories260K.gguf";
/** Per-test limit: dozens of concurrent generations on a busy 2-core machine. */
const LIMIT_MS = 180_000;

describeShared("serve: continuous batching over HTTP", [STORIES], ([model]) => {
  let s!: TestServer;
  serveForSuite((started) => (s = started), LIMIT_MS, model!);

  test("a short request sent while a long one streams finishes first", async () => {
    const order: string[] = [];
    let started!: () => void;
    const streaming = new Promise<void>((resolve) => (started = resolve));
    const long = (async () => {
      const stream = await completeStreamed(s.client, { model: "test-model", prompt: "Once upon a time", max_tokens: 400, temperature: 0, ignore_eos: true, stream: true });
      let chunks = 0;
      for await (const _ of stream) {
        if (++chunks === 5) started();
      }
      order.push("long");
    })();
    await streaming;
    const short = await complete(s.client, { model: "test-model", prompt: "The dog", max_tokens: 4, temperature: 0, ignore_eos: true });
    order.push("short");
    await long;
    expect(short.usage!.completion_tokens).toBe(4);
    expect(order).toEqual(["short", "long"]);
  }, LIMIT_MS);

  test("greedy tokens and logprobs are bitwise the same alone and among 32 concurrent requests, cache cold and warm", async () => {
    const target = TEXTS[0]!;
    const others = Array.from({ length: 31 }, (_, i) => `${TEXTS[(i + 1) % TEXTS.length]} ${"and then ".repeat(i % 5)}${i}`);
    const ask = (prompt: string) =>
      complete(s.client, { model: "test-model", prompt, max_tokens: 24, temperature: 0, ignore_eos: true, logprobs: 0 });
    const tokensOf = (r: Completion) => JSON.stringify({ tokens: r.choices[0]!.logprobs!.tokens, logprobs: r.choices[0]!.logprobs!.token_logprobs });
    const cold = async () => {
      expect(await s.llm.client.resetPrefixCache()).toBe(true);
    };
    await waitIdle(s.url);
    await cold();
    const alone = await ask(target);
    expect(alone.usage!.prompt_tokens_details!.cached_tokens).toBe(0);
    const aloneWarm = await ask(target);
    expect(aloneWarm.usage!.prompt_tokens_details!.cached_tokens).toBeGreaterThan(0);
    expect(tokensOf(aloneWarm)).toBe(tokensOf(alone));
    await waitIdle(s.url);
    await cold();
    const batchCold = await Promise.all([target, ...others].map(ask));
    expect(batchCold[0]!.usage!.prompt_tokens_details!.cached_tokens).toBe(0);
    expect(tokensOf(batchCold[0]!)).toBe(tokensOf(alone));
    const batchWarm = await Promise.all([...others, target].map(ask));
    expect(batchWarm[31]!.usage!.prompt_tokens_details!.cached_tokens).toBeGreaterThan(0);
    expect(tokensOf(batchWarm[31]!)).toBe(tokensOf(alone));
    // The others too: each the same warm as cold.
    for (let i = 0; i < 31; i++) expect(tokensOf(batchWarm[i]!)).toBe(tokensOf(batchCold[i + 1]!));
  }, LIMIT_MS);

  test("64 streaming clients, a third disconnecting at random points: no 5xx, then no block held", async () => {
    const rng = new Xoshiro128(2024);
    const statuses: number[] = [];
    // Bad requests among them are refused alone and disturb nobody.
    const post = (path: string, body: string) => fetch(`${s.url}/v1/${path}`, { method: "POST", headers: { "Content-Type": "application/json" }, body }).then((r) => r.status);
    const badOnes = Promise.all([
      post("completions", "{not json"),
      post("completions", JSON.stringify({ prompt: "x", max_tokens: 1_000_000 })),
      post("chat/completions", JSON.stringify({ messages: [{ role: "user", content: "x" }], tools: [{ type: "function" }] })),
      post("completions", JSON.stringify({ prompt: [[1, 2], [999_999]] })),
      post("completions", JSON.stringify({ prompt: "x", model: "other" })),
      post("chat/completions", JSON.stringify({ messages: [] })),
    ]);
    const outcomes = await Promise.all(
      Array.from({ length: 64 }, async (_, i) => {
        const disconnectAfter = i % 3 === 0 ? 1 + Math.floor(rng.nextFloat() * 30) : Infinity;
        const controller = new AbortController();
        const res = await fetch(`${s.url}/v1/${i % 2 === 0 ? "completions" : "chat/completions"}`, {
          method: "POST",
          headers: { "Content-Type": "application/json" },
          body: JSON.stringify({
            model: "test-model", max_tokens: 40, temperature: 0.8, seed: i, stream: true, ignore_eos: true,
            ...(i % 2 === 0 ? { prompt: TEXTS[i % TEXTS.length] } : { messages: [{ role: "user", content: TEXTS[i % TEXTS.length] }] }),
          }),
          signal: controller.signal,
        });
        statuses.push(res.status);
        let events = 0;
        let text = "";
        const decoder = new TextDecoder();
        try {
          for await (const bytes of res.body!) {
            text += decoder.decode(bytes, { stream: true });
            events = text.split("\n\n").length - 1;
            if (events >= disconnectAfter) {
              controller.abort();
              return "disconnected";
            }
          }
        } catch (e) {
          if (controller.signal.aborted) return "disconnected";
          throw e;
        }
        expect(text.endsWith("data: [DONE]\n\n")).toBe(true);
        return "completed";
      }),
    );
    expect(statuses.every((st) => st === 200)).toBe(true);
    expect(await badOnes).toEqual([400, 400, 400, 400, 404, 400]);
    expect(outcomes.filter((o) => o === "completed").length).toBeGreaterThanOrEqual(64 - 22);
    await waitIdle(s.url);
    expect(await metric(s.url, "kv_cache_usage_perc")).toBe(0);
    expect(await metric(s.url, "request_success_total", 'finished_reason="abort"')).toBeGreaterThan(0);
  }, LIMIT_MS);

  test("cache_salt: a prompt is served from the cache within its salt only", async () => {
    const prompt = `${TEXTS[3]} ${TEXTS[4]}`;
    const ask = async (salt: string | undefined) => {
      const r = await complete(s.client, { model: "test-model", prompt, max_tokens: 2, temperature: 0, ...(salt ? { cache_salt: salt } : {}) });
      return r.usage!.prompt_tokens_details!.cached_tokens ?? -1;
    };
    await waitIdle(s.url);
    expect(await s.llm.client.resetPrefixCache()).toBe(true);
    expect(await ask("tenant-a")).toBe(0);
    const hitsBefore = await metric(s.url, "prefix_cache_hits_total");
    expect(await ask("tenant-b")).toBe(0);
    expect(await ask(undefined)).toBe(0);
    expect(await metric(s.url, "prefix_cache_hits_total")).toBe(hitsBefore);
    const again = await ask("tenant-a");
    expect(again).toBeGreaterThan(0);
    expect(await metric(s.url, "prefix_cache_hits_total")).toBe(hitsBefore + again);
    expect(await ask("tenant-b")).toBe(again);
  }, LIMIT_MS);

  test("cache_salt: salts that differ only where UTF-8 would write U+FFFD (lone surrogates) never share a block", async () => {
    const prompt = `${TEXTS[2]} ${TEXTS[4]}`;
    // The raw JSON escapes: a client's JSON.stringify writes a lone surrogate as \\udXXX.
    const ask = async (salt: string) => {
      const r = await complete(s.client, { model: "test-model", prompt, max_tokens: 2, temperature: 0, cache_salt: salt });
      return r.usage!.prompt_tokens_details!.cached_tokens ?? -1;
    };
    for (const [a, b] of [["\ud800", "\ufffd"], ["x\udbff", "x\ud800"]]) {
      await waitIdle(s.url);
      expect(await s.llm.client.resetPrefixCache()).toBe(true);
      expect(await ask(a!)).toBe(0);
      expect(await ask(b!)).toBe(0);
      expect(await ask(a!)).toBeGreaterThan(0);
    }
  }, LIMIT_MS);
});
