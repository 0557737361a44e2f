/**
 * A conversation as the token ids of its prompts, whatever the prompt format: each turn's prompt
 * must be an exact token prefix of the next, so the prefix cache serves every earlier turn.
 * Built-in formats (builtin-formats.ts) append ids turn by turn; a model's Jinja template
 * (jinja-conversation.ts) renders the whole conversation and reuses the ids of the text it
 * rendered before.
 */
import { InputError } from "../errors.ts";
import type { Tokenizer } from "../tokenizer/tokenizer.ts";
import type { ChatMessage } from "./jinja-template.ts";

export interface ChatTurn {
  user: string;
  /** The reply's token ids as kept in the conversation (no closing end-of-turn token). */
  reply: number[];
  /** The reply's text. */
  replyText: string;
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
  /**
   * The prompt for a new message whose reply begins with `partial` (prefill): promptIds(user)'s
   * prompt continued to the end of `partial`, with no end-of-turn, so the reply goes on from it.
   */
  prefillIds(user: string, partial: string): number[];
  /** The prompt of `user` as the conversation's only turn (to tell whether it can fit at all). */
  aloneIds(user: string): number[];
  /** Add a message and its reply (the ids as generated, and their text). */
  commit(user: string, replyIds: readonly number[], replyText: string): void;
  /** Forget the oldest turn (to make room). */
  dropOldest(): ChatTurn | undefined;
  reset(): void;
}

/** The conversation as messages: the system prompt first if any, then each turn's user and assistant messages. */
export function conversationMessages(conversation: Conversation): ChatMessage[] {
  const system: ChatMessage[] = conversation.system === null ? [] : [{ role: "system", content: conversation.system }];
  return [...system, ...conversation.turns.flatMap((t): ChatMessage[] => [{ role: "user", content: t.user }, { role: "assistant", content: t.replyText }])];
}

/**
 * Replace the conversation with `messages` (an optional system message, then user and assistant
 * messages in turn; the replies' ids are their text tokenized). Throws InputError on another shape.
 */
export function loadConversation(conversation: Conversation, tok: Tokenizer, messages: readonly ChatMessage[], where: string): void {
  const system = messages[0]?.role === "system" ? messages[0].content : null;
  const rest = system === null ? messages : messages.slice(1);
  if (rest.length % 2 !== 0 || rest.some((m, i) => m.role !== (i % 2 === 0 ? "user" : "assistant"))) {
    throw new InputError(`${where}: a conversation is an optional system message, then user and assistant messages in turn`);
  }
  if (system !== null && !conversation.hasSystem) throw new InputError(`${where}: the ${conversation.name} format has no system prompt`);
  conversation.reset();
  conversation.system = system;
  for (let i = 0; i < rest.length; i += 2) {
    const user = rest[i]!.content;
    const reply = rest[i + 1]!.content;
    conversation.promptIds(user);
    conversation.commit(user, tok.encode(reply, { continuation: true }), reply);
  }
}
