/**
 * A seeded fuzz pass of `pagellm serve` over HTTP only (issue 30): the server runs as a process on
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
 */
import { afterAll, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { FuzzRandom } from "./helpers/gguf-fuzz.ts";
import { checkAnswer, damageCacheFolder, FUZZ_CORS_ORIGIN, fuzzCases } from "./helpers/http-fuzz.ts";
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
