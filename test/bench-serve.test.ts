/**
 * `pagellm bench serve`, the client half: SSE parsing, percentiles, the workloads' shapes, and
 * runs against an in-test OpenAI-compatible stub (test/helpers/openai-stub.ts) through the library
 * and through the CLI, errors included. Every stub is stopped in finally; every child process has
 * an explicit time limit sized for a busy 2-core machine.
 */
import { describe, expect, test } from "bun:test";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { serveMetrics, distribution } from "../src/bench/serve/serving-metrics.ts";
import { apiBaseOf, errorMessageOf, sendRequest, type ServerTarget } from "../src/bench/serve/openai-client.ts";
import { runRequests } from "../src/bench/serve/run.ts";
import { SseParser } from "../src/bench/serve/sse-parser.ts";
import { ChatSource, FIRST_TOKEN_ID, prefixWorkload, randomWorkload } from "../src/bench/serve/serve-workloads.ts";
import { targetChecks, type ServeBenchResult, type TargetResult } from "../src/bench/serve/serve-bench.ts";
import { llamaServerCold, TurnProber, worstTurn, type TurnRow } from "../src/bench/serve/turn-probe.ts";
import { startStub, type Stub, type StubOptions } from "./helpers/openai-stub.ts";
import { runPagellmAsync } from "./helpers/cli.ts";
import { describeShared } from "./helpers/shared.ts";

const CLI_TIMEOUT_MS = 120_000;

async function withStub<T>(o: StubOptions, fn: (stub: Stub) => Promise<T>): Promise<T> {
  const stub = startStub(o);
  try {
    return await fn(stub);
  } finally {
    stub.stop();
  }
}

function target(stub: Stub): ServerTarget {
  return { apiBase: apiBaseOf(stub.url), apiKey: null, model: "stub-model" };
}

/** `pagellm ...args` as a child, awaited (the stub lives in this process's event loop, so never spawnSync). */
const pagellm = (args: string[]) => runPagellmAsync(args, { timeoutMs: CLI_TIMEOUT_MS });

/** The error lines of stderr (progress lines start with [bench]). */
function errorLines(stderr: string): string[] {
  return stderr.split("\n").filter((l) => l.trim() !== "" && !l.startsWith("[bench]"));
}

describe("SSE parsing", () => {
  const stream = 'data: {"a":1}\r\n\r\n: a comment\n\ndata: line one\ndata: line two\n\nevent: ping\nid: 7\ndata:{"b":2}\r\rdata: [DONE]\n\n';
  const expected = ['{"a":1}', "line one\nline two", '{"b":2}', "[DONE]"];

  test("events, comments, multi-line data, other fields, CRLF, CR and LF endings", () => {
    const p = new SseParser();
    expect([...p.push(stream), ...p.end()]).toEqual(expected);
  });

  test("the same events whatever the cuts: every split point, and one character at a time", () => {
    for (let cut = 0; cut <= stream.length; cut++) {
      const p = new SseParser();
      expect([...p.push(stream.slice(0, cut)), ...p.push(stream.slice(cut)), ...p.end()]).toEqual(expected);
    }
    const p = new SseParser();
    expect([...[...stream].flatMap((c) => p.push(c)), ...p.end()]).toEqual(expected);
  });

  test("a last event without its blank line still counts at the end", () => {
    const p = new SseParser();
    expect(p.push("data: x\n\ndata: [DONE]")).toEqual(["x"]);
    expect(p.end()).toEqual(["[DONE]"]);
  });
});

describe("percentiles and metrics", () => {
  test("numpy's linear interpolation: 1..100 and one sample", () => {
    const d = distribution(Array.from({ length: 100 }, (_, i) => 100 - i))!;
    expect([d.n, d.mean, d.p50, d.max]).toEqual([100, 50.5, 50.5, 100]);
    expect(d.p90).toBeCloseTo(90.1, 10);
    expect(d.p99).toBeCloseTo(99.01, 10);
    expect(distribution([7])).toEqual({ n: 1, mean: 7, p50: 7, p90: 7, p99: 7, max: 7 });
    expect(distribution([])).toBeNull();
  });

  test("rates over the run's duration; cached share n/a when any request lacks it", () => {
    const timing = (id: string, cachedTokens: number | null) => ({
      ok: true as const, timing: { id, sentMs: 0, ttftMs: 10, itlMs: [2, 4], e2eMs: 16, promptTokens: 100, outputTokens: 3, cachedTokens, text: "abc" },
    });
    const m = serveMetrics({ outcomes: [timing("a", 50), timing("b", 30)], durationS: 2, unsent: 0, stoppedBy: null });
    expect([m.completed, m.requestsPerSecond, m.outputTokensPerSecond, m.promptTokens, m.cachedShare]).toEqual([2, 1, 3, 200, 0.4]);
    expect(m.itlMs!.n).toBe(4);
    expect(m.tpotMs!.p50).toBe(3);
    expect(serveMetrics({ outcomes: [timing("a", 50), timing("b", null)], durationS: 2, unsent: 0, stoppedBy: null }).cachedShare).toBeNull();
  });

  test("floors and aims: ratios and verdicts", () => {
    const metrics = (tps: number, ttft: number, share: number | null) => serveMetrics({
      outcomes: [{ ok: true, timing: { id: "x", sentMs: 0, ttftMs: ttft, itlMs: [], e2eMs: ttft, promptTokens: 10, outputTokens: tps, cachedTokens: share === null ? null : 10 * share, text: "" } }],
      durationS: 1, unsent: 0, stoppedBy: null,
    });
    const probe = { promptTokens: 576, coldMs: distributionSummary(1000), cachedMs: distributionSummary(50), ratio: 0.05, cachedTokens: 560 };
    const row = (turn: number, ratio: number | null) => ({
      conversation: 0, turn, promptTokens: 100 * turn, cachedTokens: 90 * turn, warmTtftMs: 10, coldTtftMs: 100, coldCachedTokens: 0, ratio, sameReply: true,
    });
    // Turn 1 (cold by nature, 0.9x) is left out of the worst; turn 3's cold request failed.
    const rows = [row(1, 0.9), row(2, 0.1), row(3, null), row(4, 0.2)];
    expect(worstTurn(rows)).toEqual({ ratio: 0.2, conversation: 0, turn: 4 });
    const turns = { cold: "a fresh cache_salt", rows, worst: worstTurn(rows), errors: [] };
    const targets: TargetResult[] = [
      { name: "pagellm serve", command: null, metrics: metrics(95, 100, 0.6), probe, turns },
      { name: "llama-server", command: null, metrics: metrics(100, 200, 0.4), probe: null, turns: null },
    ];
    const inProcess = { completed: 1, durationS: 1, outputTokens: 100, outputTokensPerSecond: 100, requestsPerSecond: 1, ttftMs: null, e2eMs: null, cachedShare: 0 };
    const checks = targetChecks("chat", targets, inProcess);
    expect(checks.map((c) => [c.kind, c.ratio, c.met])).toEqual([
      ["floor", 0.95, true], ["floor", 0.05, true], ["floor", 0.2, false], ["aim", 0.95, false], ["aim", 0.5, true], ["aim", 1.4999999999999998, true],
    ]);
  });
});

function distributionSummary(v: number) {
  return { n: 1, median: v, min: v, max: v, p50: v, p99: v };
}

describe("workloads", () => {
  const prefix = { prefixes: 5, prefixTokens: 512, suffixTokens: 64, requests: 40, outputTokens: 32 };

  test("prefix: P shared prefixes of L tokens, each request one of them plus a unique suffix, evenly, shuffled, seeded", () => {
    const w = prefixWorkload(prefix, 1, 49152);
    const ids = w.requests.map((r) => (r.prompt.kind === "tokens" ? r.prompt.tokenIds : []));
    expect(w.requests.length).toBe(40);
    expect(ids.every((t) => t.length === 576)).toBe(true);
    expect(w.requests.every((r) => r.maxTokens === 32)).toBe(true);
    const prefixes = new Map<string, number>();
    for (const t of ids) prefixes.set(t.slice(0, 512).join(","), (prefixes.get(t.slice(0, 512).join(",")) ?? 0) + 1);
    expect([...prefixes.values()]).toEqual([8, 8, 8, 8, 8]);
    expect(new Set(ids.map((t) => t.slice(512).join(","))).size).toBe(40);
    expect(ids.flat().every((id) => id >= FIRST_TOKEN_ID && id < 49152)).toBe(true);
    // Shuffled: the first requests are not prefix 0, 1, 2, ... in order.
    expect(w.requests.map((r) => r.id).slice(0, 5)).not.toEqual(["prefix-0", "prefix-1", "prefix-2", "prefix-3", "prefix-4"]);
    expect(prefixWorkload(prefix, 1, 49152).requests).toEqual(w.requests);
    expect(prefixWorkload(prefix, 2, 49152).requests).not.toEqual(w.requests);
  });

  test("random: N requests of exactly the prompt length, no two alike", () => {
    const w = randomWorkload({ requests: 12, promptTokens: 300, outputTokens: 8 }, 3, 32000);
    const ids = w.requests.map((r) => (r.prompt.kind === "tokens" ? r.prompt.tokenIds : []));
    expect(ids.every((t) => t.length === 300)).toBe(true);
    expect(new Set(ids.map((t) => t.join(","))).size).toBe(12);
  });
});

describe("runs against an OpenAI-compatible stub", () => {
  const small = { prefixes: 2, prefixTokens: 64, suffixTokens: 8, requests: 8, outputTokens: 5 };
  const run = { timeLimitS: 60, ignoreEos: true };

  test("prefix workload: the requests as sent, streamed, ignore_eos, usage asked; concurrency held; exact cached share", async () => {
    await withStub({}, async (stub) => {
      const source = prefixWorkload(small, 1, 32000);
      const r = await runRequests(target(stub), source, { ...run, concurrency: 1 });
      const m = serveMetrics(r);
      expect(stub.bodies.map((b) => b.prompt)).toEqual(source.requests.map((q) => (q.prompt.kind === "tokens" ? [...q.prompt.tokenIds] : [])));
      expect(stub.bodies.every((b) => b.stream === true && b.ignore_eos === true && b.stream_options?.include_usage === true && b.max_tokens === 5)).toBe(true);
      expect(stub.maxConcurrent).toBe(1);
      expect([m.completed, m.failed, m.outputTokens, m.promptTokens, m.itlMs!.n]).toEqual([8, 0, 40, 8 * 72, 8 * 4]);
      // One at a time: each prefix's first request computes it, the other three find its 64 tokens (4 whole blocks).
      expect(m.cachedShare).toBe((6 * 64) / (8 * 72));
      // One at a time, so the n-th outcome is the stub's n-th reply.
      expect(r.outcomes.map((o) => (o.ok ? o.timing.text : o.failure.error))).toEqual(stub.replies);
    });
  }, 60_000);

  test("awkwardly cut streams and llama.cpp's timings.cache_n give the same text and counts; at most --concurrency in flight", async () => {
    await withStub({ awkwardChunks: true, cached: "timings" }, async (stub) => {
      const r = await runRequests(target(stub), prefixWorkload(small, 1, 32000), { ...run, concurrency: 3 });
      const m = serveMetrics(r);
      expect([m.completed, m.outputTokens]).toEqual([8, 40]);
      expect(stub.maxConcurrent).toBe(3);
      const texts = new Set(stub.replies);
      expect(r.outcomes.every((o) => o.ok && texts.has(o.timing.text))).toBe(true);
      expect(m.cachedShare).not.toBeNull();
    });
  }, 60_000);

  test("a server that reports no cached tokens: cached share null (n/a)", async () => {
    await withStub({ cached: "none" }, async (stub) => {
      const m = serveMetrics(await runRequests(target(stub), prefixWorkload(small, 1, 32000), { ...run, concurrency: 2 }));
      expect([m.completed, m.cachedShare]).toEqual([8, null]);
    });
  }, 60_000);

  test("chat: conversations interleaved, each turn the whole history with the server's own replies", async () => {
    await withStub({}, async (stub) => {
      const source = new ChatSource({ conversations: 3, turns: 3, systemWords: 5, userWords: 10, outputTokens: 4 }, 1);
      const r = await runRequests(target(stub), source, { ...run, concurrency: 2 });
      expect(serveMetrics(r).completed).toBe(9);
      // Every conversation's first turn goes out before any second turn.
      const turnOf = (b: (typeof stub.bodies)[number]) => b.messages!.filter((m) => m.role === "user").length;
      expect(stub.bodies.slice(0, 3).map(turnOf)).toEqual([1, 1, 1]);
      for (const body of stub.bodies) {
        const msgs = body.messages!;
        const turn = turnOf(body);
        expect(msgs.length).toBe(1 + 2 * turn - 1);
        expect(msgs.map((m) => m.role)).toEqual(["system", ...Array.from({ length: 2 * turn - 1 }, (_, i) => (i % 2 === 0 ? "user" : "assistant"))]);
        // Each reply in the history is what the stub answered to that conversation's earlier turn.
        for (const [i, m] of msgs.entries()) {
          if (m.role !== "assistant") continue;
          const earlier = stub.bodies.findIndex((b) => JSON.stringify(b.messages) === JSON.stringify(msgs.slice(0, i)));
          expect(earlier).toBeGreaterThanOrEqual(0);
          expect(m.content).toBe(stub.replies[earlier]!);
        }
      }
      for (let c = 0; c < 3; c++) expect(source.history(c).length).toBe(1 + 2 * 3);
      // Later turns find their history in the stub's cache.
      expect(serveMetrics(r).cachedShare!).toBeGreaterThan(0.3);
    });
  }, 60_000);

  test("llama-server's cold requests: cache_prompt false on the slot past the workload's; each conversation's turns pinned to its slot", async () => {
    await withStub({}, async (stub) => {
      const chat = new ChatSource({ conversations: 3, turns: 2, systemWords: 20, userWords: 10, outputTokens: 3 }, 1);
      const prober = new TurnProber(target(stub), chat, llamaServerCold(2), true);
      const r = await runRequests(target(stub), prober.warmSource(), { ...run, concurrency: 1, beforeEach: prober.before.bind(prober) });
      expect(serveMetrics(r).completed).toBe(6);
      const warm = stub.bodies.filter((b) => b.cache_prompt === undefined);
      const cold = stub.bodies.filter((b) => b.cache_prompt === false);
      // Each turn's one-token warm request on the turn's own slot, then the turn.
      expect(warm.map((b) => b.id_slot)).toEqual([0, 0, 1, 1, 0, 0, 0, 0, 1, 1, 0, 0]);
      expect(cold.map((b) => b.id_slot)).toEqual([2, 2, 2, 2, 2, 2]);
      const t = prober.result();
      expect(t.rows.map((row) => [row.conversation, row.turn, row.coldCachedTokens])).toEqual([[0, 1, 0], [1, 1, 0], [2, 1, 0], [0, 2, 0], [1, 2, 0], [2, 2, 0]]);
      expect([t.errors, t.cold]).toEqual([[], "cache_prompt false on slot 2 of its own"]);
      expect(t.worst!.turn).toBe(2);
    });
  }, 60_000);

  test("a 4xx stops sending; a 5xx is counted and the run goes on", async () => {
    await withStub({ failWith: (n) => (n === 2 ? 400 : null) }, async (stub) => {
      const m = serveMetrics(await runRequests(target(stub), randomWorkload({ requests: 10, promptTokens: 20, outputTokens: 3 }, 1, 32000), { ...run, concurrency: 1 }));
      expect([m.completed, m.failed, m.unsent, m.stoppedBy]).toEqual([2, 1, 7, "HTTP 400 on random-2"]);
      expect(m.firstError).toBe("random-2: HTTP 400: stub refuses request 2");
    });
    await withStub({ failWith: (n) => (n === 2 ? 503 : null) }, async (stub) => {
      const m = serveMetrics(await runRequests(target(stub), randomWorkload({ requests: 10, promptTokens: 20, outputTokens: 3 }, 1, 32000), { ...run, concurrency: 2 }));
      expect([m.completed, m.failed, m.unsent, m.stoppedBy]).toEqual([9, 1, 0, null]);
    });
  }, 60_000);

  test("the time limit cuts what still streams and sends nothing new", async () => {
    await withStub({ tokenDelayMs: 200 }, async (stub) => {
      const m = serveMetrics(await runRequests(target(stub), randomWorkload({ requests: 6, promptTokens: 20, outputTokens: 50 }, 1, 32000), { ...run, timeLimitS: 1, concurrency: 2 }));
      expect([m.completed, m.failed, m.cut, m.unsent]).toEqual([0, 2, 2, 4]);
      expect(m.stoppedBy).toBe("the time limit of 1 s");
    });
  }, 60_000);

  test("a connection closed before the answer (a kept-alive one the server timed out) is sent again once; closed twice, it fails", async () => {
    const sse = 'data: {"choices":[{"text":" hi"}]}\n\ndata: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":1}}\n\ndata: [DONE]\n\n';
    for (const closeFirst of [1, 2]) {
      let connections = 0;
      const server = Bun.listen<{ n: number; answered: boolean }>({
        hostname: "127.0.0.1", port: 0,
        socket: {
          open(s) {
            s.data = { n: ++connections, answered: false };
          },
          data(s) {
            if (s.data.n <= closeFirst) return void s.end();
            if (s.data.answered) return;
            s.data.answered = true;
            s.end(`HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: ${sse.length}\r\nConnection: close\r\n\r\n${sse}`);
          },
        },
      });
      try {
        const req = { id: "r", prompt: { kind: "tokens" as const, tokenIds: [1000, 1001, 1002] }, maxTokens: 1 };
        const outcome = await sendRequest({ apiBase: `http://127.0.0.1:${server.port}/v1`, apiKey: null, model: "m" }, req, {
          ignoreEos: true, signal: AbortSignal.timeout(30_000), runStartMs: performance.now(),
        });
        expect(connections).toBe(2);
        if (closeFirst === 1) expect(outcome.ok && [outcome.timing.text, outcome.timing.outputTokens]).toEqual([" hi", 1]);
        else expect(!outcome.ok && outcome.failure.error).toContain("ECONNRESET");
      } finally {
        server.stop(true);
      }
    }
  }, 60_000);

  test("URLs and error bodies", () => {
    expect(apiBaseOf("http://127.0.0.1:8080")).toBe("http://127.0.0.1:8080/v1");
    expect(apiBaseOf("http://127.0.0.1:8080/v1/")).toBe("http://127.0.0.1:8080/v1");
    expect(apiBaseOf("https://host/proxy")).toBe("https://host/proxy/v1");
    expect(() => apiBaseOf("localhost:8080")).toThrow("not an http(s) URL");
    expect(errorMessageOf('{"error":{"message":"bad field","type":"x"}}')).toBe("bad field");
    expect(errorMessageOf('{"detail":"Not Found"}')).toBe("Not Found");
    expect(errorMessageOf("<html>Bad Gateway</html>")).toBe("<html>Bad Gateway</html>");
  });
});

describe("pagellm bench serve --url (the CLI against the stub)", () => {
  const quick = ["--requests", "6", "--prefixes", "2", "--prefix-tokens", "32", "--suffix-tokens", "8", "--output-tokens", "4", "--probe-reps", "1"];

  test("the table, and a --json document with every figure finite", async () => {
    await withStub({}, async (stub) => {
      const r = await pagellm(["bench", "serve", "--url", stub.url, ...quick, "--concurrency", "2"]);
      expect(r.exitCode, r.stderr).toBe(0);
      expect(r.stdout).toContain("prefix: 2 shared prefixes x 32 tokens, 6 requests with 8-token unique suffixes, 4 output tokens; concurrency 2");
      expect(r.stdout).toMatch(/TTFT p50/);
      const j = await pagellm(["bench", "serve", "--url", stub.url, ...quick, "--json"]);
      expect(j.exitCode, j.stderr).toBe(0);
      const doc = JSON.parse(j.stdout) as { bench: string; results: { model: string; targets: { metrics: { completed: number } }[] }; figures: { value: number }[] };
      expect(doc.bench).toBe("serve");
      expect(doc.results.model).toBe("stub-model");
      expect(doc.results.targets[0]!.metrics.completed).toBe(6);
      expect(doc.figures.length).toBeGreaterThan(5);
      expect(doc.figures.every((f) => Number.isFinite(f.value))).toBe(true);
    });
  }, CLI_TIMEOUT_MS);

  test("runs against two servers compare figure by figure (bench compare)", async () => {
    const dir = mkdtempSync(join(tmpdir(), "pagellm-bench-serve-"));
    try {
      for (const [name, delay] of [["a", 1], ["b", 3]] as const) {
        await withStub({ tokenDelayMs: delay }, async (stub) => {
          const r = await pagellm(["bench", "serve", "--url", stub.url, ...quick, "--json", join(dir, `${name}.json`)]);
          expect(r.exitCode, r.stderr).toBe(0);
        });
      }
      const c = await pagellm(["bench", "compare", join(dir, "b.json"), join(dir, "a.json")]);
      expect(c.exitCode, c.stderr).toBe(0);
      expect(c.stdout).toContain("prefix c=4: server output tokens/s");
      expect(c.stdout).toContain("prefix c=4: server TTFT p50");
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }, CLI_TIMEOUT_MS);

  test("--cold-probe: one token of each chat turn warm, then with a fresh cache_salt; the conversation goes on with its own replies", async () => {
    const chat = ["--workload", "chat", "--conversations", "1", "--turns", "3", "--system-words", "40", "--user-words", "10", "--output-tokens", "4", "--concurrency", "1"];
    const dir = mkdtempSync(join(tmpdir(), "pagellm-bench-serve-"));
    const file = join(dir, "chat.json");
    try {
      await withStub({}, async (stub) => {
        // The table on stdout, the document in the file: one run shows both.
        const r = await pagellm(["bench", "serve", "--url", stub.url, ...chat, "--probe-reps", "0", "--cold-probe", "--json", file]);
        expect(r.exitCode, r.stderr).toBe(0);
        expect(r.stdout).toMatch(/turn +prompt tokens +cached +warm TTFT +cold TTFT +warm \/ cold +same reply\n/);
        expect(r.stdout).toMatch(/worst turn TTFT warm \/ cold \d+\.\d{3}x \(turn [23]\)/);
        const rows = (JSON.parse(readFileSync(file, "utf8")) as { results: ServeBenchResult }).results.targets[0]!.turns!.rows;
        expect(rows.map((t: TurnRow) => t.turn)).toEqual([1, 2, 3]);
        // The history grows and is found cached; the cold requests find nothing.
        expect(rows.every((t, i) => i === 0 || (t.promptTokens! > rows[i - 1]!.promptTokens! && t.cachedTokens! > rows[i - 1]!.cachedTokens!))).toBe(true);
        expect(rows.map((t) => t.coldCachedTokens)).toEqual([0, 0, 0]);
        expect(rows.every((t) => t.ratio === t.warmTtftMs / t.coldTtftMs!)).toBe(true);
        // The stub's replies differ per request.
        expect(rows.map((t) => t.sameReply)).toEqual([false, false, false]);
        // After the warm-up, per turn: one token of it warm, one cold (a salt of its own), then the turn itself.
        const [, ...bodies] = stub.bodies;
        expect(bodies.map((b) => b.max_tokens)).toEqual([1, 1, 4, 1, 1, 4, 1, 1, 4]);
        expect(new Set(bodies.filter((_, i) => i % 3 === 1).map((b) => b.cache_salt)).size).toBe(3);
        expect(bodies.filter((_, i) => i % 3 !== 1).every((b) => b.cache_salt === undefined)).toBe(true);
        for (let t = 0; t < 3; t++) for (const k of [1, 2]) expect(bodies[3 * t + k]!.messages).toEqual(bodies[3 * t]!.messages!);
        // The last turn's history holds the turns' own replies, never a probe's.
        expect(bodies[8]!.messages!.filter((m) => m.role === "assistant").map((m) => m.content)).toEqual([stub.replies[3], stub.replies[6]]);
      });
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }, CLI_TIMEOUT_MS);

  test("a server that reports no cached tokens: n/a in the table", async () => {
    await withStub({ cached: "none" }, async (stub) => {
      const r = await pagellm(["bench", "serve", "--url", stub.url, ...quick, "--probe-reps", "0"]);
      expect(r.exitCode, r.stderr).toBe(0);
      expect(r.stdout).toMatch(/\bn\/a\n/);
    });
  }, CLI_TIMEOUT_MS);

  test("nothing listening: one line, exit 5", async () => {
    const stub = startStub();
    const url = stub.url;
    stub.stop();
    const r = await pagellm(["bench", "serve", "--url", url, ...quick]);
    expect(r.exitCode).toBe(5);
    expect(errorLines(r.stderr)).toEqual([expect.stringContaining(`cannot reach ${url}/v1/models`)]);
  }, CLI_TIMEOUT_MS);

  test("a server that rejects the requests: its message in one line, exit 5", async () => {
    await withStub({ failWith: () => 400 }, async (stub) => {
      const r = await pagellm(["bench", "serve", "--url", stub.url, ...quick]);
      expect(r.exitCode).toBe(5);
      expect(errorLines(r.stderr)).toEqual([expect.stringMatching(/the warm-up request failed: HTTP 400: stub refuses request 0 \(.*--no-ignore-eos\)/)]);
      expect(r.stdout).toBe("");
    });
  }, CLI_TIMEOUT_MS);

  test("a request failing mid-run: the finished figures are kept, then one line and exit 5", async () => {
    await withStub({ failWith: (n) => (n === 3 ? 500 : null) }, async (stub) => {
      const r = await pagellm(["bench", "serve", "--url", stub.url, ...quick, "--probe-reps", "0"]);
      expect(r.exitCode).toBe(5);
      expect(r.stdout).toContain("5/6");
      expect(errorLines(r.stderr)).toEqual([expect.stringMatching(/1 of 6 requests failed, first prefix-\d+: HTTP 500: stub refuses request 3/)]);
    });
  }, CLI_TIMEOUT_MS);

  test("bad options: one line, exit 2", async () => {
    for (const [args, message] of [
      [["--url", "http://127.0.0.1:9", "--workload", "batch"], '--workload: "batch" is not one of prefix, chat, random'],
      [["--url", "http://127.0.0.1:9", "--threads", "2"], "--threads is for servers started here"],
      [["--url", "ftp://x"], "not an http(s) URL"],
      [["--vocab-size", "5000"], "--vocab-size is for a --url server"],
      [["--llama-args", "--cache-ram 0"], "--llama-args needs --llama-server"],
      [["--url", "http://127.0.0.1:9", "--pagellm-args", "--threads 1"], "--pagellm-args is for servers started here"],
      [["--llama-server", "/no/such/llama-server"], "--llama-server /no/such/llama-server: no such file"],
      [["--url", "http://127.0.0.1:9", "--cold-probe", "--concurrency", "1"], "--cold-probe sends chat turns again cold: it needs --workload chat"],
      [["--url", "http://127.0.0.1:9", "--cold-probe", "--workload", "chat"], "--cold-probe times each turn alone: it needs --concurrency 1"],
    ] as const) {
      const r = await pagellm(["bench", "serve", ...args]);
      expect(r.exitCode).toBe(2);
      expect(errorLines(r.stderr)).toEqual([expect.stringContaining(message)]);
    }
  }, CLI_TIMEOUT_MS);
});

describeShared("pagellm bench serve against pagellm serve started on a tiny model", ["models/gguf/stories260K.gguf"], ([model]) => {
  const tiny = ["--threads", "1", "--output-tokens", "6", "--ready-timeout", "120"];

  test("prefix: the server, the in-process baseline and the TTFT probe measured, the floors computed, the server stopped", async () => {
    const r = await pagellm(["bench", "serve", "--model", model!, ...tiny, "--requests", "6", "--prefixes", "2", "--prefix-tokens", "64", "--suffix-tokens", "8", "--probe-reps", "2", "--json"]);
    expect(r.exitCode, r.stderr).toBe(0);
    const doc = JSON.parse(r.stdout) as { notes: string[]; results: ServeBenchResult };
    const res = doc.results;
    expect(res.targets.map((t) => t.name)).toEqual(["pagellm serve"]);
    const m = res.targets[0]!.metrics;
    expect([m.completed, m.failed, m.outputTokens, m.promptTokens]).toEqual([6, 0, 36, 6 * 72]);
    // Two prefixes of 64 tokens (4 whole blocks) among six requests: some hits, never beyond the prefixes.
    expect(m.cachedShare!).toBeGreaterThan(0);
    expect(m.cachedShare!).toBeLessThanOrEqual((4 * 64) / (6 * 72));
    expect([res.inProcess!.completed, res.inProcess!.outputTokens]).toEqual([6, 36]);
    const probe = res.targets[0]!.probe!;
    expect(probe.promptTokens).toBe(72);
    expect(probe.cachedTokens).toBe(64);
    expect(res.checks.map((c) => [c.kind, c.bound])).toEqual([["floor", ">= 0.9x"], ["floor", "<= 0.1x"]]);
    expect(res.checks.every((c) => c.ratio !== null && c.ratio > 0)).toBe(true);
    // The server was stopped: its port no longer answers.
    const port = /--port (\d+)/.exec(doc.notes.join("\n"))![1];
    expect(fetch(`http://127.0.0.1:${port}/health`)).rejects.toThrow();
  }, CLI_TIMEOUT_MS);

  test("chat: every turn answered over /v1/chat/completions, later turns served from the cache, a fresh cache_salt cold; no in-process baseline", async () => {
    const r = await pagellm([
      "bench", "serve", "--model", model!, ...tiny, "--workload", "chat", "--conversations", "3", "--turns", "3", "--user-words", "12", "--probe-reps", "0", "--json",
      "--concurrency", "1", "--cold-probe", "--pagellm-args", "--max-prefill-while-decoding 4",
    ]);
    expect(r.exitCode, r.stderr).toBe(0);
    const doc = JSON.parse(r.stdout) as { notes: string[]; results: ServeBenchResult };
    const res = doc.results;
    // The server was started with the extra flags.
    expect(doc.notes.join("\n")).toContain("--max-prefill-while-decoding 4 --host 127.0.0.1");
    const m = res.targets[0]!.metrics;
    expect([m.completed, m.failed, m.outputTokens]).toEqual([9, 0, 54]);
    expect(m.cachedShare!).toBeGreaterThan(0.2);
    expect(res.inProcess).toBeNull();
    // Each conversation's turns in order; its history found cached, more each turn; the cold copies found nothing.
    const turns = res.targets[0]!.turns!;
    expect(turns.rows.map((t) => `${t.conversation}.${t.turn}`)).toEqual(["0.1", "1.1", "2.1", "0.2", "1.2", "2.2", "0.3", "1.3", "2.3"]);
    for (let c = 0; c < 3; c++) {
      const rows = turns.rows.filter((t) => t.conversation === c);
      expect(rows[1]!.cachedTokens!).toBeGreaterThan(rows[0]!.cachedTokens!);
      expect(rows[2]!.cachedTokens!).toBeGreaterThan(rows[1]!.cachedTokens!);
      // Bitwise the same output with the cache on or off: the cold reply is the warm one.
      expect(rows.every((t) => t.cachedTokens! < t.promptTokens! && t.coldCachedTokens === 0 && t.ratio! > 0 && t.sameReply === true)).toBe(true);
    }
    expect(turns.errors).toEqual([]);
    expect(res.checks.map((c) => [c.kind, c.bound])).toEqual([["floor", "<= 0.15x"]]);
  }, CLI_TIMEOUT_MS);

  test("a server that cannot start: its own error in one line, exit 5, the figures measured before it kept", async () => {
    const r = await pagellm(["bench", "serve", "--model", model!, ...tiny, "--llama-server", "/bin/false", "--probe-reps", "0", "--requests", "2", "--prefixes", "1", "--prefix-tokens", "16", "--suffix-tokens", "4"]);
    expect(r.exitCode).toBe(5);
    expect(errorLines(r.stderr)).toEqual([expect.stringMatching(/llama-server exited \(1\) before it was ready: no output$/)]);
    // pagellm serve was measured first: its figures are kept.
    expect(r.stdout).toMatch(/\npagellm serve +2 /);
  }, CLI_TIMEOUT_MS);
});
