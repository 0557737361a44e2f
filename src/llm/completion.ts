/**
 * A sample's whole result, folded from its EngineOutputs: the `--json` schema of `generate`, the
 * library's generate() results, chat's turn statistics.
 */
import type { PagellmError } from "../errors.ts";
import type { Tokenizer } from "../tokenizer/tokenizer.ts";
import { ReplyReader, type ReplySetup } from "../tools/reply-reader.ts";
import type { ToolCall } from "../tools/tool-types.ts";
import type { EngineOutput, FinishReason } from "../engine/engine-output.ts";
import type { SpeculationCounts } from "../engine/speculative.ts";

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

/** Text of token `id` where it follows token `prev` in a stream (so a word's leading space shows). */
export function tokenText(tokenizer: Tokenizer, prev: number | undefined, id: number): string {
  const decoder = tokenizer.createStreamDecoder(prev);
  return decoder.push(id) + decoder.flush();
}

/** What one output added to a reply: its content and its reasoning. */
export interface TextDelta {
  content: string;
  reasoning: string;
}

/** Folds one sample's outputs into its CompletionResult. */
export class CompletionBuilder {
  private text = "";
  private readonly reader: ReplyReader | null;
  private readonly tokenIds: number[] = [];
  private readonly logprobs: TokenLogprobResult[] = [];
  private last: EngineOutput | null = null;

  constructor(
    private readonly tokenizer: Tokenizer,
    /** The prompt's last token: the one the first generated token follows. */
    private readonly promptLast: number | undefined,
    /** The request asked for more than one sample: results carry their index. */
    private readonly numbered: boolean,
    /** How the reply is read into content, reasoning and calls (null: its text is the content). */
    reply: ReplySetup | null = null,
  ) {
    this.reader = reply === null ? null : new ReplyReader(reply);
  }

  /** Adds a step's output; returns the content and reasoning it made showable. */
  add(output: EngineOutput): TextDelta {
    this.text += output.text;
    for (const [k, l] of (output.logprobs ?? []).entries()) {
      // The token this one follows: the step's previous one, else the last one so far, else the prompt's.
      const prev = k > 0 ? output.tokenIds[k - 1] : (this.tokenIds.at(-1) ?? this.promptLast);
      const entry = (id: number, logprob: number): TopLogprobResult => ({ token_id: id, token: tokenText(this.tokenizer, prev, id), logprob });
      this.logprobs.push({ ...entry(l.id, l.logprob), top_logprobs: l.top.map((t) => entry(t.id, t.logprob)) });
    }
    this.tokenIds.push(...output.tokenIds);
    this.last = output;
    if (this.reader === null) return { content: output.text, reasoning: "" };
    return this.reader.read(output.text, output.finishReason !== null);
  }

  /** Whether the sample has finished. */
  get finished(): boolean {
    return this.last !== null && this.last.finishReason !== null;
  }

  /** The result as of the last output (complete once finished). */
  result(): CompletionResult {
    const o = this.last;
    if (o === null) throw new Error("CompletionBuilder.result() before any output");
    const finish = o.timing.finishMs ?? performance.now();
    const result: CompletionResult = {
      id: o.requestId,
      ...(this.numbered ? { index: o.index } : {}),
      prompt_tokens: o.usage.promptTokens,
      cached_tokens: o.usage.cachedTokens,
      cached_tokens_memory: o.usage.cachedTokens - o.usage.cachedTokensDisk,
      cached_tokens_disk: o.usage.cachedTokensDisk,
      completion_tokens: this.tokenIds.length,
      token_ids: [...this.tokenIds],
      text: this.text,
      finish_reason: o.finishReason ?? "abort",
      ttft_ms: round2((o.timing.firstTokenMs ?? finish) - o.timing.arrivalMs),
      latency_ms: round2(finish - o.timing.arrivalMs),
    };
    if (this.reader !== null) {
      const m = this.reader.message;
      result.text = m.content;
      if (m.reasoning !== "") result.reasoning_content = m.reasoning;
      if (m.toolCalls.length > 0) {
        result.tool_calls = m.toolCalls.map((c) => ({ ...c, function: { ...c.function } }));
        if (result.finish_reason === "stop") result.finish_reason = "tool_calls";
      }
    }
    if (o.error !== null) result.error = o.error;
    if (o.speculation !== null) result.speculative = speculationResult(o.speculation);
    if (o.logprobs !== null) result.logprobs = [...this.logprobs];
    return result;
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
