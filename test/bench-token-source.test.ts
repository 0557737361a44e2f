/**
 * The benchmarks draw every prompt from one token source and build vLLM's prefix-repetition
 * workload with one generator: the engine benches (BOS-led prefixes, llama2.c content ids) and
 * `bench serve` (no BOS, ids clear of a vocabulary's control and byte tokens) differ only in
 * those two settings.
 */
import { describe, expect, test } from "bun:test";
import { makeWorkload } from "../src/bench/prefix-workloads.ts";
import { firstTokenId, prefixWorkload, servingTokens } from "../src/bench/serve/serve-workloads.ts";
import { BOS, prefixRepetition, TokenSource } from "../src/bench/token-source.ts";

describe("TokenSource", () => {
  test("draws in [first, vocabSize), seeded; serving draws start at firstTokenId", () => {
    const ids = new TokenSource(1, 40, 30).tokens(500);
    expect(Math.min(...ids)).toBe(30);
    expect(Math.max(...ids)).toBe(39);
    expect(new TokenSource(1, 40, 30).tokens(500)).toEqual(ids);
    expect(servingTokens(4, 512).tokens(64)).toEqual(new TokenSource(4, 512, firstTokenId(512)).tokens(64));
    expect(Math.min(...servingTokens(4, 512).tokens(2000))).toBe(256);
  });

  test("a vocabulary with no id to draw is refused", () => {
    expect(() => new TokenSource(1, 3)).toThrow("a vocabulary of 3 tokens is too small to draw prompts from");
    expect(() => servingTokens(1, 1)).toThrow("a vocabulary of 1 tokens is too small to draw prompts from");
  });
});

describe("prefixRepetition", () => {
  const shape = { prefixes: 3, prefixTokens: 10, suffixTokens: 4, requests: 12 };

  test("request i is prefix i mod P plus its own suffix, every prefix equally often, shuffled", () => {
    const prompts = prefixRepetition(new TokenSource(7, 1000), shape, false);
    expect(prompts.map((p) => p.index).sort((a, b) => a - b)).toEqual([...Array(12).keys()]);
    expect(prompts.map((p) => p.index)).not.toEqual([...Array(12).keys()]);
    const prefixOf = new Map(prompts.map((p) => [p.index, p.tokenIds.slice(0, 10).join(",")]));
    for (const p of prompts) expect(prefixOf.get(p.index)).toBe(prefixOf.get(p.index % 3));
    expect(new Set(prefixOf.values()).size).toBe(3);
    expect(new Set(prompts.map((p) => p.tokenIds.slice(10).join(","))).size).toBe(12);
    expect(prompts.every((p) => p.tokenIds.length === 14 && p.tokenIds[0] !== BOS)).toBe(true);
  });

  test("with bos, each prefix starts with BOS and keeps its length", () => {
    const prompts = prefixRepetition(new TokenSource(7, 1000), shape, true);
    expect(prompts.every((p) => p.tokenIds.length === 14 && p.tokenIds[0] === BOS)).toBe(true);
  });

  test("bench prefix's workloads and bench serve's prefix workload are its prompts", () => {
    const engine = makeWorkload("prefix-repetition", { requests: 30, outputTokens: 8, seed: 3, vocabSize: 512 });
    const drawn = prefixRepetition(new TokenSource(3, 512), { prefixes: 3, prefixTokens: 256, suffixTokens: 256, requests: 30 }, true);
    expect(engine.requests.map((r) => [r.id, r.promptTokenIds])).toEqual(drawn.map((p) => [`pr-${p.index}`, p.tokenIds]));
    const served = prefixWorkload({ ...shape, outputTokens: 2 }, 5, 32000);
    const sent = prefixRepetition(servingTokens(5, 32000), shape, false);
    expect(served.requests.map((r) => [r.id, r.prompt])).toEqual(sent.map((p) => [`prefix-${p.index}`, { kind: "tokens", tokenIds: p.tokenIds }]));
  });
});
