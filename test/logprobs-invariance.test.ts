/**
 * Asking for log-probabilities never changes a single output token: the same
 * requests with and without `logprobs` (0 and some top alternatives) give the same token ids, text,
 * tool calls and finish reasons, over several seeds, constrained (a tool call whose constraint
 * forces tokens, a JSON Schema, a regular expression) and not, with n > 1, streamed, and with
 * speculative decoding on, and through a reasoning budget that forces `</think>`. A constraint that forces tokens (jump-forward: `{"name": "` after a
 * call opens) appends them without sampling; a logprobs request must take the same tokens without
 * a draw too, and still report one entry per token.
 */
import { expect, test } from "bun:test";
import { DEFAULT_SPECULATIVE } from "../src/engine/speculative.ts";
import type { GenerateRequest } from "../src/llm/generate-request.ts";
import type { CompletionResult } from "../src/llm/completion.ts";
import type { LLM } from "../src/llm/llm.ts";
import { openedLLMs } from "./helpers/llm.ts";
import { describeShared, sharedPath } from "./helpers/shared.ts";

const LIMIT_MS = 180_000;
const llms = openedLLMs({ afterEach: false });

const WEATHER = {
  type: "function" as const,
  function: {
    name: "get_weather", description: "w",
    parameters: {
      type: "object", properties: { city: { type: "string", maxLength: 20 }, unit: { type: "string", enum: ["c", "f"] } },
      required: ["city", "unit"], additionalProperties: false,
    },
  },
};
const ASK = [{ role: "user" as const, content: "weather in Paris?" }];
const SEEDS = [1, 2, 3, 7];

/** The requests each seed runs: a forced tool call, a schema, a regex, a plain one, and n = 2. */
function requests(seed: number): GenerateRequest[] {
  return [
    { messages: ASK, maxTokens: 64, seed, tools: [WEATHER], toolChoice: "required" },
    { messages: ASK, maxTokens: 48, seed, constraint: { kind: "json_schema", schema: { type: "object", properties: { answer: { type: "string" }, n: { type: "integer" } }, required: ["answer", "n"] } } },
    { prompt: "Date:", maxTokens: 24, seed, constraint: { kind: "regex", pattern: "20[0-9]{2}-(0[1-9]|1[0-2])-[0-3][0-9] is a (Monday|Tuesday)" } },
    { prompt: "Once upon a time", maxTokens: 24, seed, temperature: 1.2 },
    { messages: ASK, maxTokens: 40, seed, n: 2, tools: [WEATHER], toolChoice: "required" },
  ];
}

/** What must not depend on logprobs: everything but timings and the logprobs themselves (call ids are random). */
function outputOf(r: CompletionResult) {
  return { tokens: r.token_ids, text: r.text, finish: r.finish_reason, calls: r.tool_calls?.map((c) => c.function) ?? [], error: r.error };
}

async function streamedResults(llm: LLM, batch: readonly GenerateRequest[]): Promise<CompletionResult[]> {
  const done: CompletionResult[] = [];
  for await (const e of llm.stream(batch)) if (e.kind === "done") done.push(e.result);
  return done;
}

describeShared("logprobs never change the output", ["models/gguf/rnd-qwen2-Q5_K_M.gguf"], ([model]) => {
  const runs = (llm: LLM) => async (logprobs: number | undefined, streamed: boolean) => {
    const out: ReturnType<typeof outputOf>[] = [];
    for (const seed of SEEDS) {
      const batch = requests(seed).map((r, i) => ({ ...r, id: `s${seed}-${i}`, ...(logprobs === undefined ? {} : { logprobs }) }));
      const results = streamed ? await streamedResults(llm, batch) : await llm.generate(batch);
      results.sort((a, b) => a.id.localeCompare(b.id, "en", { numeric: true }) || (a.index ?? 0) - (b.index ?? 0));
      for (const r of results) {
        if (logprobs !== undefined) expect(r.logprobs?.length).toBe(r.completion_tokens);
        out.push(outputOf(r));
      }
    }
    return out;
  };

  test("the same tokens with logprobs 0 and 5 as without, constrained (forced tokens included) and not, n = 2, streamed", async () => {
    const run = runs(llms.load({ model: model! }));
    const without = await run(undefined, false);
    // The forced call makes the comparison bite: its constraint forces tokens a logprobs request must not draw for.
    expect(without.some((o) => o.calls.length > 0)).toBe(true);
    expect(await run(0, false)).toEqual(without);
    expect(await run(5, true)).toEqual(without);
    expect(await run(undefined, true)).toEqual(without);
  }, LIMIT_MS);

  test("a template that thinks, its reasoning budget forcing `</think>` before a schema: the same tokens with and without logprobs", async () => {
    const template = sharedPath("templates/Qwen-Qwen3-0.6B.jinja");
    if (template === null) return;
    const llm = llms.load({ model: model!, chatTemplate: template });
    const schema = { type: "object", properties: { ok: { type: "boolean" } }, required: ["ok"] };
    const batch = (logprobs: number | undefined) => SEEDS.map((seed) => ({
      id: `t${seed}`, messages: ASK, maxTokens: 48, seed, reasoningBudget: 6, constraint: { kind: "json_schema" as const, schema }, ...(logprobs === undefined ? {} : { logprobs }),
    }));
    const without = (await llm.generate(batch(undefined))).map(outputOf);
    expect(without.some((o) => o.tokens.length > 6)).toBe(true);
    expect((await llm.generate(batch(2))).map(outputOf)).toEqual(without);
  }, LIMIT_MS);

  test("with speculative decoding: the same tokens with and without logprobs", async () => {
    const run = runs(llms.load({ model: model!, engine: { speculative: { ...DEFAULT_SPECULATIVE, adaptive: false } } }));
    const without = await run(undefined, false);
    expect(await run(3, false)).toEqual(without);
  }, LIMIT_MS);
});
