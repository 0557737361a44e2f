/**
 * Helpers for the disk KV cache tests: a scratch folder per test, the block files of a prompt in
 * chain order, and runs of an LLM with the disk tier that return results and tier counters.
 */
import { mkdtempSync, readdirSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { LLM, type CompletionResult, type GenerateRequest, type LoadOptions } from "../../src/llm/llm.ts";
import { CacheSaltExtraKey, hashBlockTokens } from "../../src/kv/block-hash.ts";
import type { SecondTierStats } from "../../src/kv/second-tier.ts";

export function scratchDir(tag: string): string {
  return mkdtempSync(join(tmpdir(), `pagellm-kvdisk-${tag}-`));
}

/** The one model folder under a cache root. */
export function modelFolder(root: string): string {
  const folders = readdirSync(root).filter((name) => /^[0-9a-f]{16}-[0-9a-f]{8}$/.test(name));
  if (folders.length !== 1) throw new Error(`expected one model folder in ${root}, found ${folders.join(", ")}`);
  return join(root, folders[0]!);
}

/** Block hashes of a prompt's full blocks (what the manager computes), in order. */
export function chainHashes(ids: readonly number[], blockSize: number, salt?: string): string[] {
  const hashes: string[] = [];
  for (let i = 0; (i + 1) * blockSize <= ids.length; i++) {
    const keys = i === 0 && salt !== undefined ? [new CacheSaltExtraKey(salt)] : null;
    hashes.push(hashBlockTokens(hashes[i - 1] ?? null, ids.slice(i * blockSize, (i + 1) * blockSize), keys));
  }
  return hashes;
}

/** The file of block `hash` of KV cache group `group` (a model with sliding-window layers stores each group apart). */
export function blockPath(folder: string, hash: string, group = 0): string {
  return join(folder, group === 0 ? `${hash}.kvb` : `${hash}-g${group}.kvb`);
}

export interface TierRun {
  results: CompletionResult[];
  tier: SecondTierStats;
  warnings: string[];
}

/** Loads `opts`, runs `requests` together, flushes the disk tier and closes: one "process lifetime". */
export async function runWithTier(opts: LoadOptions, requests: GenerateRequest[]): Promise<TierRun> {
  const warnings: string[] = [];
  const llm = LLM.load({ onWarning: (line) => warnings.push(line), ...opts });
  try {
    const results = await llm.generate(requests);
    await llm.flush();
    const tier = llm.stats().tier;
    if (tier === null) throw new Error("no disk tier");
    return { results, tier, warnings };
  } finally {
    llm.close();
  }
}

/** What must be bitwise equal between a run with disk hits and a cold run: tokens, text and logprobs. */
export function outputsOf(results: readonly CompletionResult[]): unknown[] {
  return results.map((r) => ({ id: r.id, token_ids: r.token_ids, text: r.text, finish_reason: r.finish_reason, logprobs: r.logprobs }));
}
