/**
 * Serving workloads with shared prefixes, after the two public benchmarks' generators (random
 * token ids, all requests submitted at once, then shuffled as both generators do):
 *
 * - vLLM's `prefix_repetition` dataset: P shared prefixes, each followed by a unique suffix, the
 *   same number of requests per prefix (at full size: 10 prefixes of 256 tokens, 256-token suffixes,
 *   128 output tokens, 100 requests). Scaled down, it keeps 10 requests per prefix.
 * - SGLang's `generated-shared-prefix` dataset: groups of prompts that share a long system prompt,
 *   each with its own question (SGLang's defaults: 16 prompts per group, a 2048-token system
 *   prompt, 128-token questions; here the system prompt is 1024 tokens so prompt and output fit a
 *   2048-token context).
 */
import type { GenerateRequest } from "../llm/llm.ts";
import { prefixRepetition, TokenSource } from "./token-source.ts";

export type WorkloadName = "prefix-repetition" | "generated-shared-prefix";
export const WORKLOAD_NAMES: readonly WorkloadName[] = ["prefix-repetition", "generated-shared-prefix"];

export interface Workload {
  name: WorkloadName;
  /** What it is, with its parameters. */
  description: string;
  requests: GenerateRequest[];
  /** Distinct shared prefixes and their length in tokens (BOS included). */
  numPrefixes: number;
  prefixTokens: number;
  /** Tokens of each request after its shared prefix, output included. */
  uniqueTokens: number;
}

export interface WorkloadOptions {
  requests: number;
  outputTokens: number;
  seed: number;
  vocabSize: number;
}

/** The full-size vLLM prefix_repetition workload's prefix and suffix lengths and requests per prefix. */
const PR = { prefixTokens: 256, suffixTokens: 256, requestsPerPrefix: 10 };
/** SGLang generated-shared-prefix, fitted to a 2048-token context. */
const GSP = { systemPromptTokens: 1024, questionTokens: 128, promptsPerGroup: 16 };

export function makeWorkload(name: WorkloadName, o: WorkloadOptions): Workload {
  return name === "prefix-repetition" ? vllmPrefixRepetition(o) : generatedSharedPrefix(o);
}

/** Both workloads are prefix repetition with BOS-led prefixes; they differ in shape and names. */
function repeatedPrefixes(o: WorkloadOptions, idPrefix: string, shape: { prefixes: number; prefixTokens: number; suffixTokens: number }): GenerateRequest[] {
  const prompts = prefixRepetition(new TokenSource(o.seed, o.vocabSize), { ...shape, requests: o.requests }, true);
  return prompts.map((p): GenerateRequest => ({ id: `${idPrefix}-${p.index}`, promptTokenIds: p.tokenIds, maxTokens: o.outputTokens, temperature: 0 }));
}

function vllmPrefixRepetition(o: WorkloadOptions): Workload {
  const numPrefixes = Math.max(1, Math.round(o.requests / PR.requestsPerPrefix));
  return {
    name: "prefix-repetition",
    description: `vLLM prefix_repetition: ${numPrefixes} prefix(es) x ${PR.prefixTokens} tokens, ${PR.suffixTokens}-token unique suffixes, ${o.outputTokens} output tokens, ${o.requests} requests`,
    requests: repeatedPrefixes(o, "pr", { prefixes: numPrefixes, prefixTokens: PR.prefixTokens, suffixTokens: PR.suffixTokens }),
    numPrefixes,
    prefixTokens: PR.prefixTokens,
    uniqueTokens: PR.suffixTokens + o.outputTokens,
  };
}

function generatedSharedPrefix(o: WorkloadOptions): Workload {
  const numGroups = Math.max(1, Math.ceil(o.requests / GSP.promptsPerGroup));
  return {
    name: "generated-shared-prefix",
    description: `SGLang generated-shared-prefix: ${numGroups} group(s) sharing a ${GSP.systemPromptTokens}-token system prompt, ${GSP.questionTokens}-token questions, ${o.outputTokens} output tokens, ${o.requests} requests`,
    requests: repeatedPrefixes(o, "gsp", { prefixes: numGroups, prefixTokens: GSP.systemPromptTokens, suffixTokens: GSP.questionTokens }),
    numPrefixes: numGroups,
    prefixTokens: GSP.systemPromptTokens,
    uniqueTokens: GSP.questionTokens + o.outputTokens,
  };
}

/**
 * The serving runs' KV pool: exactly `maxNumSeqs` whole requests. With the cache off the running
 * requests always fit, so nothing is preempted (in a tighter pool a waiting request is admitted,
 * computes a prompt chunk and is preempted again every other step, and recomputing dominates).
 * With the cache on, running requests share prefixes and leave little room besides, so cached
 * prefixes compete for blocks and are evicted: eviction and scheduling order matter.
 */
export function servingPoolBlocks(w: Workload, blockSize: number, maxNumSeqs: number): number {
  return maxNumSeqs * Math.ceil((w.prefixTokens + w.uniqueTokens) / blockSize);
}
