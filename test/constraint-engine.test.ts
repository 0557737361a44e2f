/**
 * Constrained output in the engine: the request's `constraint` compiled by the front
 * door, one matcher per sample, the mask applied before each draw. What must hold:
 *   - the reasoning gate: reasoning first (any token but an end-of-generation one), the answer
 *     constrained from the token after `</think>`, the first token free to open reasoning, every
 *     state restored by rollback;
 *   - on a model file: every output is in the constraint's language (a choice, a regex, a JSON
 *     Schema: parsed and checked), ends with finish_reason "stop" only where the grammar accepts,
 *     and with "length" when max_tokens comes first;
 *   - the same bits alone and batched, with the prefix cache on and off, with n samples forked, and
 *     with speculative decoding (drafts cut where the grammar refuses them);
 *   - forced runs: where the grammar allows one continuation, its tokens are appended without
 *     sampling (a step's output then holds several tokens without speculation);
 *   - a constraint that cannot be compiled is a RequestFieldError naming it, never unconstrained text.
 */
import { beforeAll, describe, expect, test } from "bun:test";
import { RequestFieldError } from "../src/errors.ts";
import type { ReasoningMarkers, TokenConstraint } from "../src/constraint/token-constraint.ts";
import type { ConstraintSpec } from "../src/grammar/constraint-spec.ts";
import type { GenerateRequest } from "../src/llm/generate-request.ts";
import type { LLM } from "../src/llm/llm.ts";
import { ReasoningGate } from "../src/engine/reasoning-gate.ts";
import { DEFAULT_SPECULATIVE } from "../src/engine/speculative.ts";
import { allOutputs, comparable, openedLLMs } from "./helpers/llm.ts";
import { describeShared } from "./helpers/shared.ts";

const LIMIT_MS = 180_000;

/** A constraint over tokens 0..9 that accepts the sequence 1, 2, 3 then only token 9 (the end). */
class Sequence123 implements TokenConstraint {
  private accepted: number[] = [];
  private static readonly WANT = [1, 2, 3, 9];

  fillNextTokenBitmask(mask: Uint32Array): void {
    mask.fill(0);
    const next = Sequence123.WANT[this.accepted.length];
    if (next !== undefined) mask[0]! |= 1 << next;
  }

  acceptToken(token: number): boolean {
    if (token !== Sequence123.WANT[this.accepted.length]) return false;
    this.accepted.push(token);
    return true;
  }

  rollback(n: number): void {
    this.accepted.splice(this.accepted.length - n, n);
  }

  forcedTokens(): number[] {
    return [];
  }

  isTerminated(): boolean {
    return this.accepted.length === Sequence123.WANT.length;
  }
}

const bits = (mask: Uint32Array) => Array.from({ length: 16 }, (_, t) => ((mask[0]! >>> t) & 1) === 1).flatMap((on, t) => (on ? [t] : []));

/**
 * Markers over a made-up vocabulary: token 5 is `<think>`, 6 `</think>`, 10-14 spell them as text
 * (`<`, `think`, `>`, `</`, `think>\n`), and every other token one letter of its own.
 */
function testMarkers(): ReasoningMarkers {
  const utf8 = new TextEncoder();
  const text: Record<number, string> = { 5: "<think>", 6: "</think>", 10: "<", 11: "think", 12: ">", 13: "</", 14: "think>\n" };
  return {
    start: utf8.encode("<think>"),
    end: utf8.encode("</think>"),
    tokenBytes: (id) => utf8.encode(text[id] ?? String.fromCharCode(0x61 + id)),
    startTokens: (at) => (at === 0 ? [5] : at === 1 ? [11, 12] : [12]),
    endTokens: (at) => (at === 0 ? [6] : at === 2 ? [14] : [12]),
  };
}

describe("the reasoning gate", () => {
  const markers = testMarkers();
  const eog = new Set([9]);

  test("initial state: reasoning when the prompt ends with <think> (and whitespace), as a token or as text; else the first token may open it", () => {
    expect(ReasoningGate.initialState([1, 2, 5, 7], markers)).toBe("open");
    expect(ReasoningGate.initialState([1, 2, 5], markers)).toBe("reasoning");
    expect(ReasoningGate.initialState([1, 10, 11, 12], markers)).toBe("reasoning");
    expect(ReasoningGate.initialState([1, 5, 7, 6, 2], markers)).toBe("open");
    expect(ReasoningGate.initialState([1, 2], markers)).toBe("open");
  });

  test("open: the grammar's tokens and the reasoning opener; reasoning: anything but the end of generation; then the grammar", () => {
    const gate = new ReasoningGate(new Sequence123(), markers, eog, "open");
    const mask = new Uint32Array(1);
    gate.fillNextTokenBitmask(mask);
    expect(bits(mask)).toEqual([1, 5]);
    expect(gate.acceptToken(5)).toBe(true);
    gate.fillNextTokenBitmask(mask);
    expect(bits(mask)).toEqual([0, 1, 2, 3, 4, 5, 6, 7, 8, 10, 11, 12, 13, 14, 15]);
    expect(gate.acceptToken(9)).toBe(false);
    for (const t of [7, 8, 2]) expect(gate.acceptToken(t)).toBe(true);
    expect(gate.constraining).toBe(false);
    expect(gate.acceptToken(6)).toBe(true);
    expect(gate.constraining).toBe(true);
    gate.fillNextTokenBitmask(mask);
    expect(bits(mask)).toEqual([1]);
    for (const t of [1, 2, 3]) expect(gate.acceptToken(t)).toBe(true);
    expect(gate.acceptToken(9)).toBe(true);
    expect(gate.isTerminated()).toBe(true);
    // Back to inside the reasoning: the inner grammar's tokens are undone too.
    gate.rollback(5);
    expect(gate.constraining).toBe(false);
    gate.fillNextTokenBitmask(mask);
    expect(bits(mask)).toContain(6);
    expect(gate.acceptToken(6)).toBe(true);
    expect(gate.acceptToken(1)).toBe(true);
  });

  test("a budget: after that many reasoning tokens only the end is allowed, and forced; rollback restores the count; no inner constraint: free but for the budget, the end of generation allowed", () => {
    const mask = new Uint32Array(1);
    for (const inner of [new Sequence123(), null]) {
      const gate = new ReasoningGate(inner, markers, inner === null ? new Set() : eog, "open", 2);
      expect(gate.acceptToken(5)).toBe(true);
      for (const t of [7, 8]) {
        expect(gate.forcedTokens()).toEqual([]);
        expect(gate.acceptToken(t)).toBe(true);
      }
      gate.fillNextTokenBitmask(mask);
      expect(bits(mask)).toEqual([6]);
      expect(gate.forcedTokens()).toEqual([6]);
      expect(gate.acceptToken(7)).toBe(false);
      expect(gate.acceptToken(9)).toBe(false);
      gate.rollback(1);
      expect(gate.forcedTokens()).toEqual([]);
      gate.fillNextTokenBitmask(mask);
      expect(bits(mask)).toContain(8);
      expect(bits(mask).includes(9)).toBe(inner === null);
      expect(gate.acceptToken(8)).toBe(true);
      expect(gate.acceptToken(6)).toBe(true);
      expect(gate.constraining).toBe(true);
      gate.fillNextTokenBitmask(mask);
      expect(bits(mask)).toEqual(inner === null ? Array.from({ length: 16 }, (_, t) => t) : [1]);
      expect(gate.forcedTokens()).toEqual([]);
    }
    // Budget 0, the prompt having opened the reasoning: the end at once.
    const closed = new ReasoningGate(null, markers, new Set(), "reasoning", 0);
    expect(closed.forcedTokens()).toEqual([6]);
    expect(closed.acceptToken(6)).toBe(true);
    expect(closed.isTerminated()).toBe(false);
  });

  test("the tags written as text, in any pieces: an answer that starts like <think> goes to the grammar; </think> found across tokens; a budget forces the tag's rest", () => {
    const mask = new Uint32Array(1);
    // `<` then `b` (token 1, the grammar's first): the answer after all, both tokens given to the grammar.
    const answer = new ReasoningGate(new Sequence123(), { ...markers, tokenBytes: (id) => (id === 1 ? new Uint8Array([0x3c]) : markers.tokenBytes(id)) }, eog, "open");
    expect(answer.acceptToken(1)).toBe(true);
    expect(answer.constraining).toBe(false);
    answer.fillNextTokenBitmask(mask);
    expect(bits(mask)).toEqual([2, 11]);
    expect(answer.acceptToken(2)).toBe(true);
    expect(answer.constraining).toBe(true);
    for (const t of [3, 9]) expect(answer.acceptToken(t)).toBe(true);
    expect(answer.isTerminated()).toBe(true);
    answer.rollback(3);
    expect(answer.acceptToken(11)).toBe(true);
    expect(answer.acceptToken(12)).toBe(true);
    expect(answer.constraining).toBe(false);
    // `</` `think>\n`: closed; an answer's token follows.
    for (const t of [7, 13, 8, 13]) expect(answer.acceptToken(t)).toBe(true);
    expect(answer.constraining).toBe(false);
    expect(answer.acceptToken(14)).toBe(true);
    expect(answer.constraining).toBe(true);
    expect(answer.acceptToken(2)).toBe(false);
    expect(answer.acceptToken(1)).toBe(true);
    // A budget of 2 with `</` written: the rest (`think>\n`) is forced.
    const bounded = new ReasoningGate(null, markers, new Set(), "open", 2);
    for (const t of [10, 11, 12, 7, 13]) expect(bounded.acceptToken(t)).toBe(true);
    expect(bounded.forcedTokens()).toEqual([14]);
    expect(bounded.acceptToken(7)).toBe(false);
    expect(bounded.acceptToken(14)).toBe(true);
    expect(bounded.constraining).toBe(true);
  });

  test("open, answering at once: the first token goes to the grammar and reasoning can no longer open", () => {
    const gate = new ReasoningGate(new Sequence123(), markers, eog, "open");
    expect(gate.acceptToken(1)).toBe(true);
    const mask = new Uint32Array(1);
    gate.fillNextTokenBitmask(mask);
    expect(bits(mask)).toEqual([2]);
    expect(gate.acceptToken(5)).toBe(false);
    gate.rollback(1);
    gate.fillNextTokenBitmask(mask);
    expect(bits(mask)).toEqual([1, 5]);
  });
});

const SCHEMA = {
  type: "object",
  properties: {
    name: { type: "string", maxLength: 10 },
    age: { type: "integer", minimum: 0, maximum: 120 },
    tags: { type: "array", items: { enum: ["red", "green", "blue"] }, maxItems: 3 },
  },
  required: ["name", "age", "tags"],
  additionalProperties: false,
};

/** Whether `value` has SCHEMA's shape (checked by hand: the schema is small). */
function matchesSchema(value: unknown): boolean {
  if (typeof value !== "object" || value === null || Array.isArray(value)) return false;
  const v = value as Record<string, unknown>;
  if (Object.keys(v).sort().join() !== "age,name,tags") return false;
  const age = v.age;
  const tags = v.tags;
  return typeof v.name === "string" && v.name.length <= 10 && Number.isInteger(age) && (age as number) >= 0 && (age as number) <= 120 &&
    Array.isArray(tags) && tags.length <= 3 && tags.every((t) => t === "red" || t === "green" || t === "blue");
}

describeShared("constrained output on a model file", ["models/gguf/rnd-qwen2-Q5_K_M.gguf"], ([model]) => {
  const llms = openedLLMs({ afterEach: false });
  let llm!: LLM;
  beforeAll(() => {
    llm = llms.load({ model: model! });
  }, LIMIT_MS);

  const requests = (constraint: ConstraintSpec, maxTokens: number): GenerateRequest[] => [
    { id: "greedy", prompt: "A person:", maxTokens, temperature: 0, constraint },
    { id: "seeded", prompt: "Another one:", maxTokens, temperature: 0.8, seed: 11, constraint },
    { id: "samples", prompt: "A person:", maxTokens, temperature: 1, seed: 5, n: 3, constraint },
  ];

  test("a choice, a regex and a JSON Schema: every output in the language, ended by the grammar", async () => {
    const cases: [ConstraintSpec, (text: string) => boolean][] = [
      [{ kind: "choice", choices: ["red", "green", "dark blue"] }, (t) => ["red", "green", "dark blue"].includes(t)],
      [{ kind: "regex", pattern: "[0-9]{3}-[a-z]{2,4}" }, (t) => /^[0-9]{3}-[a-z]{2,4}$/.test(t)],
      [{ kind: "json_schema", schema: SCHEMA }, (t) => matchesSchema(JSON.parse(t))],
    ];
    for (const [constraint, valid] of cases) {
      const results = await llm.generate(requests(constraint, 400));
      expect(results).toHaveLength(5);
      for (const r of results) {
        expect(r.finish_reason).toBe("stop");
        expect(valid(r.text)).toBe(true);
      }
    }
  }, LIMIT_MS);

  test("max_tokens reached first ends with finish_reason length, the text a prefix of the language", async () => {
    const [r] = await llm.generate([{ prompt: "A person:", maxTokens: 3, temperature: 0, constraint: { kind: "json_schema", schema: SCHEMA } }]);
    expect(r!.finish_reason).toBe("length");
    expect(r!.completion_tokens).toBe(3);
    expect(() => JSON.parse(r!.text)).toThrow();
  }, LIMIT_MS);

  test("the same bits alone and batched, prefix cache on and off, n forked, and with speculation", async () => {
    const constraint: ConstraintSpec = { kind: "json_schema", schema: SCHEMA };
    const batch = requests(constraint, 300);
    const together = (await llm.generate(batch)).map(comparable);
    const alone: ReturnType<typeof comparable>[] = [];
    for (const r of batch) {
      expect(await llm.client.resetPrefixCache()).toBe(true);
      alone.push(...(await llm.generate([r])).map(comparable));
    }
    expect(together.map((r) => ({ ...r, cached_tokens: 0, cached_tokens_memory: 0 }))).toEqual(alone.map((r) => ({ ...r, cached_tokens: 0, cached_tokens_memory: 0 })));
    for (const engine of [{ enablePrefixCaching: false }, { speculative: { ...DEFAULT_SPECULATIVE, adaptive: false } }, { maxNumBatchedTokens: 8 }]) {
      const other = llms.load({ model: model!, engine });
      const got = (await other.generate(batch)).map(comparable);
      expect(got.map((r) => ({ ...r, cached_tokens: 0, cached_tokens_memory: 0 }))).toEqual(together.map((r) => ({ ...r, cached_tokens: 0, cached_tokens_memory: 0 })));
      if ("speculative" in engine) expect(other.stats().draftedTokens).toBeGreaterThan(0);
    }
  }, LIMIT_MS);

  test("preempted and recomputed in a pool too small for the batch: the same bits as in a large pool", async () => {
    // Blocks of 4 (a block size has its own bits): 80 tokens need 21 blocks, so 24 hold one sequence at a time.
    const strip = (rs: ReturnType<typeof comparable>[]) => rs.map((r) => ({ ...r, cached_tokens: 0, cached_tokens_memory: 0 }));
    const batch = requests({ kind: "json_schema", schema: SCHEMA }, 80);
    const large = (await llms.load({ model: model!, engine: { blockSize: 4 } }).generate(batch)).map(comparable);
    const small = llms.load({ model: model!, engine: { blockSize: 4, numBlocks: 24 } });
    const got = (await small.generate(batch)).map(comparable);
    expect(small.stats().preemptions).toBeGreaterThan(0);
    expect(strip(got)).toEqual(strip(large));
  }, LIMIT_MS);

  test("forced runs: a schema's fixed keys come as several tokens in one step, without speculation", async () => {
    const outputs = await allOutputs(llm, [{ prompt: "A person:", maxTokens: 300, temperature: 0, constraint: { kind: "json_schema", schema: SCHEMA } }]);
    expect(outputs.some((o) => o.tokenIds.length > 1)).toBe(true);
    const text = outputs.map((o) => o.text).join("");
    expect(matchesSchema(JSON.parse(text))).toBe(true);
    // With logprobs every token is sampled from its own row: no forced run (and so another
    // tokenization of the forced text may come out: the canonical one is forced, greedy may pick another).
    const sampled = await allOutputs(llm, [{ prompt: "A person:", maxTokens: 300, temperature: 0, logprobs: 1, constraint: { kind: "json_schema", schema: SCHEMA } }]);
    expect(sampled.every((o) => o.tokenIds.length <= 1)).toBe(true);
    expect(matchesSchema(JSON.parse(sampled.map((o) => o.text).join("")))).toBe(true);
  }, LIMIT_MS);

  test("a constraint that cannot be compiled is a RequestFieldError naming it", () => {
    const fieldOf = (constraint: unknown) => {
      try {
        llm.client.prepare({ prompt: "x", constraint: constraint as ConstraintSpec });
      } catch (e) {
        expect(e).toBeInstanceOf(RequestFieldError);
        return [(e as RequestFieldError).field, (e as RequestFieldError).problem];
      }
      throw new Error("expected a RequestFieldError");
    };
    const remote = fieldOf({ kind: "json_schema", schema: { $ref: "https://example.com/s.json" } });
    expect(remote[0]).toBe("constraint");
    expect(remote[1]).toContain("https://example.com/s.json");
    expect(fieldOf({ kind: "gbnf", grammar: "root ::= \"a\" undefined-rule" })[0]).toBe("constraint");
    expect(fieldOf({ kind: "regex", pattern: "" })[0]).toBe("constraint.pattern");
    expect(fieldOf({ kind: "choice", choices: [] })[0]).toBe("constraint.choices");
    expect(fieldOf({ kind: "yaml" })[0]).toBe("constraint.kind");
  });
});
