/**
 * A seeded fuzz pass of `pagellm serve` over HTTP only: the server runs as a process on
 * 127.0.0.1 with a disk KV cache, and each round sends it a seeded batch of cases
 * (helpers/http-fuzz.ts): random and mutated requests on every route (types, ranges, lone
 * surrogates, invalid UTF-8, nesting, sizes), bodies that stop, trickle or are cut by a hang-up,
 * disconnects at random points, pipelined requests, many prompts with n around --max-prompts and
 * --max-queue (each answered as its size calls for). Between rounds block files of the cache folder
 * are damaged or replaced by FIFOs, sparse files, directories and links.
 *
 * After each round: every answer was a 2xx or a 4xx with OpenAI's error shape and no stack trace;
 * the server wrote no internal error; /metrics is back to idle (no request running or waiting, no
 * block held); a fixed greedy request gives the text it gave before the first round; the resident
 * memory is within 10% of where it stood after the first round (which grows the heap to its
 * working size).
 *
 * Bounded by work (cases and rounds), never by a clock. The quick pass runs with `bun test`;
 * PAGELLM_FUZZ_SLOW=1 adds the slower pass that CI runs (.ci/run): more seeds and rounds, and a
 * restart over the damaged cache folder.
 *
 * Structured output, tools and the agent APIs, on rnd-qwen2 (a chat template with tools): the
 * hostile inputs found by attacking the server one at a time, then seeded random requests that ask for a
 * constraint in every spelling, offer tools, or go to /v1/messages and /v1/responses, mutated
 * (helpers/http-fuzz-structured.ts). Each answer: a 2xx, or a 4xx JSON error naming the field,
 * never a 5xx, a stack trace or a server path, within a time limit per request; and while the
 * requests run, the server's resident memory stays under RSS_BASE_FACTOR times the warmed server's
 * plus the mask cache's budget plus RSS_PER_BODY_BYTE times the bytes of the bodies in flight (past it the server is killed at
 * once and the case fails; a new server takes the next cases). Every case runs; the failures are
 * reported together.
 */
import { afterAll, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { FuzzRandom } from "./helpers/gguf-fuzz.ts";
import { checkAnswer, damageCacheFolder, FUZZ_CORS_ORIGIN, fuzzCases } from "./helpers/http-fuzz.ts";
import { checkStructuredAnswer, STRUCTURED_REQUEST_LIMIT_MS, structuredCases, structuredSeeds, type StructuredCase } from "./helpers/http-fuzz-structured.ts";
import type { RawResponse } from "./helpers/raw-http.ts";
import { waitIdle } from "./helpers/serve.ts";
import { spawnServe, type ServeProcess } from "./helpers/serve-process.ts";
import { describeShared } from "./helpers/shared.ts";

const SLOW = process.env.PAGELLM_FUZZ_SLOW === "1";
const STORIES = "models/gguf/stories260K.gguf";
const MAX_BODY_MB = 1;
/** Bounds low enough that the many-prompts cases reach them (helpers/http-fuzz.ts). */
const LIMITS = { maxBodyBytes: MAX_BODY_MB << 20, maxPrompts: 8, maxQueue: 24 };
/** Cases in flight at once. */
const BATCH = 6;
/** A small pool (48 blocks of 16 tokens), so the fuzz requests evict and the disk cache is read back. */
const SERVE_ARGS = [
  "--max-body-mb", String(MAX_BODY_MB), "--max-prompts", String(LIMITS.maxPrompts), "--max-queue", String(LIMITS.maxQueue),
  "--body-timeout", "0.5", "--num-blocks", "48", "--max-num-seqs", "16", "--cors", FUZZ_CORS_ORIGIN,
];
const FIXED = { prompt: "Once upon a time, there was a little girl named Lily. She loved to play outside with her friends in the park", max_tokens: 24, temperature: 0 };
/** Lines a server that failed would write: an internal error, a stack frame, a request logged as a failure. */
const FAILURE_LINES = /internal error|^\s+at |pagellm serve: (GET|POST|PUT|DELETE|PATCH|OPTIONS|HEAD) |engine step failed/m;

const dirs: string[] = [];
afterAll(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

interface Plan {
  seed: number;
  rounds: number;
  cases: number;
  restart: boolean;
}

const PLANS: Plan[] = SLOW
  ? [{ seed: 101, rounds: 4, cases: 90, restart: true }, { seed: 102, rounds: 4, cases: 90, restart: true }, { seed: 103, rounds: 3, cases: 90, restart: false }]
  : [{ seed: 1, rounds: 3, cases: 24, restart: false }];
/** Rounds that settle the process (allocator arenas, JIT, caches) before its resident memory is held to a bound. */
const WARM_ROUNDS = 2;

async function fixedText(url: string): Promise<string> {
  const r = await fetch(`${url}/v1/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(FIXED) });
  expect(r.status).toBe(200);
  return ((await r.json()) as { choices: { text: string }[] }).choices[0]!.text;
}

/** One round's cases, BATCH at a time; every answer checked. Returns how many of each status came. */
async function round(server: ServeProcess, r: FuzzRandom, count: number): Promise<Map<number, number>> {
  const statuses = new Map<number, number>();
  const cases = fuzzCases(r, count, LIMITS);
  for (let i = 0; i < cases.length; i += BATCH) {
    await Promise.all(cases.slice(i, i + BATCH).map(async (c) => {
      let answers;
      try {
        answers = await c.run(server.url, server.port);
      } catch (e) {
        throw new Error(`${c.what}: ${(e as Error).message}`);
      }
      for (const answer of answers) {
        checkAnswer(c.what, answer);
        statuses.set(answer.status, (statuses.get(answer.status) ?? 0) + 1);
      }
    }));
  }
  return statuses;
}

/** After a round: no failure written, idle, the same greedy text. */
async function checkServer(server: ServeProcess, expected: string, when: string): Promise<void> {
  const failure = FAILURE_LINES.exec(server.stderr());
  if (failure !== null) throw new Error(`${when}: the server wrote "${failure[0]}":\n${server.stderr().slice(-2000)}`);
  await waitIdle(server.url);
  expect(await fixedText(server.url)).toBe(expected);
  expect((await fetch(`${server.url}/health`)).status).toBe(200);
}

describeShared("fuzzing pagellm serve over HTTP", [STORIES], ([model]) => {
  for (const plan of PLANS) {
    test(`seed ${plan.seed}: ${plan.rounds} rounds of ${plan.cases} cases; 2xx or OpenAI-shaped 4xx, idle after, same greedy text, memory within 10% after warm-up`, async () => {
      const dir = mkdtempSync(join(tmpdir(), "pagellm-serve-fuzz-"));
      dirs.push(dir);
      const args = [...SERVE_ARGS, "--kv-cache-dir", dir];
      const r = new FuzzRandom(plan.seed);
      let server = await spawnServe(model!, args);
      try {
        const expected = await fixedText(server.url);
        const seen = new Map<number, number>();
        let baseline = 0;
        for (let i = 0; i < plan.rounds; i++) {
          const statuses = await round(server, r, plan.cases);
          for (const [status, n] of statuses) seen.set(status, (seen.get(status) ?? 0) + n);
          await checkServer(server, expected, `round ${i + 1}`);
          // A leak grows round after round; the first rounds' growth is the process settling.
          const rss = server.rssBytes();
          if (i < WARM_ROUNDS) baseline = Math.max(baseline, rss);
          else expect(rss).toBeLessThanOrEqual(baseline * 1.1);
          damageCacheFolder(r, dir, 3);
        }
        // The cases reach past the checks: generations ran, and refusals of several kinds came.
        expect(seen.get(200) ?? 0).toBeGreaterThan(0);
        expect([...seen.keys()].filter((s) => s >= 400).length).toBeGreaterThan(2);
        if (plan.restart) {
          expect(await server.stop()).toBe(0);
          // A new process over the damaged folder: damaged blocks are refused and recomputed.
          server = await spawnServe(model!, args);
          await checkServer(server, expected, "after a restart over the damaged cache folder");
          await round(server, r, plan.cases / 3);
          await checkServer(server, expected, "a round after the restart");
        }
        expect(await server.stop()).toBe(0);
      } finally {
        server.proc.kill("SIGKILL");
      }
    }, SLOW ? 600_000 : 240_000);
  }

  test("the cases are reproducible from the seed, and differ between seeds", () => {
    const whats = (seed: number) => fuzzCases(new FuzzRandom(seed), 50, LIMITS).map((c) => c.what);
    expect(whats(5)).toEqual(whats(5));
    expect(whats(5)).not.toEqual(whats(6));
  });
});

const QWEN = "models/gguf/rnd-qwen2-Q5_K_M.gguf";
/** The body bound of the structured pass: the largest seed inputs (7.2 MB) get through to the checks. */
const STRUCTURED_BODY_MB = 8;
/**
 * A pool of one context (256 blocks of 16): the KV pool's pages are touched as blocks are first used,
 * so a default pool (384 MiB here) would grow the resident memory over the pass whatever the requests.
 */
const STRUCTURED_ARGS = ["--max-body-mb", String(STRUCTURED_BODY_MB), "--max-num-seqs", "8", "--num-blocks", "256", "--body-timeout", "5"];
/**
 * The memory bound: the warmed server's resident memory times RSS_BASE_FACTOR, plus what the
 * documented caches may hold (masks within 256 MiB: docs/structured-output.md), plus
 * RSS_PER_BODY_BYTE per byte of the bodies in flight.
 */
const RSS_BASE_FACTOR = 2;
const MASK_CACHE_BYTES = 256 << 20;
const RSS_PER_BODY_BYTE = 32;
/** Random structured cases in flight at once. */
const STRUCTURED_BATCH = 4;
const STRUCTURED_PLAN = SLOW ? { seed: 201, cases: 240, fullSeeds: true } : { seed: 21, cases: 30, fullSeeds: false };

/** The server's resident memory, 0 once it has exited. */
function residentBytes(server: ServeProcess): number {
  try {
    return server.rssBytes();
  } catch {
    return 0;
  }
}

/** A server for the structured cases, killed past its memory bound or after a hang, replaced for the next cases. */
class StructuredServer {
  private server: ServeProcess | null = null;
  private baseline = 0;
  /** Internal errors the servers wrote (a line each). */
  readonly failureLines: string[] = [];

  constructor(private readonly model: string) {}

  private async current(): Promise<ServeProcess> {
    if (this.server !== null) return this.server;
    const server = await spawnServe(this.model, STRUCTURED_ARGS);
    this.server = server;
    // Warm: a few requests, so the heap has its working size.
    for (const c of structuredCases(new FuzzRandom(1), 3)) await answerOf(server, c).catch(() => null);
    this.baseline = Math.max(this.baseline, server.rssBytes());
    return server;
  }

  /** Runs `cases` at once, the memory watched; each case's answer, or the Error that stands for one. */
  async run(cases: readonly StructuredCase[]): Promise<(RawResponse | Error)[]> {
    const server = await this.current();
    const bound = RSS_BASE_FACTOR * this.baseline + MASK_CACHE_BYTES + RSS_PER_BODY_BYTE * cases.reduce((n, c) => n + Buffer.byteLength(c.body), 0);
    let killedFor: string | null = null;
    const watch = setInterval(() => {
      const rss = residentBytes(server);
      if (rss <= bound || killedFor !== null) return;
      killedFor = `resident memory ${mib(rss)} MiB, over the bound ${mib(bound)} MiB (${RSS_BASE_FACTOR} x ${mib(this.baseline)} MiB + ${mib(MASK_CACHE_BYTES)} MiB of mask cache + ${RSS_PER_BODY_BYTE} x the bodies; ${cases.length === 1 ? "this case alone" : `one of ${cases.length} cases in flight`})`;
      this.retire(server);
    }, 20);
    try {
      const answers = await Promise.all(cases.map((c) => answerOf(server, c).catch((e: Error) => (killedFor === null ? e : new Error(killedFor)))));
      // A server still busy with a hung request would slow the next cases: a new one takes them.
      if (answers.some((a) => a instanceof HangError)) this.retire(server);
      return answers;
    } finally {
      clearInterval(watch);
    }
  }

  /** Kills `server` (once), keeping the first internal error it wrote. */
  private retire(server: ServeProcess): void {
    if (this.server !== server) return;
    this.noteFailure();
    server.proc.kill("SIGKILL");
    this.server = null;
  }

  /** Keeps the first internal error the current server wrote, if any. */
  noteFailure(): void {
    const line = this.server === null ? undefined : FAILURE_LINES.exec(this.server.stderr())?.[0];
    if (line !== undefined) this.failureLines.push(line);
  }

  /** Stops the current server, once it is idle. */
  async stop(): Promise<void> {
    const server = this.server;
    if (server === null) return;
    this.server = null;
    try {
      await waitIdle(server.url);
      expect(await server.stop()).toBe(0);
    } finally {
      server.proc.kill("SIGKILL");
    }
  }
}

class HangError extends Error {}

function mib(bytes: number): string {
  return (bytes / 2 ** 20).toFixed(0);
}

/** One case's answer, read whole (a stream to its end) within the per-request limit. */
async function answerOf(server: ServeProcess, c: StructuredCase): Promise<RawResponse> {
  const signal = AbortSignal.timeout(STRUCTURED_REQUEST_LIMIT_MS);
  try {
    const response = await fetch(`${server.url}${c.route}`, { method: "POST", headers: { "content-type": "application/json" }, body: c.body, signal });
    return { status: response.status, headers: Object.fromEntries(response.headers.entries()), body: await response.text() };
  } catch (e) {
    if (signal.aborted) throw new HangError(`no whole answer within ${STRUCTURED_REQUEST_LIMIT_MS / 1000} s (a hang)`);
    throw e;
  }
}

describeShared("fuzzing structured output, tools and the agent APIs over HTTP", [QWEN], ([model]) => {
  test(`the seed inputs (requests found by attacking the server), then ${STRUCTURED_PLAN.cases} seeded mutated structured, tool, Anthropic and Responses requests: 2xx or a 4xx naming the field, within time and ${RSS_BASE_FACTOR} x warm RSS + the mask cache + ${RSS_PER_BODY_BYTE} x body bytes`, async () => {
    const servers = new StructuredServer(model!);
    const failures: string[] = [];
    /** Answers of the random cases by class (2xx, 4xx): the cases reach generation and refusals both. */
    const classes = new Map<number, number>();
    const record = (c: StructuredCase, answer: RawResponse | Error) => {
      if (answer instanceof Error) return void failures.push(`${c.what}: ${answer.message}`);
      if (!c.what.startsWith("seed:")) classes.set(Math.floor(answer.status / 100), (classes.get(Math.floor(answer.status / 100)) ?? 0) + 1);
      try {
        checkStructuredAnswer(c, answer);
      } catch (e) {
        failures.push((e as Error).message);
      }
    };
    try {
      // The seed inputs one at a time, so that a bound passed names its input.
      for (const c of structuredSeeds(STRUCTURED_PLAN.fullSeeds)) record(c, (await servers.run([c]))[0]!);
      const cases = structuredCases(new FuzzRandom(STRUCTURED_PLAN.seed), STRUCTURED_PLAN.cases);
      for (let i = 0; i < cases.length; i += STRUCTURED_BATCH) {
        const batch = cases.slice(i, i + STRUCTURED_BATCH);
        (await servers.run(batch)).forEach((answer, k) => record(batch[k]!, answer));
      }
      servers.noteFailure();
      failures.push(...servers.failureLines.map((line) => `a server wrote "${line}"`));
    } finally {
      await servers.stop();
    }
    expect(failures).toEqual([]);
    expect(classes.get(2) ?? 0).toBeGreaterThan(0);
    expect(classes.get(4) ?? 0).toBeGreaterThan(0);
  }, SLOW ? 900_000 : 300_000);

  test("the structured cases are reproducible from the seed, and differ between seeds", () => {
    const whats = (seed: number) => structuredCases(new FuzzRandom(seed), 40).map((c) => c.what);
    expect(whats(5)).toEqual(whats(5));
    expect(whats(5)).not.toEqual(whats(6));
  });
});
