/**
 * Interrupting `pagellm generate --output`: the command line runs as a subprocess on a JSONL of 40
 * requests and is stopped part-way, first with SIGINT (Ctrl-C: exit code 130, one last
 * `pagellm: error: interrupted: …` line, the output file holds whole lines of finished results
 * only), then, resumed, with SIGKILL (whatever was written stays readable), and a last --resume
 * finishes the rest: every id once, each result as a clean uninterrupted run gives it.
 *
 * The signal is sent once the output file has a few lines (polled), never after a fixed delay, so
 * the test does not depend on the machine's speed; the workload (long generations on stories260K,
 * four sequences at a time) leaves far more work than that to interrupt.
 */
import { afterAll, beforeAll, expect, test } from "bun:test";
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import type { CompletionResult } from "../src/llm/llm.ts";
import { MODELS, TOKENIZER, withoutTimings } from "./helpers/prefix.ts";
import { describeShared } from "./helpers/shared.ts";
import { testThreads } from "./helpers/threads.ts";

const REPO = resolve(import.meta.dir, "..");
const THREADS = testThreads();
const NUM_REQUESTS = 40;
/** Lines in the output file before a signal is sent. */
const LINES_BEFORE_SIGNAL = 3;
/** Generous: how long to wait for those lines before giving up. */
const POLL_TIMEOUT_MS = 60_000;
/** Per-test limit (bun's default is 5 s): four runs of the command line on a slow machine. */
const TEST_TIMEOUT_MS = 240_000;

/** Prompts of at most 12 tokens: no prompt has a full 16-token block to share, so cached_tokens is 0 in any order. */
const TEXTS = [
  "Once upon a time", "The dog", "Lily and Ben went to the park", "One day, a little bird", "Tom had a big red ball",
  "The sun was hot", "Mia liked to paint", "A small cat", "The little girl was sad", "Sam saw a big fish",
];

function requestLines(): string {
  const lines: string[] = [];
  for (let i = 0; i < NUM_REQUESTS; i++) {
    const request: Record<string, unknown> = { id: `q${String(i).padStart(2, "0")}`, prompt: TEXTS[i % TEXTS.length], max_tokens: 380 + ((i * 23) % 80) };
    // a third of them sample, each with its own seed: resumed, they must still give the same tokens
    if (i % 3 === 2) Object.assign(request, { temperature: 0.8, seed: 7 * i });
    lines.push(JSON.stringify(request));
  }
  return lines.join("\n") + "\n";
}

/** The output file's content split into complete lines (those ending in "\n") and a torn tail. */
function readOutput(path: string): { lines: string[]; tail: string } {
  const text = existsSync(path) ? readFileSync(path, "utf8") : "";
  const end = text.lastIndexOf("\n") + 1;
  return { lines: text.slice(0, end).split("\n").filter((l) => l !== ""), tail: text.slice(end) };
}

/** Every complete line is a finished result of one of the requests (never an abort), each id once. */
function checkResults(lines: string[]): CompletionResult[] {
  const results = lines.map((l) => JSON.parse(l) as CompletionResult);
  const ids = results.map((r) => r.id);
  expect(new Set(ids).size).toBe(ids.length);
  for (const r of results) {
    expect(r.id).toMatch(/^q\d\d$/);
    expect(["stop", "length"]).toContain(r.finish_reason);
    expect(r.completion_tokens).toBe(r.token_ids.length);
    expect(r.completion_tokens).toBeGreaterThan(0);
  }
  return results;
}

describeShared("interrupting generate --output", [MODELS.stories260K, TOKENIZER], ([modelPath, tokPath]) => {
  let dir = "";
  let requestsPath = "";
  beforeAll(() => {
    dir = mkdtempSync(join(tmpdir(), "pagellm-interrupt-"));
    requestsPath = join(dir, "requests.jsonl");
    writeFileSync(requestsPath, requestLines());
  });
  afterAll(() => {
    if (dir !== "") rmSync(dir, { recursive: true, force: true });
  });

  function spawn(output: string, extra: string[] = []) {
    return Bun.spawn(
      [
        process.execPath, join(REPO, "bin/pagellm"), "generate", "--model", modelPath!, "--tokenizer", tokPath!,
        "--prompts", requestsPath, "--output", output, "--temperature", "0", "--max-num-seqs", "4", "--threads", String(THREADS),
        ...extra,
      ],
      { cwd: REPO, stdin: "ignore", stdout: "pipe", stderr: "pipe", env: { ...process.env, PAGELLM_DEBUG: "" } },
    );
  }

  /**
   * Run until the output file has at least `lines` complete lines, send `signal`, and wait for the
   * process to end. Fails if it ends (having finished everything) before the signal could be sent.
   */
  async function interruptAt(output: string, lines: number, signal: "SIGINT" | "SIGKILL", extra: string[] = []) {
    const proc = spawn(output, extra);
    const stdout = new Response(proc.stdout).text();
    const stderr = new Response(proc.stderr).text();
    let exited = false;
    void proc.exited.then(() => {
      exited = true;
    });
    try {
      const start = Date.now();
      while (readOutput(output).lines.length < lines) {
        if (exited) throw new Error(`pagellm ended before ${lines} results were written: ${await stderr}`);
        if (Date.now() - start > POLL_TIMEOUT_MS) throw new Error(`no ${lines} results in ${output} after ${POLL_TIMEOUT_MS} ms`);
        await Bun.sleep(5);
      }
      if (exited) throw new Error(`pagellm finished all its requests before it could be interrupted: ${await stderr}`);
      proc.kill(signal);
      await proc.exited;
    } finally {
      if (!exited) proc.kill("SIGKILL");
    }
    return { exitCode: proc.exitCode, signalCode: proc.signalCode, stdout: await stdout, stderr: await stderr };
  }

  test("SIGINT, then SIGKILL of a resumed run, then --resume: the same results as a clean run", async () => {
    // a clean run, for reference
    const cleanPath = join(dir, "clean.jsonl");
    const clean = spawn(cleanPath);
    const [, cleanErr] = await Promise.all([new Response(clean.stdout).text(), new Response(clean.stderr).text()]);
    expect(await clean.exited).toBe(0);
    expect(cleanErr).not.toContain("error");
    const cleanResults = checkResults(readOutput(cleanPath).lines);
    expect(cleanResults.length).toBe(NUM_REQUESTS);
    expect(cleanResults.every((r) => r.cached_tokens === 0)).toBe(true);
    const expected = new Map(cleanResults.map((r) => [r.id, withoutTimings(r)]));

    // 1. Ctrl-C part-way
    const out = join(dir, "out.jsonl");
    const first = await interruptAt(out, LINES_BEFORE_SIGNAL, "SIGINT");
    expect(first.signalCode).toBeNull();
    expect(first.exitCode).toBe(130);
    const errLines = first.stderr.trimEnd().split("\n");
    expect(errLines.filter((l) => l.startsWith("pagellm: error:")).length).toBe(1);
    const afterInt = readOutput(out);
    // nothing torn: the run stopped between results
    expect(afterInt.tail).toBe("");
    const n1 = afterInt.lines.length;
    expect(n1).toBeGreaterThanOrEqual(LINES_BEFORE_SIGNAL);
    expect(n1).toBeLessThan(NUM_REQUESTS);
    expect(errLines.at(-1)).toBe(`pagellm: error: interrupted: ${n1} of ${NUM_REQUESTS} requests finished, results in ${out}`);
    const partial1 = checkResults(afterInt.lines);
    for (const r of partial1) expect(withoutTimings(r)).toEqual(expected.get(r.id)!);

    // 2. resumed, then killed outright
    const second = await interruptAt(out, n1 + LINES_BEFORE_SIGNAL, "SIGKILL", ["--resume"]);
    expect(second.signalCode).toBe("SIGKILL");
    const afterKill = readOutput(out);
    // the first run's lines are kept as they were
    expect(afterKill.lines.slice(0, n1)).toEqual(afterInt.lines);
    const n2 = afterKill.lines.length;
    expect(n2).toBeGreaterThanOrEqual(n1 + LINES_BEFORE_SIGNAL);
    expect(n2).toBeLessThan(NUM_REQUESTS);
    // each result is one write: at worst a torn last line, which --resume drops
    const partial2 = checkResults(afterKill.lines);
    for (const r of partial2) expect(withoutTimings(r)).toEqual(expected.get(r.id)!);

    // 3. resumed to the end
    const third = spawn(out, ["--resume"]);
    const [, thirdErr] = await Promise.all([new Response(third.stdout).text(), new Response(third.stderr).text()]);
    expect(await third.exited).toBe(0);
    // it ran only the requests the file did not hold yet
    expect(thirdErr).toContain(NUM_REQUESTS - n2 === 1 ? "prompt:" : `requests: ${NUM_REQUESTS - n2} in`);
    const final = readOutput(out);
    expect(final.tail).toBe("");
    expect(final.lines.slice(0, n2)).toEqual(afterKill.lines);
    const all = checkResults(final.lines);
    expect(all.length).toBe(NUM_REQUESTS);
    expect(new Map(all.map((r) => [r.id, withoutTimings(r)]))).toEqual(expected);
  }, TEST_TIMEOUT_MS);
});
