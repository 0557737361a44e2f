/**
 * Turns a scheduler decision into one forward step: fills the step batch (tokens, positions,
 * block tables) in linear memory, runs the model, and says where each request's logits are.
 */
import type { KVArena } from "../kv/kv-arena.ts";
import type { KVCacheManager } from "../kv/kv-cache-manager.ts";
import type { StepBatch } from "../model/batch.ts";
import type { LlamaModel } from "../model/llama.ts";
import type { ScheduledRequest } from "./scheduler.ts";

export class ModelRunner {
  constructor(
    private readonly model: LlamaModel,
    private readonly arena: KVArena,
    private readonly kv: KVCacheManager,
    private readonly batch: StepBatch,
  ) {}

  /**
   * Run the scheduled tokens. Returns, per scheduled request, a view of the logits of its last new
   * token when that token ends its known tokens (a decode, or the last chunk of a prompt), else null.
   */
  execute(scheduled: readonly ScheduledRequest[]): (Float32Array | null)[] {
    const batch = this.batch;
    batch.reset();
    const rows = scheduled.map(({ req, numNewTokens }) => {
      const start = req.numComputedTokens;
      const tokens = req.allTokenIds.slice(start, start + numNewTokens);
      const wantsLogits = start + numNewTokens === req.numTokens;
      return batch.addSequence(tokens, start, this.kv.getBlockIds(req), wantsLogits ? "last" : "none");
    });
    this.model.forward(batch, this.arena);
    return rows.map((r) => (r < 0 ? null : this.logitsRow(r)));
  }

  /** Tokens one scoring call may take: every one of them gets a logits row. */
  get maxScoredTokens(): number {
    return Math.min(this.batch.maxTokens, this.batch.maxLogitRows);
  }

  /**
   * Teacher forcing: compute `tokens` at positions startPos.. of the sequence whose KV blocks are
   * `blockTable`, and return the logits after each of them (views, valid until the next call).
   */
  scoreChunk(tokens: readonly number[], startPos: number, blockTable: readonly number[]): Float32Array[] {
    const batch = this.batch;
    batch.reset();
    const first = batch.addSequence(tokens, startPos, blockTable, "all");
    this.model.forward(batch, this.arena);
    return tokens.map((_, i) => this.logitsRow(first + i));
  }

  private logitsRow(r: number): Float32Array {
    const start = this.model.logitsAddr(r) >> 2;
    return this.model.backend.mem.f32.subarray(start, start + this.model.config.vocabSize);
  }
}
