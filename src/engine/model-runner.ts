/**
 * Turns a scheduler decision into one forward step: fills the step batch (tokens, positions,
 * block tables) in linear memory, runs the model on its backend (ModelForward: WebAssembly or
 * WebGPU), and says where each request's logits are.
 */
import type { KVCacheManager } from "../kv/kv-cache-manager.ts";
import type { StepBatch } from "../model/batch.ts";
import type { ModelForward } from "./model-forward.ts";
import type { ScheduledRequest } from "./scheduler.ts";

export class ModelRunner {
  constructor(
    readonly model: ModelForward,
    private readonly kv: KVCacheManager,
    private readonly batch: StepBatch,
  ) {}

  /**
   * Run the scheduled tokens. Returns, per scheduled request, a view of the logits of its last new
   * token when that token ends its known tokens (a decode, or the last chunk of a prompt), else null.
   */
  async execute(scheduled: readonly ScheduledRequest[]): Promise<(Float32Array | null)[]> {
    const batch = this.batch;
    batch.reset();
    const rows = scheduled.map(({ req, numNewTokens }) => {
      const start = req.numComputedTokens;
      const tokens = req.allTokenIds.slice(start, start + numNewTokens);
      const wantsLogits = start + numNewTokens === req.numTokens;
      return batch.addSequence(tokens, start, this.kv.getBlockIds(req), wantsLogits ? "last" : "none");
    });
    await this.model.forward(batch);
    return rows.map((r) => (r < 0 ? null : this.model.logitsRow(r)));
  }

  /** Tokens one scoring call may take: every one of them gets a logits row. */
  get maxScoredTokens(): number {
    return Math.min(this.batch.maxTokens, this.batch.maxLogitRows);
  }

  /**
   * Teacher forcing: compute `tokens` at positions startPos.. of the sequence whose KV blocks are
   * `blockTable`, and return the logits after each of them (views, valid until the next call).
   */
  async scoreChunk(tokens: readonly number[], startPos: number, blockTable: readonly number[]): Promise<Float32Array[]> {
    const batch = this.batch;
    batch.reset();
    const first = batch.addSequence(tokens, startPos, blockTable, "all");
    await this.model.forward(batch);
    return tokens.map((_, i) => this.model.logitsRow(first + i));
  }
}
