/**
 * One sample's reply, folded from its EngineOutputs in the one way every front end folds it: its
 * text, token ids, log-probabilities (each with the token it follows, whose text a leading space
 * depends on), finish reason, and what its ReplyReader made of the text (content, reasoning, tool
 * calls). The library's and the command line's results (completion.ts) and the server's choices
 * (server/generation-run.ts) are each one, so a reply reads the same through all of them.
 */
import type { EngineOutput, FinishReason } from "../engine/engine-output.ts";
import type { SampledLogprob } from "../engine/logprobs.ts";
import type { Tokenizer } from "../tokenizer/tokenizer.ts";
import { ReplyReader, type ReplyDelta, type ReplyMessage, type ReplySetup } from "../tools/reply-reader.ts";
import { appendAll } from "../util/append-all.ts";

/** A generated token's log-probabilities and the token it follows. */
export interface LogprobEntry {
  logprob: SampledLogprob;
  prev: number | undefined;
}

/** Text of token `id` where it follows token `prev` in a stream (so a word's leading space shows). */
export function tokenText(tokenizer: Tokenizer, prev: number | undefined, id: number): string {
  const decoder = tokenizer.createStreamDecoder(prev);
  return decoder.push(id) + decoder.flush();
}

/** What one output added to a sample. */
export interface SampleDelta {
  /** The output's text, as generated. */
  text: string;
  /** The log-probabilities of the output's tokens (none unless the request asked for them). */
  logprobs: LogprobEntry[];
  /** What the reply reader made of the text (all that was held back, once the sample ends); null without one. */
  reply: ReplyDelta | null;
}

export class SampleFold {
  text = "";
  readonly tokenIds: number[] = [];
  readonly logprobs: LogprobEntry[] = [];
  finishReason: FinishReason | null = null;
  /** The last output added, or null before any. */
  last: EngineOutput | null = null;
  /** Reads the reply into content, reasoning and tool calls (a conversation with tools or reasoning); null: text only. */
  readonly reply: ReplyReader | null;

  constructor(
    /** The prompt's last token: the one the first generated token follows. */
    readonly promptLast: number | undefined,
    /** How the reply is read (null: its text is its content). */
    setup: ReplySetup | null,
  ) {
    this.reply = setup === null ? null : new ReplyReader(setup);
  }

  /** Adds an output of this sample; returns what it added. */
  add(output: EngineOutput): SampleDelta {
    const logprobs = (output.logprobs ?? []).map((logprob, k) => ({ logprob, prev: k > 0 ? output.tokenIds[k - 1] : (this.tokenIds.at(-1) ?? this.promptLast) }));
    this.text += output.text;
    appendAll(this.tokenIds, output.tokenIds);
    appendAll(this.logprobs, logprobs);
    if (output.finishReason !== null) this.finishReason = output.finishReason;
    this.last = output;
    const reply = this.reply === null ? null : this.reply.read(output.text, output.finishReason !== null);
    return { text: output.text, logprobs, reply };
  }

  /** The reply as read so far: without a reader, its text is the content. */
  get message(): ReplyMessage {
    return this.reply?.message ?? { content: this.text, reasoning: "", toolCalls: [] };
  }

  /** Whether the reply has made tool calls. */
  get madeCalls(): boolean {
    return this.reply !== null && this.reply.message.toolCalls.length > 0;
  }

  /** Whether a sample that ended for `reason` ended by calling tools: it stopped after making calls (reported "tool_calls"). */
  endedWithCalls(reason: string | null): boolean {
    return reason === "stop" && this.madeCalls;
  }
}
