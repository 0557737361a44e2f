/**
 * How `bench serve` results are shown: the serving table (one row per server, and the in-process
 * baseline), the cold/cached TTFT probe, each chat turn warm and cold (--cold-probe), the floors and
 * aims; the flat figures --compare matches;
 * notes; and the charts (output tokens/s and TTFT percentiles per server).
 */
import type { BarChart } from "../chart-svg.ts";
import { figure, fmt, fmtPct, fmtRatio, threadsLabel, type Figure, type Table } from "../bench-report.ts";
import type { ServeBenchResult, TargetCheck } from "./serve-bench.ts";
import type { Distribution } from "./serving-metrics.ts";
import type { TurnProbe } from "./turn-probe.ts";
import { firstTokenId } from "./serve-workloads.ts";

/** A cached share as a percentage, or "n/a" for a server that does not report cached tokens. */
export function fmtShare(share: number | null): string {
  return share === null ? "n/a" : fmtPct(share);
}

function ms(d: Distribution | null, key: keyof Distribution): string {
  return d === null ? "-" : fmt(d[key]);
}

/** A turn's ratio, to three places: the floor is 0.15x. */
function turnRatio(r: number | null): string {
  return r === null ? "n/a" : `${r.toFixed(3)}x`;
}

function count(n: number | null): string {
  return n === null ? "n/a" : String(n);
}

/** One server's turns, warm and cold; a conversation's number only when there are several. */
function turnTable(name: string, t: TurnProbe): Table {
  const several = t.rows.some((r) => r.conversation > 0);
  return {
    title: `${name}: each chat turn warm (its history cached) and then cold (${t.cold}), one request at a time; TTFT in ms`,
    columns: ["turn", "prompt tokens", "cached", "warm TTFT", "cold TTFT", "warm / cold", "same reply"],
    rows: t.rows.map((r) => [
      several ? `${r.conversation + 1}.${r.turn}` : String(r.turn), count(r.promptTokens), count(r.cachedTokens), fmt(r.warmTtftMs),
      r.coldTtftMs === null ? "failed" : fmt(r.coldTtftMs), turnRatio(r.ratio), r.sameReply === null ? "-" : r.sameReply ? "yes" : "no",
    ]),
  };
}

function checkVerdict(c: TargetCheck): string {
  if (c.met === null) return "n/a";
  if (c.met) return "met";
  return c.kind === "floor" ? "MISSED" : "missed";
}

export function serveTables(r: ServeBenchResult): Table[] {
  const rows = r.targets.map((t) => {
    const m = t.metrics;
    const done = m.failed + m.unsent > 0 ? `${m.completed}/${m.completed + m.failed + m.unsent}` : String(m.completed);
    return [
      t.name, done, fmt(m.requestsPerSecond), fmt(m.outputTokensPerSecond), ms(m.ttftMs, "p50"), ms(m.ttftMs, "p90"), ms(m.ttftMs, "p99"),
      ms(m.itlMs, "p50"), ms(m.itlMs, "p99"), ms(m.tpotMs, "p50"), ms(m.e2eMs, "p50"), ms(m.e2eMs, "p99"), fmtShare(m.cachedShare),
    ];
  });
  const ip = r.inProcess;
  if (ip !== null) {
    rows.push([
      "in-process engine", String(ip.completed), fmt(ip.requestsPerSecond), fmt(ip.outputTokensPerSecond), ms(ip.ttftMs, "p50"), ms(ip.ttftMs, "p90"),
      ms(ip.ttftMs, "p99"), "-", "-", "-", ms(ip.e2eMs, "p50"), ms(ip.e2eMs, "p99"), fmtPct(ip.cachedShare),
    ]);
  }
  const threads = r.threads === null ? "" : `, ${threadsLabel(r.threads)}`;
  const tables: Table[] = [{
    title: `${r.description}; concurrency ${r.concurrency} (${r.model}${threads}); latencies in ms`,
    columns: ["server", "requests", "req/s", "out tok/s", "TTFT p50", "p90", "p99", "ITL p50", "p99", "TPOT p50", "E2E p50", "p99", "cached"],
    rows,
  }];
  const probes = r.targets.flatMap((t) => (t.probe === null ? [] : [{ name: t.name, p: t.probe }]));
  if (probes.length > 0) {
    tables.push({
      title: `time to first token of a ${probes[0]!.p.promptTokens}-token prompt, cold then fully cached (median of ${probes[0]!.p.coldMs.n}, one request at a time)`,
      columns: ["server", "cold ms", "cached ms", "cached / cold", "cached tokens"],
      rows: probes.map(({ name, p }) => [name, fmt(p.coldMs.median), fmt(p.cachedMs.median), fmtRatio(p.ratio), p.cachedTokens === null ? "n/a" : String(p.cachedTokens)]),
    });
  }
  for (const t of r.targets) if (t.turns !== null) tables.push(turnTable(t.name, t.turns));
  if (r.checks.length > 0) {
    tables.push({
      title: "serving and chat targets, measured in this run",
      columns: ["", "ratio", "target", "verdict"],
      rows: r.checks.map((c) => [`${c.kind}: ${c.label}`, c.ratio === null ? "n/a" : fmtRatio(c.ratio), c.bound, checkVerdict(c)]),
    });
  }
  return tables;
}

export function serveNotes(r: ServeBenchResult): string[] {
  const notes = [
    "outputs fixed with ignore_eos (greedy); TTFT is to the first streamed text and includes queueing behind running requests; ITL is the gap between streamed pieces",
  ];
  if (r.workload !== "chat") notes.push(`token-id prompts (/v1/completions) drawn from ids ${firstTokenId(r.vocabSize)} to ${r.vocabSize - 1}, no BOS`);
  else notes.push("chat prompts are text (/v1/chat/completions): token counts and cached shares are the servers' own usage figures");
  for (const t of r.targets) {
    if (t.command !== null) notes.push(`${t.name}: ${t.command}`);
    if (t.metrics.stoppedBy !== null) notes.push(`${t.name}: sending stopped early by ${t.metrics.stoppedBy}`);
    if (t.metrics.cachedShare === null) notes.push(`${t.name}: reports no cached prompt tokens (usage.prompt_tokens_details.cached_tokens): cached share n/a`);
    const w = t.turns?.worst ?? null;
    if (w !== null) notes.push(`${t.name}: worst turn TTFT warm / cold ${turnRatio(w.ratio)} (turn ${w.turn}); turn 1 is left out: it has no history of its own to reuse`);
  }
  if (r.targets.some((t) => t.turns !== null)) {
    notes.push("cold requests: each turn's request again (greedy, the same max_tokens) right after it ended, the reply compared with the warm one, then thrown away: the conversation goes on with its own");
  }
  if (r.targets.length + (r.inProcess === null ? 0 : 1) > 1) notes.push("servers and the in-process engine ran one after the other on this machine, never together");
  return notes;
}

/**
 * The figures of a run. Servers started here are keyed by model, threads, workload and server; a
 * --url server by workload alone ("server ..."), so runs against two servers (llama-server's and
 * pagellm's, on their own ports and model names) match in `bench compare`.
 */
export function serveFigures(r: ServeBenchResult): Figure[] {
  const remote = r.threads === null;
  const base = remote ? `${r.workload} c=${r.concurrency}` : `${r.model}, ${threadsLabel(r.threads!)}, ${r.workload} c=${r.concurrency}`;
  const out: Figure[] = [];
  for (const t of r.targets) {
    const m = t.metrics;
    const k = `${base}: ${remote ? "server" : t.name}`;
    out.push(...figure(`${k} output tokens/s`, m.outputTokensPerSecond, "tokens/s"), ...figure(`${k} requests/s`, m.requestsPerSecond, "requests/s"));
    if (m.ttftMs !== null) out.push(...figure(`${k} TTFT p50`, m.ttftMs.p50, "ms", "lower"), ...figure(`${k} TTFT p99`, m.ttftMs.p99, "ms", "lower"));
    if (m.itlMs !== null) out.push(...figure(`${k} ITL p50`, m.itlMs.p50, "ms", "lower"));
    if (m.cachedShare !== null) out.push(...figure(`${k} cached share`, m.cachedShare, "fraction"));
    if (t.probe !== null) {
      out.push(...figure(`${k} TTFT cold`, t.probe.coldMs, "ms", "lower"), ...figure(`${k} TTFT fully cached`, t.probe.cachedMs, "ms", "lower"));
    }
    // A document written before --cold-probe existed has no turns.
    const worst = t.turns?.worst ?? null;
    if (worst !== null) out.push(...figure(`${k} chat turn TTFT warm / cold, worst of turns 2+`, worst.ratio, "x", "lower"));
  }
  if (r.inProcess !== null) out.push(...figure(`${base}: in-process engine output tokens/s`, r.inProcess.outputTokensPerSecond, "tokens/s"));
  for (const c of r.checks) {
    if (c.ratio !== null) out.push(...figure(`${base}: ${c.label}`, c.ratio, "x", c.bound.startsWith("<") ? "lower" : "higher"));
  }
  return out;
}

/** Output tokens/s per server (and the in-process engine), and TTFT percentiles per server. */
export function serveCharts(r: ServeBenchResult): BarChart[] {
  const names = r.targets.map((t) => t.name);
  const throughput: BarChart = {
    kind: "bar", title: `Output tokens/s, ${r.workload} workload, concurrency ${r.concurrency} (${r.model})`, yLabel: "tokens/s",
    categories: r.inProcess === null ? names : [...names, "in-process engine"],
    series: [{ name: "output tokens/s", values: [...r.targets.map((t) => t.metrics.outputTokensPerSecond), ...(r.inProcess === null ? [] : [r.inProcess.outputTokensPerSecond])] }],
  };
  const ttft: BarChart = {
    kind: "bar", title: `Time to first token, ${r.workload} workload (${r.model})`, yLabel: "ms", categories: names,
    series: (["p50", "p90", "p99"] as const).map((p) => ({ name: `TTFT ${p}`, values: r.targets.map((t) => t.metrics.ttftMs?.[p] ?? null) })),
  };
  return [throughput, ttft];
}
