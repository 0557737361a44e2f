/**
 * `pagellm serve` as a child process on 127.0.0.1 and a free port, talked to over HTTP only: its
 * address from the startup line, what it has written on stderr so far (read as it comes, so the
 * pipe never fills), its resident memory (Linux: /proc/PID/status), and stopping it.
 */
import type { Subprocess } from "bun";
import { readFileSync } from "node:fs";
import { REPO_ROOT } from "./cli.ts";
import { StreamText } from "./stream-text.ts";
import { testThreads } from "./threads.ts";

export interface ServeProcess {
  proc: Subprocess<"ignore", "pipe", "pipe">;
  url: string;
  port: number;
  /** The line it printed once it listened: address, model, context, KV cache. */
  startupLine: string;
  /** Everything written on stderr so far. */
  stderr(): string;
  /** Resolves once stderr matches `pattern` (a line it logs: a signal taken, a request); fails if it exits first. */
  saysOnStderr(pattern: RegExp): Promise<void>;
  /** Resident set size now, in bytes. */
  rssBytes(): number;
  /** SIGTERM, then SIGKILL if it has not exited within `graceMs`; resolves with the exit code. */
  stop(graceMs?: number): Promise<number>;
}

/** Starts `pagellm serve --model MODEL --port 0 --threads T ...args` and waits for its startup line. */
export async function spawnServe(model: string, args: readonly string[] = []): Promise<ServeProcess> {
  const proc = Bun.spawn(["bun", "bin/pagellm", "serve", "--model", model, "--port", "0", "--threads", String(testThreads()), ...args], {
    cwd: REPO_ROOT, stdin: "ignore", stdout: "pipe", stderr: "pipe", env: { ...process.env, PAGELLM_DEBUG: "" },
  });
  const stdout = new StreamText(proc.stdout);
  const stderr = new StreamText(proc.stderr);
  try {
    await stdout.waitFor(() => stdout.text.includes("\n"), "the startup line");
  } catch (e) {
    proc.kill("SIGKILL");
    throw new Error(`serve printed no startup line: ${(e as Error).message}\nstderr: ${stderr.text}`);
  }
  const startupLine = stdout.text.slice(0, stdout.text.indexOf("\n"));
  const url = /(http:\/\/127\.0\.0\.1:\d+)/.exec(startupLine)?.[1];
  if (url === undefined) {
    proc.kill("SIGKILL");
    throw new Error(`no address in the startup line: ${startupLine}`);
  }
  return {
    proc, url, port: Number(new URL(url).port), startupLine,
    stderr: () => stderr.text,
    saysOnStderr: async (pattern) => {
      await stderr.waitForMatch(pattern);
    },
    rssBytes: () => Number(/^VmRSS:\s+(\d+) kB$/m.exec(readFileSync(`/proc/${proc.pid}/status`, "utf8"))?.[1]) * 1024,
    async stop(graceMs = 30_000) {
      proc.kill("SIGTERM");
      const timer = setTimeout(() => proc.kill("SIGKILL"), graceMs);
      const code = await proc.exited;
      clearTimeout(timer);
      return code;
    },
  };
}
