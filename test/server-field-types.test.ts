/**
 * The fields `pagellm serve` takes and does not use, and the prompts it cannot run: each has
 * the type OpenAI gives it or is a 400 naming it; a message's `name` is a string and reaches a
 * Jinja template as transformers passes it; a seed past the 64-bit signed range is
 * refused; an empty prompt on a model without BOS is a 400 naming the prompt (no internal request
 * id in the message), an empty prompt array says so, and an echoed prompt's log-probabilities have
 * one entry per token.
 */
import { afterAll, beforeAll, expect, test } from "bun:test";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { LLM } from "../src/llm/llm.ts";
import { servePoster, type Answer } from "./helpers/serve-poster.ts";
import { describeShared } from "./helpers/shared.ts";
import { testThreads } from "./helpers/threads.ts";

const STORIES = "models/gguf/stories260K.gguf";
/** A model whose tokenizer adds no BOS: an empty text is no tokens at all. */
const QWEN2 = "models/gguf/rnd-qwen2-Q5_K_M.gguf";
/** Per-test limit: model loads and a few one-token generations on a busy 2-core machine. */
const LIMIT_MS = 120_000;

interface ErrorBody {
  error: { message: string; type: string; param: string | null; code: string | null };
}

/** The param of a 400 (throws on anything else). */
function paramOf(a: Answer): string | null {
  if (a.status !== 400) throw new Error(`expected a 400, got ${a.status}: ${JSON.stringify(a.body).slice(0, 300)}`);
  return (a.body as unknown as ErrorBody).error.param;
}

function messageOf(a: Answer): string {
  return (a.body as unknown as ErrorBody).error.message;
}

describeShared("serve: the types of unused fields, names, seeds", [STORIES], ([model]) => {
  const post = servePoster(() => LLM.load({ model: model!, engine: { threads: testThreads() } }), LIMIT_MS);
  const completion = (extra: Record<string, unknown>) => post("/v1/completions", { prompt: "Once", max_tokens: 1, ...extra });
  const chat = (extra: Record<string, unknown>) => post("/v1/chat/completions", { messages: [{ role: "user", content: "Hi" }], max_tokens: 1, ...extra });

  test("user, metadata, store, service_tier and parallel_tool_calls: OpenAI's types or a 400 naming them; their values change nothing", async () => {
    const bad: [Record<string, unknown>, string][] = [
      [{ user: 5 }, "user"], [{ metadata: [1] }, "metadata"], [{ metadata: "x" }, "metadata"], [{ metadata: { tier: 1 } }, "metadata.tier"],
      [{ store: "x" }, "store"], [{ service_tier: 5 }, "service_tier"],
    ];
    for (const [fields, param] of bad) {
      expect(paramOf(await completion(fields))).toBe(param);
      expect(paramOf(await chat(fields))).toBe(param);
    }
    expect(paramOf(await chat({ parallel_tool_calls: "x" }))).toBe("parallel_tool_calls");
    const long = "k".repeat(100_000);
    const quoted = await completion({ metadata: { [long]: 1 } });
    expect(paramOf(quoted)!.length).toBeLessThan(200);
    expect(messageOf(quoted).length).toBeLessThan(600);

    const plain = await completion({ temperature: 0 });
    const good = { user: "u-1", metadata: { tier: "gold" }, store: false, service_tier: "auto", temperature: 0 };
    const withFields = await completion(good);
    expect(withFields.status).toBe(200);
    expect((withFields.body.choices as unknown[])[0]).toEqual((plain.body.choices as unknown[])[0]);
    expect((await chat({ ...good, parallel_tool_calls: true })).status).toBe(200);
    // null is absent, as for every field.
    expect((await completion({ user: null, metadata: null, store: null })).status).toBe(200);
  }, LIMIT_MS);

  test("messages[].name and refusal: strings or a 400 naming them", async () => {
    const named = (message: Record<string, unknown>) => post("/v1/chat/completions", { messages: [message], max_tokens: 1 });
    expect(paramOf(await named({ role: "user", content: "Hi", name: 5 }))).toBe("messages[0].name");
    expect(paramOf(await named({ role: "user", content: "Hi", name: ["Ann"] }))).toBe("messages[0].name");
    expect(paramOf(await post("/v1/chat/completions", {
      messages: [{ role: "user", content: "Hi" }, { role: "assistant", content: "Yes", refusal: 1 }, { role: "user", content: "Go" }], max_tokens: 1,
    }))).toBe("messages[1].refusal");
    expect((await named({ role: "user", content: "Hi", name: "Ann" })).status).toBe(200);
    expect((await named({ role: "user", content: "Hi", name: null })).status).toBe(200);
  }, LIMIT_MS);

  test("seed: a 64-bit signed integer, as vLLM takes it; 2^64 - 2^11 and -2^63 - 2^11 are 400s naming seed", async () => {
    // Doubles next to the bounds. JSON.stringify writes -2^63 as -9223372036854776000, past the
    // bound in its digits, which are checked (the bounds' own digits: server-field-values.test.ts).
    for (const seed of [2 ** 63 - 1024, -(2 ** 63) + 1024, 0]) expect((await completion({ seed })).status).toBe(200);
    for (const seed of [2 ** 64 - 2048, 2 ** 64, -(2 ** 63), -(2 ** 63) - 2048, 1.5]) expect(paramOf(await completion({ seed }))).toBe("seed");
  }, LIMIT_MS);

  test("an empty prompt array has its own message; an echoed empty prompt (BOS only) has one log-probability entry per token", async () => {
    const empty = await completion({ prompt: [] });
    expect(paramOf(empty)).toBe("prompt");
    expect(messageOf(empty)).toBe("'prompt' is an empty array: give at least one prompt");
    const echoed = await completion({ prompt: "", echo: true, logprobs: 1, max_tokens: 0 });
    expect(echoed.status).toBe(200);
    const logprobs = (echoed.body.choices as { logprobs: Record<string, unknown[]> }[])[0]!.logprobs;
    expect(logprobs.tokens!.length).toBe(1);
    for (const key of ["token_logprobs", "top_logprobs", "text_offset"]) expect(logprobs[key]!.length).toBe(logprobs.tokens!.length);
    expect(logprobs.token_logprobs).toEqual([null]);
  }, LIMIT_MS);
});

describeShared("serve: an empty prompt on a model without BOS", [QWEN2], ([model]) => {
  const post = servePoster(() => LLM.load({ model: model!, engine: { threads: testThreads() } }), LIMIT_MS);

  test("is a 400 naming the prompt (prompt[i] among several), with no internal request id; echo with max_tokens 0 too", async () => {
    const cases: [Record<string, unknown>, string][] = [
      [{ prompt: "" }, "prompt"], [{ prompt: ["Hi", ""] }, "prompt[1]"], [{ prompt: "", echo: true, logprobs: 2, max_tokens: 0 }, "prompt"],
      [{ prompt: "", stream: true }, "prompt"],
    ];
    for (const [body, param] of cases) {
      const a = await post("/v1/completions", { max_tokens: 1, ...body });
      expect(paramOf(a)).toBe(param);
      expect(messageOf(a)).toBe(`'${param}' is empty, and this model adds no BOS token: there is no token to start from`);
      expect(messageOf(a)).not.toContain("req-");
    }
    expect((await post("/v1/completions", { prompt: "Hi", max_tokens: 1 })).status).toBe(200);
  }, LIMIT_MS);
});

describeShared("a message's name reaches a Jinja template", [STORIES], ([model]) => {
  let dir = "";
  let llm: LLM | undefined;
  beforeAll(() => {
    dir = mkdtempSync(join(tmpdir(), "pagellm-name-template-"));
    const template = join(dir, "named.jinja");
    writeFileSync(template, "{% for m in messages %}{{ m.role }}{% if m.name %} ({{ m.name }}){% endif %}: {{ m.content }}\n{% endfor %}{% if add_generation_prompt %}assistant:{% endif %}");
    llm = LLM.load({ model: model!, engine: { threads: testThreads() }, chatTemplate: template });
  }, LIMIT_MS);
  afterAll(() => {
    llm?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  test("as transformers passes it; a message without one renders as before", () => {
    const text = (messages: { role: string; content: string; name?: string }[]) => llm!.tokenizer.decode([...llm!.client.prepare({ messages }).promptTokenIds]);
    expect(text([{ role: "system", content: "Be kind." }, { role: "user", content: "Hi", name: "Ann" }])).toContain("user (Ann): Hi\nassistant:");
    expect(text([{ role: "user", content: "Hi" }])).toContain("user: Hi\nassistant:");
    expect(() => llm!.client.prepare({ messages: [{ role: "user", content: "Hi", name: 5 as unknown as string }] })).toThrow("messages[0].name");
  });
});
