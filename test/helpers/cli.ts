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

/** What a test may set for one run: its stdin, extra environment, and the child's own time limit. */
export interface CliOptions {
  stdin?: string;
  env?: Record<string, string>;
  /** Killed past this (default CHILD_PROCESS_MS): a hang shows as a test failure, not a stuck suite. */
  timeoutMs?: number;
}

/**
 * How a test runs the CLI: from the repository root, with the calling environment and these
 * overrides (never debug stack dumps, whatever it sets), killed past its own limit.
 */
function spawnOptions(opts: CliOptions) {
  return {
    cwd: REPO_ROOT,
    stdin: opts.stdin === undefined ? ("ignore" as const) : Buffer.from(opts.stdin),
    stdout: "pipe" as const,
    stderr: "pipe" as const,
    env: { ...process.env, PAGELLM_DEBUG: "", ...opts.env },
    // A test blocked in spawnSync cannot be stopped by its own limit: the child bounds itself.
    timeout: opts.timeoutMs ?? CHILD_PROCESS_MS,
  };
}

/** `bun bin/pagellm ...args` from the repository root; waits for it to exit. */
export function runPagellm(args: readonly string[], opts: CliOptions = {}): CliResult {
  const proc = Bun.spawnSync(["bun", "bin/pagellm", ...args], spawnOptions(opts));
  return { exitCode: proc.exitCode ?? -1, stdout: proc.stdout.toString(), stderr: proc.stderr.toString() };
}

/**
 * The same, without blocking this process's event loop: for a test whose stub server (a fake hub,
 * an OpenAI stub) answers from this process, or that runs several children at once.
 */
export async function runPagellmAsync(args: readonly string[], opts: CliOptions = {}): Promise<CliResult> {
  const proc = Bun.spawn(["bun", "bin/pagellm", ...args], spawnOptions(opts));
  const [stdout, stderr] = await Promise.all([new Response(proc.stdout).text(), new Response(proc.stderr).text(), proc.exited]);
  return { exitCode: proc.exitCode ?? -1, stdout, stderr };
}

/** Text without ANSI colour escapes (citty colours its usage text). */
export function stripAnsi(text: string): string {
  return text.replace(/\x1b\[[0-9;]*m/g, "");
}
