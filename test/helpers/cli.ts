/**
 * Runs the `pagellm` command line (bin/pagellm) as a child process, the way a user would, and
 * collects what it printed.
 */
import { resolve } from "node:path";
import { CHILD_PROCESS_MS } from "./limits.ts";

/** The repository root (where bin/pagellm is). */
export const REPO_ROOT = resolve(import.meta.dir, "..", "..");

export interface CliResult {
  exitCode: number;
  stdout: string;
  stderr: string;
}

/** `bun bin/pagellm ...args` from the repository root; waits for it to exit. */
export function runPagellm(args: readonly string[], opts: { stdin?: string; env?: Record<string, string>; timeoutMs?: number } = {}): CliResult {
  const proc = Bun.spawnSync(["bun", "bin/pagellm", ...args], {
    cwd: REPO_ROOT,
    stdin: opts.stdin === undefined ? "ignore" : Buffer.from(opts.stdin),
    stdout: "pipe",
    stderr: "pipe",
    // No debug stack dumps, whatever the calling environment sets.
    env: { ...process.env, PAGELLM_DEBUG: "", ...opts.env },
    // Killed past this (a hang shows as a test failure, not a stuck suite; a test blocked in
    // spawnSync cannot be stopped by its own limit).
    timeout: opts.timeoutMs ?? CHILD_PROCESS_MS,
  });
  return {
    exitCode: proc.exitCode ?? -1,
    stdout: proc.stdout.toString(),
    stderr: proc.stderr.toString(),
  };
}

/** Text without ANSI colour escapes (citty colours its usage text). */
export function stripAnsi(text: string): string {
  return text.replace(/\x1b\[[0-9;]*m/g, "");
}
