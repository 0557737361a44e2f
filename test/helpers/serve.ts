/**
 * A `pagellm serve` server inside the test process (the model loaded once, the server on
 * 127.0.0.1 and a free port), an `openai` client pointed at it, and readers of its /metrics.
 */
import { afterAll, beforeAll } from "bun:test";
import OpenAI from "openai";
import type { Completion, CompletionCreateParamsNonStreaming, CompletionCreateParamsStreaming } from "openai/resources/completions";
import type { EngineOptions } from "../../src/engine/engine-options.ts";
import { LLM } from "../../src/llm/llm.ts";
import { PagellmServer, type ServerOptions } from "../../src/server/server.ts";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { scriptedModel, type Script } from "./scripted-model.ts";
import { testThreads } from "./threads.ts";

export interface TestServer {
  llm: LLM;
  server: PagellmServer;
  url: string;
  client: OpenAI;
  close(): Promise<void>;
}

export async function startServer(
  model: string, opts: Partial<ServerOptions> = {}, engine: Partial<EngineOptions> = {}, chatTemplate?: string,
): Promise<TestServer> {
  const llm = LLM.load({ model, engine: { threads: testThreads(), ...engine }, chatTemplate });
  const server = new PagellmServer({
    host: "127.0.0.1", port: 0, apiKey: null, maxBodyBytes: 8 << 20, maxQueue: 256, logRequests: false, modelName: "test-model",
    log: () => {},
    ...opts,
  });
  server.ready(llm);
  const url = server.url;
  return {
    llm, server, url,
    client: openaiClient(url, opts.apiKey ?? "none"),
    async close() {
      await server.close();
      llm.close();
    },
  };
}

/**
 * A server for every test of the enclosing describe: started in its beforeAll (within limitMs, a
 * model load included), handed to `use`, and always stopped in its afterAll.
 */
export function serveForSuite(
  use: (started: TestServer) => void, limitMs: number, ...args: Parameters<typeof startServer>
): void {
  let started: TestServer | undefined;
  beforeAll(async () => {
    started = await startServer(...args);
    use(started);
  }, limitMs);
  afterAll(async () => {
    await started?.close();
  });
}

/**
 * A server on a scripted model (test/helpers/scripted-model.ts) for a describe's tests, the model
 * written into a temporary folder (removed after); none when ../shared lacks its vocabulary.
 */
export function serveScripted(script: Script, limitMs: number): { get: () => TestServer } {
  let server: TestServer | undefined;
  const dir = mkdtempSync(join(tmpdir(), "pagellm-scripted-"));
  beforeAll(async () => {
    const model = scriptedModel(dir, script);
    if (model !== null) server = await startServer(model.path);
  }, limitMs);
  afterAll(async () => {
    await server?.close();
    rmSync(dir, { recursive: true, force: true });
  });
  return { get: () => server! };
}

/** An openai client that never retries (a 429 or 5xx must surface as the error it is). */
export function openaiClient(url: string, apiKey = "none"): OpenAI {
  return new OpenAI({ baseURL: `${url}/v1`, apiKey, maxRetries: 0, timeout: 120_000 });
}

/** The value of a metric line `pagellm:NAME{...} VALUE` (the first whose labels include `labelPart`). */
export async function metric(url: string, name: string, labelPart = ""): Promise<number> {
  const text = await (await fetch(`${url}/metrics`)).text();
  for (const line of text.split("\n")) {
    if (line.startsWith(`pagellm:${name}{`) && line.includes(labelPart)) return Number(line.slice(line.lastIndexOf(" ") + 1));
  }
  throw new Error(`no metric pagellm:${name} ${labelPart} in /metrics`);
}

/** Waits until no request runs or waits and no KV block is held (aborts land one step later); throws after a deadline. */
export async function waitIdle(url: string): Promise<void> {
  for (let i = 0; i < 3000; i++) {
    const busy = (await metric(url, "num_requests_running")) + (await metric(url, "num_requests_waiting")) + (await metric(url, "kv_cache_blocks_in_use"));
    if (busy === 0) return;
    await Bun.sleep(10);
  }
  throw new Error("the server did not come back to idle (/metrics)");
}

/** Fields vLLM and llama.cpp add to OpenAI's (and pagellm serve takes), which the client passes through. */
export interface ServerExtensions {
  ignore_eos?: boolean;
  top_k?: number;
  min_p?: number;
  repetition_penalty?: number;
  repeat_penalty?: number;
  repeat_last_n?: number;
  cache_salt?: string;
}

/** A text completion with the server's extra fields (the client's types know only OpenAI's). */
export function complete(client: OpenAI, body: CompletionCreateParamsNonStreaming & ServerExtensions): Promise<Completion> {
  return client.completions.create(body);
}

/** The same, streamed. */
export function completeStreamed(client: OpenAI, body: CompletionCreateParamsStreaming & ServerExtensions) {
  return client.completions.create(body);
}
