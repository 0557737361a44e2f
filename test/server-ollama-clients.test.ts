/**
 * The official `ollama` npm package against `pagellm serve` on the scripted weather model
 * (test/helpers/scripted-model.ts: it calls get_weather for Paris before a tool result and answers
 * "The weather in Paris is sunny." after one), under Bun and under Node: listing, chat with a tool
 * (the call's arguments as an object, whole and streamed, then the answer to its result), generate
 * whole and streamed, and a missing model raised as ollama's error. The clients are
 * test/fixtures/tool-clients/ollama-clients.mjs, run under Bun (imported here) and under Node
 * (`node ollama-clients.mjs URL`), with the same checks; both runtimes' results must also be equal.
 */
import { describe, expect, test } from "bun:test";
import { OLLAMA_CLIENTS } from "./fixtures/tool-clients/ollama-clients.mjs";
import { resultsUnderNode } from "./helpers/node-clients.ts";
import { WEATHER_SCRIPT } from "./helpers/scripted-model.ts";
import { serveScripted } from "./helpers/serve.ts";
import { sharedPath } from "./helpers/shared.ts";

const LIMIT_MS = 180_000;
const available = sharedPath("vocab/ggml-vocab-qwen2.gguf") !== null && sharedPath(WEATHER_SCRIPT.template) !== null;

type Results = { [K in keyof typeof OLLAMA_CLIENTS]: Awaited<ReturnType<(typeof OLLAMA_CLIENTS)[K]>> };

const CALL = { name: "get_weather", arguments: { city: "Paris" } };

const CHECKS: { [K in keyof Results]: (r: Results[K]) => void } = {
  ollamaListing: (r) => {
    const [major, minor] = r.version.split(".").map(Number) as [number, number];
    expect(major * 1000 + minor).toBeGreaterThanOrEqual(6);
    expect(r.names).toEqual(["test-model:latest"]);
    expect(r.details).toMatchObject({ format: "gguf", family: "qwen2" });
    expect(r.capabilities).toEqual(["completion", "tools"]);
    expect(r.contextLength).toBeGreaterThan(0);
    expect(r.loaded).toEqual(["test-model:latest"]);
  },
  ollamaChatTools: (r) => {
    expect(r.calls).toEqual([expect.objectContaining(CALL) as never]);
    expect(r.firstDone).toBe("stop");
    expect(r.streamedCalls).toEqual([expect.objectContaining(CALL) as never]);
    expect(r.answer).toBe(WEATHER_SCRIPT.afterResult);
    expect(r.streamedAnswer).toBe(r.answer);
    expect(r.evalCount).toBeGreaterThan(0);
  },
  ollamaGenerate: (r) => {
    expect(r.streamed).toBe(r.response);
    expect(r.promptEvalCount).toBeGreaterThan(0);
    expect(r.evalCount).toBeGreaterThan(0);
    expect(["stop", "length"]).toContain(r.lastDone!);
  },
  ollamaMissingModel: (r) => {
    expect(r).toEqual({ status: 404, message: "model 'missing' not found" });
  },
};

describe.skipIf(!available)("the ollama package against the server, under Bun and Node", () => {
  const s = serveScripted(WEATHER_SCRIPT, LIMIT_MS);
  const underBun: Partial<Results> = {};

  for (const name of Object.keys(OLLAMA_CLIENTS) as (keyof Results)[]) {
    test(`${name}, under Bun`, async () => {
      const result = await OLLAMA_CLIENTS[name](s.get().url);
      (CHECKS[name] as (r: unknown) => void)(result);
      (underBun as Record<string, unknown>)[name] = result;
    }, LIMIT_MS);
  }

  test("every client under Node (node ollama-clients.mjs URL): the same checks, and the same results as under Bun", async () => {
    const results = await resultsUnderNode("ollama-clients.mjs", s.get().url, LIMIT_MS);
    for (const name of Object.keys(OLLAMA_CLIENTS) as (keyof Results)[]) {
      (CHECKS[name] as (r: unknown) => void)(results[name]);
      if (underBun[name] !== undefined) expect({ name, result: results[name] }).toEqual({ name, result: underBun[name] });
    }
  }, LIMIT_MS);
});
