/**
 * llama.cpp itself as the peer of the GGUF benches, in the same run on the same file: the
 * node-llama-cpp npm package (native llama.cpp with its prebuilt CPU binaries) under Bun, from a
 * folder outside the project where the user installed it:
 *
 *   mkdir -p /tmp/peers && cd /tmp/peers && NODE_LLAMA_CPP_SKIP_DOWNLOAD=true npm install node-llama-cpp@3.22.1
 *   pagellm bench decode --shape smollm2-135m --type Q8_0 --peer-nlc /tmp/peers
 *
 * Each measurement is a separate Bun process (nlc-peer-script.ts) at one thread count, run right
 * after pagellm's measurement at that count, so the two see the machine within seconds of each other.
 */
import { existsSync } from "node:fs";
import { join } from "node:path";
import { InputError } from "../errors.ts";
import { summarize, type Summary } from "./measure.ts";
import { fmtRatio, fmtSpread, type Table } from "./report.ts";

const SCRIPT = join(import.meta.dir, "nlc-peer-script.ts");

export interface PeerRun {
  /** The folder node-llama-cpp is installed in (holds node_modules/node-llama-cpp). */
  dir: string;
  model: string;
  threads: number;
  mode: "decode" | "prefill";
  promptTokens: number;
  genTokens: number;
  warmup: number;
  reps: number;
  /** The model's vocabulary: prompts are random ids below it. */
  vocabSize: number;
  seed: number;
}

export interface PeerResult {
  /** The llama.cpp release node-llama-cpp bundles. */
  llamaCpp: string;
  tokensPerSecond: Summary;
}

/** The --peer-nlc folder, checked: it must hold an installed node-llama-cpp. */
export function checkPeerDir(dir: string): string {
  if (!existsSync(join(dir, "node_modules", "node-llama-cpp", "package.json"))) {
    throw new InputError(
      `--peer-nlc ${dir}: no node_modules/node-llama-cpp there; install it outside the project: ` +
        `mkdir -p ${dir} && cd ${dir} && NODE_LLAMA_CPP_SKIP_DOWNLOAD=true npm install node-llama-cpp@3.22.1`,
    );
  }
  return dir;
}

/** Run node-llama-cpp on `run.model` in its own process and return its tokens/s. */
export function runNlcPeer(run: PeerRun): PeerResult {
  const args = [run.dir, run.model, run.threads, run.mode, run.promptTokens, run.genTokens, run.warmup, run.reps, run.vocabSize, run.seed].map(String);
  const proc = Bun.spawnSync([process.execPath, SCRIPT, ...args], { stdout: "pipe", stderr: "pipe" });
  const out = proc.stdout.toString().trim().split("\n").pop() ?? "";
  let parsed: { llamaCpp?: unknown; tokensPerSecond?: unknown } = {};
  try {
    parsed = JSON.parse(out) as typeof parsed;
  } catch {
    // reported below with the process's own error output
  }
  const rates = parsed.tokensPerSecond;
  if (proc.exitCode !== 0 || !Array.isArray(rates) || rates.length === 0 || !rates.every((r) => typeof r === "number" && r > 0)) {
    const why = proc.stderr.toString().trim().split("\n").slice(-3).join(" | ");
    throw new InputError(`node-llama-cpp peer failed on ${run.model} (exit ${proc.exitCode}): ${why || out || "no output"}`);
  }
  return { llamaCpp: String(parsed.llamaCpp), tokensPerSecond: summarize(rates as number[]) };
}

/** A figure of llama.cpp's next to pagellm's: its tokens/s and pagellm's / its (medians). */
export interface PeerFigure extends PeerResult {
  ratio: number;
}

/** pagellm against llama.cpp (--peer-nlc) on the same file, at each thread count that has a peer figure. */
export function peerTable(what: string, rows: readonly { threads: number; ours: Summary; peer: PeerFigure | null }[]): Table {
  const withPeer = rows.filter((x) => x.peer !== null);
  return {
    title: `${what} against llama.cpp ${withPeer[0]?.peer?.llamaCpp ?? ""} (node-llama-cpp, --peer-nlc) on the same file, run right after; median (min-max)`,
    columns: ["threads", "pagellm tokens/s", "llama.cpp tokens/s", "pagellm / llama.cpp"],
    rows: withPeer.map((x) => [String(x.threads), fmtSpread(x.ours), fmtSpread(x.peer!.tokensPerSecond), fmtRatio(x.peer!.ratio)]),
  };
}
