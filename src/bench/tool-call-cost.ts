/**
 * `pagellm bench decode --tools`: what tool calling costs a request's decode (the target:
 * parsing and the constraint add at most 5%), measured in the same run on one engine, each pair of
 * requests back to back with the order alternating, so that both see the same machine. The
 * baseline ("plain") is the same rendered prompt sent as token ids: nothing read, nothing
 * constrained.
 *   - auto: a conversation offering tools, tool_choice "auto" (the lazy constraint's free-text
 *     masks, the trigger scan, the reply read for calls). Greedy, so both write the same tokens
 *     (checked): a random-weight model writes no call;
 *   - required: tool_choice "required" (every token of the reply inside calls: the arguments'
 *     masks, forced runs). The tokens differ, their number and positions do not, so the time per
 *     token compares the same forward passes plus the masks.
 * Decode time per token is (latency - time to first token) / (tokens - 1), summed over the
 * requests of a repetition; the CPU time of the whole requests (this process) is the steadier
 * figure on a shared machine. Steadier still, and apart from the model: the tools runs' tokens
 * replayed through a fresh constraint and reply reader (a mask filled and applied to a row of
 * logits, the token accepted, the forced tokens asked for, the text read: what the engine and
 * the front end do per token), timed in rounds, against the plain decode's time per token.
 */
import { InputError } from "../errors.ts";
import { applyTokenBitmask } from "../constraint/token-constraint.ts";
import type { CompletionResult, GenerateRequest, LLM } from "../llm/llm.ts";
import { ReplyReader } from "../tools/reply-reader.ts";
import type { ToolDefinition } from "../tools/tool-types.ts";
import { alternatingRates, runAlternating } from "./alternating.ts";
import { withLLM } from "./engine-runs.ts";
import { secondsPerCall, summarize, type RepeatOptions, type Summary } from "./measure.ts";
import type { BenchModel } from "./bench-models.ts";
import { figure, fmt, fmtPct, fmtRatio, fmtSpread, progress, threadsLabel, type Figure, type Table } from "./bench-report.ts";

export interface ToolCallBenchOptions extends RepeatOptions {
  threads: number;
  genTokens: number;
}

export type ToolWorkloadName = "auto" | "required";

export interface ToolWorkloadRow {
  workload: ToolWorkloadName;
  /** Decode tokens/s per repetition of the plain prompt, and with the workload's tool choice. */
  plain: Summary;
  tools: Summary;
  /** Median over repetitions of plain / tools tokens/s: the decode time tools take, as a multiple of plain (1.05 = 5% more). */
  timeRatio: number;
  /** The same for the CPU time per generated token. */
  cpuRatio: number;
  /** Both wrote the same tokens (auto only; null for required, whose tokens are calls). */
  identical: boolean | null;
  /** Calls read from the last repetition's replies. */
  calls: number;
  /** The constraint's and the reader's own milliseconds per token (the replay), and that over the plain decode's milliseconds per token. */
  replayMsPerToken: number;
  replayFraction: number;
}

export interface ToolCallDecode {
  threads: number;
  genTokens: number;
  rows: ToolWorkloadRow[];
}

/** Tools of the shape agents offer: a few functions, typed arguments, an enum, an optional field. */
const TOOLS: ToolDefinition[] = [
  {
    type: "function",
    function: {
      name: "get_weather",
      description: "Get the current weather in a city.",
      parameters: {
        type: "object",
        properties: { city: { type: "string", maxLength: 40 }, unit: { enum: ["celsius", "fahrenheit"] }, days: { type: "integer", minimum: 1, maximum: 14 } },
        required: ["city"],
        additionalProperties: false,
      },
    },
  },
  {
    type: "function",
    function: {
      name: "search",
      description: "Search the web.",
      parameters: { type: "object", properties: { query: { type: "string", maxLength: 80 }, top: { type: "integer", minimum: 1, maximum: 10 } }, required: ["query"], additionalProperties: false },
    },
  },
];

const PROMPTS = ["What is the weather in Paris this week?", "Find the population of Oslo.", "Is it raining in Lima?", "Look up the tallest building."];

export async function runToolCallDecode(model: BenchModel, o: ToolCallBenchOptions): Promise<ToolCallDecode> {
  progress(`tool-call decode on ${model.label}, ${threadsLabel(o.threads)}`);
  return await withLLM(model, { threads: o.threads, speculative: null }, async (llm) => {
    const rows: ToolWorkloadRow[] = [];
    for (const workload of ["auto", "required"] as const) rows.push(await compare(llm, o, workload));
    return { threads: o.threads, genTokens: o.genTokens, rows };
  });
}

/** The conversations with tools under `choice`. */
function requests(o: ToolCallBenchOptions, choice: ToolWorkloadName): GenerateRequest[] {
  return PROMPTS.map((content) => ({
    messages: [{ role: "user", content }], tools: TOOLS, toolChoice: choice, maxTokens: o.genTokens, ignoreEos: true, temperature: 0, repetitionPenalty: 1,
  }));
}

/**
 * The same prompts as token ids: the same work without reading or constraint. (tool_choice
 * "none" would not do: a template that cannot render tools gets them in the system message only
 * when they may be called, so its prompt would be shorter.)
 */
function plainOf(llm: LLM, request: GenerateRequest): GenerateRequest {
  const { messages: _m, tools: _t, toolChoice: _c, ...rest } = request;
  return { ...rest, promptTokenIds: [...llm.client.prepare(request).promptTokenIds] };
}

async function compare(llm: LLM, o: ToolCallBenchOptions, workload: ToolWorkloadName): Promise<ToolWorkloadRow> {
  const toolRequests = requests(o, workload);
  const plainOfTools = new Map(toolRequests.map((r) => [r, plainOf(llm, r)]));
  const { reps, last } = await runAlternating(toolRequests, o, async (which, request) => {
    const [r] = await llm.generate([which === "a" ? plainOfTools.get(request)! : request]);
    if (!r || r.finish_reason === "error") throw new InputError(`tool-call bench request failed: ${r?.error ?? "no result"}`);
    return r;
  });
  // a: plain, b: tools. alternatingRates' ratios are b's speed over a's: their inverses are the time tools take.
  const rates = alternatingRates(reps);
  const plain = rates.a;
  const tokensOf = (results: readonly CompletionResult[]) => results.map((r) => r.token_ids);
  const identical = workload === "auto" ? JSON.stringify(tokensOf(last.results.a)) === JSON.stringify(tokensOf(last.results.b)) : null;
  const replayMs = summarize(toolRequests.map((r, i) => replayMsPerToken(llm, r, last.results.b[i]!.token_ids, Math.max(3, o.reps)))).median;
  return {
    workload, plain, tools: rates.b, timeRatio: 1 / rates.ratio, cpuRatio: 1 / rates.cpuRatio,
    identical, calls: last.results.b.reduce((n, r) => n + (r.tool_calls?.length ?? 0), 0), replayMsPerToken: replayMs, replayFraction: replayMs / (1000 / plain.median),
  };
}

/** Milliseconds per token that `request`'s constraint and reply reader take over `tokens` (median of `reps` timed rounds). */
function replayMsPerToken(llm: LLM, request: GenerateRequest, tokens: readonly number[], reps: number): number {
  const prepared = llm.client.prepare(request);
  const constraint = prepared.request.constraint;
  const setup = prepared.reply;
  const rows = Math.max(llm.config.vocabSize, llm.tokenizer.vocabSize);
  const mask = new Uint32Array(Math.ceil(rows / 32));
  const logits = new Float32Array(rows);
  // The text each token adds, decoded before the timing (plain decoding decodes too).
  const pieces: string[] = [];
  let before = "";
  for (let i = 0; i < tokens.length; i++) {
    const text = llm.tokenizer.decode(tokens.slice(0, i + 1));
    pieces.push(text.startsWith(before) ? text.slice(before.length) : text);
    before = text;
  }
  const replay = (): void => {
    const c = constraint?.create?.() ?? null;
    const reader = setup === null ? null : new ReplyReader(setup);
    for (let i = 0; i < tokens.length; i++) {
      if (c !== null) {
        c.fillNextTokenBitmask(mask);
        applyTokenBitmask(logits, mask);
        if (!c.acceptToken(tokens[i]!)) throw new InputError(`tool-call bench: the constraint refused its own run's token ${tokens[i]}`);
        c.forcedTokens();
      }
      reader?.push(pieces[i]!);
    }
    reader?.end();
  };
  return (summarize(secondsPerCall(replay, reps)).median * 1000) / Math.max(1, tokens.length);
}

/** --compare figures: each workload's decode time with tools as a multiple of the plain prompt's (lower is better). */
export function toolCallFigures(model: string, r: ToolCallDecode): Figure[] {
  return r.rows.flatMap((x) => {
    const at = `${model}, tool calls ${x.workload}, ${threadsLabel(r.threads)}`;
    return [
      ...figure(`${at}: decode time vs plain`, x.timeRatio, "x", "lower"), ...figure(`${at}: CPU time vs plain`, x.cpuRatio, "x", "lower"),
      ...figure(`${at}: constraint and reader, of plain decode time`, x.replayFraction, "", "lower"),
    ];
  });
}

export function toolCallTable(r: ToolCallDecode): Table {
  return {
    title:
      `tool calls: decode with tool_choice auto / required vs the same prompts as plain token ids (two tools, ${PROMPTS.length} requests x ${r.genTokens} tokens, greedy), ` +
      `in the same run, ${threadsLabel(r.threads)}, pairs alternating; tokens/s median (min-max); time ratio = plain tokens/s / tools tokens/s (target <= 1.05x); ` +
      `replay: the tools runs' tokens through a fresh constraint and reader, ms per token and its share of the plain decode's time per token`,
    columns: ["tool_choice", "plain tokens/s", "tools tokens/s", "decode time ratio", "CPU time ratio", "replay ms/token", "of plain decode", "same tokens", "calls read"],
    rows: r.rows.map((x) => [
      x.workload, fmtSpread(x.plain), fmtSpread(x.tools), fmtRatio(x.timeRatio), fmtRatio(x.cpuRatio), fmt(x.replayMsPerToken, 3), fmtPct(x.replayFraction),
      x.identical === null ? "-" : x.identical ? "yes" : "NO", String(x.calls),
    ]),
  };
}
