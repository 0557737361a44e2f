/**
 * Time to first token of one prompt cold and then fully cached, over HTTP: per repetition a fresh
 * random prompt is sent twice, one request at a time, nothing else running. The second request
 * finds every whole block of the prompt in the server's prefix cache (the last token is always
 * computed again, to get the logits), so its TTFT is one forward pass of a token or so.
 */
import { ServerError } from "../../errors.ts";
import { summarize, type Summary } from "../measure.ts";
import { sendRequest, type BenchRequest, type RequestTiming, type ServerTarget } from "./openai-client.ts";
import { servingTokens } from "./serve-workloads.ts";

export interface TtftProbe {
  promptTokens: number;
  coldMs: Summary;
  cachedMs: Summary;
  /** cached / cold (medians). */
  ratio: number;
  /** Cached prompt tokens the server reported for the second requests (median); null when it does not say. */
  cachedTokens: number | null;
}

export interface ProbeOptions {
  promptTokens: number;
  reps: number;
  seed: number;
  vocabSize: number;
  ignoreEos: boolean;
}

/** A few tokens, so the first piece of text arrives even when the first token is part of a character. */
const PROBE_OUTPUT_TOKENS = 4;
/** Seeds of the probe's prompts: far from the workloads' (seed, seed + 1, ...). */
const PROBE_SEED_OFFSET = 1_000_003;

async function timeOne(target: ServerTarget, req: BenchRequest, ignoreEos: boolean): Promise<RequestTiming> {
  const outcome = await sendRequest(target, req, { ignoreEos, signal: AbortSignal.timeout(600_000), runStartMs: performance.now() });
  if (!outcome.ok) throw new ServerError(`TTFT probe ${req.id} at ${target.apiBase}: ${outcome.failure.error}`);
  return outcome.timing;
}

export async function probeTtft(target: ServerTarget, o: ProbeOptions): Promise<TtftProbe> {
  const draw = servingTokens(o.seed + PROBE_SEED_OFFSET, o.vocabSize);
  const cold: number[] = [];
  const cached: number[] = [];
  const cachedTokens: number[] = [];
  let reported = true;
  for (let rep = 0; rep < o.reps; rep++) {
    const req: BenchRequest = { id: `ttft-probe-${rep}`, prompt: { kind: "tokens", tokenIds: draw.tokens(o.promptTokens) }, maxTokens: PROBE_OUTPUT_TOKENS };
    cold.push((await timeOne(target, req, o.ignoreEos)).ttftMs);
    const again = await timeOne(target, req, o.ignoreEos);
    cached.push(again.ttftMs);
    if (again.cachedTokens === null) reported = false;
    else cachedTokens.push(again.cachedTokens);
  }
  const coldMs = summarize(cold);
  const cachedMs = summarize(cached);
  return {
    promptTokens: o.promptTokens, coldMs, cachedMs, ratio: cachedMs.median / coldMs.median,
    cachedTokens: reported ? summarize(cachedTokens).median : null,
  };
}
