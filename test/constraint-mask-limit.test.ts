/**
 * A constraint that goes over its grammar's mask bounds while decoding (grammar/limits.ts, mask*:
 * the lexer states, nodes and work its masks may add) ends its sequence with finish_reason "error"
 * and the bound named in the error, through a real engine: the sequences batched with it run on
 * to the same bits as alone, and every KV block is free afterwards. The compiler is given mask
 * bounds small enough that a counted regex passes them within a few tokens; the compile's own
 * first mask is charged to the compile, so the request is accepted and fails mid-decode.
 */
import { afterAll, beforeAll, expect, test } from "bun:test";
import { buildEngine } from "../src/engine/engine-builder.ts";
import { EngineClient } from "../src/llm/engine-client.ts";
import { DEFAULT_ENGINE_OPTIONS } from "../src/engine/engine-options.ts";
import type { EngineOutput } from "../src/engine/engine-output.ts";
import type { LLMEngine } from "../src/engine/engine.ts";
import type { GenerateRequest } from "../src/llm/generate-request.ts";
import { GrammarConstraints } from "../src/grammar/constraints.ts";
import { GRAMMAR_LIMITS } from "../src/grammar/limits.ts";
import { openCheckpoint } from "../src/model/load.ts";
import { loadTokenizer } from "../src/tokenizer/load.ts";
import { describeShared } from "./helpers/shared.ts";
import { testThreads } from "./helpers/threads.ts";

const LIMIT_MS = 120_000;

/** Each request's outputs joined: its text, tokens, finish reason and error. */
interface Finished {
  text: string;
  tokenIds: number[];
  finishReason: string | null;
  error: string | null;
}

async function finished(client: EngineClient, requests: readonly GenerateRequest[]): Promise<Map<string, Finished>> {
  const byId = new Map<string, Finished>();
  const outputs: EngineOutput[] = [];
  for await (const o of client.submit(requests)) outputs.push(o);
  for (const o of outputs) {
    const f = byId.get(o.requestId) ?? { text: "", tokenIds: [], finishReason: null, error: null };
    f.text += o.text;
    f.tokenIds.push(...o.tokenIds);
    if (o.finishReason !== null && o.finishReason !== undefined) [f.finishReason, f.error] = [o.finishReason, o.error];
    byId.set(o.requestId, f);
  }
  return byId;
}

describeShared("a constraint over its mask bounds mid-decode", ["models/gguf/rnd-qwen2-Q5_K_M.gguf"], ([model]) => {
  let engine!: LLMEngine;
  let client!: EngineClient;
  let totalBlocks = 0;
  beforeAll(() => {
    const checkpoint = openCheckpoint(model!);
    const { tokenizer } = loadTokenizer(model!, { modelVocabSize: checkpoint.config.vocabSize });
    engine = buildEngine(checkpoint, tokenizer, { ...DEFAULT_ENGINE_OPTIONS, threads: testThreads() });
    totalBlocks = engine.numFreeBlocks;
    const prompts = {
      encode: (text: string) => tokenizer.encode(text, { addBos: true }), encodeWritten: (text: string) => tokenizer.encode(text),
      decodeWritten: (ids: readonly number[]) => tokenizer.decode(ids), piece: (id: number) => tokenizer.decode([id]), messages: () => ({ ids: [], reply: null, shownTokenIds: [] }),
    };
    // No room for new lexer states beyond what the compile's first mask made, and none granted per token.
    const maskLimits = { ...GRAMMAR_LIMITS, maskLexerStates: 4, maskLexerStatesPerToken: 0 };
    client = new EngineClient(engine, { prompts, constraints: new GrammarConstraints(tokenizer, checkpoint.config.vocabSize, { maskLimits }), reasoning: null });
  }, LIMIT_MS);
  afterAll(async () => {
    await client?.close();
    engine?.close();
  });

  test("ends that sequence with finish_reason error naming the bound; the others in its batch get the same bits as alone; every block is freed", async () => {
    const free: GenerateRequest[] = [
      { id: "greedy", prompt: "Once upon a time", maxTokens: 24, temperature: 0 },
      { id: "seeded", prompt: "The sea", maxTokens: 24, temperature: 0.9, seed: 7 },
    ];
    const constrained: GenerateRequest = { id: "bounded", prompt: "A word:", maxTokens: 40, temperature: 0, constraint: { kind: "regex", pattern: "[a-z]{1,80}" } };
    const alone = new Map<string, Finished>();
    for (const r of free) {
      expect(await client.resetPrefixCache()).toBe(true);
      for (const [id, f] of await finished(client, [r])) alone.set(id, f);
    }
    expect(await client.resetPrefixCache()).toBe(true);
    const batch = await finished(client, [free[0]!, constrained, free[1]!]);
    const bounded = batch.get("bounded")!;
    expect(bounded.finishReason).toBe("error");
    expect(bounded.error).toMatch(/^the constraint went over a bound: .*\(limit: maskLexerStates\)$/);
    // It ran a few tokens before the bound (the compile's first mask is not charged to it), all in the language.
    expect(bounded.tokenIds.length).toBeGreaterThan(0);
    expect(bounded.tokenIds.length).toBeLessThan(40);
    expect(bounded.text).toMatch(/^[a-z]+$/);
    for (const r of free) {
      expect(batch.get(r.id!)).toEqual(alone.get(r.id!)!);
      expect(alone.get(r.id!)!.finishReason).toBe("length");
    }
    expect(engine.hasUnfinished).toBe(false);
    expect(await client.resetPrefixCache()).toBe(true);
    expect(engine.numFreeBlocks).toBe(totalBlocks);
    // The grammar stays refused: a resend is a refusal naming the bound, before anything runs.
    expect(() => client.prepare(constrained)).toThrow(/maskLexerStates/);
  }, LIMIT_MS);
});
