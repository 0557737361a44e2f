/**
 * Chat prompt formats and the token ids of a conversation, kept so that every turn's prompt is an
 * exact token prefix of the next one: the engine's prefix cache then serves all earlier turns.
 *
 * The next prompt is built by appending the new turn's tokens to the previous prompt and the
 * reply's generated tokens, never by encoding the whole conversation again (that could segment
 * the boundary between a reply and the next message differently, and miss the cache).
 *
 * Templates:
 * - `raw`: plain text for base models. Each message is appended as text (the tokenizer's dummy
 *   prefix puts a space between it and what came before); the reply continues it. BOS starts the
 *   conversation only.
 * - `llama2`: the Llama 2 chat format as llama2.c's run.c chat mode builds it. Every turn starts
 *   with BOS; the first is `[INST] <<SYS>>\n{system}\n<</SYS>>\n\n{user} [/INST]` (or
 *   `[INST] {user} [/INST]` without a system prompt), later ones `[INST] {user} [/INST]`; each
 *   reply is followed by EOS.
 */
import type { EncodeOptions, StreamDecoder } from "../tokenizer/tokenizer.ts";
import type { ChatTurn, Conversation } from "./conversation.ts";

export const CHAT_TEMPLATES = ["raw", "llama2"] as const;
export type ChatTemplateName = (typeof CHAT_TEMPLATES)[number];

/** What the templates need of a tokenizer. */
export interface ChatTokenizer {
  readonly bosId: number | null;
  readonly eosId: number | null;
  encode(text: string, opts?: EncodeOptions): number[];
  createStreamDecoder(prevTokenId?: number): StreamDecoder;
}

/** Whether the template has a place for a system prompt. */
export function templateHasSystem(template: ChatTemplateName): boolean {
  return template === "llama2";
}

/** The text of a user turn; `system` only on the conversation's first turn (null or "" for none). */
export function renderUserTurn(template: ChatTemplateName, user: string, system: string | null): string {
  switch (template) {
    case "raw":
      return user;
    case "llama2":
      return system ? `[INST] <<SYS>>\n${system}\n<</SYS>>\n\n${user} [/INST]` : `[INST] ${user} [/INST]`;
  }
}

export interface TurnContext {
  /** Whether the model's prompts start with BOS. */
  addBos: boolean;
  /** Whether this turn starts the conversation. */
  first: boolean;
  /** The system prompt (used by llama2 on the first turn). */
  system: string | null;
}

/** Token ids of a user turn, as appended after everything before it. */
export function userTurnIds(template: ChatTemplateName, tok: ChatTokenizer, user: string, ctx: TurnContext): number[] {
  const bos = ctx.addBos && tok.bosId !== null ? [tok.bosId] : [];
  const text = renderUserTurn(template, user, ctx.first ? ctx.system : null);
  const ids = tok.encode(text, { addBos: false });
  switch (template) {
    case "raw":
      return ctx.first ? [...bos, ...ids] : ids;
    case "llama2":
      return [...bos, ...ids];
  }
}

/** Token ids that close a reply (llama2: EOS; raw: none). */
export function replyEndIds(template: ChatTemplateName, tok: ChatTokenizer): number[] {
  return template === "llama2" && tok.eosId !== null ? [tok.eosId] : [];
}

/**
 * The generated ids to keep as a reply whose final text is `text`: all of them, unless a stop
 * string cut the text (the result's token ids still hold the stop string), then the longest run
 * of leading ids whose text is a prefix of `text`.
 */
export function keptReplyIds(tok: ChatTokenizer, prevTokenId: number | undefined, ids: readonly number[], text: string): number[] {
  const whole = tok.createStreamDecoder(prevTokenId);
  if (ids.map((id) => whole.push(id)).join("") + whole.flush() === text) return [...ids];
  const decoder = tok.createStreamDecoder(prevTokenId);
  let decoded = "";
  let kept = 0;
  for (let i = 0; i < ids.length; i++) {
    const piece = decoder.push(ids[i]!);
    if (piece.length === 0) continue;
    decoded += piece;
    if (!text.startsWith(decoded)) break;
    kept = i + 1;
  }
  return ids.slice(0, kept);
}

export interface ChatHistoryOptions {
  addBos: boolean;
  system?: string | null;
}

/**
 * A conversation as token ids. `promptIds(user)` is the prompt for a new message; `commit` adds
 * that message and its reply, so the next prompt starts with exactly this prompt and the reply.
 */
export class ChatHistory implements Conversation {
  private readonly list: ChatTurn[] = [];
  private idList: number[] = [];
  private systemPrompt: string | null;

  constructor(
    readonly template: ChatTemplateName,
    private readonly tok: ChatTokenizer,
    private readonly opts: ChatHistoryOptions,
  ) {
    this.systemPrompt = opts.system || null;
  }

  get turns(): readonly ChatTurn[] {
    return this.list;
  }

  get name(): string {
    return this.template;
  }

  get hasSystem(): boolean {
    return templateHasSystem(this.template);
  }

  get continuesText(): boolean {
    return this.template === "raw";
  }

  /** The ids of `user` as the conversation's only turn. */
  aloneIds(user: string): number[] {
    return userTurnIds(this.template, this.tok, user, { addBos: this.opts.addBos, first: true, system: this.systemPrompt });
  }

  /** Every token of the conversation so far: each turn's ids, reply and closing ids. */
  get ids(): readonly number[] {
    return this.idList;
  }

  get system(): string | null {
    return this.systemPrompt;
  }

  /** Set or clear the system prompt; the conversation so far is rebuilt with it. */
  set system(text: string | null) {
    this.systemPrompt = text || null;
    this.rebuild();
  }

  /** The ids a new message appends. */
  turnIds(user: string): number[] {
    return userTurnIds(this.template, this.tok, user, { addBos: this.opts.addBos, first: this.list.length === 0, system: this.systemPrompt });
  }

  /** The prompt for a new message: the conversation so far, then the message's turn. */
  promptIds(user: string): number[] {
    return [...this.idList, ...this.turnIds(user)];
  }

  /** The prompt for a new message with its reply begun: `partial`'s ids follow the turn's as a reply's would. */
  prefillIds(user: string, partial: string): number[] {
    return [...this.promptIds(user), ...(partial === "" ? [] : this.tok.encode(partial, { continuation: true }))];
  }

  /** Add a message and the ids of its reply (as generated; a closing EOS is added here). */
  commit(user: string, replyIds: readonly number[], replyText = ""): void {
    this.idList = [...this.idList, ...this.turnIds(user), ...replyIds, ...replyEndIds(this.template, this.tok)];
    this.list.push({ user, reply: [...replyIds], replyText });
  }

  /** Forget the oldest turn (to make room); returns it, or undefined when there is none. */
  dropOldest(): ChatTurn | undefined {
    const turn = this.list.shift();
    if (turn !== undefined) this.rebuild();
    return turn;
  }

  /** Start a new conversation (the system prompt stays). */
  reset(): void {
    this.list.length = 0;
    this.idList = [];
  }

  private rebuild(): void {
    const turns = this.list.splice(0);
    this.idList = [];
    for (const t of turns) this.commit(t.user, t.reply, t.replyText);
  }
}
