/**
 * The disk KV cache from the command line: --kv-cache-dir on generate (auto under $PAGELLM_CACHE),
 * its option errors, `--json` results split into memory and disk, and `pagellm cache ls|du|clear`
 * with --model.
 */
import { afterAll, expect, test } from "bun:test";
import { existsSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { resolveCacheDir } from "../src/kv-disk/folder.ts";
import type { CompletionResult } from "../src/llm/llm.ts";
import { runPagellm } from "./helpers/cli.ts";
import { describeShared } from "./helpers/shared.ts";
import { scratchDir } from "./helpers/kv-disk.ts";

const LIMIT_MS = 180_000;
const home = scratchDir("cli");
afterAll(() => rmSync(home, { recursive: true, force: true }));

test("--kv-cache-dir auto is $PAGELLM_CACHE/kv, else ~/.cache/pagellm/kv", () => {
  expect(resolveCacheDir("auto", { PAGELLM_CACHE: "/x/cache" })).toBe("/x/cache/kv");
  expect(resolveCacheDir("auto", { PAGELLM_CACHE: "" })).toMatch(/\/\.cache\/pagellm\/kv$/);
  expect(resolveCacheDir("some/dir", {})).toBe(join(process.cwd(), "some/dir"));
});

test("pagellm cache ls|du|clear with a regular file as --kv-cache-dir: one line, exit 2", () => {
  const file = join(home, "not-a-folder");
  writeFileSync(file, "x");
  for (const sub of ["ls", "du", "clear"]) {
    const r = runPagellm(["cache", sub, "--kv-cache-dir", file]);
    expect(r.stderr).toBe(`pagellm: error: --kv-cache-dir ${file}: not a folder\n`);
    expect(r.exitCode).toBe(2);
  }
  expect(readFileSync(file, "utf8")).toBe("x");
}, LIMIT_MS);

describeShared("pagellm --kv-cache-dir and pagellm cache", ["models/gguf/stories260K.gguf", "models/gguf/stories260K-Q8_0.gguf"], ([model, other]) => {
  const env = { PAGELLM_CACHE: home };
  const prompt = "Once upon a time, there was a little girl named Lily. She loved to play outside in the park with her friends.";
  const generate = (extra: string[]) =>
    runPagellm(["generate", "--model", model!, "--prompt", prompt, "--max-tokens", "6", "--temperature", "0", "--threads", "1", "--json", ...extra], { env });

  test("option errors are one line, exit 2", () => {
    const cases: [string[], RegExp][] = [
      [["--kv-cache-write", "evict"], /--kv-cache-write and --kv-cache-disk-mb need --kv-cache-dir/],
      [["--kv-cache-dir", "auto", "--kv-cache-write", "sometimes"], /--kv-cache-write must be one of through, evict, got "sometimes"/],
      [["--kv-cache-dir", "auto", "--kv-cache-disk-mb", "0"], /--kv-cache-disk-mb must be above 0/],
      [["--kv-cache-dir", "auto", "--prefix-hash", "xxh64"], /sha256/],
    ];
    for (const [args, message] of cases) {
      const r = generate(args);
      expect(r.exitCode).toBe(2);
      expect(r.stderr).toMatch(message);
      expect(r.stderr.trim().split("\n").length).toBe(1);
    }
  }, LIMIT_MS);

  test("generate twice with auto: the second reads the prompt from disk; cache ls, du, clear", () => {
    const first = generate(["--kv-cache-dir", "auto"]);
    expect(first.exitCode).toBe(0);
    const second = generate(["--kv-cache-dir", "auto"]);
    expect(second.exitCode).toBe(0);
    const [a, b] = [first, second].map((r) => JSON.parse(r.stdout) as CompletionResult);
    expect(b!.token_ids).toEqual(a!.token_ids);
    expect(a!.cached_tokens_disk).toBe(0);
    expect(b!.cached_tokens_disk).toBe(Math.floor((b!.prompt_tokens - 1) / 16) * 16);
    expect(b!.cached_tokens_memory).toBe(0);
    expect(existsSync(join(home, "kv"))).toBe(true);

    const ls = runPagellm(["cache", "ls"], { env });
    expect(ls.exitCode).toBe(0);
    // A GGUF model's KV cache is f16 by default (as llama.cpp's).
    expect(ls.stdout).toMatch(/stories260K\.gguf\s+f16, 16-token blocks\s+\d+\s+[\d.]+ MiB\s+\d{4}-\d\d-\d\dT/);
    const folders = (runPagellm(["cache", "ls", "--json"], { env }).stdout.trim().split("\n")).map((l) => JSON.parse(l) as { blocks: number; model: string });
    expect(folders.length).toBe(1);
    expect(folders[0]!.model).toBe("stories260K.gguf");
    expect(folders[0]!.blocks).toBe(readdirSync(join(home, "kv", readdirSync(join(home, "kv"))[0]!)).filter((n) => n.endsWith(".kvb")).length);
    expect(runPagellm(["cache", "du", "--model", model!], { env }).stdout).toMatch(/MiB\s+total/);
    // Another model (same vocabulary, other weights) has no blocks here; clearing it removes nothing.
    expect(runPagellm(["cache", "ls", "--model", other!], { env }).stdout).toContain("no cached KV blocks");
    expect(runPagellm(["cache", "clear", "--model", other!], { env }).stdout).toContain("nothing to remove");
    const clear = runPagellm(["cache", "clear", "--model", model!], { env });
    expect(clear.stdout).toMatch(/removed [0-9a-f]{16}-[0-9a-f]{8} \(stories260K\.gguf\): \d+ blocks/);
    expect(runPagellm(["cache", "ls"], { env }).stdout).toContain("no cached KV blocks");
    // After clear, a run computes again (and writes again).
    const third = JSON.parse(generate(["--kv-cache-dir", "auto"]).stdout) as CompletionResult;
    expect(third.cached_tokens).toBe(0);
    expect(third.token_ids).toEqual(a!.token_ids);
  }, LIMIT_MS);
});
