/**
 * Every stream makes progress under load: 32 concurrent streamed constrained
 * requests (json_schema, json_object, guided_regex, guided_choice on /v1/completions) and tool
 * requests (tool_choice auto, required and named on /v1/chat/completions) against `pagellm serve`
 * on rnd-qwen2, some of them cut by their client at a seeded random event. Each stream that is not
 * cut ends with a finish_reason and [DONE], and its longest gap between two token events (content
 * or tool-call deltas, from its first on: the wait for the first is its time to first token), once
 * every request is in (the server has answered each with its headers), stays under GAP_BOUND times
 * the streams' count times the run's median gap between a stream's tokens (one step, as every
 * running stream gets a token a step). The bound is relative to the run's own step time, so a busy
 * machine slows both sides alike. Afterwards the server is idle: the cut streams' work was freed.
 *
 * Stated bound: a stream waits for the other streams' prompts (at most --max-prefill-while-decoding
 * tokens a step) and nothing else; twice the streams' count in steps holds that with room. While
 * requests arrive, their constraints compile on the thread that runs the steps and hold every
 * stream: that worst gap is printed, not bounded (docs/server.md, "Streams under load").
 */
import { expect, test } from "bun:test";
import { FuzzRandom } from "./helpers/gguf-fuzz.ts";
import { waitIdle } from "./helpers/serve.ts";
import { spawnServe } from "./helpers/serve-process.ts";
import { describeShared } from "./helpers/shared.ts";

const MODEL = "models/gguf/rnd-qwen2-Q5_K_M.gguf";
const STREAMS = 32;
const MAX_TOKENS = 160;
/** The worst gap may be this many times STREAMS median steps. */
const GAP_BOUND = 2;
const LIMIT_MS = 120_000;

const WEATHER = {
  type: "function",
  function: {
    name: "get_weather", description: "w",
    parameters: { type: "object", properties: { city: { type: "string", maxLength: 20 }, unit: { type: "string", enum: ["c", "f"] } }, required: ["city", "unit"], additionalProperties: false },
  },
};

/** Stream i's route and body: four kinds of constraint on completions, three tool choices on chat. */
function streamRequest(i: number): { path: string; body: Record<string, unknown> } {
  const common = { max_tokens: MAX_TOKENS, seed: i, temperature: 1, stream: true };
  const prompt = `Request ${i}: write it down.`;
  const chat = (extra: Record<string, unknown>) => ({ path: "/v1/chat/completions", body: { ...common, messages: [{ role: "user", content: `weather in city ${i}?` }], tools: [WEATHER], ...extra } });
  const completion = (extra: Record<string, unknown>) => ({ path: "/v1/completions", body: { ...common, prompt, ...extra } });
  switch (i % 7) {
    case 0: return completion({ response_format: { type: "json_schema", json_schema: { name: "r", schema: { type: "object", properties: { n: { type: "integer" }, s: { type: "string" } }, required: ["n", "s"] } } } });
    case 1: return completion({ response_format: { type: "json_object" } });
    case 2: return completion({ guided_regex: "[a-z]{2,30}( [0-9]{1,4})*" });
    case 3: return completion({ guided_choice: ["yes", "no", "not today", "in a while"] });
    case 4: return chat({ tool_choice: "required" });
    case 5: return chat({ tool_choice: "auto" });
    default: return chat({ tool_choice: { type: "function", function: { name: "get_weather" } } });
  }
}

interface StreamRun {
  what: string;
  /** When the server answered with the stream's headers (it had taken the request: parsed, compiled, queued). */
  acceptedAt: number;
  /** When each token event came (performance.now()). */
  tokenTimes: number[];
  finish: string | null;
  done: boolean;
  cut: boolean;
}

/** Whether an SSE chunk's first choice carries tokens: text, content or a tool-call delta. */
function carriesTokens(chunk: { choices?: { text?: string; delta?: { content?: string | null; tool_calls?: unknown[] } }[] }): boolean {
  const choice = chunk.choices?.[0];
  if (choice === undefined) return false;
  return (choice.text ?? "") !== "" || (choice.delta?.content ?? "") !== "" || (choice.delta?.tool_calls?.length ?? 0) > 0;
}

/** Runs one stream to its end, or cuts it (its client leaves) after `cutAfter` token events. */
async function runStream(url: string, i: number, cutAfter: number | null): Promise<StreamRun> {
  const { path, body } = streamRequest(i);
  const run: StreamRun = { what: `${i} ${path} ${JSON.stringify(body).slice(0, 120)}`, acceptedAt: 0, tokenTimes: [], finish: null, done: false, cut: false };
  const leave = new AbortController();
  const response = await fetch(`${url}${path}`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body), signal: leave.signal });
  if (response.status !== 200) throw new Error(`${run.what}: ${response.status} ${await response.text()}`);
  run.acceptedAt = performance.now();
  const reader = response.body!.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) return run;
      buffer += decoder.decode(value, { stream: true });
      for (let end = buffer.indexOf("\n\n"); end >= 0; end = buffer.indexOf("\n\n")) {
        const event = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        if (event === "data: [DONE]") run.done = true;
        if (!event.startsWith("data: {")) continue;
        const chunk = JSON.parse(event.slice(6)) as Parameters<typeof carriesTokens>[0] & { choices?: { finish_reason?: string | null }[] };
        if (carriesTokens(chunk)) run.tokenTimes.push(performance.now());
        run.finish = chunk.choices?.[0]?.finish_reason ?? run.finish;
        if (cutAfter !== null && run.tokenTimes.length >= cutAfter) {
          run.cut = true;
          leave.abort();
          return run;
        }
      }
    }
  } catch (e) {
    if (run.cut) return run;
    throw e;
  }
}

/** The gaps between consecutive token events of a stream (only those that start at `from` or later). */
function gapsOf(times: readonly number[], from = -Infinity): number[] {
  return times.slice(1).map((t, k) => (times[k]! >= from ? t - times[k]! : 0));
}

function median(values: readonly number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)]!;
}

/** The pools: the default (every stream fits whole), and one that holds about a fifth of them whole. */
const POOLS: { name: string; args: string[] }[] = [
  { name: "the default pool", args: [] },
  { name: "a pool of 100 blocks", args: ["--num-blocks", "100"] },
];

describeShared("streams under load", [MODEL], ([model]) => {
  for (const pool of POOLS) test(`${pool.name}: ${STREAMS} constrained and tool streams, some cut: each other one finishes, its worst token gap under ${GAP_BOUND} x ${STREAMS} median steps; idle after`, async () => {
    const server = await spawnServe(model!, pool.args);
    try {
      const r = new FuzzRandom(38);
      const cuts = Array.from({ length: STREAMS }, () => (r.int(4) === 0 ? 1 + r.int(12) : null));
      const runs = await Promise.all(cuts.map((cutAfter, i) => runStream(server.url, i, cutAfter)));
      const finished = runs.filter((run) => !run.cut);
      expect(finished.length).toBeGreaterThan(STREAMS / 2);
      for (const run of finished) {
        if (!run.done || run.finish === null) throw new Error(`${run.what}: no finish_reason and [DONE] (finish ${run.finish})`);
      }
      const gaps = runs.flatMap((run) => gapsOf(run.tokenTimes));
      const step = median(gaps);
      const arrived = Math.max(...runs.map((run) => run.acceptedAt));
      const worstOf = (from: number) => finished.map((run) => ({ what: run.what, gap: Math.max(0, ...gapsOf(run.tokenTimes, from)) })).sort((a, b) => b.gap - a.gap)[0]!;
      const worstWhileArriving = worstOf(-Infinity);
      const worst = worstOf(arrived);
      console.log(`  worst gap counting the requests' arrival: ${worstWhileArriving.gap.toFixed(0)} ms (${(worstWhileArriving.gap / step).toFixed(1)} steps)`);
      const prompts = (await (await fetch(`${server.url}/metrics`)).text()).match(/prompt_tokens_total\{[^}]*\} (\d+)/)?.[1];
      console.log(`streams under load (${pool.name}, ${prompts} prompt tokens): median step ${step.toFixed(1)} ms, worst gap ${worst.gap.toFixed(0)} ms (${(worst.gap / step).toFixed(1)} steps), ${gaps.length} gaps`);
      if (worst.gap > GAP_BOUND * STREAMS * step) {
        throw new Error(`${worst.what}: a gap of ${worst.gap.toFixed(0)} ms, over ${GAP_BOUND} x ${STREAMS} x the median step ${step.toFixed(1)} ms`);
      }
      await waitIdle(server.url);
      expect(await server.stop()).toBe(0);
    } finally {
      server.proc.kill("SIGKILL");
    }
  }, LIMIT_MS);
});
