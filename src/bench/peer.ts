/**
 * llama.cpp as the peer of the GGUF benches (`bench decode|prefill`): run on the same file at the
 * same thread count right after each pagellm measurement, so the two see the machine within
 * seconds of each other. Two kinds, one file each, behind `LlamaCppPeer`: node-llama-cpp under Bun
 * (`--peer-nlc`, peer-nlc.ts) and llama.cpp's own `llama-bench` binary (`--peer-llama-bench`,
 * peer-llama-bench.ts).
 */
import type { KVType } from "../kv/kv-layout.ts";
import type { Summary } from "./measure.ts";
import { fmtRatio, fmtSpread, type Table } from "./bench-report.ts";

/** One peer measurement: the file, the thread count and what to time. */
export interface PeerRun {
  model: string;
  threads: number;
  /** decode: tokens/s of `genTokens` generated after a `promptTokens` prompt; prefill: tokens/s of a `promptTokens` prompt. */
  mode: "decode" | "prefill";
  promptTokens: number;
  genTokens: number;
  warmup: number;
  reps: number;
  /** The model's vocabulary: prompts are random ids below it. */
  vocabSize: number;
  seed: number;
  /** pagellm's KV cache type in this run (null: the file's default, f16 for GGUF, as llama.cpp's). */
  kvType: KVType | null;
}

export interface PeerResult {
  /** The llama.cpp build that ran (its release or commit). */
  llamaCpp: string;
  /** How it ran, as the reports say it: "llama-bench, --peer-llama-bench". */
  via: string;
  tokensPerSecond: Summary;
}

/** llama.cpp run one way. */
export interface LlamaCppPeer {
  /** Time llama.cpp on `run.model`, in its own process; an InputError naming the peer when it fails. */
  run(run: PeerRun): PeerResult;
}

/** A figure of llama.cpp's next to pagellm's: its tokens/s and pagellm's / its (medians). */
export interface PeerFigure extends PeerResult {
  ratio: number;
}

/** pagellm against llama.cpp on the same file, at each thread count that has a peer figure. */
export function peerTable(what: string, rows: readonly { threads: number; ours: Summary; peer: PeerFigure | null }[]): Table {
  const withPeer = rows.filter((x) => x.peer !== null);
  return {
    title: `${what} against llama.cpp ${withPeer[0]?.peer?.llamaCpp ?? ""} (${withPeer[0]?.peer?.via ?? ""}) on the same file, run right after; median (min-max)`,
    columns: ["threads", "pagellm tokens/s", "llama.cpp tokens/s", "pagellm / llama.cpp"],
    rows: withPeer.map((x) => [String(x.threads), fmtSpread(x.ours), fmtSpread(x.peer!.tokensPerSecond), fmtRatio(x.peer!.ratio)]),
  };
}
