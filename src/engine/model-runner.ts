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
    const vocab = this.model.config.vocabSize;
    const f32 = this.model.backend.mem.f32;
    return rows.map((r) => (r < 0 ? null : f32.subarray(this.model.logitsAddr(r) >> 2, (this.model.logitsAddr(r) >> 2) + vocab)));
  }
}
