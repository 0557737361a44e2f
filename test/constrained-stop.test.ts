/**
 * Stop strings under a constraint: `finish_reason: "stop"` means a constrained
 * output parses and matches (docs/structured-output.md), so a stop string ends constrained output
 * only where the constraint may end; where it would cut the output short (a "\n" of pretty JSON,
 * the "," between two properties) it is text like any other. On a random-weight model, over
 * several seeds: JSON Schema with stop strings the JSON writes, every "stop" output valid; a
 * regex of words with stop " ", cut at a word's end where the regex may end; a forced tool call
 * with stop "\n", whose call comes whole; a json_schema chat request with stop "\n" over HTTP. Stop strings still cut
 * unconstrained output as before.
 */
import { expect, test } from "bun:test";
import Ajv from "ajv";
import type { CompletionResult } from "../src/llm/completion.ts";
import type { GenerateRequest } from "../src/llm/generate-request.ts";
import { openedLLMs } from "./helpers/llm.ts";
import { startServer } from "./helpers/serve.ts";
import { describeShared } from "./helpers/shared.ts";

const LIMIT_MS = 180_000;
const llms = openedLLMs({ afterEach: false });
const SEEDS = [1, 2, 3, 4, 5, 6];

const SCHEMA = {
  type: "object", properties: { a: { type: "string", maxLength: 8 }, n: { type: "integer", minimum: 0, maximum: 999 } },
  required: ["a", "n"], additionalProperties: false,
};
const validSchema = new Ajv().compile(SCHEMA);
const WORDS = "[a-z]{1,6}( [a-z]{1,6}){0,12}";
const ASK = [{ role: "user" as const, content: "json" }];

function eachSeed(request: GenerateRequest): GenerateRequest[] {
  return SEEDS.map((seed) => ({ ...request, seed }));
}

/** Whether a "stop" output is whole; its text for the failure message. */
function parses(r: CompletionResult): [string, boolean] {
  try {
    return [r.text, validSchema(JSON.parse(r.text))];
  } catch {
    return [r.text, false];
  }
}

describeShared("stop strings under a constraint", ["models/gguf/rnd-qwen2-Q5_K_M.gguf"], ([model]) => {
  test("JSON Schema: a stop string inside the JSON does not cut it; every \"stop\" output parses and validates", async () => {
    const llm = llms.load({ model: model! });
    let stopped = 0;
    for (const stop of [["\n"], [","], ['"'], ["}"], [":", "\n\n"]]) {
      const results = await llm.generate(eachSeed({ messages: ASK, maxTokens: 160, stop, constraint: { kind: "json_schema", schema: SCHEMA } }));
      for (const r of results) {
        expect(["stop", "length"]).toContain(r.finish_reason);
        if (r.finish_reason !== "stop") continue;
        stopped++;
        expect(parses(r)).toEqual([r.text, true]);
      }
    }
    // The random model writes whitespace for long; enough of them finish to make the check bite.
    expect(stopped).toBeGreaterThan(5);
  }, LIMIT_MS);

  test("a regex of words with stop \" \": cut at a word's end, where the regex may end; unconstrained text is cut as before", async () => {
    const llm = llms.load({ model: model! });
    const constrained = await llm.generate(eachSeed({ prompt: "Words:", maxTokens: 40, stop: [" "], constraint: { kind: "regex", pattern: WORDS } }));
    const wholeWords = new RegExp(`^(?:${WORDS})$`);
    let cut = 0;
    for (const r of constrained) {
      if (r.finish_reason !== "stop") continue;
      expect([r.text, wholeWords.test(r.text)]).toEqual([r.text, true]);
      if (!r.text.includes(" ")) cut++;
    }
    // The stop string still ends constrained output where the output may end.
    expect(cut).toBeGreaterThan(0);
    const free = await llm.generate(eachSeed({ prompt: "Once upon a time", maxTokens: 40, stop: [" "], temperature: 1 }));
    for (const r of free) if (r.finish_reason === "stop") expect(r.text).not.toContain(" ");
    expect(free.some((r) => r.finish_reason === "stop")).toBe(true);
  }, LIMIT_MS);

  test("a forced tool call with stop \"\\n\": the call comes whole", async () => {
    const llm = llms.load({ model: model! });
    const tool = { type: "function" as const, function: { name: "get_weather", parameters: { type: "object", properties: { unit: { type: "string", enum: ["c", "f"] } }, required: ["unit"], additionalProperties: false } } };
    const results = await llm.generate(eachSeed({ messages: ASK, maxTokens: 120, stop: ["\n"], tools: [tool], toolChoice: "required", parallelToolCalls: false }));
    let called = 0;
    for (const r of results) {
      if (r.finish_reason === "length") continue;
      expect(r.finish_reason).toBe("tool_calls");
      called++;
      expect(JSON.parse(r.tool_calls![0]!.function.arguments)).toMatchObject({ unit: expect.stringMatching(/^[cf]$/) });
    }
    expect(called).toBeGreaterThan(0);
  }, LIMIT_MS);

  test("over HTTP: json_schema with stop \"\\n\" never answers \"stop\" with text that does not parse", async () => {
    const server = await startServer(model!);
    try {
      for (const seed of SEEDS) {
        const body = { messages: ASK, max_tokens: 160, seed, stop: ["\n"], response_format: { type: "json_schema", json_schema: { name: "x", schema: SCHEMA } } };
        const res = await fetch(`${server.url}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
        const choice = ((await res.json()) as { choices: { message: { content: string }; finish_reason: string }[] }).choices[0]!;
        if (choice.finish_reason === "stop") expect(validSchema(JSON.parse(choice.message.content))).toBe(true);
        else expect(choice.finish_reason).toBe("length");
      }
    } finally {
      await server.close();
    }
  }, LIMIT_MS);
});
