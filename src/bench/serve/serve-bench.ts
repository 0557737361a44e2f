/**
 * `pagellm bench serve`: a seeded serving workload sent to OpenAI-compatible servers, and the
 * serving targets (floors and aims) measured as ratios in the same run.
 *
 * - With a URL: the workload against that server (pagellm serve, llama-server, vLLM, ...).
 * - With a model file (or the default random SmolLM2-135M-shaped Q8_0): `pagellm serve` started
 *   on loopback; the same token-id requests through the engine in this process (the floor's
 *   baseline: serving costs at most 10% of throughput); a prompt's TTFT cold and fully cached (the
 *   floor: cached at most 0.1x cold); and with --llama-server, llama.cpp's server on the same file,
 *   threads and slots (the aims). The servers run one after the other, never together.
 * - With --cold-probe (chat, one request at a time): each turn sent again cold (turn-probe.ts), the
 *   chat floor: every turn after the first at most 0.15x of the same prompt cold.
 */
import { basename } from "node:path";
import { PagellmError, ServerError } from "../../errors.ts";
import type { BenchModel } from "../bench-models.ts";
import { progress } from "../bench-report.ts";
import { llamaServerArgv, pagellmServeArgv, freePort, startChild, type ChildServer } from "./child-server.ts";
import { runInProcess, type InProcessResult } from "./in-process.ts";
import { serveMetrics, type ServeMetrics } from "./serving-metrics.ts";
import { listModels, sendRequest, type BenchRequest, type ServerTarget } from "./openai-client.ts";
import { runRequests, type RunOptions } from "./run.ts";
import { probeTtft, type TtftProbe } from "./ttft-probe.ts";
import { llamaServerCold, saltedCold, TurnProber, type ColdMethod, type TurnProbe } from "./turn-probe.ts";
import {
  ChatSource, ListSource, prefixWorkload, randomWorkload, servingTokens, type ChatShape, type PrefixShape, type RandomShape, type RequestSource,
  type ServeWorkloadName,
} from "./serve-workloads.ts";

/** The shape of each workload; the run uses the one named. */
export interface WorkloadShapes {
  prefix: PrefixShape;
  random: RandomShape;
  chat: ChatShape;
}

export interface ServeBenchOptions extends RunOptions {
  workload: ServeWorkloadName;
  shapes: WorkloadShapes;
  seed: number;
  /** Token ids are drawn below this (a --url server's vocabulary is unknown; a model file's is read). */
  vocabSize: number;
  /** The cold/cached TTFT probe: repetitions (0: none) and prompt length. */
  probe: { reps: number; promptTokens: number };
  /** Chat at concurrency 1: send each turn again cold and report both TTFTs per turn. */
  coldProbe: boolean;
  /** Where requests go: a server the user runs, or servers started here on a model. */
  server: RemoteServer | LocalServers;
}

export interface RemoteServer {
  kind: "url";
  apiBase: string;
  apiKey: string | null;
  /** The model field; null: the first of GET /v1/models. */
  model: string | null;
}

export interface LocalServers {
  kind: "local";
  model: BenchModel;
  threads: number;
  /** Run the in-process baseline (token-id workloads only). */
  inProcess: boolean;
  /** llama-server's binary, or null. */
  llamaServer: string | null;
  llamaSlots: number;
  /** More llama-server flags, after the bench's own. */
  llamaArgs: string[];
  /** More pagellm serve flags, after the bench's own (the in-process baseline does not take them). */
  pagellmArgs: string[];
  /** Seconds a started server may take to answer /health. */
  readyTimeoutS: number;
}

export interface TargetResult {
  /** "pagellm serve", "llama-server", or the URL. */
  name: string;
  /** The command line of a server started here. */
  command: string | null;
  metrics: ServeMetrics;
  probe: TtftProbe | null;
  /** --cold-probe: each chat turn warm and cold. */
  turns: TurnProbe | null;
}

/** A serving floor (must be met) or aim (pursued), as a ratio measured in this run. */
export interface TargetCheck {
  label: string;
  kind: "floor" | "aim";
  ratio: number | null;
  /** "<= 0.1x", ">= 0.9x", ... */
  bound: string;
  met: boolean | null;
}

export interface ServeBenchResult {
  workload: ServeWorkloadName;
  description: string;
  concurrency: number;
  model: string;
  /** Prompt token ids were drawn below this. */
  vocabSize: number;
  /** Threads of the servers started here; null for a --url server. */
  threads: number | null;
  targets: TargetResult[];
  inProcess: InProcessResult | null;
  checks: TargetCheck[];
  /** Servers that could not be measured (llama-server did not start, ...), one line each; what was measured is kept. */
  errors: string[];
}

/** The serving floors (throughput against the same requests in-process, cached TTFT against cold) and the cached-share aim against llama-server. */
export const SERVE_FLOOR_THROUGHPUT = 0.9;
export const SERVE_FLOOR_CACHED_TTFT = 0.1;
export const SERVE_AIM_CACHED_SHARE = 1.2;
/** The chat floor: a chat turn whose history is cached at most this fraction of its TTFT cold. */
export const SERVE_FLOOR_TURN_TTFT = 0.15;

/** A fresh source of the named workload (a chat keeps state, so every target gets its own). */
export function makeSource(o: Pick<ServeBenchOptions, "workload" | "shapes" | "seed" | "vocabSize">): RequestSource {
  if (o.workload === "prefix") return prefixWorkload(o.shapes.prefix, o.seed, o.vocabSize);
  if (o.workload === "random") return randomWorkload(o.shapes.random, o.seed, o.vocabSize);
  return new ChatSource(o.shapes.chat, o.seed);
}

/** Positions the longest request of the workload needs (a chat's estimated at two tokens a word, for its template and words that split). */
export function longestRequest(o: Pick<ServeBenchOptions, "workload" | "shapes">): number {
  const s = o.shapes;
  if (o.workload === "prefix") return s.prefix.prefixTokens + s.prefix.suffixTokens + s.prefix.outputTokens;
  if (o.workload === "random") return s.random.promptTokens + s.random.outputTokens;
  return 2 * s.chat.systemWords + s.chat.turns * (2 * s.chat.userWords + s.chat.outputTokens + 16);
}

/** One short request first: model code paths warmed, and a server that rejects the requests' shape fails here with its message. */
async function warmUp(target: ServerTarget, o: ServeBenchOptions): Promise<void> {
  const req: BenchRequest = o.workload === "chat"
    ? { id: "warm-up", prompt: { kind: "chat", messages: [{ role: "user", content: "Hello there." }] }, maxTokens: 4 }
    : { id: "warm-up", prompt: { kind: "tokens", tokenIds: servingTokens(o.seed + 7, o.vocabSize).tokens(16) }, maxTokens: 4 };
  const outcome = await sendRequest(target, req, { ignoreEos: o.ignoreEos, signal: AbortSignal.timeout(300_000), runStartMs: performance.now() });
  if (!outcome.ok) {
    const hint = o.ignoreEos && outcome.failure.status === 400 ? " (a server that rejects ignore_eos: add --no-ignore-eos)" : "";
    throw new ServerError(`${target.apiBase}: the warm-up request failed: ${outcome.failure.error}${hint}`);
  }
}

/** The workload (each chat turn also cold with --cold-probe), then the TTFT probe, against one server. */
async function measureTarget(name: string, command: string | null, target: ServerTarget, o: ServeBenchOptions, cold: ColdMethod): Promise<TargetResult> {
  await warmUp(target, o);
  const source = makeSource(o);
  progress(`${name}: ${source.description}, concurrency ${o.concurrency}${o.coldProbe ? `, each turn again cold (${cold.description})` : ""}`);
  const prober = o.coldProbe && source instanceof ChatSource ? new TurnProber(target, source, cold, o.ignoreEos) : null;
  const run = prober === null
    ? await runRequests(target, source, o)
    : await runRequests(target, prober.warmSource(), { ...o, beforeEach: prober.before.bind(prober) });
  const metrics = serveMetrics(run);
  progress(`${name}: ${metrics.completed} requests in ${metrics.durationS.toFixed(1)} s, ${metrics.outputTokensPerSecond.toFixed(1)} output tokens/s`);
  let probe: TtftProbe | null = null;
  if (o.probe.reps > 0) {
    progress(`${name}: TTFT of a ${o.probe.promptTokens}-token prompt cold and fully cached, ${o.probe.reps} repetitions`);
    probe = await probeTtft(target, { ...o.probe, seed: o.seed, vocabSize: o.vocabSize, ignoreEos: o.ignoreEos });
  }
  const turns = prober === null ? null : prober.result();
  if (turns !== null && turns.worst !== null) progress(`${name}: worst turn TTFT warm / cold ${turns.worst.ratio.toFixed(3)}x (turn ${turns.worst.turn})`);
  return { name, command, metrics, probe, turns };
}

/** Start a server, measure it, always stop it. */
async function withChild(name: string, argv: (port: number) => string[], o: ServeBenchOptions, local: LocalServers, cold: ColdMethod): Promise<TargetResult> {
  const port = freePort();
  const command = argv(port);
  // Reports name files, never the folders of this machine.
  const shown = command.map((a) => (a.includes("/") ? basename(a) : a)).join(" ");
  progress(`starting ${name}: ${shown}`);
  const child: ChildServer = await startChild(name, command, port, local.readyTimeoutS);
  try {
    const models = await listModels(child.apiBase, null);
    const target: ServerTarget = { apiBase: child.apiBase, apiKey: null, model: models[0] ?? basename(local.model.path) };
    return await measureTarget(name, shown, target, o, cold);
  } finally {
    await child.stop();
  }
}

export async function runServeBench(o: ServeBenchOptions): Promise<ServeBenchResult> {
  const s = o.server;
  const description = makeSource(o).description;
  if (s.kind === "url") {
    const models = await listModels(s.apiBase, s.apiKey);
    const model = s.model ?? models[0];
    if (model === undefined) throw new ServerError(`${s.apiBase}/models lists no model: give --model NAME`);
    const result = await measureTarget(s.apiBase, null, { apiBase: s.apiBase, apiKey: s.apiKey, model }, o, saltedCold());
    return { workload: o.workload, description, concurrency: o.concurrency, model, vocabSize: o.vocabSize, threads: null, targets: [result], inProcess: null, checks: [], errors: [] };
  }
  // One context for every server (llama-server's per slot) and the in-process engine: the longest request, at least 2048.
  const ctx = Math.max(2048, Math.ceil(longestRequest(o) / 256) * 256);
  const targets: TargetResult[] = [];
  targets.push(await withChild("pagellm serve", (port) => pagellmServeArgv(s.model.path, s.threads, ctx, port, s.pagellmArgs), o, s, saltedCold()));
  let inProcess: InProcessResult | null = null;
  const source = makeSource(o);
  if (s.inProcess && source instanceof ListSource) {
    progress(`in-process engine (as generate --prompts): the same ${source.total} requests, at most ${o.concurrency} running`);
    inProcess = await runInProcess(s.model, source.requests, { threads: s.threads, ctxSize: ctx, concurrency: o.concurrency, ignoreEos: o.ignoreEos, seed: o.seed });
    progress(`in-process engine: ${inProcess.durationS.toFixed(1)} s, ${inProcess.outputTokensPerSecond.toFixed(1)} output tokens/s`);
  }
  const errors: string[] = [];
  if (s.llamaServer !== null) {
    const bin = s.llamaServer;
    // The cold requests get a slot of their own (the last), so the conversation's slot keeps its tokens.
    const slots = s.llamaSlots + (o.coldProbe ? 1 : 0);
    try {
      const argv = (port: number) => llamaServerArgv(bin, s.model.path, s.threads, slots, ctx, port, s.llamaArgs);
      targets.push(await withChild("llama-server", argv, o, s, llamaServerCold(s.llamaSlots)));
    } catch (e) {
      // pagellm's figures are measured: report them, then this.
      if (!(e instanceof PagellmError)) throw e;
      errors.push(e.message);
    }
  }
  return {
    workload: o.workload, description, concurrency: o.concurrency, model: s.model.label, vocabSize: o.vocabSize, threads: s.threads, targets, inProcess,
    checks: targetChecks(o.workload, targets, inProcess), errors,
  };
}

function check(label: string, kind: TargetCheck["kind"], ratio: number | null, bound: string, met: (r: number) => boolean): TargetCheck {
  const finite = ratio !== null && Number.isFinite(ratio) ? ratio : null;
  return { label, kind, ratio: finite, bound, met: finite === null ? null : met(finite) };
}

/** The serving floors (throughput, cached and chat-turn TTFT) and aims (against llama-server) that this run's measurements allow. */
export function targetChecks(workload: ServeWorkloadName, targets: readonly TargetResult[], inProcess: InProcessResult | null): TargetCheck[] {
  const pagellm = targets.find((t) => t.name === "pagellm serve");
  const llama = targets.find((t) => t.name === "llama-server");
  const checks: TargetCheck[] = [];
  if (pagellm === undefined) return checks;
  const p = pagellm.metrics;
  if (inProcess !== null) {
    checks.push(check("pagellm serve output tokens/s / the same requests in-process", "floor", p.outputTokensPerSecond / inProcess.outputTokensPerSecond,
      `>= ${SERVE_FLOOR_THROUGHPUT}x`, (r) => r >= SERVE_FLOOR_THROUGHPUT));
  }
  if (pagellm.probe !== null) {
    checks.push(check(`pagellm serve TTFT, ${pagellm.probe.promptTokens}-token prompt fully cached / cold`, "floor", pagellm.probe.ratio,
      `<= ${SERVE_FLOOR_CACHED_TTFT}x`, (r) => r <= SERVE_FLOOR_CACHED_TTFT));
  }
  if (pagellm.turns !== null) {
    checks.push(check("pagellm serve chat turn TTFT / the same turn cold, worst of turns 2+", "floor", pagellm.turns.worst?.ratio ?? null,
      `<= ${SERVE_FLOOR_TURN_TTFT}x`, (r) => r <= SERVE_FLOOR_TURN_TTFT));
  }
  if (llama === undefined) return checks;
  const l = llama.metrics;
  checks.push(check("output tokens/s, pagellm serve / llama-server", "aim", p.outputTokensPerSecond / l.outputTokensPerSecond, ">= 1x", (r) => r >= 1));
  const ttft = p.ttftMs !== null && l.ttftMs !== null ? p.ttftMs.p50 / l.ttftMs.p50 : null;
  checks.push(check("TTFT p50, pagellm serve / llama-server", "aim", ttft, "< 1x", (r) => r < 1));
  if (workload === "chat") {
    const share = p.cachedShare !== null && l.cachedShare !== null && l.cachedShare > 0 ? p.cachedShare / l.cachedShare : null;
    checks.push(check("cached-token share, pagellm serve / llama-server", "aim", share, `>= ${SERVE_AIM_CACHED_SHARE}x`, (r) => r >= SERVE_AIM_CACHED_SHARE));
  }
  return checks;
}

/** Requests that failed for a reason other than the time limit, over every target: the run's error, or null. */
export function runFailure(r: ServeBenchResult): string | null {
  const failing = r.targets.filter((t) => t.metrics.failed > t.metrics.cut);
  const lines = [
    ...failing.map((t) => `${t.name}: ${t.metrics.failed - t.metrics.cut} of ${t.metrics.completed + t.metrics.failed} requests failed, first ${t.metrics.firstError}`),
    ...r.targets.flatMap((t) => (t.turns === null ? [] : t.turns.errors.map((e) => `${t.name}: ${e}`))),
    ...r.errors,
  ];
  return lines.length === 0 ? null : lines.join("; ");
}
