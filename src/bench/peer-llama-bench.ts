/**
 * llama.cpp's own benchmark, `llama-bench`, as the peer of the GGUF benches (peer.ts): the binary
 * of a llama.cpp build the user made (e.g. ../shared/tools/llama-ref's, native for this CPU), run
 * on the same file at the same thread count right after pagellm's measurement:
 *
 *   pagellm bench decode --model FILE.gguf --threads 1,2 --peer-llama-bench ~/llama.cpp/build/bin/llama-bench
 *
 * decode is llama-bench's `tg` test at the prompt's depth (`-p 0 -n TOKENS -d PROMPT`: the prompt
 * is evaluated first and not timed), prefill its `pp` test (`-p PROMPT -n 0`). Each repetition is
 * one of its samples; its warm-up run is on unless the bench's --warmup is 0. Its KV cache is
 * pagellm's type in the run (-ctk/-ctv), f16 when the run keeps the file's default.
 */
import { existsSync } from "node:fs";
import { InputError } from "../errors.ts";
import { summarize } from "./measure.ts";
import type { LlamaCppPeer, PeerResult, PeerRun } from "./peer.ts";

/** The --peer-llama-bench binary, checked: it must exist. */
export function llamaBenchPeer(bin: string): LlamaCppPeer {
  if (!existsSync(bin)) throw new InputError(`--peer-llama-bench ${bin}: no such file (give the llama-bench binary of a llama.cpp build)`);
  return { run: (run) => runLlamaBench(bin, run) };
}

/** llama-bench's arguments for one run. */
export function llamaBenchArgs(run: PeerRun): string[] {
  const test = run.mode === "decode"
    ? ["-p", "0", "-n", String(run.genTokens), "-d", String(run.promptTokens)]
    : ["-p", String(run.promptTokens), "-n", "0"];
  const kv = run.kvType === null ? [] : ["-ctk", run.kvType, "-ctv", run.kvType];
  return ["-m", run.model, "-t", String(run.threads), "-r", String(run.reps), "-o", "json", ...test, ...kv, ...(run.warmup === 0 ? ["--no-warmup"] : [])];
}

/** The part of one llama-bench JSON record used here. */
interface LlamaBenchRecord {
  build_commit?: unknown;
  samples_ts?: unknown;
}

/** llama-bench's JSON output (an array of records, one per test): the build's commit and the samples' tokens/s, or null. */
export function parseLlamaBench(stdout: string): { build: string; rates: number[] } | null {
  let records: unknown;
  try {
    records = JSON.parse(stdout);
  } catch {
    return null;
  }
  if (!Array.isArray(records) || records.length !== 1) return null;
  const r = records[0] as LlamaBenchRecord;
  const rates = r.samples_ts;
  if (!Array.isArray(rates) || rates.length === 0 || !rates.every((x) => typeof x === "number" && x > 0)) return null;
  return { build: String(r.build_commit), rates: rates as number[] };
}

function runLlamaBench(bin: string, run: PeerRun): PeerResult {
  const proc = Bun.spawnSync([bin, ...llamaBenchArgs(run)], { stdout: "pipe", stderr: "pipe" });
  const parsed = proc.exitCode === 0 ? parseLlamaBench(proc.stdout.toString()) : null;
  if (parsed === null) {
    const why = proc.stderr.toString().trim().split("\n").slice(-3).join(" | ");
    throw new InputError(`llama-bench peer failed on ${run.model} (exit ${proc.exitCode}): ${why || "no figures in its output"}`);
  }
  return { llamaCpp: parsed.build, via: "llama-bench, --peer-llama-bench", tokensPerSecond: summarize(parsed.rates) };
}
