/**
 * A client fixture (test/fixtures/tool-clients/*.mjs) run under Node: `node FIXTURE.mjs URL` as one
 * child process, killed if it outlives the test's limit, whose one JSON line holds each client's
 * result (or {error}). The process must exit 0 with nothing on stderr.
 */
import { expect } from "bun:test";
import { join } from "node:path";
import { REPO_ROOT } from "./cli.ts";

export async function resultsUnderNode(fixture: string, url: string, limitMs: number): Promise<{ [name: string]: unknown }> {
  const child = Bun.spawn(["node", join(REPO_ROOT, "test", "fixtures", "tool-clients", fixture), url], {
    cwd: REPO_ROOT, stdout: "pipe", stderr: "pipe", env: { ...process.env },
  });
  const timer = setTimeout(() => child.kill(), limitMs - 10_000);
  try {
    const [stdout, stderr, code] = await Promise.all([new Response(child.stdout).text(), new Response(child.stderr).text(), child.exited]);
    expect({ code, stderr: stderr.slice(0, 2000) }).toEqual({ code: 0, stderr: "" });
    const results = JSON.parse(stdout) as { [name: string]: unknown };
    for (const [name, r] of Object.entries(results)) expect({ name, error: (r as { error?: string }).error }).toEqual({ name, error: undefined });
    return results;
  } finally {
    clearTimeout(timer);
  }
}
