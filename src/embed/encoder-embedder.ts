/**
 * The Embedder of an encoder model (bert, nomic-bert): sequences packed in order into steps of at
 * most the model's step budget, each step one forward pass, each sequence pooled from its own
 * rows. A sequence is never split across steps: every token attends to every other, so all of a
 * sequence's keys must be in the step that computes it. A sequence over the step budget runs in a
 * step of its own (the model's buffers hold the context), so every sequence the request checks
 * let through (at most the context) runs.
 */
import { ModelCapabilityError } from "../errors.ts";
import { EncoderModel } from "../backend/wasm/encoder.ts";
import { GpuEncoderModel } from "../backend/webgpu/encoder-gpu.ts";
import type { WebGpuBackend } from "../backend/webgpu/backend.ts";
import type { EncoderCheckpoint, EncoderConfig } from "../model/encoder.ts";
import type { Embedder, Pooling } from "./embed-types.ts";
import { poolRows } from "./pooling.ts";

/** Tokens of one step by default: llama.cpp's default --ubatch-size is 512; more lets short inputs share a step. */
export const DEFAULT_ENCODER_STEP_TOKENS = 2048;

/** An encoder's forward pass on a backend: EncoderModel (WebAssembly) or GpuEncoderModel (WebGPU). */
interface EncoderForward {
  readonly config: EncoderConfig;
  /** The most tokens one step holds (at least the context). */
  readonly maxTokens: number;
  readonly labels: readonly string[] | null;
  forward(sequences: readonly (readonly number[])[]): Float32Array | Promise<Float32Array>;
  classify(rows: Float32Array): Float32Array | Promise<Float32Array>;
  close(): void;
}

export class EncoderEmbedder implements Embedder {
  readonly width: number;
  readonly maxTokens: number;

  private constructor(
    private readonly model: EncoderForward,
    readonly pooling: Pooling,
    /** Tokens packed into one step (a longer sequence runs in a step of its own). */
    private readonly stepTokens: number,
  ) {
    this.width = model.config.dim;
    this.maxTokens = model.config.contextLength;
  }

  /** Load the encoder on `threads` threads, or on `gpu`; `pooling` overrides the file's (rank needs the classifier head). */
  static load(ckpt: EncoderCheckpoint, opts: { threads: number; pooling?: Pooling; stepTokens?: number; gpu?: WebGpuBackend }): EncoderEmbedder {
    const pooling = opts.pooling ?? ckpt.config.pooling;
    if (pooling === "rank" && ckpt.config.classifier === null) {
      throw new ModelCapabilityError("rerank", `${ckpt.file}: pooling rank needs a classifier head (cls.weight, cls.output.weight), which the model lacks`);
    }
    const stepTokens = Math.max(1, opts.stepTokens ?? DEFAULT_ENCODER_STEP_TOKENS);
    const model = opts.gpu === undefined ? EncoderModel.load(ckpt, opts.threads, stepTokens) : GpuEncoderModel.load(ckpt, opts.gpu, stepTokens);
    // A GPU step may hold fewer tokens than asked (its attention grid's bound), never fewer than the context.
    return new EncoderEmbedder(model, pooling, Math.min(stepTokens, model.maxTokens));
  }

  /** The classifier's labels (a reranker's), or null. */
  get labels(): readonly string[] | null {
    return this.model.labels;
  }

  async embed(sequences: readonly (readonly number[])[]): Promise<Float32Array[]> {
    const out: Float32Array[] = [];
    for (const step of packSteps(sequences, this.stepTokens)) {
      const hidden = await this.model.forward(step);
      let start = 0;
      const firstRows: Float32Array[] = [];
      for (const seq of step) {
        if (this.pooling === "rank") firstRows.push(hidden.subarray(start * this.width, (start + 1) * this.width));
        else out.push(poolRows(hidden, start, seq.length, this.width, this.pooling));
        start += seq.length;
      }
      if (this.pooling === "rank") out.push(...(await this.scores(firstRows)));
    }
    return out;
  }

  close(): void {
    this.model.close();
  }

  /** Each first row through the classifier head: one value per label. */
  private async scores(rows: readonly Float32Array[]): Promise<Float32Array[]> {
    const stacked = new Float32Array(rows.length * this.width);
    rows.forEach((r, i) => stacked.set(r, i * this.width));
    const values = await this.model.classify(stacked);
    const labels = values.length / rows.length;
    return rows.map((_, i) => values.slice(i * labels, (i + 1) * labels));
  }
}

/** Sequences in order, cut into runs of at most `budget` tokens (a sequence alone may fill one). */
export function packSteps(sequences: readonly (readonly number[])[], budget: number): (readonly number[])[][] {
  const steps: (readonly number[])[][] = [];
  let current: (readonly number[])[] = [];
  let tokens = 0;
  for (const seq of sequences) {
    if (current.length > 0 && tokens + seq.length > budget) {
      steps.push(current);
      current = [];
      tokens = 0;
    }
    current.push(seq);
    tokens += seq.length;
  }
  if (current.length > 0) steps.push(current);
  return steps;
}
