/**
 * The chat workload's turns, warm against cold (`bench serve --cold-probe`): after each turn of a
 * conversation, the same messages are sent again in a way no cached block can serve, and the two
 * times to first token are kept side by side. The warm turn is the conversation's own request
 * (its history cached by the turns before it); the cold one's reply is thrown away, so the
 * conversation goes on exactly as without the probe. The cold request is the warm one with the
 * cold fields added (greedy, the same max_tokens), so both time the same thing: the first text of
 * the same reply, even when a first token makes no text of its own. On pagellm serve the two
 * replies are the same text (its output is bitwise the same with the cache on or off); the rows say
 * whether they were.
 *
 * How a request is made cold depends on the server:
 * - pagellm serve, vLLM (and a --url server): a fresh `cache_salt`, which every block hash of the
 *   request includes, so no block of any earlier request can match.
 * - llama-server: `cache_prompt: false` (its slot's tokens are not reused) on a slot of its own
 *   (`id_slot`), started beside the workload's slots; each conversation's turns are pinned to a
 *   workload slot (conversation c to slot c mod slots), since llama-server's own choice could pick
 *   the probe's slot (an empty slot is the least recently used), whose tokens the probe overwrites.
 *
 * Invariants: one request at a time (the run's concurrency is 1), so nothing else runs while
 * either is timed; a cold probe whose usage reports cached tokens was not cold, and the report says
 * so rather than keep its ratio.
 */
import { randomUUID } from "node:crypto";
import { sendRequest, type BenchRequest, type ExtraFields, type RequestOutcome, type ServerTarget } from "./openai-client.ts";
import type { ChatSource, ChatTurn, RequestSource } from "./workloads.ts";

/** How a server is asked to compute a request cold: the body fields of the n-th cold request, and those of a warm turn. */
export interface ColdMethod {
  /** In words, for the report ("a fresh cache_salt"). */
  description: string;
  fields(n: number): ExtraFields;
  warmFields(t: ChatTurn): ExtraFields;
}

/** pagellm serve and vLLM: a salt no other request has. */
export function saltedCold(): ColdMethod {
  const run = randomUUID();
  return { description: "a fresh cache_salt", fields: (n) => ({ cache_salt: `cold-probe-${run}-${n}` }), warmFields: () => ({}) };
}

/** llama-server with `slots` slots for the workload and one more (the last) for the cold requests. */
export function llamaServerCold(slots: number): ColdMethod {
  return {
    description: `cache_prompt false on slot ${slots} of its own`,
    fields: () => ({ cache_prompt: false, id_slot: slots }),
    warmFields: (t) => ({ id_slot: t.conversation % slots }),
  };
}

/** One turn, warm and cold. */
export interface TurnRow {
  /** From 0. */
  conversation: number;
  /** From 1. */
  turn: number;
  /** usage.prompt_tokens of the warm turn; null when the server sent no usage. */
  promptTokens: number | null;
  /** Prompt tokens the warm turn found cached; null when the server does not say. */
  cachedTokens: number | null;
  warmTtftMs: number;
  /** null when the cold request failed. */
  coldTtftMs: number | null;
  /** Prompt tokens the server said the cold request found cached: 0 when it was cold. */
  coldCachedTokens: number | null;
  /** warm / cold; null when the cold request failed or was not cold. */
  ratio: number | null;
  /** The cold reply's text is the warm one's; null when the cold request failed. */
  sameReply: boolean | null;
}

export interface TurnProbe {
  /** How the cold requests were made cold. */
  cold: string;
  rows: TurnRow[];
  /** The highest warm / cold ratio of turns 2 and later (turn 1 has no history of its own to reuse); null when none has one. */
  worst: { ratio: number; conversation: number; turn: number } | null;
  /** Cold requests that failed or were served from a cache, one line each. */
  errors: string[];
}

/** The turns' worst ratio, turn 1 left out. */
export function worstTurn(rows: readonly TurnRow[]): TurnProbe["worst"] {
  let worst: TurnProbe["worst"] = null;
  for (const r of rows) {
    if (r.turn < 2 || r.ratio === null) continue;
    if (worst === null || r.ratio > worst.ratio) worst = { ratio: r.ratio, conversation: r.conversation, turn: r.turn };
  }
  return worst;
}

/** Sends each finished turn again cold (RunOptions.afterEach) and keeps the rows. */
export class TurnProber {
  private readonly rows: TurnRow[] = [];
  private readonly errors: string[] = [];
  private sent = 0;

  constructor(
    private readonly target: ServerTarget,
    private readonly chat: ChatSource,
    private readonly method: ColdMethod,
    private readonly ignoreEos: boolean,
  ) {}

  /** The chat's requests with the method's warm fields added. */
  warmSource(): RequestSource {
    const { chat, method } = this;
    return {
      description: chat.description,
      get total() {
        return chat.total;
      },
      next: () => {
        const req = chat.next();
        return req === null ? null : { ...req, extra: { ...req.extra, ...method.warmFields(chat.turnOf(req.id)) } };
      },
      finished: (req, outcome) => chat.finished(req, outcome),
    };
  }

  /** After a turn: the same request cold (the cold fields in place of the warm ones). A failed turn has nothing to compare. */
  async after(req: BenchRequest, outcome: RequestOutcome, signal: AbortSignal): Promise<void> {
    if (!outcome.ok) return;
    const { conversation, turn } = this.chat.turnOf(req.id);
    const cold: BenchRequest = { ...req, id: `${req.id}-cold`, extra: this.method.fields(this.sent++) };
    const c = await sendRequest(this.target, cold, { ignoreEos: this.ignoreEos, signal, runStartMs: performance.now() });
    const warm = outcome.timing;
    const row: TurnRow = {
      conversation, turn, promptTokens: warm.promptTokens, cachedTokens: warm.cachedTokens, warmTtftMs: warm.ttftMs,
      coldTtftMs: c.ok ? c.timing.ttftMs : null, coldCachedTokens: c.ok ? c.timing.cachedTokens : null, ratio: null,
      sameReply: c.ok ? c.timing.text === warm.text : null,
    };
    // One cut by the run's time limit is no fault of the server's.
    if (!c.ok) {
      if (!c.failure.cut) this.errors.push(`cold request of turn ${turn}: ${c.failure.error}`);
    } else if (row.coldCachedTokens !== null && row.coldCachedTokens > 0) {
      this.errors.push(`cold request of turn ${turn}: the server served ${row.coldCachedTokens} of its tokens from a cache (it ignores ${this.method.description}?)`);
    } else row.ratio = warm.ttftMs / c.timing.ttftMs;
    this.rows.push(row);
  }

  result(): TurnProbe {
    return { cold: this.method.description, rows: [...this.rows], worst: worstTurn(this.rows), errors: [...this.errors] };
  }
}
