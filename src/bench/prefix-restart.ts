/**
 * `pagellm bench prefix --restart`: what the disk KV cache buys after a restart. Every timed
 * request runs in a fresh process (restart-child.ts), so the memory pool is empty each time:
 *
 *   cold      no disk tier: the whole prompt (shared prefix + unique suffix) is computed;
 *   restart   the disk tier warm with the shared prefix (one process computed it first, and the
 *             block files are in the page cache): the prefix is read from disk, the suffix computed.
 *
 * The two alternate, one pair per repetition, so a slow spell of a shared machine hits both. Beside
 * them, the machine's streaming read of the same block files from the page cache (one 1 MiB
 * buffer, file after file), against which the disk tier's own read speed is put.
 */
import { closeSync, mkdtempSync, openSync, readdirSync, readSync, rmSync } from "node:fs";
import { join } from "node:path";
import type { CompletionResult } from "../llm/llm.ts";
import type { EngineOptions } from "../engine/engine-options.ts";
import { InputError } from "../errors.ts";
import type { SecondTierStats } from "../kv/second-tier.ts";
import { ratio, repeat, summarize, type RepeatOptions, type Summary } from "./measure.ts";
import type { BenchModel } from "./bench-models.ts";
import { TokenSource } from "./token-source.ts";
import { fmt, fmtRatio, fmtSpread, progress, threadsLabel, figure, type Figure, type Table } from "./bench-report.ts";

/** Restart TTFT / cold TTFT: the floor (must be at most 0.1x) and the aim (0.03x). */
export const RESTART_FLOOR = 0.1;
export const RESTART_AIM = 0.03;
const CHILD_TIMEOUT_MS = 600_000;

/** What restart-child.ts is asked to do. */
export interface RestartJob {
  model: string;
  tokenizer: string;
  engine: Partial<EngineOptions>;
  kvCacheDir: string | null;
  promptTokenIds: number[];
}

export interface RestartChildResult {
  result: CompletionResult;
  tier: SecondTierStats | null;
  loadMs: number;
}

export interface RestartOptions extends RepeatOptions {
  model: BenchModel;
  threads: number;
  blockSize: number;
  prefixTokens: number;
  suffixTokens: number;
  seed: number;
  /** Where the block files go (a fresh folder inside it, removed afterwards). */
  scratchDir: string;
}

export interface RestartResult {
  model: string;
  threads: number;
  blockSize: number;
  promptTokens: number;
  prefixTokens: number;
  coldTtftMs: Summary;
  restartTtftMs: Summary;
  /** restart / cold, per repetition pair. */
  ratioPerRep: Summary;
  /** Prompt tokens read from disk in the restart runs (median). */
  diskCachedTokens: number;
  /** Bytes the disk tier read per restart request, and its read speed (bytes / wall time with reads in flight), MB/s. */
  diskBytesRead: number;
  diskReadMBps: Summary;
  /** The same block files read as one stream from the page cache, MB/s. */
  streamReadMBps: Summary;
  /** Model load time of the restart processes (not in TTFT), ms. */
  loadMs: Summary;
  floor: number;
  aim: number;
}

export async function runRestartBench(o: RestartOptions): Promise<RestartResult> {
  const source = new TokenSource(o.seed + 31337, o.model.config.vocabSize);
  const prefix = source.prompt(o.prefixTokens);
  const promptTokens = o.prefixTokens + o.suffixTokens;
  if (promptTokens > o.model.config.seqLen) {
    throw new InputError(`prefix + suffix (${promptTokens} tokens) exceed the model's context of ${o.model.config.seqLen}: lower --prefix-tokens`);
  }
  const prompt = () => [...prefix, ...source.tokens(o.suffixTokens)];
  const dir = mkdtempSync(join(o.scratchDir, "kv-restart-"));
  try {
    const job = (kvCacheDir: string | null): RestartJob => ({
      model: o.model.path, tokenizer: o.model.tokenizer, engine: { threads: o.threads, blockSize: o.blockSize }, kvCacheDir, promptTokenIds: prompt(),
    });
    progress(`restart: one process computes the ${o.prefixTokens}-token prefix into the disk tier`);
    await runChild(job(dir));
    const files = blockFiles(dir);
    streamRead(files); // the page cache holds them now (they were just written): read once more to be sure
    const pairs = await repeat(o, async (rep) => {
      progress(`restart: fresh processes, cold and disk-warm (${rep < 0 ? "warm-up" : `repetition ${rep + 1} of ${o.reps}`})`);
      const cold = await runChild(job(null));
      const warm = await runChild(job(dir));
      return { cold, warm };
    });
    const stream = Array.from({ length: Math.max(3, o.reps) }, () => streamRead(files));
    const tiers = pairs.map((p) => p.warm.tier as SecondTierStats);
    return {
      model: o.model.label, threads: o.threads, blockSize: o.blockSize, promptTokens, prefixTokens: o.prefixTokens,
      coldTtftMs: summarize(pairs.map((p) => p.cold.result.ttft_ms)),
      restartTtftMs: summarize(pairs.map((p) => p.warm.result.ttft_ms)),
      ratioPerRep: summarize(pairs.map((p) => p.warm.result.ttft_ms / p.cold.result.ttft_ms)),
      diskCachedTokens: summarize(pairs.map((p) => p.warm.result.cached_tokens_disk)).median,
      diskBytesRead: summarize(tiers.map((t) => t.bytesRead)).median,
      diskReadMBps: summarize(tiers.map((t) => t.bytesRead / 1e6 / (t.readMs / 1000))),
      streamReadMBps: summarize(stream),
      loadMs: summarize(pairs.map((p) => p.warm.loadMs)),
      floor: RESTART_FLOOR, aim: RESTART_AIM,
    };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

async function runChild(job: RestartJob): Promise<RestartChildResult> {
  const script = new URL("./restart-child.ts", import.meta.url).pathname;
  const proc = Bun.spawn([process.execPath, script, JSON.stringify(job)], { stdout: "pipe", stderr: "pipe", timeout: CHILD_TIMEOUT_MS });
  const [out, err, code] = await Promise.all([new Response(proc.stdout).text(), new Response(proc.stderr).text(), proc.exited]);
  if (code !== 0) {
    const lines = err.trim().split("\n");
    throw new InputError(`bench prefix --restart: a child process failed (exit ${code}): ${lines.find((l) => /error/i.test(l)) ?? lines.pop() ?? ""}`);
  }
  return JSON.parse(out) as RestartChildResult;
}

/** Every block file under the cache folder. */
function blockFiles(root: string): string[] {
  return readdirSync(root, { recursive: true, encoding: "utf8" }).filter((p) => p.endsWith(".kvb")).map((p) => join(root, p));
}

/** MB/s of reading `files` one after another through one 1 MiB buffer. */
function streamRead(files: readonly string[]): number {
  const buffer = new Uint8Array(1 << 20);
  const t0 = performance.now();
  let bytes = 0;
  for (const path of files) {
    const fd = openSync(path, "r");
    try {
      for (let n = readSync(fd, buffer); n > 0; n = readSync(fd, buffer)) bytes += n;
    } finally {
      closeSync(fd);
    }
  }
  return bytes / 1e6 / ((performance.now() - t0) / 1000);
}

export function restartTable(r: RestartResult): Table {
  return {
    title: `${r.model}, ${threadsLabel(r.threads)}, ${r.blockSize}-token blocks: TTFT of ${r.prefixTokens} shared + ${r.promptTokens - r.prefixTokens} unique tokens in a fresh process; median (min-max)`,
    columns: ["run", "TTFT ms", "vs cold", `target (floor ${fmtRatio(r.floor)}, aim ${fmtRatio(r.aim)})`, "from disk", "read MB/s"],
    rows: [
      ["cold (no disk tier)", fmtSpread(r.coldTtftMs), "1.00x", "-", "0", "-"],
      [
        "restart, disk tier warm", fmtSpread(r.restartTtftMs), fmtSpread(r.ratioPerRep), verdict(r), `${fmt(r.diskCachedTokens)} tokens, ${fmt(r.diskBytesRead / 1e6)} MB`,
        `${fmtSpread(r.diskReadMBps)} (stream from page cache ${fmtSpread(r.streamReadMBps)}: ${fmtRatio(ratio(r.diskReadMBps, r.streamReadMBps))})`,
      ],
    ],
  };
}

function verdict(r: RestartResult): string {
  const x = r.ratioPerRep.median;
  return x <= r.aim ? "aim met" : x <= r.floor ? "floor met, aim missed" : "floor MISSED";
}

export function restartFigures(r: RestartResult): Figure[] {
  const at = `${r.model}, ${threadsLabel(r.threads)}`;
  return [
    ...figure(`${at}: TTFT ${r.promptTokens} tokens, fresh process, cold, ms`, r.coldTtftMs, "ms", "lower"),
    ...figure(`${at}: TTFT ${r.promptTokens} tokens, fresh process, disk tier warm, ms`, r.restartTtftMs, "ms", "lower"),
    ...figure(`${at}: restart TTFT / cold TTFT`, r.ratioPerRep, "ratio", "lower"),
    ...figure(`${at}: disk tier read MB/s`, r.diskReadMBps, "MB/s"),
    ...figure(`${at}: streaming read of the same files from the page cache, MB/s`, r.streamReadMBps, "MB/s"),
  ];
}

export function restartNotes(r: RestartResult): string[] {
  return [
    `restart: each timed request in a fresh process (model load, ${fmt(r.loadMs.median)} ms median, not in TTFT); cold and restart alternate`,
    "restart: disk read speed = bytes of block files read / wall time with at least one read in flight (verification and copy into the arena not included)",
  ];
}
