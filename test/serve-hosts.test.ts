/**
 * `pagellm serve --host` with several addresses: one listener per address on one port, the start
 * line naming each, every listener closed on shutdown; an address that cannot be bound is one
 * clean error line. The second address is 127.0.0.2 (every 127/8 address is the loopback on
 * Linux), and ::1 too where the machine has IPv6.
 */
import { expect, test } from "bun:test";
import { LLM } from "../src/llm/llm.ts";
import { PagellmServer } from "../src/server/server.ts";
import { runPagellm } from "./helpers/cli.ts";
import { PROCESS_TEST_MS } from "./helpers/limits.ts";
import { spawnServe } from "./helpers/serve-process.ts";
import { describeShared } from "./helpers/shared.ts";
import { testThreads } from "./helpers/threads.ts";

const STORIES = "models/gguf/stories260K.gguf";
/** An address no machine has (TEST-NET-1, RFC 5737). */
const NOWHERE = "192.0.2.1";

/** Whether this machine can listen on the IPv6 loopback. */
function hasIpv6(): boolean {
  try {
    Bun.serve({ hostname: "::1", port: 0, fetch: () => new Response() }).stop(true);
    return true;
  } catch {
    return false;
  }
}

const HOSTS = ["127.0.0.1", "127.0.0.2", ...(hasIpv6() ? ["::1"] : [])];

/** Whether something answers on `url` (false: the connection is refused). */
async function answers(url: string): Promise<boolean> {
  try {
    await (await fetch(`${url}/health`)).text();
    return true;
  } catch {
    return false;
  }
}

describeShared("serve on several addresses", [STORIES], ([model]) => {
  test("one listener per address, one port; each answers, close() closes them all", async () => {
    const llm = LLM.load({ model: model!, engine: { threads: testThreads() } });
    const server = new PagellmServer({ host: HOSTS, port: 0, apiKey: null, maxBodyBytes: 1 << 20, maxQueue: 8, logRequests: false, modelName: "m", log: () => {} });
    try {
      server.ready(llm);
      const port = new URL(server.url).port;
      const expected = HOSTS.map((h) => `http://${h.includes(":") ? `[${h}]` : h}:${port}`);
      expect(server.urls).toEqual(expected);
      for (const url of server.urls) {
        const r = await fetch(`${url}/v1/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ prompt: "Once", max_tokens: 2 }) });
        expect([url, r.status]).toEqual([url, 200]);
        await r.text();
      }
      await server.close();
      for (const url of expected) expect([url, await answers(url)]).toEqual([url, false]);
    } finally {
      await server.close();
      llm.close();
    }
  }, PROCESS_TEST_MS);

  test("an address that cannot be bound: an InputError naming it; the listeners opened before it are closed", async () => {
    const first = Bun.serve({ hostname: "127.0.0.1", port: 0, fetch: () => new Response() });
    const port = first.port!;
    first.stop(true);
    const make = (host: string[], p: number) => () => new PagellmServer({ host, port: p, apiKey: null, maxBodyBytes: 1, maxQueue: 1, logRequests: false, modelName: "m", log: () => {} });
    expect(make(["127.0.0.1", NOWHERE], port)).toThrow(`cannot listen on ${NOWHERE}:${port}: no network interface of this machine has that address`);
    // The first listener was closed: the port is free again.
    expect(await answers(`http://127.0.0.1:${port}`)).toBe(false);
    const busy = Bun.serve({ hostname: "127.0.0.2", port: 0, fetch: () => new Response() });
    try {
      expect(make(["127.0.0.2"], busy.port!)).toThrow(`cannot listen on 127.0.0.2:${busy.port}: the port is in use (another server? --port 0 picks a free one)`);
    } finally {
      busy.stop(true);
    }
  });

  test("pagellm serve --host A,B --host C: the start line names each; SIGTERM closes every listener; a bad address is one error line", async () => {
    const [a, b, ...rest] = HOSTS;
    const serve = await spawnServe(model!, ["--host", `${a},${b}`, ...rest.flatMap((h) => ["--host", h])]);
    const port = serve.port;
    const urls = HOSTS.map((h) => `http://${h.includes(":") ? `[${h}]` : h}:${port}`);
    expect(serve.startupLine).toStartWith(`pagellm serve: ${urls.join(", ")} serving stories260K.gguf (`);
    for (const url of urls) expect([url, await answers(url)]).toEqual([url, true]);
    expect(await serve.stop()).toBe(0);
    for (const url of urls) expect([url, await answers(url)]).toEqual([url, false]);

    const bad = runPagellm(["serve", "--model", model!, "--host", `127.0.0.1,${NOWHERE}`, "--port", "0"]);
    expect(bad.exitCode).toBe(2);
    expect(bad.stderr).toMatch(new RegExp(`^pagellm: error: cannot listen on ${NOWHERE.replaceAll(".", "\\.")}:\\d+: no network interface of this machine has that address\\n$`));
    const empty = runPagellm(["serve", "--model", model!, "--host", "127.0.0.1,"]);
    expect(empty.exitCode).toBe(2);
    expect(empty.stderr).toBe("pagellm: error: --host needs an address (e.g. 127.0.0.1, ::1, 0.0.0.0)\n");
  }, PROCESS_TEST_MS);
});
