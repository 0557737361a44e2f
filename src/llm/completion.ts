/**
 * A sample's whole result, folded from its EngineOutputs: the `--json` schema of `generate`, the
 * library's generate() results, chat's turn statistics.
 */
import type { PagellmError } from "../errors.ts";
import type { Tokenizer } from "../tokenizer/tokenizer.ts";
import type { ReplySetup } from "../tools/reply-reader.ts";
import type { ToolCall } from "../tools/tool-types.ts";
import type { EngineOutput, FinishReason } from "../engine/engine-output.ts";
import type { SpeculationCounts } from "../engine/speculative.ts";
import { SampleFold, tokenText, type LogprobEntry } from "./sample-fold.ts";

/** The result of one request (one sample of it, when it asked for several): one object per line of `--json`. */
export interface CompletionResult {
  id: string;
  /** Which sample, when the request asked for more than one (n); absent otherwise. */
  index?: number;
  prompt_tokens: number;
  /** Prompt tokens served from the prefix cache: cached_tokens_memory + cached_tokens_disk. */
  cached_tokens: number;
  /** Of cached_tokens, those found in the memory pool. */
  cached_tokens_memory: number;
  /** Of cached_tokens, those read from the disk tier (kvCacheDir) instead of computed. */
  cached_tokens_disk: number;
  completion_tokens: number;
  token_ids: number[];
  /** The reply's text; for a conversation whose replies are read (tools, reasoning), its content only. */
  text: string;
  /** Only when the reply reasoned (between `<think>` tags, or gpt-oss's analysis channel): the reasoning, apart from text. */
  reasoning_content?: string;
  /** Only when the reply called tools: the calls, in OpenAI's shape (arguments as JSON text). */
  tool_calls?: ToolCall[];
  /** "tool_calls" when the reply ended after calling tools. */
  finish_reason: FinishReason | "tool_calls";
  ttft_ms: number;
  latency_ms: number;
  /** Only when finish_reason is "error": why the request was rejected or failed. */
  error?: string;
  /** Only when the request asked for logprobs: one entry per generated token, as the OpenAI API returns them. */
  logprobs?: TokenLogprobResult[];
  /** Only when the engine speculates: draft tokens verified, those accepted, and their ratio (null when none was drafted). */
  speculative?: SpeculationResult;
}

/** What speculative decoding did for one request. */
export interface SpeculationResult {
  drafted: number;
  accepted: number;
  acceptance_rate: number | null;
}

/** A token's log-probability as a result reports it: id, text and log-probability. */
export interface TopLogprobResult {
  token_id: number;
  token: string;
  logprob: number;
}

/** A generated token's log-probability and its most likely alternatives at that position. */
export interface TokenLogprobResult extends TopLogprobResult {
  top_logprobs: TopLogprobResult[];
}

/** What one output added to a reply: its content and its reasoning. */
export interface TextDelta {
  content: string;
  reasoning: string;
}

/** Folds one sample's outputs (SampleFold) into its CompletionResult. */
export class CompletionBuilder {
  private readonly fold: SampleFold;

  constructor(
    private readonly tokenizer: Tokenizer,
    /** The prompt's last token: the one the first generated token follows. */
    promptLast: number | undefined,
    /** The request asked for more than one sample: results carry their index. */
    private readonly numbered: boolean,
    /** How the reply is read into content, reasoning and calls (null: its text is the content). */
    reply: ReplySetup | null = null,
  ) {
    this.fold = new SampleFold(promptLast, reply);
  }

  /** Adds a step's output; returns the content and reasoning it made showable. */
  add(output: EngineOutput): TextDelta {
    const delta = this.fold.add(output);
    return delta.reply ?? { content: delta.text, reasoning: "" };
  }

  /** Whether the sample has finished. */
  get finished(): boolean {
    return this.fold.finishReason !== null;
  }

  /** The result as of the last output (complete once finished). */
  result(): CompletionResult {
    const f = this.fold;
    const o = f.last;
    if (o === null) throw new Error("CompletionBuilder.result() before any output");
    const finish = o.timing.finishMs ?? performance.now();
    const m = f.message;
    const result: CompletionResult = {
      id: o.requestId,
      ...(this.numbered ? { index: o.index } : {}),
      prompt_tokens: o.usage.promptTokens,
      cached_tokens: o.usage.cachedTokens,
      cached_tokens_memory: o.usage.cachedTokens - o.usage.cachedTokensDisk,
      cached_tokens_disk: o.usage.cachedTokensDisk,
      completion_tokens: f.tokenIds.length,
      token_ids: [...f.tokenIds],
      text: m.content,
      finish_reason: o.finishReason ?? "abort",
      ttft_ms: round2((o.timing.firstTokenMs ?? finish) - o.timing.arrivalMs),
      latency_ms: round2(finish - o.timing.arrivalMs),
    };
    if (m.reasoning !== "") result.reasoning_content = m.reasoning;
    if (f.madeCalls) result.tool_calls = m.toolCalls.map((c) => ({ ...c, function: { ...c.function } }));
    if (f.endedWithCalls(result.finish_reason)) result.finish_reason = "tool_calls";
    if (o.error !== null) result.error = o.error;
    if (o.speculation !== null) result.speculative = speculationResult(o.speculation);
    if (o.logprobs !== null) result.logprobs = f.logprobs.map((e) => this.logprobResult(e));
    return result;
  }

  /** A token's log-probability and its alternatives, each with its text where it follows `prev`. */
  private logprobResult({ logprob: l, prev }: LogprobEntry): TokenLogprobResult {
    const entry = (id: number, logprob: number): TopLogprobResult => ({ token_id: id, token: tokenText(this.tokenizer, prev, id), logprob });
    return { ...entry(l.id, l.logprob), top_logprobs: l.top.map((t) => entry(t.id, t.logprob)) };
  }
}

export function speculationResult(c: SpeculationCounts): SpeculationResult {
  return { drafted: c.drafted, accepted: c.accepted, acceptance_rate: c.drafted === 0 ? null : round4(c.accepted / c.drafted) };
}

/** The result of a request refused before it ran: finish_reason "error" and why. */
export function rejectedResult(id: string, promptTokens: number, e: PagellmError | string): CompletionResult {
  return {
    id, prompt_tokens: promptTokens, cached_tokens: 0, cached_tokens_memory: 0, cached_tokens_disk: 0, completion_tokens: 0, token_ids: [], text: "",
    finish_reason: "error", ttft_ms: 0, latency_ms: 0, error: typeof e === "string" ? e : e.message,
  };
}

function round2(x: number): number {
  return Math.round(x * 100) / 100;
}

function round4(x: number): number {
  return Math.round(x * 1e4) / 1e4;
}
