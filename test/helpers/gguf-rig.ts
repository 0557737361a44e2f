/**
 * Drives a GGUF model's forward pass directly (no scheduler): token ids in, logits of every
 * position out, over a paged KV cache with a shuffled block table. Used to score token sequences
 * against llama.cpp's references and to check batch invariance on GGUF files.
 */
import { expect } from "bun:test";
import { CpuBackend } from "../../src/backend/wasm/cpu.ts";
import { KVArena } from "../../src/backend/wasm/kv-arena.ts";
import { KVCacheGroups } from "../../src/kv/kv-groups.ts";
import type { KVType } from "../../src/kv/kv-layout.ts";
import { StepBatch } from "../../src/model/batch.ts";
import type { ModelConfig } from "../../src/model/config.ts";
import { LlamaModel } from "../../src/backend/wasm/llama.ts";
import { openCheckpoint } from "../../src/model/load.ts";
import { loadWeights } from "../../src/backend/wasm/weights.ts";
import { sameBits } from "./logit-compare.ts";

export class GGUFRig {
  readonly backend: CpuBackend;
  readonly config: ModelConfig;
  readonly model: LlamaModel;
  readonly arena: KVArena;
  readonly batch: StepBatch;
  /**
   * Block tables (one per KV cache group, kv-groups.ts) of the sequence under test (reversed order,
   * so tables are not contiguous), and of a second sequence on the other blocks.
   */
  readonly tables: number[][];
  readonly otherTables: number[][];

  /** kvType: f32 unless given, so that comparisons with float64 references see only the weights' rounding. */
  constructor(path: string, readonly maxTokens: number, threads: number, readonly blockSize = 16, kvType: KVType = "f32") {
    const ckpt = openCheckpoint(path);
    this.config = { ...ckpt.config, seqLen: Math.min(ckpt.config.seqLen, maxTokens) };
    this.backend = new CpuBackend(threads);
    try {
      const weights = loadWeights({ ...ckpt, config: this.config }, this.backend.mem, this.backend.kernels);
      const blocks = Math.ceil(maxTokens / blockSize);
      const groups = KVCacheGroups.of(this.config);
      this.model = new LlamaModel(this.config, weights, this.backend, 2 * maxTokens, 2 * maxTokens);
      this.arena = new KVArena(this.backend.mem, this.config, 2 * blocks * groups.groups.length, blockSize, kvType);
      this.batch = new StepBatch(this.backend.mem, 2 * maxTokens, 2, blocks, blockSize, 2 * maxTokens, groups.groups.length);
      this.tables = groups.disjointTables(Array.from({ length: blocks }, (_, i) => 2 * blocks - 1 - i), 2 * blocks);
      this.otherTables = groups.disjointTables(Array.from({ length: blocks }, (_, i) => i), 2 * blocks);
    } catch (e) {
      this.backend.close();
      throw e;
    }
  }

  close(): void {
    this.backend.close();
  }

  private rows(row: number, n: number): Float32Array[] {
    const V = this.config.vocabSize;
    const out: Float32Array[] = [];
    for (let r = row; r < row + n; r++) {
      const at = this.model.logitsAddr(r) >> 2;
      out.push(this.backend.mem.f32.slice(at, at + V));
    }
    return out;
  }

  /** Logits at every position of `tokens`, fed in chunks of `chunk` tokens, optionally beside a second sequence. */
  logits(tokens: readonly number[], chunk: number, other: readonly number[] | null = null): Float32Array[] {
    const out: Float32Array[] = [];
    for (let pos = 0; pos < tokens.length; pos += chunk) {
      this.batch.reset();
      if (other !== null && pos < other.length) this.batch.addSequence(other.slice(pos, pos + chunk), pos, this.otherTables, "last");
      const piece = tokens.slice(pos, pos + chunk);
      const row = this.batch.addSequence(piece, pos, this.tables, "all");
      this.model.forward(this.batch, this.arena);
      out.push(...this.rows(row, piece.length));
    }
    return out;
  }

  /** `steps` greedy ids after `prompt` (prefill in one chunk, then one token per step), stopping after any of `stops`. */
  greedy(prompt: readonly number[], steps: number, stops: ReadonlySet<number>): number[] {
    const all = [...prompt];
    let last = this.logits(prompt, prompt.length).at(-1)!;
    const out: number[] = [];
    for (let i = 0; i < steps; i++) {
      const next = argmax(last);
      out.push(next);
      if (stops.has(next)) break;
      all.push(next);
      this.batch.reset();
      const row = this.batch.addSequence([next], all.length - 1, this.tables, "last");
      this.model.forward(this.batch, this.arena);
      last = this.rows(row, 1)[0]!;
    }
    return out;
  }
}

/**
 * The same logits, bit for bit, for `tokens` prefilled at once by `rig`, in chunks of 7, token by
 * token and in chunks of 11 beside another sequence, and by `other` (another thread count) in chunks of 5.
 */
export function expectChunkingInvariance(rig: GGUFRig, other: GGUFRig, tokens: readonly number[]): void {
  const once = rig.logits(tokens, tokens.length);
  expect(sameBits(rig.logits(tokens, 7), once)).toBe(true);
  expect(sameBits(rig.logits(tokens, 1), once)).toBe(true);
  expect(sameBits(rig.logits(tokens, 11, [...tokens].reverse()), once)).toBe(true);
  expect(sameBits(other.logits(tokens, 5), once)).toBe(true);
}

export function argmax(x: ArrayLike<number>): number {
  let best = 0;
  for (let i = 1; i < x.length; i++) if (x[i]! > x[best]!) best = i;
  return best;
}

/** log softmax(x)[i], in float64. */
export function logSoftmaxAt(x: ArrayLike<number>, i: number): number {
  let max = -Infinity;
  for (let j = 0; j < x.length; j++) max = Math.max(max, x[j]!);
  let sum = 0;
  for (let j = 0; j < x.length; j++) sum += Math.exp(x[j]! - max);
  return x[i]! - max - Math.log(sum);
}
