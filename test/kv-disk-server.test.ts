/**
 * The disk KV cache behind `pagellm serve`: a second server over the same folder (a restart) serves
 * the first one's prompt from disk, and /metrics counts it (pagellm:prefix_cache_disk_hits_total,
 * bytes read and written).
 */
import { afterAll, expect, test } from "bun:test";
import { rmSync } from "node:fs";
import { LLM } from "../src/llm/llm.ts";
import { PagellmServer } from "../src/server/server.ts";
import { metric } from "./helpers/serve.ts";
import { describeShared } from "./helpers/shared.ts";
import { testThreads } from "./helpers/threads.ts";
import { TEXTS } from "./helpers/prefix.ts";
import { scratchDir } from "./helpers/kv-disk.ts";

const LIMIT_MS = 120_000;
const dir = scratchDir("serve");
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describeShared("pagellm serve with --kv-cache-dir", ["models/gguf/stories260K.gguf"], ([model]) => {
  /** One server lifetime: a completion request, its usage, the disk metrics; flushed and closed. */
  async function serveOnce(): Promise<{ text: string; cached: number; diskHits: number; read: number; written: number }> {
    const llm = LLM.load({ model: model!, engine: { threads: testThreads() }, kvCacheDir: dir });
    const server = new PagellmServer({
      host: "127.0.0.1", port: 0, apiKey: null, maxBodyBytes: 1 << 20, maxQueue: 16, logRequests: false, modelName: "m", log: () => {},
    });
    try {
      server.ready(llm);
      const response = await fetch(`${server.url}/v1/completions`, {
        method: "POST", headers: { "content-type": "application/json" },
        body: JSON.stringify({ model: "m", prompt: `${TEXTS[0]} ${TEXTS[1]}`, max_tokens: 8, temperature: 0 }),
      });
      expect(response.status).toBe(200);
      const body = (await response.json()) as { choices: { text: string }[]; usage: { prompt_tokens_details: { cached_tokens: number } } };
      await llm.flush();
      return {
        text: body.choices[0]!.text, cached: body.usage.prompt_tokens_details.cached_tokens,
        diskHits: await metric(server.url, "prefix_cache_disk_hits_total"),
        read: await metric(server.url, "prefix_cache_disk_read_bytes_total"),
        written: await metric(server.url, "prefix_cache_disk_written_bytes_total"),
      };
    } finally {
      await server.close();
      llm.close();
    }
  }

  test("a restarted server reads the prompt from disk; /metrics counts the hits and bytes", async () => {
    const first = await serveOnce();
    expect(first.cached).toBe(0);
    expect(first.diskHits).toBe(0);
    expect(first.written).toBeGreaterThan(0);
    const second = await serveOnce();
    expect(second.text).toBe(first.text);
    expect(second.cached).toBeGreaterThan(0);
    expect(second.diskHits).toBe(second.cached);
    expect(second.read).toBeGreaterThan(0);
    expect(second.written).toBe(0);
  }, LIMIT_MS);
});
