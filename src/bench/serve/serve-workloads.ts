/**
 * The workloads `bench serve` sends, seeded so every run and every server gets the same requests:
 *
 * - prefix: vLLM's prefix-repetition shape. P shared prefixes of L tokens; each request is one of
 *   them (the same number of requests per prefix) plus a unique S-token suffix; shuffled, as
 *   vLLM's generator does. Token-id prompts through /v1/completions.
 * - random: each request a prompt of N random tokens. Token-id prompts.
 * - chat: C conversations of T turns interleaved, as many users of one chat UI: each turn sends
 *   the whole history (system prompt, every user message and every reply the server gave) to
 *   /v1/chat/completions. Messages are text (a chat has no token-id form) made of common English
 *   words, about one token each in any vocabulary, so lengths are close to intended but not exact:
 *   the report counts the server's `usage`.
 *
 * Token ids are drawn from FIRST_TOKEN_ID (or half a vocabulary smaller than 2000) up to the
 * vocabulary size, clear of the low ids where vocabularies keep their control and byte tokens; no
 * BOS is added.
 */
import { Xoshiro128 } from "../../util/random.ts";
import { prefixRepetition, TokenSource } from "../token-source.ts";
import type { BenchRequest, ChatMessage, RequestOutcome } from "./openai-client.ts";

export type ServeWorkloadName = "prefix" | "chat" | "random";
export const SERVE_WORKLOADS: readonly ServeWorkloadName[] = ["prefix", "chat", "random"];

/** Lowest token id a prompt uses: above the control and byte tokens most vocabularies start with. */
export const FIRST_TOKEN_ID = 1000;

/** The lowest id drawn from a vocabulary: FIRST_TOKEN_ID, or its upper half when it is small (a test model's 512). */
export function firstTokenId(vocabSize: number): number {
  return Math.min(FIRST_TOKEN_ID, Math.floor(vocabSize / 2));
}

/** Where a run takes its requests from: a fixed list, or a chat whose next turns wait for replies. */
export interface RequestSource {
  /** What it is, with its parameters. */
  readonly description: string;
  /** Requests it issues in all when every one succeeds. */
  readonly total: number;
  /** The next request ready to send; null when none is ready now (every chat waits for a reply) or none is left. */
  next(): BenchRequest | null;
  /** A request ended: a chat appends the reply to its history, or ends the conversation when it failed. */
  finished(req: BenchRequest, outcome: RequestOutcome): void;
}

export interface PrefixShape {
  prefixes: number;
  prefixTokens: number;
  suffixTokens: number;
  requests: number;
  outputTokens: number;
}

export interface RandomShape {
  requests: number;
  promptTokens: number;
  outputTokens: number;
}

export interface ChatShape {
  conversations: number;
  turns: number;
  /** Words of the system prompt every conversation starts with (0: none). */
  systemWords: number;
  userWords: number;
  outputTokens: number;
}

/** Seeded token ids in [firstTokenId(vocabSize), vocabSize), no BOS. */
export function servingTokens(seed: number, vocabSize: number): TokenSource {
  return new TokenSource(seed, vocabSize, firstTokenId(vocabSize));
}

/** A fixed list of requests, sent in order. */
export class ListSource implements RequestSource {
  private sent = 0;

  constructor(readonly description: string, readonly requests: readonly BenchRequest[]) {}

  get total(): number {
    return this.requests.length;
  }

  next(): BenchRequest | null {
    return this.requests[this.sent++] ?? null;
  }

  finished(): void {}
}

/** vLLM's prefix repetition: requests spread evenly over the prefixes, then shuffled. */
export function prefixWorkload(s: PrefixShape, seed: number, vocabSize: number): ListSource {
  const prompts = prefixRepetition(servingTokens(seed, vocabSize), s, false);
  const requests = prompts.map((p): BenchRequest => ({ id: `prefix-${p.index}`, prompt: { kind: "tokens", tokenIds: p.tokenIds }, maxTokens: s.outputTokens }));
  const description =
    `prefix: ${s.prefixes} shared prefixes x ${s.prefixTokens} tokens, ${s.requests} requests with ${s.suffixTokens}-token unique suffixes, ` +
    `${s.outputTokens} output tokens`;
  return new ListSource(description, requests);
}

export function randomWorkload(s: RandomShape, seed: number, vocabSize: number): ListSource {
  const draw = servingTokens(seed, vocabSize);
  const requests = Array.from({ length: s.requests }, (_, i): BenchRequest => ({
    id: `random-${i}`, prompt: { kind: "tokens", tokenIds: draw.tokens(s.promptTokens) }, maxTokens: s.outputTokens,
  }));
  return new ListSource(`random: ${s.requests} requests of ${s.promptTokens} random tokens, ${s.outputTokens} output tokens`, requests);
}

/** Common English words: each about one token (with its leading space) in the usual vocabularies. */
const WORDS = (
  "the of and to in is you that it he was for on are as with his they at be this have from or one had by word but not what all were we " +
  "when your can said there use an each which she do how their if will up other about out many then them these so some her would make " +
  "like him into time has look two more write go see number no way could people my than first water been call who now find long down " +
  "day did get come made may part over new sound take only little work know place year live me back give most very after thing our just " +
  "name good sentence man think say great where help through much before line right too mean old any same tell boy follow came want show " +
  "also around form three small set put end does another well large must big even such because turn here why ask went men read need land " +
  "different home us move try kind hand picture again change off play spell air away animal house point page letter mother answer found " +
  "study still learn should world high every near add food between own below country plant last school father keep tree never start city"
).split(" ");

/** Where a request sits in the chat: conversation from 0, turn from 1. */
export interface ChatTurn {
  conversation: number;
  turn: number;
}

/** One conversation's state. */
interface Conversation {
  messages: ChatMessage[];
  turnsSent: number;
}

/**
 * C conversations interleaved round-robin: every conversation's first turn in order, then each
 * conversation's next turn queued behind the others as soon as its reply arrives. With more
 * conversations than a server's slots, a conversation's history must survive the others' turns
 * in the server's cache to be reused.
 */
export class ChatSource implements RequestSource {
  readonly description: string;
  private readonly conversations: Conversation[];
  /** Conversations whose next turn is ready, in the order they became ready. */
  private readonly ready: number[];
  /** The conversation and turn of each request sent. */
  private readonly sentTurns = new Map<string, ChatTurn>();
  private readonly rng: Xoshiro128;

  constructor(private readonly shape: ChatShape, seed: number) {
    this.rng = new Xoshiro128(seed);
    const system: ChatMessage[] = shape.systemWords > 0 ? [{ role: "system", content: this.words(shape.systemWords) }] : [];
    this.conversations = Array.from({ length: shape.conversations }, () => ({ messages: [...system], turnsSent: 0 }));
    this.ready = this.conversations.map((_, i) => i);
    this.description =
      `chat: ${shape.conversations} conversations x ${shape.turns} turns interleaved, each turn the whole history` +
      `${shape.systemWords > 0 ? ` after a ${shape.systemWords}-word system prompt` : ""}, ${shape.userWords}-word user messages, ` +
      `${shape.outputTokens}-token replies`;
  }

  get total(): number {
    return this.shape.conversations * this.shape.turns;
  }

  next(): BenchRequest | null {
    const c = this.ready.shift();
    if (c === undefined) return null;
    const conv = this.conversations[c]!;
    conv.messages.push({ role: "user", content: this.words(this.shape.userWords) });
    conv.turnsSent++;
    const id = `chat-${c}-${conv.turnsSent}`;
    this.sentTurns.set(id, { conversation: c, turn: conv.turnsSent });
    return { id, prompt: { kind: "chat", messages: [...conv.messages] }, maxTokens: this.shape.outputTokens };
  }

  finished(req: BenchRequest, outcome: RequestOutcome): void {
    const c = this.turnOf(req.id).conversation;
    const conv = this.conversations[c]!;
    // A failed turn ends its conversation: a chat UI would not go on without the reply.
    if (!outcome.ok) return;
    conv.messages.push({ role: "assistant", content: outcome.timing.text });
    if (conv.turnsSent < this.shape.turns) this.ready.push(c);
  }

  /** Which conversation and turn a request of this chat is. */
  turnOf(id: string): ChatTurn {
    const t = this.sentTurns.get(id);
    if (t === undefined) throw new RangeError(`${id} is not a request of this chat`);
    return t;
  }

  /** The history conversation `c` has so far (for tests). */
  history(c: number): readonly ChatMessage[] {
    return this.conversations[c]!.messages;
  }

  /** `n` words, the first capitalised, ending with a full stop. */
  private words(n: number): string {
    const list = Array.from({ length: n }, () => WORDS[this.rng.nextUint32() % WORDS.length]!);
    list[0] = list[0]!.charAt(0).toUpperCase() + list[0]!.slice(1);
    return `${list.join(" ")}.`;
  }
}
