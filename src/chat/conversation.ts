/**
 * A conversation as the token ids of its prompts, whatever the prompt format: each turn's prompt
 * must be an exact token prefix of the next, so the prefix cache serves every earlier turn.
 * Built-in formats (builtin-formats.ts) append ids turn by turn; a model's Jinja template
 * (jinja-conversation.ts) renders the whole conversation and reuses the ids of the text it
 * rendered before.
 */

export interface ChatTurn {
  user: string;
  /** The reply's token ids as kept in the conversation (no closing end-of-turn token). */
  reply: number[];
}

export interface Conversation {
  /** The format's name, for the banner and /stats. */
  readonly name: string;
  /** Whether the format has a place for a system prompt. */
  readonly hasSystem: boolean;
  /** Plain continuation (a base model): an empty message lets the model go on. */
  readonly continuesText: boolean;
  system: string | null;
  readonly turns: readonly ChatTurn[];
  /** Every token of the conversation so far. */
  readonly ids: readonly number[];
  /** The prompt for a new message: the conversation so far, then the message's turn. */
  promptIds(user: string): number[];
  /** The prompt of `user` as the conversation's only turn (to tell whether it can fit at all). */
  aloneIds(user: string): number[];
  /** Add a message and its reply (the ids as generated, and their text). */
  commit(user: string, replyIds: readonly number[], replyText: string): void;
  /** Forget the oldest turn (to make room). */
  dropOldest(): ChatTurn | undefined;
  reset(): void;
}
