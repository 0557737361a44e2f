/**
 * What an embedding or reranking request is and what it returns: the contract between the front
 * door (LLM.embed, LLM.rerank), the server's /v1/embeddings and /v1/rerank, the CLI's `embed` and
 * `rerank`, and the two kinds of model that compute them (encoders, which run without a KV cache,
 * and decoder embedders, which run through the paged engine so that a shared prefix is cached).
 * Vectors are returned pooled and unnormalized by the model; normalization and `dimensions` are
 * applied once, in src/embed/normalize.ts, on every path.
 */

/** How one input's token vectors become its embedding (llama.cpp's --pooling; `rank` is a reranker's score head). */
export type Pooling = "none" | "mean" | "cls" | "last" | "rank";

/** One input: a text, tokenized as the model's file says (special tokens added), or token ids run as given. */
export type EmbedInput = string | readonly number[];

export interface EmbedOptions {
  /**
   * llama.cpp's --embd-normalize: -1 none, 0 max absolute value scaled to int16's range, 1 taxicab,
   * 2 Euclidean (the default), p > 2 the p-norm.
   */
  readonly normalize?: number;
  /** Matryoshka: keep the first N values, then normalize (as ollama and vLLM do). At most the model's width. */
  readonly dimensions?: number;
  /** Cut an input longer than the model's context to it (ollama's `truncate`) instead of refusing it. */
  readonly truncate?: boolean;
}

export interface Embedding {
  /** The input's index in the request. */
  readonly index: number;
  /** The pooled vector (width values); with pooling `none`, every token's vector, tokenCount x width, row after row. */
  readonly values: Float32Array;
  /** Tokens the model ran for this input (special tokens included). */
  readonly tokenCount: number;
}

export interface EmbedResult {
  /** In input order. */
  readonly embeddings: readonly Embedding[];
  /** The sum of tokenCount: OpenAI's usage.prompt_tokens. */
  readonly promptTokens: number;
}

export interface RerankOptions {
  /** Keep the best N results (all when absent). */
  readonly topN?: number;
}

export interface RerankScore {
  /** The document's index in the request. */
  readonly index: number;
  /** llama.cpp's /rerank score: a BERT head's raw logit, or Qwen3-Reranker's p("yes") (its softmax over yes/no). */
  readonly score: number;
  /** In 0-1 (vLLM's, Jina's and Cohere's relevance_score): sigmoid(score) of a logit, the score itself when it is a probability. */
  readonly relevanceScore: number;
}

export interface RerankResult {
  /** Best first. */
  readonly results: readonly RerankScore[];
  readonly promptTokens: number;
}

/** What a loaded model can be asked for (the server's /v1/models says it; a request for another is a 400 naming it). */
export interface ModelCapabilities {
  readonly generate: boolean;
  readonly embed: boolean;
  readonly rerank: boolean;
  /** The pooling embeddings get (the file's `{arch}.pooling_type`, or the --pooling option); null: none (generation only). */
  readonly pooling: Pooling | null;
  /** Width of an embedding (the model's hidden size). */
  readonly embeddingWidth: number;
}

/**
 * A model that embeds token sequences: an encoder (BERT, nomic-bert) or a decoder embedder
 * through the engine. Invariant: each sequence's vector is the same bits whatever else is in the
 * call, in what order, at any thread count and cache state.
 */
export interface Embedder {
  readonly pooling: Pooling;
  readonly width: number;
  /** The most tokens one sequence may have (the model's context). */
  readonly maxTokens: number;
  /**
   * How a rank head's score reads: a logit (a BERT cross-encoder's; its relevance is the sigmoid)
   * or a probability already (Qwen3-Reranker's softmax over yes/no). Absent: a logit.
   */
  readonly rankScore?: "logit" | "probability";
  /** Pooled, unnormalized vectors, one per sequence, in order (for `rank`, the head's output: the score first). */
  embed(sequences: readonly (readonly number[])[]): Promise<Float32Array[]>;
  close(): void;
}
