/**
 * llama.cpp as the peer of the GGUF benches (peer.ts) through the node-llama-cpp npm package
 * (native llama.cpp with its prebuilt CPU binaries) under Bun, from a folder outside the project
 * where the user installed it:
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
import { summarize } from "./measure.ts";
import type { LlamaCppPeer, PeerResult, PeerRun } from "./peer.ts";

const SCRIPT = join(import.meta.dir, "nlc-peer-script.ts");

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

/**
 * node-llama-cpp installed in `dir` (checked) as the peer. Its KV cache is its default, f16: a run's
 * other --kv-type is not passed on.
 */
export function nlcPeer(dir: string): LlamaCppPeer {
  checkPeerDir(dir);
  return { run: (run) => runNlcPeer(dir, run) };
}

/** Run node-llama-cpp on `run.model` in its own process and return its tokens/s. */
function runNlcPeer(dir: string, run: PeerRun): PeerResult {
  const args = [dir, run.model, run.threads, run.mode, run.promptTokens, run.genTokens, run.warmup, run.reps, run.vocabSize, run.seed].map(String);
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
  return { llamaCpp: String(parsed.llamaCpp), via: "node-llama-cpp, --peer-nlc", tokensPerSecond: summarize(rates as number[]) };
}
