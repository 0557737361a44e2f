/**
 * `pagellm serve` with several models (--models-dir, --models-preset, --memory-budget), in the test
 * process on a fake clock: three stories260K quantizations in a temporary models folder under a
 * budget that holds two (measured from each model served alone), so the least recently used is
 * evicted and loaded again; two models' requests at once; each model's output bit for bit that of
 * the model served alone; a model too large for the budget refused with the figures; keep_alive
 * 0 and durations; a corrupt file failing only its own requests; num_ctx never reloading and a
 * prompt over a model's context refused with the limit; the disk KV tier serving a model loaded
 * again; the listings (/v1/models, /api/tags, /api/ps) and /metrics per model; unknown models
 * answered 404 in each route family's shape.
 */
import { afterAll, beforeAll, expect, test } from "bun:test";
import { copyFileSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { manyModels } from "../src/cli/serve-models.ts";
import { DEFAULT_ENGINE_OPTIONS } from "../src/engine/engine-options.ts";
import type { LLM } from "../src/llm/llm.ts";
import { estimateModelBytes } from "../src/server/models/model-memory.ts";
import type { ModelRegistry } from "../src/server/models/registry.ts";
import { PagellmServer } from "../src/server/server.ts";
import { FakeClock } from "./helpers/fake-clock.ts";
import { metric, startServer } from "./helpers/serve.ts";
import { describeShared } from "./helpers/shared.ts";
import { testThreads } from "./helpers/threads.ts";
import { TEXTS } from "./helpers/prefix.ts";

const LIMIT_MS = 240_000;
const QUANTS = ["Q8_0", "F16", "Q4_0"] as const;
const NAMES = QUANTS.map((q) => `stories260K-${q}`);
const KV_MB = 8;
const PROMPT = `${TEXTS[0]} ${TEXTS[1]}`;

interface Completion {
  text: string;
  cached: number;
}

async function post(url: string, path: string, body: unknown): Promise<Response> {
  return fetch(`${url}${path}`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
}

async function complete(url: string, model: string, prompt = PROMPT): Promise<Completion> {
  const r = await post(url, "/v1/completions", { model, prompt, max_tokens: 16, temperature: 0 });
  const body = (await r.json()) as { choices: { text: string }[]; usage: { prompt_tokens_details: { cached_tokens: number } }; error?: { message: string } };
  if (r.status !== 200) throw new Error(`${model}: ${r.status} ${JSON.stringify(body)}`);
  return { text: body.choices[0]!.text, cached: body.usage.prompt_tokens_details.cached_tokens };
}

/** The streamed text of a chat completion (server-sent events). */
async function streamedChat(url: string, model: string): Promise<string> {
  const r = await post(url, "/v1/chat/completions", { model, messages: [{ role: "user", content: "Tell me a story" }], max_tokens: 16, temperature: 0, stream: true });
  expect(r.status).toBe(200);
  let text = "";
  for (const line of (await r.text()).split("\n")) {
    if (!line.startsWith("data: ") || line === "data: [DONE]") continue;
    const chunk = JSON.parse(line.slice(6)) as { choices: { delta: { content?: string } }[] };
    text += chunk.choices[0]?.delta.content ?? "";
  }
  return text;
}

async function states(url: string): Promise<Record<string, string>> {
  const body = (await (await fetch(`${url}/v1/models`)).json()) as { data: { id: string; status: { value: string } }[] };
  return Object.fromEntries(body.data.map((m) => [m.id, m.status.value]));
}

/** Whether `name` is unloaded within a few seconds (an unload writes its disk blocks first, on real time). */
async function unloadedSoon(url: string, name: string): Promise<boolean> {
  for (let i = 0; i < 500; i++) {
    if ((await states(url))[name] === "unloaded") return true;
    await Bun.sleep(10);
  }
  return false;
}

describeShared("pagellm serve with several models", QUANTS.map((q) => `models/gguf/stories260K-${q}.gguf`), (files) => {
  const dir = mkdtempSync(join(tmpdir(), "pagellm-models-"));
  const modelsDir = join(dir, "models");
  const kvDir = join(dir, "kv");
  const clock = new FakeClock();
  const alone = new Map<string, { completion: Completion; chat: string; bytes: number }>();
  let server: PagellmServer;
  let registry: ModelRegistry<LLM>;
  let url: string;
  let budget: number;

  beforeAll(async () => {
    mkdirSync(modelsDir);
    files.forEach((f, i) => copyFileSync(f!, join(modelsDir, `${NAMES[i]}.gguf`)));
    // Not a model at all: it fails its own requests only.
    writeFileSync(join(modelsDir, "broken.gguf"), Buffer.concat([Buffer.from("GGUF"), Buffer.alloc(64, 0xff)]));
    const engine = { threads: testThreads(), kvCacheMb: KV_MB };
    // Each model served alone: its outputs, and what it holds once loaded.
    let maxBytes = 0;
    let minBytes = Infinity;
    let maxEstimate = 0;
    let minEstimate = Infinity;
    for (const [i, name] of NAMES.entries()) {
      const s = await startServer(files[i]!, { modelName: name }, engine);
      try {
        const bytes = s.llm.stats().memoryBytes;
        alone.set(name, { completion: await complete(s.url, name), chat: await streamedChat(s.url, name), bytes });
        maxBytes = Math.max(maxBytes, bytes);
        minBytes = Math.min(minBytes, bytes);
      } finally {
        await s.close();
      }
      const estimate = estimateModelBytes(files[i]!, { ...DEFAULT_ENGINE_OPTIONS, ...engine });
      maxEstimate = Math.max(maxEstimate, estimate);
      minEstimate = Math.min(minEstimate, estimate);
    }
    // Room for one loaded model and another's load, never for two loaded and a third's.
    expect(maxBytes + maxEstimate).toBeLessThan(2 * minBytes + minEstimate);
    budget = Math.floor((maxBytes + maxEstimate + 2 * minBytes + minEstimate) / 2);
    const preset = join(dir, "preset.toml");
    writeFileSync(preset, [
      "[\"*\"]", `threads = ${testThreads()}`, "",
      `["stories260K-Q8_0"]`, `aliases = ["tiny"]`, "",
      `["short"]`, `model = "models/${NAMES[0]}.gguf"`, "ctx-size = 64", "",
      `["huge"]`, `model = "models/${NAMES[0]}.gguf"`, "kv-cache-mb = 512", "ctx-size = 2048", "",
    ].join("\n"));
    const values = {
      "models-dir": modelsDir, "models-preset": preset, "memory-budget": `${budget / 2 ** 20}M`, "kv-cache-mb": String(KV_MB), "keep-alive": "-1",
      "kv-cache-dir": kvDir, device: "wasm",
    };
    registry = manyModels(values, [], 16, clock).registry;
    server = new PagellmServer({ host: "127.0.0.1", port: 0, apiKey: null, maxBodyBytes: 1 << 20, maxQueue: 16, logRequests: false, modelName: "", log: () => {} });
    server.readyMany(registry);
    url = server.url;
  }, LIMIT_MS);

  afterAll(async () => {
    await server?.close();
    await registry?.closeAll();
    rmSync(dir, { recursive: true, force: true });
  });

  test("every model is listed, none loaded; the corrupt file is listed too", async () => {
    expect(await states(url)).toEqual({ broken: "unloaded", huge: "unloaded", short: "unloaded", ...Object.fromEntries(NAMES.map((n) => [n, "unloaded"])) });
    const tags = (await (await fetch(`${url}/api/tags`)).json()) as { models: { name: string; details: { quantization_level: string } }[] };
    const q8 = tags.models.find((m) => m.name === "stories260K-Q8_0:latest");
    expect(q8?.details.quantization_level).toBe("Q8_0");
  }, LIMIT_MS);

  test("under a budget that holds two, the least recently used is evicted and loaded again; outputs are each model's served alone", async () => {
    const [a, b, c] = NAMES as [string, string, string];
    expect(await complete(url, a)).toEqual(alone.get(a)!.completion);
    expect(await complete(url, b)).toEqual(alone.get(b)!.completion);
    expect(await states(url)).toMatchObject({ [a]: "loaded", [b]: "loaded", [c]: "unloaded" });
    await complete(url, b); // b the more recent
    expect((await complete(url, c)).text).toBe(alone.get(c)!.completion.text);
    expect(await states(url)).toMatchObject({ [a]: "unloaded", [b]: "loaded", [c]: "loaded" });
    expect(registry.usedBytes).toBeLessThanOrEqual(budget);
    // a again: b is now the least recently used. From the disk tier, its prompt's blocks are cached.
    const again = await complete(url, a);
    expect(again.text).toBe(alone.get(a)!.completion.text);
    expect(again.cached).toBeGreaterThan(0);
    expect(registry.statusOf(a).loads).toBe(2);
    expect(await states(url)).toMatchObject({ [a]: "loaded", [b]: "unloaded", [c]: "loaded" });
    expect(await metric(url, "model_loads_total", `model="${a}"`)).toBe(2);
    expect((await (await fetch(`${url}/metrics`)).text()).split("\n")).toContain(`pagellm:memory_budget_bytes ${budget}`);
  }, LIMIT_MS);

  test("requests for two models at once are both served, streamed, each as served alone", async () => {
    const [a, , c] = NAMES as [string, string, string];
    const [x, y] = await Promise.all([streamedChat(url, a), streamedChat(url, c)]);
    expect(x).toBe(alone.get(a)!.chat);
    expect(y).toBe(alone.get(c)!.chat);
    // An alias names the same model.
    expect((await complete(url, "tiny")).text).toBe(alone.get(a)!.completion.text);
    const text = await (await fetch(`${url}/metrics`)).text();
    expect(text).toContain(`pagellm:kv_cache_num_blocks{model_name="${a}",model="${a}"}`);
    expect(text).toContain(`pagellm:num_requests_waiting{model_name="${c}",model="${c}"}`);
    expect(text.match(/^# TYPE pagellm:kv_cache_num_blocks /gm)?.length).toBe(1);
  }, LIMIT_MS);

  test("a model that cannot fit even alone is refused with what it needs and the budget; nothing is unloaded for it", async () => {
    const before = await states(url);
    const r = await post(url, "/v1/completions", { model: "huge", prompt: "Once", max_tokens: 2 });
    expect(r.status).toBe(400);
    const body = (await r.json()) as { error: { message: string; code: string } };
    expect(body.error.code).toBe("model_exceeds_memory_budget");
    expect(body.error.message).toMatch(/model 'huge' needs \d+\.\d MiB, more than the memory budget of \d+\.\d MiB/);
    expect(body.error.message).toContain(`${(budget / 2 ** 20).toFixed(1)} MiB`);
    expect(await states(url)).toEqual(before);
  }, LIMIT_MS);

  test("a corrupt file fails its own requests, naming no path; the other models keep serving", async () => {
    const r = await post(url, "/v1/completions", { model: "broken", prompt: "Once", max_tokens: 2 });
    expect(r.status).toBe(500);
    const body = (await r.json()) as { error: { message: string; code: string } };
    expect(body.error.code).toBe("model_load_failed");
    expect(body.error.message).toContain("model 'broken' failed to load");
    expect(body.error.message).not.toContain(dir);
    const ollama = await post(url, "/api/generate", { model: "broken", prompt: "Once", stream: false });
    expect(ollama.status).toBe(500);
    expect(Object.keys((await ollama.json()) as object)).toEqual(["error"]);
    expect((await states(url)).broken).toBe("failed");
    expect((await complete(url, NAMES[2]!)).text).toBe(alone.get(NAMES[2]!)!.completion.text);
  }, LIMIT_MS);

  test("a model's context is fixed at load: num_ctx never reloads it; a prompt over it is refused with the limit", async () => {
    const loads = registry.statusOf("short").loads;
    const ok = await post(url, "/api/generate", { model: "short", prompt: "Once", stream: false, options: { num_ctx: 8192, num_predict: 4, temperature: 0 } });
    expect(ok.status).toBe(200);
    await post(url, "/api/generate", { model: "short", prompt: "Once", stream: false, options: { num_ctx: 512, num_predict: 4, temperature: 0 } });
    expect(registry.statusOf("short").loads).toBe(loads + 1);
    const long = await post(url, "/api/generate", { model: "short", prompt: PROMPT, stream: false, options: { num_predict: 4 } });
    expect(long.status).toBe(400);
    expect(((await long.json()) as { error: string }).error).toContain("64");
    const openai = await post(url, "/v1/completions", { model: "short", prompt: PROMPT, max_tokens: 4 });
    expect(openai.status).toBe(400);
    expect(((await openai.json()) as { error: { code: string } }).error.code).toBe("context_length_exceeded");
  }, LIMIT_MS);

  test("keep_alive: an empty prompt loads; a duration unloads when it runs out (fake clock); 0 unloads", async () => {
    const name = NAMES[1]!;
    const loadOnly = await post(url, "/api/generate", { model: name, keep_alive: "1m" });
    expect(((await loadOnly.json()) as { done_reason: string }).done_reason).toBe("load");
    expect((await states(url))[name]).toBe("loaded");
    const ps = (await (await fetch(`${url}/api/ps`)).json()) as { models: { name: string; expires_at: string; size: number }[] };
    const entry = ps.models.find((m) => m.name === `${name}:latest`)!;
    expect(Date.parse(entry.expires_at)).toBe(clock.now() + 60_000);
    expect(entry.size).toBe(registry.statusOf(name).bytes!);
    await clock.advance(59_999);
    expect((await states(url))[name]).toBe("loaded");
    await clock.advance(1);
    expect(await unloadedSoon(url, name)).toBe(true);

    // A prompt with keep_alive 0: answered, then unloaded.
    const once = await post(url, "/api/generate", { model: name, prompt: "Once", keep_alive: 0, stream: false, options: { num_predict: 2 } });
    expect(once.status).toBe(200);
    await once.json();
    expect(await unloadedSoon(url, name)).toBe(true);

    // An empty chat with keep_alive 0 unloads a loaded model without a request running on it.
    await complete(url, name);
    const unload = await post(url, "/api/chat", { model: name, messages: [], keep_alive: 0 });
    expect(((await unload.json()) as { done_reason: string }).done_reason).toBe("unload");
    expect((await states(url))[name]).toBe("unloaded");
  }, LIMIT_MS);

  test("POST /models/load and /models/unload", async () => {
    const name = NAMES[1]!;
    const load = await post(url, "/models/load", { model: name });
    expect(load.status).toBe(200);
    expect(await load.json()).toMatchObject({ success: true, status: "loaded" });
    const unload = await post(url, "/models/unload", { model: name });
    expect(await unload.json()).toMatchObject({ success: true, was_loaded: true, status: "unloaded" });
    expect((await post(url, "/models/load", { model: "nope" })).status).toBe(404);
    expect((await post(url, "/models/load", {})).status).toBe(400);
  }, LIMIT_MS);

  test("an unknown model is a 404 in each route family's shape; a request naming none is a 400", async () => {
    const openai = await post(url, "/v1/chat/completions", { model: "nope", messages: [{ role: "user", content: "hi" }] });
    expect(openai.status).toBe(404);
    expect(((await openai.json()) as { error: { code: string } }).error.code).toBe("model_not_found");
    const anthropic = await post(url, "/v1/messages", { model: "nope", max_tokens: 4, messages: [{ role: "user", content: "hi" }] });
    expect(anthropic.status).toBe(404);
    expect(((await anthropic.json()) as { type: string }).type).toBe("error");
    const ollama = await post(url, "/api/chat", { model: "nope", messages: [{ role: "user", content: "hi" }] });
    expect(ollama.status).toBe(404);
    expect(await ollama.json()).toEqual({ error: "model 'nope' not found" });
    const none = await post(url, "/v1/completions", { prompt: "hi" });
    expect(none.status).toBe(400);
    expect((await fetch(`${url}/v1/models/${encodeURIComponent(NAMES[0]!)}`)).status).toBe(200);
    expect((await fetch(`${url}/v1/models/nope`)).status).toBe(404);
  }, LIMIT_MS);
});
