/**
 * frequency_penalty, presence_penalty (OpenAI's definitions, over the generated tokens) and
 * logit_bias (a token id to a bias from -100 to 100), added once to the engine's one request type
 * and so reachable from every front end. What must hold:
 *   - the sampler: the bias is added first, the penalties count generated tokens only (never the
 *     prompt), frequency per occurrence, presence once;
 *   - on a model file, greedy output follows the definitions token by token: each generated token
 *     is the argmax of the logits after the tokens before it (from the engine's own scoring),
 *     biased and penalised as defined, and differs from the unpenalised output;
 *   - `generate` flags, JSONL fields, the library and both HTTP endpoints take them; an
 *     out-of-range value is the one error naming the field, in each front end's own words.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { BadRequestError } from "openai";
import { RequestFieldError } from "../src/errors.ts";
import { argmax, DEFAULT_SAMPLING, Sampler, type SamplingParams } from "../src/engine/sampler.ts";
import type { LLM } from "../src/llm/llm.ts";
import { runPagellm } from "./helpers/cli.ts";
import { PROCESS_TEST_MS } from "./helpers/limits.ts";
import { openedLLMs } from "./helpers/llm.ts";
import { describeShared } from "./helpers/shared.ts";
import { serveForSuite, type TestServer } from "./helpers/serve.ts";

const MODEL = "models/gguf/stories260K-Q8_0.gguf";
const LIMIT_MS = 120_000;
const PROMPT = "Once upon a time, there was a little girl named Lily. She loved to play";

function greedy(params: Partial<SamplingParams>): Sampler {
  return new Sampler({ ...DEFAULT_SAMPLING, temperature: 0, ...params });
}

describe("the sampler's bias and penalties", () => {
  // Token 0 leads by 1; token 1 was generated twice, token 2 once; token 3 is only in the prompt.
  const logits = Float32Array.from([5, 4.5, 4.2, 4.8, 0]);
  const history = [3, 3, 1, 2, 1];
  const outputStart = 2;

  test("nothing set: the plain argmax", () => {
    expect(greedy({}).sample(logits, history, undefined, outputStart)).toBe(0);
  });

  test("logit bias is added to the token's logit, before anything else", () => {
    expect(greedy({ logitBias: new Map([[4, 5.5]]) }).sample(logits, history, undefined, outputStart)).toBe(4);
    expect(greedy({ logitBias: new Map([[0, -1]]) }).sample(logits, history, undefined, outputStart)).toBe(3);
  });

  test("frequency penalty subtracts per generated occurrence; the prompt's tokens are not counted", () => {
    // 0 leads; a negative penalty raises token 1 (two occurrences: +2 x 0.4 = 5.3) above it.
    expect(greedy({ frequencyPenalty: -0.4 }).sample(logits, history, undefined, outputStart)).toBe(1);
    // Token 3 occurs twice in the prompt only: a negative penalty leaves it at 4.8.
    expect(greedy({ frequencyPenalty: -0.2, logitBias: new Map([[0, -1], [1, -1], [2, -1]]) }).sample(logits, history, undefined, outputStart)).toBe(3);
  });

  test("presence penalty subtracts once per generated token, whatever its count", () => {
    // -0.6: token 1 (4.5 + 0.6 = 5.1) and token 2 (4.2 + 0.6 = 4.8) rise by the same, once: 1 wins over 0.
    expect(greedy({ presencePenalty: -0.6 }).sample(logits, history, undefined, outputStart)).toBe(1);
    // A positive one lowers them: 0 stays.
    expect(greedy({ presencePenalty: 2 }).sample(logits, history, undefined, outputStart)).toBe(0);
  });
});

describeShared("penalties and logit_bias on a model file", [MODEL], ([model]) => {
  const llms = openedLLMs({ afterEach: false });
  let llm!: LLM;
  let prompt: number[] = [];
  let plain: number[] = [];
  beforeAll(async () => {
    llm = llms.load({ model: model! });
    prompt = llm.encode(PROMPT);
    const [r] = await llm.generate([{ promptTokenIds: prompt, maxTokens: 40, temperature: 0, ignoreEos: true }]);
    plain = r!.token_ids;
  }, LIMIT_MS);

  /** Greedy tokens of the request with `fields`, and each checked against its definition on the engine's own logits. */
  async function followsDefinition(fields: { frequencyPenalty?: number; presencePenalty?: number; logitBias?: Record<number, number> }): Promise<number[]> {
    const [r] = await llm.generate([{ promptTokenIds: prompt, maxTokens: 40, temperature: 0, ignoreEos: true, ...fields }]);
    const out = r!.token_ids;
    // The logits after every prefix of prompt + output, scored in one pass (the same bits as decoding, by batch invariance).
    const rows = (await llm.client.score({ tokens: [...prompt, ...out], logits: true })).logits!;
    out.forEach((token, i) => {
      const x = Float64Array.from(rows[prompt.length - 1 + i]!);
      for (const [id, bias] of Object.entries(fields.logitBias ?? {})) x[Number(id)]! += bias;
      const counts = new Map<number, number>();
      for (const t of out.slice(0, i)) counts.set(t, (counts.get(t) ?? 0) + 1);
      for (const [t, c] of counts) x[t] = x[t]! - (fields.frequencyPenalty ?? 0) * c - (fields.presencePenalty ?? 0);
      expect(token).toBe(argmax(x));
    });
    return out;
  }

  test("frequency_penalty: each token is the argmax less the penalty times its count so far; the output changes", async () => {
    const out = await followsDefinition({ frequencyPenalty: 1.5 });
    expect(out).not.toEqual(plain);
  }, LIMIT_MS);

  test("presence_penalty: each token is the argmax less the penalty on every token seen; the output changes", async () => {
    const out = await followsDefinition({ presencePenalty: 2 });
    expect(out).not.toEqual(plain);
    // The greedy output repeats itself; with the penalty at 2 it repeats less.
    expect(new Set(out).size).toBeGreaterThan(new Set(plain).size);
  }, LIMIT_MS);

  test("logit_bias: -100 removes a token the output had; +100 makes a token every output token", async () => {
    const banned = plain[0]!;
    const without = await followsDefinition({ logitBias: { [banned]: -100 } });
    expect(without).not.toContain(banned);
    const forced = await followsDefinition({ logitBias: { 42: 100 } });
    expect(forced.every((t) => t === 42)).toBe(true);
  }, LIMIT_MS);

  test("out of range: one RequestFieldError naming the field", () => {
    const fieldOf = (fields: Record<string, unknown>) => {
      try {
        llm.client.prepare({ prompt: "x", ...fields });
      } catch (e) {
        expect(e).toBeInstanceOf(RequestFieldError);
        return (e as RequestFieldError).field;
      }
      throw new Error("expected a RequestFieldError");
    };
    expect(fieldOf({ frequencyPenalty: 2.5 })).toBe("frequencyPenalty");
    expect(fieldOf({ presencePenalty: -3 })).toBe("presencePenalty");
    expect(fieldOf({ presencePenalty: "a lot" })).toBe("presencePenalty");
    expect(fieldOf({ logitBias: { 5: 101 } })).toBe("logitBias.5");
    expect(fieldOf({ logitBias: { 512: 1 } })).toBe("logitBias.512");
    expect(fieldOf({ logitBias: [1, 2] })).toBe("logitBias");
  });
});

describeShared("penalties and logit_bias from the command line", [MODEL], ([model]) => {
  let dir = "";
  beforeAll(() => {
    dir = mkdtempSync(join(tmpdir(), "pagellm-penalties-"));
  });
  afterAll(() => rmSync(dir, { recursive: true, force: true }));
  const base = () => ["generate", "--model", model!, "--threads", "1", "--temperature", "0", "--max-tokens", "6", "--json"];
  const ids = (stdout: string) => stdout.trim().split("\n").map((line) => (JSON.parse(line) as { id: string; token_ids: number[] }));

  test("--logit-bias, --frequency-penalty and --presence-penalty reach the request; JSONL lines override them", () => {
    const forced = runPagellm([...base(), "--prompt", PROMPT, "--logit-bias", "42=100"]);
    expect(forced.exitCode).toBe(0);
    expect(ids(forced.stdout)[0]!.token_ids).toEqual([42, 42, 42, 42, 42, 42]);
    // llama.cpp's form of the same option.
    const llamaForm = runPagellm([...base(), "--prompt", PROMPT, "--logit-bias", "42+100"]);
    expect(ids(llamaForm.stdout)[0]!.token_ids).toEqual([42, 42, 42, 42, 42, 42]);
    const jsonl = join(dir, "requests.jsonl");
    writeFileSync(jsonl, [
      JSON.stringify({ id: "bias", prompt: PROMPT, logit_bias: { 7: 100 } }),
      JSON.stringify({ id: "inherits", prompt: PROMPT }),
      JSON.stringify({ id: "penalised", prompt: PROMPT, max_tokens: 30, presence_penalty: 2, frequency_penalty: 1 }),
      JSON.stringify({ id: "plain", prompt: PROMPT, max_tokens: 30 }),
    ].join("\n"));
    const run = runPagellm([...base(), "--prompts", jsonl, "--logit-bias", "42=100"]);
    expect(run.exitCode).toBe(0);
    const byId = new Map(ids(run.stdout).map((r) => [r.id, r.token_ids]));
    // A line's logit_bias replaces the option's (one map per request, as a JSON field would).
    expect(byId.get("bias")).toEqual([7, 7, 7, 7, 7, 7]);
    expect(byId.get("inherits")).toEqual([42, 42, 42, 42, 42, 42]);
  }, PROCESS_TEST_MS);

  test("out of range: one line naming the option, or the JSONL field with its line", () => {
    const bad = runPagellm([...base(), "--prompt", PROMPT, "--frequency-penalty", "3"]);
    expect(bad.exitCode).toBe(2);
    expect(bad.stderr).toBe("pagellm: error: --frequency-penalty must be at least -2 and at most 2, got 3\n");
    const form = runPagellm([...base(), "--prompt", PROMPT, "--logit-bias", "forty-two"]);
    expect(form.exitCode).toBe(2);
    expect(form.stderr).toContain("--logit-bias expects ID=BIAS");
    const jsonl = join(dir, "bad.jsonl");
    writeFileSync(jsonl, [JSON.stringify({ id: "ok", prompt: PROMPT }), JSON.stringify({ id: "bad", prompt: PROMPT, presence_penalty: 5 })].join("\n"));
    const run = runPagellm([...base(), "--prompts", jsonl]);
    // A run whose requests were rejected ends with exit 3, its other results kept (as before the one request type).
    expect(run.exitCode).toBe(3);
    const results = run.stdout.trim().split("\n").map((l) => JSON.parse(l) as { id: string; finish_reason: string; error?: string });
    expect(results.find((r) => r.id === "ok")!.finish_reason).toBe("length");
    expect(results.find((r) => r.id === "bad")!.error).toBe(`${jsonl}:2: "presence_penalty" must be at least -2 and at most 2, got 5`);
    // A token id past the vocabulary is only known once the model is loaded: the option is named then.
    const past = runPagellm([...base(), "--prompt", PROMPT, "--logit-bias", "512=1"]);
    expect(past.exitCode).toBe(3);
    expect(past.stderr).toBe("pagellm: error: prompt: --logit-bias 512 must be keyed by token ids from 0 to 511\n");
  }, PROCESS_TEST_MS);
});

describeShared("penalties and logit_bias over HTTP", [MODEL], ([model]) => {
  let s!: TestServer;
  serveForSuite((started) => (s = started), LIMIT_MS, model!);

  test("both endpoints take them: logit_bias forces a token, the penalties change greedy text", async () => {
    const chat = await s.client.chat.completions.create({
      model: "test-model", messages: [{ role: "user", content: PROMPT }], max_tokens: 4, temperature: 0, logit_bias: { 42: 100 }, logprobs: true,
    });
    const forced = await s.client.completions.create({ model: "test-model", prompt: PROMPT, max_tokens: 4, temperature: 0, logit_bias: { 42: 100 }, logprobs: 0 });
    expect(chat.choices[0]!.logprobs!.content!.map((t) => t.token)).toEqual(forced.choices[0]!.logprobs!.tokens!);
    expect(new Set(forced.choices[0]!.logprobs!.tokens!).size).toBe(1);
    const plain = await s.client.completions.create({ model: "test-model", prompt: PROMPT, max_tokens: 30, temperature: 0 });
    const penalised = await s.client.completions.create({ model: "test-model", prompt: PROMPT, max_tokens: 30, temperature: 0, presence_penalty: 2, frequency_penalty: 1 });
    expect(penalised.choices[0]!.text).not.toBe(plain.choices[0]!.text);
  }, LIMIT_MS);

  test("out of range: a 400 whose param names the field", async () => {
    const paramOf = async (body: Record<string, unknown>, chat: boolean) => {
      try {
        if (chat) await s.client.chat.completions.create({ model: "test-model", messages: [{ role: "user", content: "x" }], max_tokens: 1, ...body });
        else await s.client.completions.create({ model: "test-model", prompt: "x", max_tokens: 1, ...body });
      } catch (e) {
        expect(e).toBeInstanceOf(BadRequestError);
        return [(e as BadRequestError).param, (e as BadRequestError).message];
      }
      throw new Error("expected a 400");
    };
    for (const chat of [true, false]) {
      expect(await paramOf({ frequency_penalty: 2.5 }, chat)).toEqual(["frequency_penalty", "400 'frequency_penalty' must be at least -2 and at most 2, got 2.5"]);
      expect((await paramOf({ presence_penalty: "high" }, chat))[0]).toBe("presence_penalty");
      expect((await paramOf({ logit_bias: { 9: -101 } }, chat))[0]).toBe("logit_bias.9");
    }
  }, LIMIT_MS);
});
