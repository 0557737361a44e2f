/**
 * The chat workload's turns, warm against cold (`bench serve --cold-probe`): before each turn of a
 * conversation is sent, the turn's messages go out twice with max_tokens 1, first as the turn
 * would (its history cached by the turns before it), then in a way no cached block can serve, and
 * the two times are kept side by side. A one-token request's whole time is its time to first
 * token, whether or not that token makes text (a random-weight model's first token often makes
 * none, and a stream's first text can then come with its last token). The turn itself is sent
 * after them, as without the probe (its prompt now fully cached, which the workload's own
 * figures say). On pagellm serve the two one-token replies are the same text (its output is
 * bitwise the same with the cache on or off); the rows say whether they were.
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
import { sendRequest, type BenchRequest, type ExtraFields, type ServerTarget } from "./openai-client.ts";
import type { ChatSource, ChatTurn, RequestSource } from "./serve-workloads.ts";

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
  /** usage.prompt_tokens of the warm request; null when the server sent no usage. */
  promptTokens: number | null;
  /** Prompt tokens the warm request found cached; null when the server does not say. */
  cachedTokens: number | null;
  /** The warm one-token request's whole time, ms. */
  warmTtftMs: number;
  /** The cold one-token request's whole time, ms; null when it failed. */
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

/** Sends each turn warm and cold, one token each, before the turn itself (RunOptions.beforeEach), and keeps the rows. */
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

  /** Before a turn (its warm fields already added): one token of it warm, then one cold. A failed warm request has nothing to compare. */
  async before(req: BenchRequest, signal: AbortSignal): Promise<void> {
    const { conversation, turn } = this.chat.turnOf(req.id);
    const send = (r: BenchRequest) => sendRequest(this.target, r, { ignoreEos: this.ignoreEos, signal, runStartMs: performance.now() });
    const w = await send({ ...req, id: `${req.id}-warm1`, maxTokens: 1 });
    if (!w.ok) {
      if (!w.failure.cut) this.errors.push(`warm one-token request of turn ${turn}: ${w.failure.error}`);
      return;
    }
    const c = await send({ ...req, id: `${req.id}-cold1`, maxTokens: 1, extra: this.method.fields(this.sent++) });
    const warm = w.timing;
    const row: TurnRow = {
      conversation, turn, promptTokens: warm.promptTokens, cachedTokens: warm.cachedTokens, warmTtftMs: warm.e2eMs,
      coldTtftMs: c.ok ? c.timing.e2eMs : null, coldCachedTokens: c.ok ? c.timing.cachedTokens : null, ratio: null,
      sameReply: c.ok ? c.timing.text === warm.text : null,
    };
    // One cut by the run's time limit is no fault of the server's.
    if (!c.ok) {
      if (!c.failure.cut) this.errors.push(`cold request of turn ${turn}: ${c.failure.error}`);
    } else if (row.coldCachedTokens !== null && row.coldCachedTokens > 0) {
      this.errors.push(`cold request of turn ${turn}: the server served ${row.coldCachedTokens} of its tokens from a cache (it ignores ${this.method.description}?)`);
    } else row.ratio = warm.e2eMs / c.timing.e2eMs;
    this.rows.push(row);
  }

  result(): TurnProbe {
    return { cold: this.method.description, rows: [...this.rows], worst: worstTurn(this.rows), errors: [...this.errors] };
  }
}
