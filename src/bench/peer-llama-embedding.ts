/**
 * llama.cpp's `llama-embedding` as the peer of `bench embed`: a binary of a llama.cpp build the
 * user made, run on the same file, the same texts and the same thread count right after
 * pagellm's measurement:
 *
 *   pagellm bench embed --llama-embedding ~/llama.cpp/build/bin/llama-embedding
 *
 * A batch of B inputs is one process given those B texts (`-f`, one a line), so it computes
 * them exactly as pagellm's LLM.embed call of B inputs does: packed in order into steps of at most
 * 2048 tokens (`-c 2048 -b 2048 -ub 2048`, its default batch and pagellm's default step),
 * a text that does not fit starting the next step. Normalization is off (`--embd-normalize -1`),
 * the pooling the file's, `-t` and `-tb` the thread count. The time is read from its own
 * timestamped log: from its first step to its perf summary, so its encoder passes and pooling,
 * after loading, its warm-up and tokenizing (parseLlamaEmbedding); a repetition's time is the sum
 * over its processes.
 */
import { existsSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { InputError } from "../errors.ts";

/** Tokens of one llama-embedding step: its default -b, and pagellm's DEFAULT_ENCODER_STEP_TOKENS. */
export const PEER_STEP_TOKENS = 2048;

export interface EmbeddingPeerRun {
  model: string;
  threads: number;
  /** The inputs, cut into batches: one process each. */
  batches: readonly (readonly string[])[];
  pooling: string;
}

export interface EmbeddingPeerPass {
  /** The llama.cpp build that ran ("commit de3ff81"). */
  build: string;
  /** Its own timing of the embedding, summed over the batches' processes. */
  seconds: number;
  /** Tokens it says it computed (the inputs' tokens: a check that it read the same inputs). */
  tokens: number;
}

export interface EmbeddingPeer {
  /** One pass over the batches; an InputError naming the peer when it fails. */
  run(run: EmbeddingPeerRun): EmbeddingPeerPass;
}

/** The --llama-embedding binary, checked: it must exist. */
export function llamaEmbeddingPeer(bin: string): EmbeddingPeer {
  if (!existsSync(bin)) throw new InputError(`--llama-embedding ${bin}: no such file (give the llama-embedding binary of a llama.cpp build)`);
  const version = Bun.spawnSync([bin, "--version"], { stdout: "pipe", stderr: "pipe" });
  const build = parseLlamaVersion(`${version.stdout.toString()}\n${version.stderr.toString()}`);
  return { run: (run) => ({ build, ...runPass(bin, run) }) };
}

/** llama-embedding's arguments for one batch whose texts are in `inputFile`. */
export function llamaEmbeddingArgs(run: Pick<EmbeddingPeerRun, "model" | "threads" | "pooling">, inputFile: string): string[] {
  const step = String(PEER_STEP_TOKENS);
  return [
    "-m", run.model, "-f", inputFile, "-t", String(run.threads), "-tb", String(run.threads), "-c", step, "-b", step, "-ub", step,
    // Verbosity 4 lets through the info lines, timestamped, that carry its timing.
    "--pooling", run.pooling, "--embd-normalize", "-1", "-lv", "4", "--log-timestamps", "--log-prefix",
  ];
}

/** A log line's timestamp (minutes.seconds.milliseconds.microseconds since start) in milliseconds. */
function stampMs(m: RegExpMatchArray): number {
  return Number(m[1]) * 60_000 + Number(m[2]) * 1000 + Number(m[3]) + Number(m[4]) / 1000;
}

const STAMP = String.raw`^(\d+)\.(\d{2})\.(\d{3})\.(\d{3}) I `;

/**
 * What one llama-embedding process reports: the milliseconds from its first step ("batch_decode:
 * n_tokens = ...", logged as each step starts, after tokenizing) to its perf summary (after the
 * last step and the printing of a few values per input), and the steps' tokens; null when absent.
 * Its own "prompt eval time" is not used: it misses part of the steps' time here (512 ms
 * reported for a process whose first step alone took 4.6 s between log lines).
 */
export function parseLlamaEmbedding(output: string): { ms: number; tokens: number } | null {
  const steps = [...output.matchAll(new RegExp(`${STAMP}batch_decode: n_tokens = (\\d+)`, "gm"))];
  const end = new RegExp(`${STAMP}llama_perf_context_print:`, "m").exec(output);
  if (steps.length === 0 || end === null) return null;
  const tokens = steps.reduce((sum, m) => sum + Number(m[5]), 0);
  return { ms: stampMs(end) - stampMs(steps[0]!), tokens };
}

/** The build `--version` names ("commit de3ff81"), or "unknown build". */
export function parseLlamaVersion(output: string): string {
  const commit = /commit ([0-9a-f]+)/.exec(output)?.[1];
  return commit === undefined ? "unknown build" : `commit ${commit}`;
}

/**
 * Its log is written by a thread of its own, which at exit now and then (about 1 run in 20 here)
 * has not yet written the last lines, the timing among them: such a run is run again.
 */
const ATTEMPTS = 5;

/** One process on the texts in `input`: its timing, retried while its log lacks it. */
function runBatch(bin: string, run: EmbeddingPeerRun, input: string): { ms: number; tokens: number } {
  let why = "";
  for (let attempt = 0; attempt < ATTEMPTS; attempt++) {
    const proc = Bun.spawnSync([bin, ...llamaEmbeddingArgs(run, input)], { stdout: "pipe", stderr: "pipe" });
    const stderr = proc.stderr.toString();
    const parsed = parseLlamaEmbedding(`${proc.stdout.toString()}\n${stderr}`);
    if (proc.exitCode === 0 && parsed !== null) return parsed;
    why = `exit ${proc.exitCode}: ${stderr.trim().split("\n").slice(-3).join(" | ") || "no output"}`;
    if (proc.exitCode !== 0) break;
  }
  throw new InputError(`llama-embedding peer failed on ${run.model} (${why}${why.startsWith("exit 0") ? `; no prompt eval time in its log in ${ATTEMPTS} runs` : ""})`);
}

function runPass(bin: string, run: EmbeddingPeerRun): Omit<EmbeddingPeerPass, "build"> {
  const dir = mkdtempSync(join(tmpdir(), "pagellm-embed-peer-"));
  try {
    const input = join(dir, "inputs.txt");
    let seconds = 0;
    let tokens = 0;
    for (const batch of run.batches) {
      writeFileSync(input, batch.join("\n"));
      const parsed = runBatch(bin, run, input);
      seconds += parsed.ms / 1000;
      tokens += parsed.tokens;
    }
    return { seconds, tokens };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
