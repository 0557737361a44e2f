/**
 * Turns a scheduler decision into one forward step: fills the step batch (tokens, positions,
 * block tables) in linear memory, runs the model on its backend (ModelForward: WebAssembly or
 * WebGPU), and says where each request's logits are.
 */
import type { KVCacheManager } from "../kv/kv-cache-manager.ts";
import { stepSpans, type StepBatch, type StepSpan } from "../model/batch.ts";
import type { ModelForward } from "../backend/model-forward.ts";
import type { Request } from "../kv/request.ts";
import type { ScheduledRequest } from "./scheduler.ts";

export class ModelRunner {
  constructor(
    readonly model: ModelForward,
    private readonly kv: KVCacheManager,
    private readonly batch: StepBatch,
  ) {}

  /**
   * Run the scheduled tokens. Returns, per scheduled request, views of the logits (valid until the
   * next forward) at each of its new tokens from its last known token on: [] for a chunk of prompt
   * that does not end it; one row for a decode or a prompt's last chunk; 1 + d rows when d draft
   * tokens (req.draftTokenIds) follow the last known token, row j predicting the token after draft
   * token j - 1. A request that `pools` (an embedding) gets, with its prompt's last chunk, one row
   * of its last token's normed hidden state instead of logits.
   */
  async execute<R extends Request>(scheduled: readonly ScheduledRequest<R>[], pools: (req: R) => boolean = () => false): Promise<Float32Array[][]> {
    const batch = this.batch;
    batch.reset();
    const spans = scheduled.map(({ req, numNewTokens }) => {
      const start = req.numComputedTokens;
      const end = start + numNewTokens;
      const known = req.allTokenIds;
      const numDraft = Math.max(0, end - req.numTokens);
      const tokens = numDraft === 0 ? known.slice(start, end) : [...known.slice(start), ...req.draftTokenIds.slice(0, numDraft)];
      const numRows = end >= req.numTokens ? 1 + numDraft : 0;
      const hidden = numRows > 0 && pools(req);
      const spans = req.mmItems.length === 0 ? [] : stepSpans(req.mmItems, start, end);
      return { first: batch.addSequence(tokens, start, this.kv.getBlockTables(req), hidden ? "hidden" : numRows, spans), numRows, hidden };
    });
    await this.model.forward(batch);
    return spans.map(({ first, numRows, hidden }) =>
      Array.from({ length: numRows }, (_, j) => (hidden ? this.model.hiddenRow(first + j) : this.model.logitsRow(first + j))),
    );
  }

  /** Tokens one scoring call may take: every one of them gets a logits row. */
  get maxScoredTokens(): number {
    return Math.min(this.batch.maxTokens, this.batch.maxLogitRows);
  }

  /**
   * Teacher forcing: compute `tokens` at positions startPos.. of the sequence whose KV blocks are
   * `blockTables` (one per KV cache group), and return the logits after each of them (views, valid
   * until the next call). `spans`: rows that replace some of the tokens' input (StepBatch.addSequence).
   */
  async scoreChunk(
    tokens: readonly number[], startPos: number, blockTables: readonly (readonly number[])[], spans: readonly StepSpan[] = [],
  ): Promise<Float32Array[]> {
    const batch = this.batch;
    batch.reset();
    const first = batch.addSequence(tokens, startPos, blockTables, "all", spans);
    await this.model.forward(batch);
    return tokens.map((_, i) => this.model.logitsRow(first + i));
  }
}
