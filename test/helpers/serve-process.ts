/**
 * `pagellm serve` as a child process on 127.0.0.1 and a free port, talked to over HTTP only: its
 * address from the startup line, what it has written on stderr so far (read as it comes, so the
 * pipe never fills), its resident memory (Linux: /proc/PID/status), and stopping it.
 */
import type { Subprocess } from "bun";
import { readFileSync } from "node:fs";
import { REPO_ROOT } from "./cli.ts";
import { testThreads } from "./threads.ts";

export interface ServeProcess {
  proc: Subprocess<"ignore", "pipe", "pipe">;
  url: string;
  port: number;
  /** Everything written on stderr so far. */
  stderr(): string;
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
  let errText = "";
  void (async () => {
    const decoder = new TextDecoder();
    for await (const chunk of proc.stderr) errText += decoder.decode(chunk, { stream: true });
  })();
  const reader = proc.stdout.getReader();
  let out = "";
  while (!out.includes("\n")) {
    const { value, done } = await reader.read();
    if (done) {
      await proc.exited;
      throw new Error(`serve exited before its startup line: ${errText}`);
    }
    out += new TextDecoder().decode(value);
  }
  reader.releaseLock();
  const url = /(http:\/\/127\.0\.0\.1:\d+)/.exec(out)?.[1];
  if (url === undefined) {
    proc.kill("SIGKILL");
    throw new Error(`no address in the startup line: ${out}`);
  }
  return {
    proc, url, port: Number(new URL(url).port),
    stderr: () => errText,
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
