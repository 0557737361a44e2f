/**
 * What large requests cost a `pagellm serve` process: the peak resident
 * memory a request adds (Linux's VmHWM, reset before each through /proc/PID/clear_refs) against a
 * stated multiple of its body, and a 400 naming the field and the limit, never a 500.
 *
 *   - A prompt far over the context (a megabyte tool description, megabytes of a call's arguments
 *     or of a message, count_tokens' 7.2 MB) is refused from its bytes' count before it is
 *     tokenized (Tokenizer.minTokens): at most 8 x its body + 32 MB (it took up to 1.7 GB and 6 s,
 *     or a stack overflow).
 *   - A prompt under that bound but over the context is tokenized until it passes the context (a
 *     long word merged on ids, in typed arrays), then refused: at most 64 x its body + 32 MB,
 *     where a 600 KB word took 700 MB and hundreds of thousands of tokens overflowed the stack
 *     (a 500).
 *   - A tool enum of 100,000 strings with tool_choice "required" (a 500: the rendered tools'
 *     tokens were spread into a call; at most 96 x its body, the template's render of the tools'
 *     JSON the most of it) and a logit_bias of more entries than the vocabulary has
 *     tokens (counted before one is read) are 400s naming their field.
 *
 * On the random qwen2 model (a 49,152-token vocabulary whose longest token is 162 bytes: a prompt
 * of more than 4096 x 162 bytes is refused untokenized) with Qwen2.5's template, which renders
 * tools and calls into the prompt, at its context of 4096.
 */
import { afterAll, beforeAll, expect, test } from "bun:test";
import { readFileSync, writeFileSync } from "node:fs";
import { describeShared } from "./helpers/shared.ts";
import { spawnServe, type ServeProcess } from "./helpers/serve-process.ts";

const CHAT_MODEL = "models/gguf/rnd-qwen2-Q5_K_M.gguf";
const TEMPLATE = "templates/Qwen-Qwen2.5-7B-Instruct.jinja";
const LIMIT_MS = 120_000;
const MB = 1 << 20;

/** One word of `n` letters (no spaces, so one pre-token: the tokenizer's worst case). */
function word(n: number): string {
  let out = "";
  const letters = "abcdefghijklmnopqrstuvwxyz";
  for (let i = 0; i < n; i += 4096) out += Array.from({ length: Math.min(4096, n - i) }, (_, k) => letters[((i + k) * 7919) % 26]).join("");
  return out;
}

interface Measured {
  status: number;
  error: { message: string; param?: string | null };
  bodyBytes: number;
  /** Peak resident memory during the request, above the resident memory before it. */
  addedBytes: number;
}

/** A value of /proc/PID/status in bytes (VmRSS, VmHWM). */
function statusBytes(s: ServeProcess, key: string): number {
  return Number(new RegExp(`^${key}:\\s+(\\d+) kB$`, "m").exec(readFileSync(`/proc/${s.proc.pid}/status`, "utf8"))?.[1]) * 1024;
}

/** Posts `body` to /v1/`path` and measures the peak resident memory it added. */
async function measured(s: ServeProcess, path: string, body: unknown): Promise<Measured> {
  const text = JSON.stringify(body);
  // Resets VmHWM to the resident memory now (Linux clear_refs 5).
  writeFileSync(`/proc/${s.proc.pid}/clear_refs`, "5");
  const before = statusBytes(s, "VmRSS");
  const r = await fetch(`${s.url}/v1/${path}`, { method: "POST", headers: { "content-type": "application/json" }, body: text });
  const json = (await r.json()) as { error: Measured["error"] };
  return { status: r.status, error: json.error, bodyBytes: text.length, addedBytes: statusBytes(s, "VmHWM") - before };
}

describeShared("serve: the memory and the answer of large requests", [CHAT_MODEL, TEMPLATE], ([model, template]) => {
  let s!: ServeProcess;
  beforeAll(async () => {
    s = await spawnServe(model!, ["--ctx-size", "4096", "--chat-template", template!]);
  }, LIMIT_MS);
  afterAll(async () => {
    await s?.stop();
  });

  const measure = (path: string, body: unknown) => measured(s, path, body);
  const hi = [{ role: "user", content: "hi" }];
  const within = (m: Measured, times: number) => {
    if (process.env.PAGELLM_TEST_VERBOSE) console.log(`body ${(m.bodyBytes / MB).toFixed(2)} MB: +${(m.addedBytes / MB).toFixed(1)} MB`);
    expect(m.addedBytes).toBeLessThanOrEqual(times * m.bodyBytes + 32 * MB);
  };

  test("prompts far over the context are refused from their size, before tokenization: a 400 naming messages, at most 8 x the body + 32 MB", async () => {
    const cases: [string, unknown][] = [
      ["chat/completions", { messages: hi, max_tokens: 1, tools: [{ type: "function", function: { name: "f", description: word(MB), parameters: { type: "object" } } }] }],
      ["chat/completions", {
        messages: [...hi, { role: "assistant", content: "", tool_calls: [{ id: "c1", type: "function", function: { name: "f", arguments: JSON.stringify({ a: word(2 * MB) }) } }] }, { role: "tool", tool_call_id: "c1", content: "ok" }],
        max_tokens: 1,
      }],
      ["chat/completions", { messages: [{ role: "user", content: word(2 * MB) }], max_tokens: 1 }],
      ["messages/count_tokens", { messages: [{ role: "user", content: word(7.2e6) }] }],
    ];
    for (const [path, body] of cases) {
      const m = await measure(path, body);
      expect(m.status).toBe(400);
      expect(m.error.message).toMatch(/longer than the context of 4096/);
      if (path === "chat/completions") expect(m.error.param).toBe("messages");
      else expect(m.error.message).toContain("messages");
      within(m, 8);
    }
  }, LIMIT_MS);

  test("prompts under that bound are tokenized until they pass the context: a 600 KB word, 600,000 digits (a token each) are 400s, at most 64 x the body + 32 MB", async () => {
    for (const content of [word(600_000), "7".repeat(600_000)]) {
      const m = await measure("chat/completions", { messages: [{ role: "user", content }], max_tokens: 1 });
      expect(m.status).toBe(400);
      expect(m.error.message).toMatch(/^prompt of more than 4096 tokens is longer than the context of 4096/);
      within(m, 64);
    }
  }, LIMIT_MS);

  test("a tool enum of 100,000 strings with tool_choice required, and a logit_bias over the vocabulary: 400s naming the field", async () => {
    const values = Array.from({ length: 100_000 }, (_, i) => `v${i}`);
    const tools = [{ type: "function", function: { name: "f", parameters: { type: "object", properties: { e: { type: "string", enum: values } }, required: ["e"] } } }];
    const enumCase = await measure("chat/completions", { messages: hi, max_tokens: 4, tool_choice: "required", tools });
    expect(enumCase.status).toBe(400);
    expect(enumCase.error.param).toBe("messages");
    expect(enumCase.error.message).toMatch(/longer than the context of 4096/);
    // The template's render of the tools' JSON (before the prompt's bytes can be counted) costs
    // about 40 x their size.
    within(enumCase, 96);
    const bias = await measure("chat/completions", { messages: hi, max_tokens: 1, logit_bias: Object.fromEntries(Array.from({ length: 100_000 }, (_, i) => [String(i), 1])) });
    expect(bias.status).toBe(400);
    expect(bias.error.param).toBe("logit_bias");
    expect(bias.error.message).toBe("'logit_bias' may hold at most 49152 entries (one per token of the vocabulary)");
    within(bias, 8);
  }, LIMIT_MS);

  test("a json_schema of 1,000 optional properties, as allOf branches or one object: a 200, at most 64 x the body + 32 MB", async () => {
    // The first constraint makes the compiler and its view of the vocabulary: the model's cost, paid here first.
    const warm = await measure("completions", { prompt: "JSON:", max_tokens: 2, json_schema: { type: "object", properties: { a: { type: "integer" } } } });
    expect(warm.status).toBe(200);
    const properties = (n: number) => Array.from({ length: n }, (_, i) => [`p${i}`, { type: "integer" }] as const);
    // Merging the branches once copied every key merged so far at each branch: +500 MB for this 42 KB body.
    for (const json_schema of [
      { allOf: properties(1000).map(([k, v]) => ({ properties: { [k]: v } })) },
      { type: "object", properties: Object.fromEntries(properties(1000)) },
    ]) {
      const m = await measure("completions", { prompt: "JSON:", max_tokens: 8, json_schema });
      expect(m.status).toBe(200);
      within(m, 64);
    }
  }, LIMIT_MS);
});

describeShared("serve: a megabyte prompt on a SentencePiece vocabulary", ["models/gguf/rnd-llama-Q4_K_M.gguf"], ([model]) => {
  let s!: ServeProcess;
  beforeAll(async () => {
    s = await spawnServe(model!, ["--ctx-size", "2048"]);
  }, LIMIT_MS);
  afterAll(async () => {
    await s?.stop();
  });

  test("is refused from its size too (its longest piece is 48 bytes): a 400, at most 8 x the body + 32 MB", async () => {
    const m = await measured(s, "chat/completions", { messages: [{ role: "user", content: word(2 * MB) }], max_tokens: 1 });
    expect(m.status).toBe(400);
    expect(m.error.param).toBe("messages");
    expect(m.error.message).toMatch(/^prompt of at least \d+ tokens is longer than the context of 2048/);
    expect(m.addedBytes).toBeLessThanOrEqual(8 * m.bodyBytes + 32 * MB);
  }, LIMIT_MS);
});
