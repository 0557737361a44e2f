/**
 * llama.cpp's `llama-batched-bench` as the peer of batched decode (`bench threads`): llama-bench
 * has no test of many sequences decoding together, so this one binary of the user's llama.cpp
 * build (`cmake --build build --target llama-batched-bench`) times it: `-npl SEQS` sequences, each
 * with its own `-npp PROMPT`-token prompt (not shared, as pagellm's batch bench), then `-ntg STEPS`
 * decode steps of all of them together. Its `speed_tg` (SEQS x STEPS / the decode time) is the
 * figure next to pagellm's aggregate decode tokens/s. It runs each configuration once, so one
 * process is one repetition; its warm-up (16 tokens) is its own.
 */
import { existsSync } from "node:fs";
import { InputError } from "../errors.ts";
import { summarize, type Summary } from "./measure.ts";

export interface BatchedPeerRun {
  model: string;
  threads: number;
  seqs: number;
  promptTokens: number;
  steps: number;
  reps: number;
}

export interface BatchedPeerResult {
  /** "llama-batched-bench" and the build's version line where it printed one. */
  via: string;
  tokensPerSecond: Summary;
}

export interface BatchedPeer {
  /** Time llama.cpp's batched decode on `run.model`; an InputError naming the peer when it fails. */
  run(run: BatchedPeerRun): BatchedPeerResult;
}

/** The --peer-batched-bench binary, checked: it must exist. */
export function batchedBenchPeer(bin: string): BatchedPeer {
  if (!existsSync(bin)) throw new InputError(`--peer-batched-bench ${bin}: no such file (give the llama-batched-bench binary of a llama.cpp build)`);
  return { run: (run) => runBatchedBench(bin, run) };
}

/** llama-batched-bench's arguments for one process: a context just large enough, every sequence in one batch. */
export function batchedBenchArgs(run: BatchedPeerRun): string[] {
  const context = run.seqs * (run.promptTokens + run.steps) + 16;
  const batch = String(Math.max(512, run.seqs * run.promptTokens));
  return [
    "-m", run.model, "-t", String(run.threads), "-tb", String(run.threads), "-c", String(context), "-b", batch, "-ub", batch,
    "-npp", String(run.promptTokens), "-ntg", String(run.steps), "-npl", String(run.seqs), "-ctk", "f16", "-ctv", "f16", "--output-format", "jsonl",
  ];
}

/** The decode speed (`speed_tg`) of the JSON line of `seqs` sequences in its output, or null. */
export function parseBatchedBench(output: string, seqs: number): number | null {
  for (const line of output.split("\n")) {
    const text = line.trim();
    if (!text.startsWith("{")) continue;
    let record: unknown;
    try {
      record = JSON.parse(text);
    } catch {
      continue;
    }
    if (typeof record !== "object" || record === null) continue;
    const r = record as { pl?: unknown; speed_tg?: unknown };
    if (r.pl === seqs && typeof r.speed_tg === "number" && r.speed_tg > 0) return r.speed_tg;
  }
  return null;
}

function runBatchedBench(bin: string, run: BatchedPeerRun): BatchedPeerResult {
  const rates: number[] = [];
  for (let rep = 0; rep < run.reps; rep++) {
    const proc = Bun.spawnSync([bin, ...batchedBenchArgs(run)], { stdout: "pipe", stderr: "pipe" });
    const output = `${proc.stdout.toString()}\n${proc.stderr.toString()}`;
    const rate = proc.exitCode === 0 ? parseBatchedBench(output, run.seqs) : null;
    if (rate === null) {
      const why = proc.stderr.toString().trim().split("\n").slice(-3).join(" | ");
      throw new InputError(`llama-batched-bench peer failed on ${run.model} (exit ${proc.exitCode}): ${why || "no figures in its output"}`);
    }
    rates.push(rate);
  }
  return { via: "llama-batched-bench, --peer-batched-bench", tokensPerSecond: summarize(rates) };
}
