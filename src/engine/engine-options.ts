/**
 * The engine's options (`--ctx-size`, `--num-blocks`, `--max-num-batched-tokens`, ...), their
 * defaults, and the sizes derived from them before anything is allocated: the context a run gets,
 * the sequences a step may hold for the model's vocabulary, the KV blocks of the pool.
 */
import { availableParallelism } from "node:os";
import { InputError } from "../errors.ts";
import type { EvictionPolicyName } from "../kv/eviction.ts";
import type { HashAlgorithm } from "../kv/block-hash.ts";
import { KVCacheGroups } from "../kv/kv-groups.ts";
import type { KVLayout, KVType } from "../kv/kv-layout.ts";
import type { ModelConfig } from "../model/config.ts";
import type { AdmissionPolicy, SchedulePolicy } from "./scheduler.ts";
import type { SpeculativeOptions } from "./speculative.ts";

export interface EngineOptions {
  /**
   * Context size: positions a sequence may reach, which size the RoPE tables and cap the KV pool.
   * null = DEFAULT_CONTEXT or the model's own if smaller; 0 = the model's full context.
   */
  ctxSize: number | null;
  /** Tokens per KV block. */
  blockSize: number;
  /** KV pool size in blocks; null = from kvCacheMb. */
  numBlocks: number | null;
  /** KV pool size in MiB when numBlocks is null. */
  kvCacheMb: number;
  enablePrefixCaching: boolean;
  evictionPolicy: EvictionPolicyName;
  prefixHash: HashAlgorithm;
  /** Token budget of one step (prefill chunks and decode tokens together). */
  maxNumBatchedTokens: number;
  /**
   * Prompt tokens a step may compute while any request decodes (all prefill chunks together), so
   * that a step with decodes stays short; with nothing decoding a step takes maxNumBatchedTokens.
   */
  maxPrefillWhileDecoding: number;
  /** Sequences one step may hold. */
  maxNumSeqs: number;
  schedule: SchedulePolicy;
  /**
   * What admission keeps free (scheduler.ts): "finish", room for every admitted request to reach
   * its max_tokens (a stream is never preempted part way); "watermark", a block per running
   * request only (vLLM's: more requests at once, preempted and recomputed when the pool runs out).
   */
  admission: AdmissionPolicy;
  /** Threads the kernels run on (1 = the calling thread only). */
  threads: number;
  /**
   * Speculative decoding (speculative.ts): drafts verified several tokens a step, the output the
   * same bits as without; null = off.
   */
  speculative: SpeculativeOptions | null;
  /**
   * The largest WebAssembly memory in MiB (a model larger is placed over several); null =
   * PAGELLM_WASM_MEMORY_MB, else 4 GiB less what the runtime needs.
   */
  wasmMemoryMb: number | null;
  /**
   * Element type of the KV cache (llama.cpp's --cache-type-k/-v); null = the model's default: f16
   * for GGUF models, f32 for llama2.c checkpoints (see src/kv/kv-layout.ts).
   */
  kvType: KVType | null;
}

/** Context used when none is asked for: enough for chat, far less memory than a 128K-token maximum. */
export const DEFAULT_CONTEXT = 4096;

export const DEFAULT_ENGINE_OPTIONS: EngineOptions = {
  ctxSize: null,
  blockSize: 16,
  numBlocks: null,
  kvCacheMb: 512,
  enablePrefixCaching: true,
  evictionPolicy: "lru-keep-cached",
  prefixHash: "sha256",
  maxNumBatchedTokens: 512,
  maxPrefillWhileDecoding: 16,
  maxNumSeqs: 64,
  schedule: "fcfs",
  admission: "finish",
  threads: availableParallelism(),
  speculative: null,
  wasmMemoryMb: null,
  kvType: null,
};

/** Most bytes of logits one step may hold (fitToVocabulary). */
export const LOGIT_BUDGET_BYTES = 256 << 20;

/**
 * The options with maxNumSeqs lowered, when need be, so that the logit rows of a step (one per
 * sequence, more when speculating: logitRows) stay within LOGIT_BUDGET_BYTES. A real vocabulary
 * never needs it (Gemma 3's 262144 tokens: 64 rows are 64 MiB); a vocabulary of millions would
 * otherwise take gigabytes of logits, and the sampler's work arrays as much again.
 */
export function fitToVocabulary(o: EngineOptions, c: ModelConfig): EngineOptions {
  const rowsPerSeq = o.speculative === null ? 1 : 1 + o.speculative.tokens;
  const rows = Math.floor(LOGIT_BUDGET_BYTES / (4 * (c.vocabSize + c.dim)));
  const seqs = Math.max(1, Math.min(o.maxNumSeqs, Math.floor(rows / rowsPerSeq)));
  return seqs === o.maxNumSeqs ? o : { ...o, maxNumSeqs: seqs };
}

/**
 * Logit rows one step may ask for: one per sequence, or, when speculating, its last token's and
 * one per draft token (never more than the step's tokens).
 */
export function logitRows(o: EngineOptions): number {
  if (o.speculative === null) return o.maxNumSeqs;
  return Math.max(o.maxNumSeqs, Math.min(o.maxNumBatchedTokens, o.maxNumSeqs * (1 + o.speculative.tokens)));
}

/** The model's config with seqLen set to the context this engine runs at. */
export function withContext(c: ModelConfig, ctxSize: number | null): ModelConfig {
  if (ctxSize !== null && (!Number.isInteger(ctxSize) || ctxSize < 0)) {
    throw new InputError(`context size must be a non-negative integer, got ${ctxSize}`);
  }
  const seqLen = contextLength(c.seqLen, ctxSize);
  return seqLen === c.seqLen ? c : { ...c, seqLen };
}

/** The context a run gets for --ctx-size `ctxSize` on a model of `modelContext` positions (see EngineOptions.ctxSize). */
export function contextLength(modelContext: number, ctxSize: number | null): number {
  return ctxSize === 0 ? modelContext : Math.min(ctxSize ?? DEFAULT_CONTEXT, modelContext);
}

/**
 * Blocks for kvCacheMb, but no more than every sequence at full context could use, nor than the
 * backend holds per layer (maxBlocks: one GPU storage binding per layer's K or V).
 */
export function defaultNumBlocks(c: ModelConfig, o: EngineOptions, kv: KVLayout, maxBlocks: number): number {
  const perBlock = kv.blockBytes;
  const fromBudget = Math.floor((o.kvCacheMb * 2 ** 20) / perBlock);
  // What every sequence can hold at once at the full context (a sliding window's groups hold only theirs).
  const forAllSeqs = o.maxNumSeqs * KVCacheGroups.of(c).blocksPerSequence(c.seqLen, o.blockSize, o.maxNumBatchedTokens);
  return Math.max(1, Math.min(fromBudget, forAllSeqs, maxBlocks));
}
