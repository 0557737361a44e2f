/**
 * What the engine hands out: immutable snapshots, never live objects. A step yields one
 * EngineOutput per sample it advanced (or ended); the front door (engine-client.ts) passes them on
 * to the request's stream. A consumer that wants the whole result folds them (collect.ts).
 */
import type { SampledLogprob } from "./logprobs.ts";
import type { FinishReason, Sequence } from "./sequence.ts";
import type { SpeculationCounts } from "./speculative.ts";

// A sample's finish reason is the sequence's state; outputs carry it, so it is exported with them.
export type { FinishReason };

/** Token counts of one sample so far. */
export interface OutputUsage {
  readonly promptTokens: number;
  /** Prompt tokens served from the prefix cache (memory and disk together); 0 until admitted. */
  readonly cachedTokens: number;
  /** Of cachedTokens, those read from the disk tier instead of computed. */
  readonly cachedTokensDisk: number;
  /** Tokens generated so far (a stop token excluded). */
  readonly completionTokens: number;
}

/** When a sample arrived, got its first token and ended (performance.now() milliseconds). */
export interface OutputTiming {
  readonly arrivalMs: number;
  readonly firstTokenMs: number | null;
  readonly finishMs: number | null;
}

/** What one step did for one sample of a request. */
export interface EngineOutput {
  readonly requestId: string;
  /** Which of the request's n samples (0 .. n - 1). */
  readonly index: number;
  /** Tokens generated this step: usually 1, more when draft tokens were accepted, 0 when it ended without one. */
  readonly tokenIds: readonly number[];
  /** Tokens sampled this step, a stop token included (tokenIds plus the stop token, if one came). */
  readonly numSampled: number;
  /** Text that became showable this step (held back while it may still turn into a stop string). */
  readonly text: string;
  /** The log-probabilities of tokenIds, when the request asked for them; else null. */
  readonly logprobs: readonly SampledLogprob[] | null;
  /** Set on the sample's last output: why it ended. */
  readonly finishReason: FinishReason | null;
  /** Why it failed, when finishReason is "error"; else null. */
  readonly error: string | null;
  readonly usage: OutputUsage;
  readonly timing: OutputTiming;
  /** Speculative decoding's counts for this sample so far; null when the engine does not speculate. */
  readonly speculation: SpeculationCounts | null;
  /** An embedding request's pooled hidden state (GenerationParams.pooling), on its last output; else null. */
  readonly embedding: Float32Array | null;
}

/** Where a sequence stood when its last output was made, to cut the next one's new part. */
export interface OutputMark {
  tokens: number;
  logprobs: number;
}

/** The output of `seq` for what it gained since `mark` (then moved to now), with the text that became showable. */
export function snapshot(seq: Sequence, mark: OutputMark, text: string, numSampled: number): EngineOutput {
  const tokenIds = seq.outputTokenIds.slice(mark.tokens);
  const logprobs = seq.params.logprobs === undefined ? null : seq.logprobs.slice(mark.logprobs);
  mark.tokens = seq.outputTokenIds.length;
  mark.logprobs = seq.logprobs.length;
  const cached = seq.numCachedTokens ?? 0;
  return {
    requestId: seq.requestId,
    index: seq.sampleIndex,
    tokenIds,
    numSampled,
    text,
    logprobs,
    finishReason: seq.finishReason,
    error: seq.error,
    usage: { promptTokens: seq.numPromptTokens, cachedTokens: cached, cachedTokensDisk: seq.numTierCachedTokens ?? 0, completionTokens: seq.outputTokenIds.length },
    timing: { arrivalMs: seq.arrivalMs, firstTokenMs: seq.firstTokenMs, finishMs: seq.finishMs },
    speculation: seq.drafter === null ? null : { ...seq.drafter.counts },
    embedding: seq.embedding,
  };
}
