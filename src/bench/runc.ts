/**
 * llama2.c's `run` as a baseline, run in the same bench as pagellm: decode speed is compared
 * with it on the same model file. The binary is whatever the user points --runc at (nothing
 * of llama2.c is part of this project); with an OpenMP build, OMP_NUM_THREADS sets its threads.
 */
import { existsSync } from "node:fs";
import { InputError } from "../errors.ts";

/**
 * Decode tokens/s of one `run` invocation: greedy, `steps` positions from a short prompt, as
 * `run` itself reports it ("achieved tok/s", timed from its second forward pass).
 */
export function runcTokensPerSecond(binary: string, model: string, tokenizer: string, steps: number, threads: number): number {
  if (!existsSync(binary)) throw new InputError(`${binary}: --runc binary not found`);
  const proc = Bun.spawnSync([binary, model, "-z", tokenizer, "-t", "0", "-n", String(steps), "-i", "Once upon a time"], {
    env: { ...process.env, OMP_NUM_THREADS: String(threads) },
  });
  const err = proc.stderr.toString();
  const match = /achieved tok\/s:\s*([0-9.]+)/.exec(err);
  if (proc.exitCode !== 0 || match === null) {
    throw new InputError(`${binary}: did not report "achieved tok/s" (exit ${proc.exitCode}): ${err.trim().split("\n").pop() ?? ""}`);
  }
  return Number(match[1]);
}
