/**
 * A decoder embedder (Qwen3-Embedding, or any decoder given last-token pooling): each sequence is
 * an engine request that runs its prompt and ends with its last token's hidden state after the
 * output norm (GenerationParams.pooling). They go through the paged KV engine like any prompt, so
 * a prefix many inputs share (Qwen3-Embedding's `Instruct: ...\nQuery: `) is computed once and hit
 * by the rest, and a call's sequences are submitted together so that they batch. Every vector is
 * the same bits whether its prefix was a cache hit or computed, whatever the batch, the chunking
 * and the thread count, as generation's logits are (docs/architecture.md, batch invariance).
 *
 * Only `last` pooling, and `rank` on a reranker whose head reads the last token (Qwen3-Reranker's
 * layout, model/rank-head.ts): a cache hit keeps no hidden state of the tokens it skips, which
 * mean or first-token pooling would need, and running those without the cache would give up what
 * a decoder embedder is for; decoderPooling refuses them. A reranker's documents share the rerank
 * template's prefix and their query: submitted together, that prefix is computed once (the
 * scheduler caches each block a step fills at allocation).
 */
import { EmbeddingFailedError, InputError, RequestTooLongError } from "../errors.ts";
import type { EngineRequest } from "../engine/engine.ts";
import type { EngineOutput } from "../engine/engine-output.ts";
import { DEFAULT_SAMPLING } from "../engine/sampler.ts";
import type { DecoderRankHead } from "../model/rank-head.ts";
import type { Embedder, Pooling } from "./embed-types.ts";

/** Queues engine requests together and streams their outputs (EngineClient.submitEngineRequests). */
export type EngineRequestSubmit = (requests: readonly EngineRequest[]) => AsyncIterable<EngineOutput>;

/** What a decoder embedder needs of its engine. */
export interface DecoderEmbedderParts {
  readonly submit: EngineRequestSubmit;
  /** The model's hidden size. */
  readonly width: number;
  /** Positions one sequence can reach (EngineInfo.maxPositions). */
  readonly maxTokens: number;
  /** A reranker's head (pooling rank), or null (pooling last). */
  readonly rankHead: DecoderRankHead | null;
}

/**
 * The pooling a decoder runs: the file's `{arch}.pooling_type` or the --pooling option (the
 * option wins), null when neither names one (a chat model: no embeddings). InputError for any
 * pooling but `last`, and `rank` on a file with the rank head (see the file's comment).
 */
export function decoderPooling(filePooling: Pooling | null, option: Pooling | null, hasRankHead: boolean): DecoderPooling | null {
  const pooling = option ?? filePooling;
  if (pooling === null || pooling === "last") return pooling;
  if (pooling === "rank") {
    if (hasRankHead) return pooling;
    throw new InputError("pooling rank needs a reranker's head (cls.output.weight), which this decoder model lacks");
  }
  throw new InputError(`pooling ${pooling} is not supported on a decoder model: it embeds through the prefix cache, which keeps only the last token's state (use --pooling last)`);
}

/** What a decoder pools: its last token's state, or that through its rank head. */
export type DecoderPooling = "last" | "rank";

export class DecoderEmbedder implements Embedder {
  readonly pooling: DecoderPooling;
  readonly width: number;
  readonly maxTokens: number;
  /** The yes/no head's softmax is a probability already (llama.cpp's /rerank score, p("yes")). */
  readonly rankScore = "probability" as const;
  private readonly submit: EngineRequestSubmit;
  private readonly rankHead: DecoderRankHead | null;
  /** Calls so far: each call's request ids are its own. */
  private calls = 0;

  constructor(parts: DecoderEmbedderParts) {
    this.submit = parts.submit;
    this.width = parts.width;
    this.maxTokens = parts.maxTokens;
    this.rankHead = parts.rankHead;
    this.pooling = parts.rankHead === null ? "last" : "rank";
  }

  /**
   * Pooled, unnormalized vectors, in order (for rank, the head's softmax over its labels: the
   * score first). RequestTooLongError naming the sequence's index for
   * one longer than maxTokens (none is queued then); EmbeddingFailedError when the engine ends one
   * without its vector.
   */
  async embed(sequences: readonly (readonly number[])[]): Promise<Float32Array[]> {
    sequences.forEach((s, i) => this.checkLength(s, i));
    if (sequences.length === 0) return [];
    const call = this.calls++;
    const requests = sequences.map((tokens, i) => embeddingRequest(`embed-${call}-${i}`, tokens));
    const index = new Map(requests.map((r, i) => [r.id, i]));
    const vectors: (Float32Array | null)[] = sequences.map(() => null);
    for await (const out of this.submit(requests)) {
      if (out.finishReason === null) continue;
      const i = index.get(out.requestId)!;
      if (out.embedding === null) throw new EmbeddingFailedError(`input ${i} ended (${out.finishReason}) without its embedding${out.error === null ? "" : `: ${out.error}`}`);
      vectors[i] = this.rankHead === null ? out.embedding : rankScores(this.rankHead, out.embedding);
    }
    return vectors.map((v, i) => {
      if (v === null) throw new EmbeddingFailedError(`input ${i} got no embedding`);
      return v;
    });
  }

  close(): void {}

  private checkLength(tokens: readonly number[], i: number): void {
    if (tokens.length === 0) throw new InputError(`input ${i} has no tokens`);
    if (tokens.length > this.maxTokens) {
      throw new RequestTooLongError(`input ${i} has ${tokens.length} tokens, more than the context of ${this.maxTokens} (truncate it, or a larger --ctx-size)`, "prompt");
    }
  }
}

/**
 * The head's output for a last hidden state, as llama.cpp computes it: cls.output · hidden (+ bias),
 * then a softmax over the labels (f32 values; the softmax as ggml's: exp of each minus the
 * largest, times 1 / their sum). Element 0 is the score.
 */
export function rankScores(head: DecoderRankHead, hidden: Float32Array): Float32Array {
  const n = head.labels.length;
  const width = hidden.length;
  const logits = new Float32Array(n);
  for (let r = 0; r < n; r++) {
    let dot = 0;
    const row = head.weights.subarray(r * width, (r + 1) * width);
    for (let i = 0; i < width; i++) dot += row[i]! * hidden[i]!;
    logits[r] = dot + (head.bias?.[r] ?? 0);
  }
  const max = Math.max(...logits);
  let sum = 0;
  const out = new Float32Array(n);
  for (let r = 0; r < n; r++) {
    out[r] = Math.exp(Math.fround(logits[r]! - max));
    sum += out[r]!;
  }
  const scale = Math.fround(1 / sum);
  for (let r = 0; r < n; r++) out[r] = out[r]! * scale;
  return out;
}

/** The engine request of one sequence: its prompt computed, nothing sampled, its last hidden state returned. */
export function embeddingRequest(id: string, tokens: readonly number[]): EngineRequest {
  return {
    id,
    promptTokenIds: tokens,
    samples: [{ maxTokens: 1, stop: [], sampling: DEFAULT_SAMPLING, pooling: "last" }],
    cacheSalt: null,
    constraint: null,
  };
}

/** What the factory needs of the front door (EngineClient): its engine-request queue and its context. */
export interface EmbeddingEngine {
  submitEngineRequests(requests: readonly EngineRequest[]): AsyncIterable<EngineOutput>;
  readonly info: { readonly maxPositions: number };
}

/**
 * The decoder embedder over `engine` for a model of hidden size `width` (what LLM builds for a
 * decoder with a pooling), a reranker when given its head.
 */
export function decoderEmbedder(engine: EmbeddingEngine, width: number, rankHead: DecoderRankHead | null = null): DecoderEmbedder {
  return new DecoderEmbedder({ submit: (requests) => engine.submitEngineRequests(requests), width, maxTokens: engine.info.maxPositions, rankHead });
}
