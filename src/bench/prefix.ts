/**
 * `pagellm bench prefix`: what automatic prefix caching buys and what it costs.
 *
 * 1. Time to first token of a long shared prefix plus a short unique suffix, with the prefix
 *    cached (one request warmed it) and with the cache off.
 * 2. The cost of block hashing per prompt token, sha256 and xxh64, next to prefill per token.
 * 3. The cost when nothing hits: throughput of all-distinct prompts, cache on vs off (target:
 *    within 2%). The two engines run alternately, so drift on a shared machine hits both.
 * 4. Time to first token against the fraction of the prompt found in the cache (0% to the whole
 *    prefix), one cache-on engine: what a chat turn or a shared system prompt buys.
 * 5. Serving workloads with shared prefixes (see prefix-workloads.ts), FCFS and LPM scheduling, each
 *    eviction policy, cache on and off, in a KV pool small enough that eviction matters.
 */
import type { KVType } from "../kv/kv-layout.ts";
import type { EngineOptions } from "../engine/engine-options.ts";
import type { LLM } from "../llm/llm.ts";
import type { SchedulePolicy } from "../engine/scheduler.ts";
import type { EvictionPolicyName } from "../kv/eviction.ts";
import type { HashAlgorithm } from "../kv/block-hash.ts";
import { measureHashCost } from "../kv/hash-cost.ts";
import { InputError } from "../errors.ts";
import { measureTtft, withLLM } from "./engine-runs.ts";
import { ratio, repeat, summarize, type RepeatOptions, type Summary } from "./measure.ts";
import type { BenchModel } from "./bench-models.ts";
import { TokenSource } from "./token-source.ts";
import { figure, fmt, fmtPct, fmtRatio, fmtSpread, progress, threadsLabel, type Figure, type Table } from "./bench-report.ts";
import { configLabel, runServing, type ServingConfig, type ServingResult } from "./prefix-serving.ts";
import { makeWorkload, servingPoolBlocks, type WorkloadName } from "./prefix-workloads.ts";

const BLOCK_SIZE = 16;
const HASHES: readonly HashAlgorithm[] = ["sha256", "xxh64"];
/** Fractions of the shared prefix cached before the TTFT-by-fraction requests (rounded down to whole blocks). */
export const CACHED_FRACTIONS: readonly number[] = [0, 0.25, 0.5, 0.75, 1];
/** The most a prefix cache that never hits may cost: throughput with it on at most 2% below off. */
export const ZERO_HIT_TARGET = 0.02;

export interface PrefixOptions extends RepeatOptions {
  threads: number;
  /** The KV cache type (null: the model's default). */
  kvType: KVType | null;
  model: BenchModel;
  prefixTokens: number;
  suffixTokens: number;
  /** The all-distinct workload: requests per repetition, prompt and output tokens of each. */
  distinctRequests: number;
  distinctPromptTokens: number;
  distinctOutputTokens: number;
  workloads: readonly WorkloadName[];
  requests: number;
  outputTokens: number;
  /** Requests running at once in the serving workloads. */
  maxNumSeqs: number;
  /** KV pool of the serving workloads; null: servingPoolBlocks. */
  numBlocks: number | null;
  policies: readonly EvictionPolicyName[];
  seed: number;
}

export interface TtftResult {
  promptTokens: number;
  prefixTokens: number;
  cachedMs: Summary;
  uncachedMs: Summary;
  /** uncached / cached (medians). */
  speedup: number;
  /** Prefix hits / lookups over the timed cached requests, in tokens. */
  hitRate: number;
}

/** TTFT of prompts of one length whose first `cachedTokens` were cached by an earlier request. */
export interface CachedFractionPoint {
  /** The fraction of the shared prefix asked for (CACHED_FRACTIONS). */
  target: number;
  promptTokens: number;
  /** Prompt tokens served from the cache (median over the timed requests). */
  cachedTokens: number;
  /** cachedTokens / promptTokens: the x of the TTFT chart. */
  cachedFraction: number;
  ttftMs: Summary;
}

export interface HashCost {
  algorithm: HashAlgorithm;
  nsPerToken: number;
  /** Against the cost of prefilling a token (uncached TTFT / prompt tokens). */
  fractionOfPrefill: number;
}

export interface ZeroHitResult {
  requests: number;
  promptTokens: number;
  outputTokens: number;
  /** Prompt plus output tokens per second. */
  cacheOnTokensPerSecond: Summary;
  cacheOffTokensPerSecond: Summary;
  /** on / off, per repetition (each pair run back to back). */
  ratioPerRep: Summary;
  hitRate: number;
  target: number;
}

export interface WorkloadResult {
  name: WorkloadName;
  description: string;
  maxNumSeqs: number;
  numBlocks: number;
  configs: ServingResult[];
}

/** `results` of `bench prefix`. */
export interface PrefixResult {
  model: string;
  threads: number;
  blockSize: number;
  ttft: TtftResult;
  ttftByCachedFraction: CachedFractionPoint[];
  hashing: HashCost[];
  zeroHit: ZeroHitResult;
  workloads: WorkloadResult[];
}

export async function runPrefixBench(o: PrefixOptions): Promise<PrefixResult> {
  const base: Partial<EngineOptions> = { threads: o.threads, blockSize: BLOCK_SIZE, kvType: o.kvType };
  const { ttft, ttftByCachedFraction, zeroHit } = await withLLM(o.model, { ...base, enablePrefixCaching: true }, (on) =>
    withLLM(o.model, { ...base, enablePrefixCaching: false }, async (off) => ({
      ttft: await measureSharedPrefixTtft(on, off, o),
      ttftByCachedFraction: await measureTtftByCachedFraction(on, o),
      zeroHit: await measureZeroHit(on, off, o),
    })),
  );
  progress("block hashing cost");
  const prefillNsPerToken = (ttft.uncachedMs.median * 1e6) / ttft.promptTokens;
  const hashing = HASHES.map((algorithm): HashCost => {
    const nsPerToken = measureHashCost(algorithm, BLOCK_SIZE, ttft.promptTokens);
    return { algorithm, nsPerToken, fractionOfPrefill: nsPerToken / prefillNsPerToken };
  });
  const workloads: WorkloadResult[] = [];
  for (const name of o.workloads) {
    const workload = makeWorkload(name, { requests: o.requests, outputTokens: o.outputTokens, seed: o.seed, vocabSize: o.model.config.vocabSize });
    const numBlocks = o.numBlocks ?? servingPoolBlocks(workload, BLOCK_SIZE, o.maxNumSeqs);
    const configs: ServingResult[] = [];
    for (const config of servingConfigs(o.policies)) {
      progress(`${name}: cache ${configLabel(config)} (${numBlocks} KV blocks, ${o.maxNumSeqs} running)`);
      configs.push(await runServing(o.model, workload, config, { ...base, numBlocks, maxNumSeqs: o.maxNumSeqs }));
    }
    workloads.push({ name, description: workload.description, maxNumSeqs: o.maxNumSeqs, numBlocks, configs });
  }
  return { model: o.model.label, threads: o.threads, blockSize: BLOCK_SIZE, ttft, ttftByCachedFraction, hashing, zeroHit, workloads };
}

/**
 * Cache off once: with nothing cached every request's cached prefix is 0 tokens, so LPM's order
 * is arrival order and it schedules exactly as FCFS. Then each eviction policy under both.
 */
function servingConfigs(policies: readonly EvictionPolicyName[]): ServingConfig[] {
  const schedules: SchedulePolicy[] = ["fcfs", "lpm"];
  return [
    { cache: false, schedule: "fcfs", evictionPolicy: policies[0] ?? "lru" },
    ...policies.flatMap((evictionPolicy) => schedules.map((schedule): ServingConfig => ({ cache: true, schedule, evictionPolicy }))),
  ];
}

async function measureSharedPrefixTtft(on: LLM, off: LLM, o: PrefixOptions): Promise<TtftResult> {
  const source = new TokenSource(o.seed, on.config.vocabSize);
  const prefix = source.prompt(o.prefixTokens);
  const suffixes = Array.from({ length: o.warmup + o.reps + 1 }, () => source.tokens(o.suffixTokens));
  const prompt = (i: number) => [...prefix, ...suffixes[i]!];
  const promptTokens = o.prefixTokens + o.suffixTokens;
  if (promptTokens > on.config.seqLen) {
    throw new InputError(`prefix + suffix (${promptTokens} tokens) exceed the model's context of ${on.config.seqLen}: lower --prefix-tokens`);
  }
  progress(`TTFT of ${o.prefixTokens} shared + ${o.suffixTokens} unique tokens, cache on`);
  await on.generate([{ promptTokenIds: prompt(o.warmup + o.reps), maxTokens: 1, temperature: 0 }]); // caches the prefix
  const before = on.stats();
  // Repetition indices run -warmup..reps-1; each request gets its own suffix.
  const cached = await measureTtft(on, o, (rep) => prompt(rep + o.warmup));
  const after = on.stats();
  progress(`TTFT of ${promptTokens} tokens, cache off`);
  const uncached = await measureTtft(off, o, (rep) => prompt(rep + o.warmup));
  const cachedMs = summarize(cached);
  const uncachedMs = summarize(uncached);
  const queries = after.prefixQueries - before.prefixQueries;
  return {
    promptTokens, prefixTokens: o.prefixTokens, cachedMs, uncachedMs,
    speedup: ratio(uncachedMs, cachedMs),
    hitRate: queries === 0 ? 0 : (after.prefixHits - before.prefixHits) / queries,
  };
}

/**
 * For each fraction: one request caches a fresh prefix of that many whole blocks, then every timed
 * request is that prefix plus its own random rest, to the same prompt length. Fresh prefixes per
 * fraction, so an earlier fraction's blocks never add hits; the cached tokens are measured.
 */
async function measureTtftByCachedFraction(on: LLM, o: PrefixOptions): Promise<CachedFractionPoint[]> {
  const source = new TokenSource(o.seed + 104729, on.config.vocabSize);
  const promptTokens = o.prefixTokens + o.suffixTokens;
  const points: CachedFractionPoint[] = [];
  for (const target of CACHED_FRACTIONS) {
    const shared = Math.floor((target * o.prefixTokens) / BLOCK_SIZE) * BLOCK_SIZE;
    progress(`TTFT of ${promptTokens} tokens with ${shared} cached (${fmtPct(target)} of the prefix)`);
    const prefix = shared > 0 ? source.prompt(shared) : [];
    const prompt = () => (shared > 0 ? [...prefix, ...source.tokens(promptTokens - shared)] : source.prompt(promptTokens));
    if (shared > 0) await on.generate([{ promptTokenIds: prompt(), maxTokens: 1, temperature: 0 }]);
    const runs = await repeat(o, async () => {
      const [r] = await on.generate([{ promptTokenIds: prompt(), maxTokens: 1, temperature: 0 }]);
      if (!r || r.finish_reason === "error") throw new InputError(`request failed: ${r?.error ?? "no result"}`);
      return { ms: r.ttft_ms, cached: r.cached_tokens };
    });
    const cachedTokens = summarize(runs.map((r) => r.cached)).median;
    points.push({ target, promptTokens, cachedTokens, cachedFraction: cachedTokens / promptTokens, ttftMs: summarize(runs.map((r) => r.ms)) });
  }
  return points;
}

async function measureZeroHit(on: LLM, off: LLM, o: PrefixOptions): Promise<ZeroHitResult> {
  progress(`all-distinct prompts (${o.distinctRequests} x ${o.distinctPromptTokens} tokens), cache on vs off, alternating`);
  const before = on.stats();
  const run = async (llm: LLM, rep: number): Promise<number> => {
    // The same prompts for both engines in a repetition, new ones every repetition: nothing can hit.
    const source = new TokenSource(o.seed + 7919 * (rep + o.warmup + 1), llm.config.vocabSize);
    const requests = Array.from({ length: o.distinctRequests }, () => ({
      promptTokenIds: source.prompt(o.distinctPromptTokens), maxTokens: o.distinctOutputTokens, temperature: 0,
    }));
    const t0 = performance.now();
    const results = await llm.generate(requests);
    const tokens = results.reduce((n, r) => n + r.prompt_tokens + r.completion_tokens, 0);
    return tokens / ((performance.now() - t0) / 1000);
  };
  const pairs = await repeat(o, async (rep) => {
    // Alternate which engine goes first, so a slow spell of the machine does not favour one.
    if (rep % 2 === 0) {
      const a = await run(on, rep);
      return { on: a, off: await run(off, rep) };
    }
    const b = await run(off, rep);
    return { on: await run(on, rep), off: b };
  });
  const after = on.stats();
  const queries = after.prefixQueries - before.prefixQueries;
  return {
    requests: o.distinctRequests, promptTokens: o.distinctPromptTokens, outputTokens: o.distinctOutputTokens,
    cacheOnTokensPerSecond: summarize(pairs.map((p) => p.on)),
    cacheOffTokensPerSecond: summarize(pairs.map((p) => p.off)),
    ratioPerRep: summarize(pairs.map((p) => p.on / p.off)),
    hitRate: queries === 0 ? 0 : (after.prefixHits - before.prefixHits) / queries,
    target: ZERO_HIT_TARGET,
  };
}

export function prefixTables(r: PrefixResult): Table[] {
  const t = r.ttft;
  const z = r.zeroHit;
  const tables: Table[] = [
    {
      title: `${r.model}, ${r.threads} thread(s): TTFT of ${t.prefixTokens} shared + ${t.promptTokens - t.prefixTokens} unique tokens; median (min-max)`,
      columns: ["prefix cache", "TTFT ms", "hit rate", "speedup"],
      rows: [
        ["on (prefix warmed)", fmtSpread(t.cachedMs), fmtPct(t.hitRate), fmtRatio(t.speedup)],
        ["off", fmtSpread(t.uncachedMs), "-", "1.00x"],
      ],
    },
    {
      title: `block hashing (${r.blockSize}-token blocks, ${t.promptTokens}-token prompt) vs prefill cost per token`,
      columns: ["hash", "ns/token", "of prefill"],
      rows: r.hashing.map((h) => [h.algorithm, fmt(h.nsPerToken), fmtPct(h.fractionOfPrefill)]),
    },
    {
      title: `0% hit rate: ${z.requests} distinct prompts x ${z.promptTokens} tokens, ${z.outputTokens} output tokens; prompt+output tokens/s, median (min-max)`,
      columns: ["prefix cache", "tokens/s", "hit rate", `on/off (target within ${fmtPct(z.target)})`],
      rows: [
        ["on", fmtSpread(z.cacheOnTokensPerSecond), fmtPct(z.hitRate), fmtSpread(z.ratioPerRep)],
        ["off", fmtSpread(z.cacheOffTokensPerSecond), "-", "-"],
      ],
    },
  ];
  tables.splice(1, 0, {
    title: `${r.model}, ${r.threads} thread(s): TTFT of a ${r.ttftByCachedFraction[0]?.promptTokens ?? 0}-token prompt against the part of it already cached; median (min-max)`,
    columns: ["cached tokens", "cached fraction", "TTFT ms", "vs nothing cached"],
    rows: r.ttftByCachedFraction.map((p) => [
      fmt(p.cachedTokens), fmtPct(p.cachedFraction), fmtSpread(p.ttftMs), fmtRatio(ratio(p.ttftMs, r.ttftByCachedFraction[0]!.ttftMs)),
    ]),
  });
  for (const w of r.workloads) {
    tables.push({
      title: `${w.description}; ${w.maxNumSeqs} running at most, KV pool ${w.numBlocks} blocks of ${r.blockSize} tokens`,
      columns: [
        "prefix cache", "schedule", "eviction", "output tokens/s", "TTFT p50 ms", "TTFT p99 ms", "hit rate", "uncached prompt tokens", "evictions", "preemptions", "wall s",
      ],
      rows: w.configs.map((c) => [
        c.cache ? "on" : "off", c.cache ? c.schedule : "fcfs = lpm", c.cache ? c.evictionPolicy : "-",
        fmt(c.outputTokensPerSecond), fmt(c.ttftMs.p50), fmt(c.ttftMs.p99), fmtPct(c.hitRate), String(c.promptTokens - c.cachedTokens),
        String(c.evictions), String(c.preemptions), fmt(c.wallSeconds),
      ]),
    });
  }
  return tables;
}

/** The figures --compare matches: TTFTs, hashing cost, zero-hit throughput, serving throughput and hit rates. */
export function prefixFigures(r: PrefixResult): Figure[] {
  const at = `${r.model}, ${threadsLabel(r.threads)}`;
  const t = r.ttft;
  return [
    ...figure(`${at}: TTFT ${t.prefixTokens} cached + ${t.promptTokens - t.prefixTokens} tokens, ms`, t.cachedMs, "ms", "lower"),
    ...figure(`${at}: TTFT ${t.promptTokens} tokens, cache off, ms`, t.uncachedMs, "ms", "lower"),
    ...r.ttftByCachedFraction.flatMap((p) => figure(`${at}: TTFT ${p.promptTokens} tokens, ${fmtPct(p.target)} of the prefix cached, ms`, p.ttftMs, "ms", "lower")),
    ...r.hashing.flatMap((h) => figure(`${h.algorithm} block hashing ns/token`, h.nsPerToken, "ns/token", "lower")),
    ...figure(`${at}: 0% hits, cache on, tokens/s`, r.zeroHit.cacheOnTokensPerSecond, "tokens/s"),
    ...figure(`${at}: 0% hits, cache off, tokens/s`, r.zeroHit.cacheOffTokensPerSecond, "tokens/s"),
    ...r.workloads.flatMap((w) => w.configs.flatMap((c) => [
      ...figure(`${at}: ${w.name}, cache ${configLabel(c)}: output tokens/s`, c.outputTokensPerSecond, "tokens/s"),
      ...figure(`${at}: ${w.name}, cache ${configLabel(c)}: TTFT p50 ms`, c.ttftMs.p50, "ms", "lower"),
      ...figure(`${at}: ${w.name}, cache ${configLabel(c)}: hit rate`, c.hitRate, "fraction"),
    ])),
  ];
}

/** Notes for the reader: which workload configurations evicted cached blocks. */
export function prefixNotes(r: PrefixResult): string[] {
  if (r.workloads.length === 0) return [];
  const notes: string[] = [
    "serving workloads: all requests submitted at once to a freshly loaded engine; TTFT includes queueing",
    "with the prefix cache off LPM's order is arrival order (every cached prefix is 0 tokens), so one run stands for FCFS and LPM",
    "serving configurations run one after another, once each: between configurations that compute the same prompt tokens, throughput differs by machine noise",
  ];
  for (const w of r.workloads) {
    const evicting = w.configs.filter((c) => c.evictions > 0).map((c) => `cache ${configLabel(c)}`);
    notes.push(`${w.name}: ${evicting.length > 0 ? `eviction under the ${w.numBlocks}-block pool in ${evicting.join("; ")}` : `no evictions in the ${w.numBlocks}-block pool`}`);
  }
  return notes;
}
