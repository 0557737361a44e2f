/**
 * Errors name the field at fault and never show a path of the
 * server's disk; values of the wrong type or range are a 400 naming the field, and the values
 * llama.cpp gives a meaning are taken with it.
 *
 * - Field at fault: `chat_template_kwargs` may not set the template's own variables (`tools`,
 *   `messages`, ...); a tool without the description a template writes (Hermes' tool_use
 *   template: `" - " + tool.description`) names that tool's description, on every route in its
 *   own spelling.
 * - No paths: template errors and `context_length_exceeded` messages name the served model, not
 *   its file or the template file.
 * - Values: `messages[].reasoning_content` a string; `seed` a 64-bit signed integer checked on its
 *   digits (-2^63 - 1 and 2^63 parse to doubles inside the range); `reasoning_budget` -1 (no
 *   bound), 0 (the reasoning closes at once) or a budget up to 2^31 - 1, on the routes, in a JSONL
 *   line and as `--reasoning-budget`; Anthropic's `tool_result.is_error` a boolean,
 *   `metadata.user_id` a string, text blocks' `citations` refused; the Responses API's
 *   `text.verbosity` low/medium/high and `temperature` 0 to 2.
 */
import { afterAll, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { LLM } from "../src/llm/llm.ts";
import { runPagellm } from "./helpers/cli.ts";
import { THINKING_SCRIPT } from "./helpers/scripted-model.ts";
import { serveScripted } from "./helpers/serve.ts";
import { servePoster, type Answer } from "./helpers/serve-poster.ts";
import { describeShared, SHARED_DIR } from "./helpers/shared.ts";
import { testThreads } from "./helpers/threads.ts";

const STORIES = "models/gguf/stories260K.gguf";
const HERMES = "templates/NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja";
/** Per-test limit: a model load and a few one-token generations on a busy 2-core machine. */
const LIMIT_MS = 120_000;

type ErrorBody = { error?: { message: string; param: string | null; code: string | null } };
const errorOf = (a: Answer) => (a.body as ErrorBody).error;

/** The `param` of a 400 (OpenAI's shape); throws on any other answer. */
function paramOf(a: Answer): string | null | undefined {
  if (a.status !== 400) throw new Error(`expected a 400, got ${a.status}: ${a.text.slice(0, 300)}`);
  return errorOf(a)?.param;
}

/** An Anthropic error's message (its shape has no param: the message names the field). */
function anthropicMessage(a: Answer): string {
  if (a.status !== 400) throw new Error(`expected a 400, got ${a.status}: ${a.text.slice(0, 300)}`);
  return errorOf(a)!.message;
}

const HI = [{ role: "user", content: "Hi" }];
interface Tool {
  type: string;
  function: { name: string; description?: string; parameters: Record<string, unknown> };
}
const NO_DESCRIPTION: Tool = { type: "function", function: { name: "get_time", parameters: { type: "object", properties: { city: { type: "string" } } } } };

describeShared("serve with Hermes-3's tool_use template: the field at fault, no server paths", [STORIES, HERMES], ([model, template]) => {
  const post = servePoster(() => LLM.load({ model: model!, chatTemplate: template!, engine: { threads: testThreads() } }), LIMIT_MS);
  /** No path of the server's disk in an answer: neither the model's nor the template's, nor the folder they are in. */
  const noPaths = (a: Answer) => {
    for (const path of [model!, template!, SHARED_DIR]) expect(a.text).not.toContain(path);
  };

  test("chat_template_kwargs may not set the template's own variables: a 400 naming chat_template_kwargs.tools", async () => {
    for (const name of ["tools", "messages", "add_generation_prompt", "bos_token"]) {
      const a = await post("/v1/chat/completions", { messages: HI, max_tokens: 1, chat_template_kwargs: { [name]: "x" } });
      expect(paramOf(a)).toBe(`chat_template_kwargs.${name}`);
      noPaths(a);
    }
    expect((await post("/v1/chat/completions", { messages: HI, max_tokens: 1, chat_template_kwargs: { enable_thinking: false } })).status).toBe(200);
  }, LIMIT_MS);

  test("a tool without the description the template writes: a 400 naming it in each route's spelling, without paths", async () => {
    const tools: Tool[] = [{ type: "function", function: { name: "get_weather", description: "w", parameters: { type: "object", properties: {} } } }, NO_DESCRIPTION];
    const chat = await post("/v1/chat/completions", { messages: HI, max_tokens: 1, tools });
    expect(paramOf(chat)).toBe("tools[1].function.description");
    expect(errorOf(chat)!.message).toStartWith("'tools[1].function.description' is needed by m's chat template: ");
    noPaths(chat);
    const responses = await post("/v1/responses", { input: "Hi", max_output_tokens: 1, tools: tools.map((t) => ({ type: "function", ...t.function })) });
    expect(paramOf(responses)).toBe("tools[1].description");
    noPaths(responses);
    const anthropic = await post("/v1/messages", {
      messages: HI, max_tokens: 1, tools: tools.map((t) => ({ name: t.function.name, description: t.function.description, input_schema: t.function.parameters })),
    });
    expect(anthropicMessage(anthropic)).toStartWith("'tools[1].description' is needed by m's chat template");
    noPaths(anthropic);
  }, LIMIT_MS);

  test("a parameter without a description renders over HTTP, and the prompt has the tool", async () => {
    const tool = { ...NO_DESCRIPTION, function: { ...NO_DESCRIPTION.function, description: "Local time." } };
    const a = await post("/tokenize", { messages: HI, tools: [tool] });
    expect(a.status).toBe(200);
    const ok = await post("/v1/chat/completions", { messages: HI, max_tokens: 1, tools: [tool] });
    expect(ok.status).toBe(200);
  }, LIMIT_MS);

  test("context_length_exceeded names the served model, not its file", async () => {
    const long = "Once upon a time ".repeat(1000);
    for (const [path, body] of [["/v1/completions", { prompt: long, max_tokens: 1 }], ["/v1/chat/completions", { messages: [{ role: "user", content: long }], max_tokens: 1 }]] as const) {
      const a = await post(path, body);
      expect(paramOf(a)).not.toBeUndefined();
      expect(errorOf(a)!.code).toBe("context_length_exceeded");
      expect(errorOf(a)!.message).toContain("m declares a context of");
      noPaths(a);
    }
    const anthropic = await post("/v1/messages", { messages: [{ role: "user", content: long }], max_tokens: 1 });
    expect(anthropicMessage(anthropic)).toContain("m declares a context of");
    noPaths(anthropic);
  }, LIMIT_MS);
});

describeShared("serve: a template that fails on a request's template variables names the field that set them", [STORIES], ([model]) => {
  const dir = mkdtempSync(join(tmpdir(), "pagellm-kwargs-fault-"));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));
  const template = join(dir, "thinks.jinja");
  writeFileSync(template, "{% if not enable_thinking %}{{ raise_exception('this model always thinks') }}{% endif %}{% for m in messages %}{{ m.content }}{% endfor %}");
  const post = servePoster(() => LLM.load({ model: model!, chatTemplate: template, engine: { threads: testThreads() } }), LIMIT_MS);

  test("chat_template_kwargs, Anthropic's thinking, the Responses API's reasoning.effort; no template path", async () => {
    const chat = await post("/v1/chat/completions", { messages: HI, max_tokens: 1, chat_template_kwargs: { enable_thinking: false } });
    expect(paramOf(chat)).toBe("chat_template_kwargs");
    expect(errorOf(chat)!.message).toBe(`'chat_template_kwargs' cannot be rendered by m's chat template: "this model always thinks"`);
    const responses = await post("/v1/responses", { input: "Hi", max_output_tokens: 1, reasoning: { effort: "none" } });
    expect(paramOf(responses)).toBe("reasoning.effort");
    const anthropic = await post("/v1/messages", { messages: HI, max_tokens: 1, thinking: { type: "disabled" } });
    expect(anthropicMessage(anthropic)).toStartWith("'thinking' cannot be rendered by m's chat template");
    for (const a of [chat, responses, anthropic]) expect(a.text).not.toContain(dir);
    expect((await post("/v1/chat/completions", { messages: HI, max_tokens: 1 })).status).toBe(200);
  }, LIMIT_MS);
});

describeShared("serve: values of the wrong type or range are a 400 naming the field", [STORIES], ([model]) => {
  const post = servePoster(() => LLM.load({ model: model!, engine: { threads: testThreads() } }), LIMIT_MS);
  const completion = (extra: string) => post("/v1/completions", `{"prompt": "Once", "max_tokens": 1, ${extra}}`);

  test("messages[].reasoning_content: a string", async () => {
    const messages = (reasoning: unknown) => [{ role: "user", content: "Hi" }, { role: "assistant", content: "Yes", reasoning_content: reasoning }, { role: "user", content: "Go" }];
    expect(paramOf(await post("/v1/chat/completions", { messages: messages(5), max_tokens: 1 }))).toBe("messages[1].reasoning_content");
    expect(paramOf(await post("/v1/chat/completions", { messages: messages({ text: "x" }), max_tokens: 1 }))).toBe("messages[1].reasoning_content");
    expect((await post("/v1/chat/completions", { messages: messages("Thought."), max_tokens: 1 })).status).toBe(200);
    expect((await post("/v1/chat/completions", { messages: messages(null), max_tokens: 1 })).status).toBe(200);
  }, LIMIT_MS);

  test("seed: a 64-bit signed integer, checked on its digits", async () => {
    for (const seed of ["-9223372036854775808", "9223372036854775807", "-9.223372036854775808e18", "0", "12345678901234567890e-1"]) {
      expect((await completion(`"seed": ${seed}`)).status).toBe(200);
    }
    // -2^63 - 1 parses to -2^63 and 2^63 to the double of 2^63 - 1: only the digits tell.
    for (const seed of ["-9223372036854775809", "9223372036854775808", "18446744073709551615", "1e19", "1.5", "\"1\""]) {
      const a = await completion(`"seed": ${seed}`);
      expect(paramOf(a)).toBe("seed");
    }
    expect(errorOf(await completion(`"seed": -9223372036854775809`))!.message).toBe("'seed' must be an integer from -9223372036854775808 to 9223372036854775807, got -9223372036854775809");
  }, LIMIT_MS);

  test("reasoning_budget: -1 (no bound), 0 and up to 2^31 - 1; other values are a 400", async () => {
    for (const budget of ["-1", "0", "5", "2147483647"]) expect((await completion(`"reasoning_budget": ${budget}`)).status).toBe(200);
    for (const budget of ["-2", "1.5", "2147483648", "18446744073709551616", "\"x\""]) expect(paramOf(await completion(`"reasoning_budget": ${budget}`))).toBe("reasoning_budget");
    const chat = await post("/v1/chat/completions", { messages: HI, max_tokens: 1, reasoning_budget: -1 });
    expect(chat.status).toBe(200);
  }, LIMIT_MS);

  test("Anthropic: tool_result.is_error a boolean, metadata.user_id a string, text blocks' citations refused", async () => {
    const messages = (result: Record<string, unknown>) => ({
      max_tokens: 1,
      messages: [
        { role: "user", content: "Weather?" },
        { role: "assistant", content: [{ type: "tool_use", id: "toolu_1", name: "get_weather", input: {} }] },
        { role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_1", content: "sunny", ...result }] },
      ],
    });
    expect(anthropicMessage(await post("/v1/messages", messages({ is_error: "yes" })))).toBe("'messages[2].content[0].is_error' must be a boolean");
    for (const isError of [true, false, null]) expect((await post("/v1/messages", messages({ is_error: isError }))).status).toBe(200);

    const hi = { max_tokens: 1, messages: HI };
    expect(anthropicMessage(await post("/v1/messages", { ...hi, metadata: { user_id: 5 } }))).toBe("'metadata.user_id' must be a string");
    expect(anthropicMessage(await post("/v1/messages", { ...hi, metadata: { plan: "x" } }))).toContain("'metadata.plan'");
    expect((await post("/v1/messages", { ...hi, metadata: { user_id: "u-1" } })).status).toBe(200);

    const cited = [{ type: "char_location", cited_text: "x", document_index: 0, start_char_index: 0, end_char_index: 1 }];
    const text = (citations: unknown) => ({ type: "text", text: "Hi", citations });
    expect(anthropicMessage(await post("/v1/messages", { max_tokens: 1, messages: [{ role: "user", content: [text(cited)] }] }))).toContain("citations");
    expect(anthropicMessage(await post("/v1/messages", { ...hi, system: [text(cited)] }))).toContain("citations");
    // A reply's text blocks carry `citations: null`; a client that sends them back is fine.
    expect((await post("/v1/messages", { max_tokens: 1, messages: [{ role: "user", content: [text(null)] }] })).status).toBe(200);
    expect((await post("/v1/messages", { max_tokens: 1, messages: [{ role: "user", content: [text([])] }] })).status).toBe(200);
  }, LIMIT_MS);

  test("Responses: text.verbosity low/medium/high, temperature 0 to 2", async () => {
    const responses = (extra: Record<string, unknown>) => post("/v1/responses", { input: "Hi", max_output_tokens: 1, ...extra });
    expect(paramOf(await responses({ text: { verbosity: 5 } }))).toBe("text.verbosity");
    expect(paramOf(await responses({ text: { verbosity: "loud" } }))).toBe("text.verbosity");
    expect(paramOf(await responses({ temperature: 5 }))).toBe("temperature");
    expect(paramOf(await responses({ temperature: -0.5 }))).toBe("temperature");
    for (const ok of [{ text: { verbosity: "low" } }, { temperature: 2 }, { temperature: 0 }]) expect((await responses(ok)).status).toBe(200);
  }, LIMIT_MS);
});

describe("reasoning_budget -1 is llama.cpp's no bound, 0 closes the reasoning at once (a thinking scripted model)", () => {
  const s = serveScripted(THINKING_SCRIPT, LIMIT_MS);
  const reply = async (extra: Record<string, unknown>) => {
    const r = await fetch(`${s.get().url}/v1/chat/completions`, {
      method: "POST", headers: { "content-type": "application/json" },
      body: JSON.stringify({ messages: [{ role: "user", content: "What is the weather in Paris?" }], temperature: 0, max_tokens: 16, ...extra }),
    });
    expect(r.status).toBe(200);
    return ((await r.json()) as { choices: { message: { reasoning_content?: string; content: string } }[] }).choices[0]!.message;
  };

  test("-1 reasons as without a budget; 0 writes no reasoning", async () => {
    const free = await reply({});
    expect(free.reasoning_content).toBe("\nThe user asks about Paris.\n");
    expect(await reply({ reasoning_budget: -1 })).toEqual(free);
    expect((await reply({ reasoning_budget: 0 })).reasoning_content ?? "").toBe("\n");
  }, LIMIT_MS);
});

describeShared("the command line: --reasoning-budget and a JSONL line's reasoning_budget and seed", [STORIES], ([model]) => {
  const dir = mkdtempSync(join(tmpdir(), "pagellm-field-values-"));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));
  const generate = (...args: string[]) => runPagellm(["generate", "--model", model!, "--threads", "1", "--max-tokens", "1", ...args], { timeoutMs: 60_000 });

  test("--reasoning-budget -1 and 0 run; -2 is refused naming it; --seed checked on its digits", () => {
    for (const budget of ["-1", "0", "5"]) expect(generate("--prompt", "Once", "--reasoning-budget", budget).exitCode).toBe(0);
    const bad = generate("--prompt", "Once", "--reasoning-budget", "-2");
    expect(bad.exitCode).not.toBe(0);
    expect(bad.stderr).toContain("--reasoning-budget");
    expect(generate("--prompt", "Once", "--seed", "9223372036854775807").exitCode).toBe(0);
    const seed = generate("--prompt", "Once", "--seed", "9223372036854775808");
    expect(seed.exitCode).not.toBe(0);
    expect(seed.stderr).toContain("--seed must be an integer from -9223372036854775808 to 9223372036854775807");
  }, LIMIT_MS);

  test("a JSONL line: reasoning_budget -1 and 0 run, a seed past the range is rejected naming it", () => {
    const file = join(dir, "requests.jsonl");
    writeFileSync(file, [
      '{"id": "free", "prompt": "Once", "reasoning_budget": -1}',
      '{"id": "closed", "prompt": "Once", "reasoning_budget": 0}',
      '{"id": "seed", "prompt": "Once", "seed": -9223372036854775809}',
      '{"id": "low", "prompt": "Once", "seed": -9223372036854775808}',
    ].join("\n") + "\n");
    const r = generate("--prompts", file, "--json");
    const lines = r.stdout.trim().split("\n").map((l) => JSON.parse(l) as { id: string; finish_reason: string; error?: string });
    for (const id of ["free", "closed", "low"]) expect(lines.find((l) => l.id === id)!.finish_reason).not.toBe("error");
    expect(lines.find((l) => l.id === "seed")!.error).toContain('"seed" must be an integer from -9223372036854775808');
  }, LIMIT_MS);
});
