/**
 * The disk KV cache across processes: what one process computed, the next reads back.
 *
 * - A 1,536-token shared document survives a restart: in a new process the first request's cached
 *   tokens are the whole document, all from disk, and its output is the cold run's.
 * - A chat REPL conversation survives a restart: /save, then a new `pagellm chat` that /loads it
 *   serves the whole conversation from disk.
 * - Two processes writing and two reading the same block keys at once: no reader ever sees a partial
 *   or wrong block. Two `generate`s sharing a folder at once both give the cold output.
 */
import { afterAll, expect, test } from "bun:test";
import { rmSync } from "node:fs";
import { join } from "node:path";
import type { CompletionResult, GenerateRequest } from "../src/llm/llm.ts";
import type { SecondTierStats } from "../src/kv/second-tier.ts";
import { makeConfig } from "../src/model/config.ts";
import { writeLlama2c } from "../src/synth/llama2c-writer.ts";
import { randomWeights } from "../src/synth/random-weights.ts";
import { turnStats } from "./helpers/chat-turns.ts";
import { REPO_ROOT, runPagellm } from "./helpers/cli.ts";
import { describeShared } from "./helpers/shared.ts";
import { testThreads } from "./helpers/threads.ts";
import { outputsOf, scratchDir } from "./helpers/kv-disk.ts";

const THREADS = testThreads();
/** Each child process gets this long on a loaded 2-core machine. */
const CHILD_TIMEOUT_MS = 120_000;
const TEST_TIMEOUT_MS = 300_000;
const scratch = scratchDir("processes");
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

interface ChildRun {
  results: CompletionResult[];
  tier: SecondTierStats | null;
  warnings: string[];
}

async function child(job: Record<string, unknown>): Promise<ChildRun> {
  const proc = Bun.spawn(["bun", join("test", "helpers", "kv-disk-child.ts"), JSON.stringify(job)], {
    cwd: REPO_ROOT, stdout: "pipe", stderr: "pipe", timeout: CHILD_TIMEOUT_MS,
  });
  const [out, err, code] = await Promise.all([new Response(proc.stdout).text(), new Response(proc.stderr).text(), proc.exited]);
  if (code !== 0) throw new Error(`child exited ${code}: ${err}`);
  return JSON.parse(out) as ChildRun;
}

describeShared("disk KV cache across processes", ["models/llama2c/tok512.bin", "models/gguf/stories260K.gguf"], ([tokenizer, stories]) => {
  // A llama2.c model with a 2048-token context (random weights, tok512's vocabulary), so a 1,536-token document fits.
  const model = join(scratch, "long-context.bin");
  const config = makeConfig({ dim: 64, hiddenDim: 128, nLayers: 3, nHeads: 4, nKvHeads: 2, vocabSize: 512, seqLen: 2048, sharedClassifier: true });
  writeLlama2c(model, config, randomWeights(config, 99), "legacy");
  let state = 12345;
  const randomIds = (n: number) => Array.from({ length: n }, () => ((state = (state * 1103515245 + 12345) >>> 0) % 500) + 3);
  const document = [1, ...randomIds(1535)];
  const question = () => randomIds(32);
  const engine = { threads: THREADS, blockSize: 16, maxNumBatchedTokens: 512 };

  test("a 1,536-token shared document survives a restart", async () => {
    const dir = join(scratch, "document");
    const ask = (id: string, q: number[], seed: number): GenerateRequest => ({ id, promptTokenIds: [...document, ...q], maxTokens: 8, temperature: 0.8, seed, logprobs: 2 });
    const [q1, q2, q3] = [question(), question(), question()];
    const first = await child({ model, tokenizer, kvCacheDir: dir, engine, requests: [ask("q1", q1, 1)] });
    expect(first.results[0]!.cached_tokens).toBe(0);
    expect(first.tier!.blocksWritten).toBeGreaterThanOrEqual(1536 / 16);
    // A new process: the document comes from disk, whole, for the first request; then from memory.
    const restart = await child({ model, tokenizer, kvCacheDir: dir, engine, requests: [ask("q2", q2, 2)] });
    const cold = await child({ model, tokenizer, engine, requests: [ask("q2", q2, 2)] });
    expect(restart.results[0]!.cached_tokens_disk).toBe(1536);
    expect(restart.results[0]!.cached_tokens).toBe(1536);
    expect(outputsOf(restart.results)).toEqual(outputsOf(cold.results));
    expect(restart.tier!.blocksRejected).toBe(0);
    expect(restart.warnings).toEqual([]);
    // Two questions at once in a third process: the document is read once and serves both.
    const both = await child({ model, tokenizer, kvCacheDir: dir, engine, requests: [ask("q2", q2, 2), ask("q3", q3, 3)] });
    // q2 (1,568 tokens) finds all its blocks but the last (it holds the token to compute): the document and q2's first 16 tokens.
    expect(both.results.map((r) => r.cached_tokens)).toEqual([1536 + 16, 1536]);
    expect(both.tier!.blocksRead).toBe(1536 / 16 + 1);
  }, TEST_TIMEOUT_MS);

  test("a chat conversation survives a restart: /save, then /load in a new pagellm chat", () => {
    const dir = join(scratch, "chat");
    const saved = join(scratch, "conversation.json");
    const base = ["chat", "--model", stories!, "--template", "chatml", "--temperature", "0", "--threads", String(THREADS), "--max-tokens", "12", "--kv-cache-dir", dir];
    const first = runPagellm(base, { stdin: `Once upon a time\nThe dog ran to the park\n/save ${saved}\n` });
    expect(first.exitCode).toBe(0);
    const turns1 = turnStats(first.stderr);
    expect(turns1.length).toBe(2);
    const { prompt: prompt2, reply: reply2 } = turns1[1]!;
    // The second process knows the conversation only from the file and the cache folder.
    const second = runPagellm(base, { stdin: `/load ${saved}\n/stats\nThen\n` });
    expect(second.exitCode).toBe(0);
    const turns2 = turnStats(second.stderr);
    expect(turns2.length).toBe(1);
    const { cached, fromDisk } = turns2[0]!;
    // Every token the first process computed (its prompts and replies but the last reply's last token), in whole blocks.
    expect(cached).toBe(Math.floor((prompt2 + reply2 - 1) / 16) * 16);
    expect(fromDisk).toBe(cached);
    expect(second.stderr).not.toContain("warning");
  }, TEST_TIMEOUT_MS);

  test("two writers and two readers of the same blocks at once: no reader sees a partial or wrong block", async () => {
    const root = join(scratch, "stress");
    const seconds = 4;
    const spawn = (role: string) => Bun.spawn(["bun", join("test", "helpers", "kv-disk-stress.ts"), role, root, String(seconds)], {
      cwd: REPO_ROOT, stdout: "pipe", stderr: "pipe", timeout: CHILD_TIMEOUT_MS,
    });
    const procs = ["write", "read", "write", "read"].map(spawn);
    const outs = await Promise.all(procs.map(async (p) => {
      const [out, err, code] = await Promise.all([new Response(p.stdout).text(), new Response(p.stderr).text(), p.exited]);
      if (code !== 0) throw new Error(`stress child exited ${code}: ${err}`);
      return JSON.parse(out) as { rounds: number; found: number; wrong: number; rejected: number };
    }));
    const readers = [outs[1]!, outs[3]!];
    for (const r of readers) {
      expect(r.found).toBeGreaterThan(0);
      expect(r.wrong).toBe(0);
      expect(r.rejected).toBe(0);
    }
    expect(outs[0]!.rounds + outs[2]!.rounds).toBeGreaterThan(1);
  }, TEST_TIMEOUT_MS);

  test("two generate processes sharing one folder at once both give the cold output", async () => {
    const dir = join(scratch, "shared-folder");
    const q = question();
    const requests = [{ id: "d", promptTokenIds: [...document.slice(0, 600), ...q], maxTokens: 6, temperature: 0, logprobs: 1 }];
    const cold = await child({ model, tokenizer, engine, requests });
    const runs = await Promise.all([0, 1].map(() => child({ model, tokenizer, kvCacheDir: dir, engine, requests })));
    for (const run of runs) {
      expect(outputsOf(run.results)).toEqual(outputsOf(cold.results));
      expect(run.tier!.blocksRejected).toBe(0);
      expect(run.warnings).toEqual([]);
    }
    const after = await child({ model, tokenizer, kvCacheDir: dir, engine, requests });
    expect(outputsOf(after.results)).toEqual(outputsOf(cold.results));
    expect(after.results[0]!.cached_tokens_disk).toBe(Math.floor((600 + 32 - 1) / 16) * 16);
  }, TEST_TIMEOUT_MS);
});
