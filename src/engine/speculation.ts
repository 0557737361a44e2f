/**
 * A step's speculation over the running sequences (each one's drafting state: Drafter in
 * speculative.ts).
 *
 * How a step speculates (engine.ts, scheduler.ts, model-runner.ts): before scheduling, every
 * running sequence may get a draft (ngram-proposer.ts); the scheduler runs its last token and as
 * much of the draft as the step's leftover budget and free KV blocks allow, like a prefill chunk;
 * the model returns logits at each of those positions; the sampler then draws, position by
 * position, exactly what it would have drawn decoding one token at a time (the same logits, by
 * batch invariance; the same random stream, one draw per token; the same history for penalties),
 * accepting while the draw equals the draft. The first difference is the sampled token itself, so
 * every verification yields at least one token and the output is the same bits as without.
 */
import type { KVCacheManager } from "../kv/kv-cache-manager.ts";
import type { Sequence } from "./sequence.ts";

/**
 * A step's speculation: drafts proposed before scheduling, verified after the forward, and the
 * engine's counts of both.
 */
export class Speculation {
  /** Draft tokens verified, and those accepted, over the engine's life. */
  drafted = 0;
  accepted = 0;

  constructor(
    private readonly kv: KVCacheManager,
    /** Positions a sequence may reach. */
    private readonly maxPositions: number,
  ) {}

  /**
   * Give every running sequence its draft for this step ([] when it does not speculate, pauses or
   * finds none, or when `skip` says so: a sequence whose samples are forked once its prompt is
   * computed takes no draft, since they take its KV as computed). A sequence still reading its
   * prompt gets one too: the scheduler runs it only with the prompt's last chunk, so the first
   * tokens after a prompt can already come from it.
   */
  propose(running: readonly Sequence[], skip: (seq: Sequence) => boolean): void {
    for (const seq of running) {
      const draft = seq.drafter !== null && !skip(seq) ? seq.drafter.propose(seq.allTokenIds, this.draftLimit(seq)) : [];
      seq.draftTokenIds = withinConstraint(seq, draft);
    }
  }

  /**
   * Sample a sequence's logit rows in order, exactly as decoding one token at a time would: row j
   * follows draft token j - 1, so it is only used while every draw so far equalled the draft.
   * `draw` samples one row into the sequence (null when the row could not be sampled and the
   * sequence ended); `interrupts` says, after a token equal to the draft, whether decoding one token
   * at a time would go on otherwise than by sampling the next row (a constraint forcing the next
   * tokens), which ends the verification there too. Then the draft's rejected positions are rolled
   * back: the sequence keeps the KV of its known tokens up to the last one, which the next step
   * feeds, as after a plain decode. Returns the tokens drawn.
   */
  verify(seq: Sequence, rows: readonly Float32Array[], draw: (row: Float32Array) => number | null, interrupts: () => boolean = () => false): number {
    const draft = seq.draftTokenIds;
    const numDrafted = rows.length - 1;
    let accepted = 0;
    let numSampled = 0;
    for (let j = 0; j < rows.length; j++) {
      const token = draw(rows[j]!);
      if (token === null) break;
      numSampled++;
      const hit = j < numDrafted && token === draft[j];
      if (hit) accepted++;
      if (!hit || seq.isFinished || interrupts()) break;
    }
    seq.draftTokenIds = [];
    if (numDrafted > 0) {
      seq.drafter!.record(numDrafted, accepted);
      this.drafted += numDrafted;
      this.accepted += accepted;
      if (!seq.isFinished) {
        seq.numComputedTokens = seq.numTokens - 1;
        this.kv.rollback(seq, seq.numComputedTokens);
      }
    }
    return numSampled;
  }

  /**
   * Most draft tokens a sequence may verify: accepted whole, with the token sampled after them, they
   * must not take it past max_tokens, and their positions must fit the context.
   */
  private draftLimit(seq: Sequence): number {
    const maxTokens = seq.params.maxTokens;
    const byLength = maxTokens === null ? Infinity : maxTokens - seq.outputTokenIds.length - 1;
    return Math.max(0, Math.min(byLength, this.maxPositions - seq.numTokens));
  }
}

/**
 * The longest start of `draft` that seq's constraint accepts (it is left as it was): a draft token
 * the grammar refuses could never be sampled, so verifying it would waste a position.
 */
function withinConstraint(seq: Sequence, draft: number[]): number[] {
  const constraint = seq.constraint;
  if (constraint === null || draft.length === 0) return draft;
  let accepted = 0;
  while (accepted < draft.length && constraint.acceptToken(draft[accepted]!)) accepted++;
  constraint.rollback(accepted);
  return accepted === draft.length ? draft : draft.slice(0, accepted);
}
