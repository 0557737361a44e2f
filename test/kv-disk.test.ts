/**
 * The disk KV cache (--kv-cache-dir) in one process, through the library: a second LLM over the
 * same folder stands for a restart (a fresh memory pool; the only way to its blocks is the disk).
 *
 * - Outputs with disk hits are bitwise the outputs of a cold run (token ids, text, logprobs of every
 *   token), greedy and seeded, at block sizes 4, 16 and 32, and cached_tokens_disk is exactly the
 *   prefix the first run computed, in whole blocks.
 * - Damaged and foreign block files (flipped bytes, truncation, swapped names, another model's,
 *   another salt's, a wrong key under a right name) are detected, removed and recomputed, outputs
 *   unchanged; one salt never reads another's blocks.
 * - A full disk degrades to the memory cache with one warning; the size bound removes the least
 *   recently used blocks; "evict" mode writes blocks when memory evicts them and at flush.
 */
import { afterAll, describe, expect, test } from "bun:test";
import { copyFileSync, cpSync, existsSync, readdirSync, readFileSync, renameSync, rmSync, statSync, truncateSync, utimesSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { LLM, type GenerateRequest, type LoadOptions } from "../src/llm/llm.ts";
import { makeConfig } from "../src/model/config.ts";
import { writeLlama2c } from "../src/synth/llama2c-writer.ts";
import { randomWeights } from "../src/synth/random-weights.ts";
import { nodeBlockFileOps, type BlockFileOps } from "../src/kv-disk/file-ops.ts";
import { scanRoot } from "../src/kv-disk/folder.ts";
import { folderRow, folderSummary } from "../src/cli/cache-command.ts";
import { describeShared, SHARED_DIR } from "./helpers/shared.ts";
import { testThreads } from "./helpers/threads.ts";
import { TEXTS } from "./helpers/prefix.ts";
import { blockPath, chainHashes, modelFolder, outputsOf, runWithTier, scratchDir } from "./helpers/kv-disk.ts";

const THREADS = testThreads();
const TIMEOUT_MS = 180_000;
const dirs: string[] = [];
afterAll(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

function newDir(tag: string): string {
  const d = scratchDir(tag);
  dirs.push(d);
  return d;
}

describeShared("disk KV cache", ["models/gguf/stories260K.gguf", "models/gguf/stories260K-Q8_0.gguf", "models/llama2c/tok512.bin"], ([model, otherModel]) => {
  const load = (blockSize: number, extra: Partial<LoadOptions> = {}): LoadOptions => ({
    model: model!, engine: { threads: THREADS, blockSize, maxNumBatchedTokens: 256 }, ...extra,
  });
  const ids = (() => {
    const llm = LLM.load({ model: model!, engine: { threads: 1 } });
    try {
      return { long: llm.encode(`${TEXTS[0]} ${TEXTS[1]} ${TEXTS[2]}`), other: llm.encode(`${TEXTS[0]} ${TEXTS[3]}`) };
    } finally {
      llm.close();
    }
  })();
  /** Greedy and seeded requests sharing the long prompt's prefix, with logprobs so every logit row's bits are compared. */
  const requests = (): GenerateRequest[] => [
    { id: "greedy", promptTokenIds: ids.long, maxTokens: 12, temperature: 0, logprobs: 3 },
    { id: "seeded", promptTokenIds: [...ids.long.slice(0, 70), ...ids.other.slice(30, 50)], maxTokens: 12, temperature: 0.9, topP: 0.95, seed: 42, logprobs: 3 },
    { id: "other", promptTokenIds: ids.other, maxTokens: 12, temperature: 0.7, seed: 7, logprobs: 2 },
  ];

  async function cold(blockSize: number): Promise<unknown[]> {
    const llm = LLM.load(load(blockSize));
    try {
      return outputsOf(await llm.generate(requests()));
    } finally {
      llm.close();
    }
  }

  describe("disk hits give the cold run's outputs, bit for bit", () => {
    for (const blockSize of [4, 16, 32]) {
      test(`block size ${blockSize}`, async () => {
        const root = newDir(`bs${blockSize}`);
        const expected = await cold(blockSize);
        const first = await runWithTier(load(blockSize, { kvCacheDir: root }), requests());
        expect(outputsOf(first.results)).toEqual(expected);
        expect(first.results.map((r) => r.cached_tokens_disk)).toEqual([0, 0, 0]);
        expect(first.tier.blocksWritten).toBeGreaterThan(0);
        expect(first.tier.writesDropped).toBe(0);

        const restart = await runWithTier(load(blockSize, { kvCacheDir: root }), requests());
        expect(outputsOf(restart.results)).toEqual(expected);
        // Every prompt was computed whole in the first run: all its full blocks but the one with the last token are cached.
        // A block the prompts share is read once and counted as a disk hit by the first request admitted with it.
        for (const r of restart.results) {
          expect(r.cached_tokens).toBe(Math.floor((r.prompt_tokens - 1) / blockSize) * blockSize);
          expect(r.cached_tokens_memory + r.cached_tokens_disk).toBe(r.cached_tokens);
        }
        expect(restart.results.reduce((n, r) => n + r.cached_tokens_disk, 0)).toBe(restart.tier.blocksRead * blockSize);
        const alone = await runWithTier(load(blockSize, { kvCacheDir: root }), requests().slice(0, 1));
        expect(outputsOf(alone.results)).toEqual(expected.slice(0, 1));
        expect(alone.results[0]!.cached_tokens_disk).toBe(Math.floor((alone.results[0]!.prompt_tokens - 1) / blockSize) * blockSize);
        expect(restart.tier.blocksRejected).toBe(0);
        expect(restart.tier.blocksWritten).toBe(0); // nothing new: prompts and outputs were all written before
        expect(restart.warnings).toEqual([]);
      }, TIMEOUT_MS);
    }
  });

  describe("damaged and foreign block files are detected, removed and recomputed", () => {
    const blockSize = 4;
    const prompt = (): GenerateRequest[] => [{ id: "p", promptTokenIds: ids.long, maxTokens: 10, temperature: 0, logprobs: 2 }];
    let pristine = "";
    let expected: unknown[] = [];
    const hashes = chainHashes(ids.long, blockSize);

    async function setUp(): Promise<void> {
      if (pristine !== "") return;
      const llm = LLM.load(load(blockSize));
      try {
        expected = outputsOf(await llm.generate(prompt()));
      } finally {
        llm.close();
      }
      pristine = newDir("pristine");
      await runWithTier(load(blockSize, { kvCacheDir: pristine }), prompt());
    }

    /** A copy of the pristine folder with `damage` applied to its model folder, then a restart on it. */
    async function restartAfter(damage: (folder: string) => void) {
      await setUp();
      const root = newDir("damaged");
      cpSync(pristine, root, { recursive: true });
      const folder = modelFolder(root);
      damage(folder);
      const run = await runWithTier(load(blockSize, { kvCacheDir: root }), prompt());
      expect(outputsOf(run.results)).toEqual(expected);
      return { run, folder, result: run.results[0]! };
    }

    const BAD = 5; // the damaged block: blocks 0-4 still come from disk
    const flip = (path: string, at: number) => {
      const bytes = readFileSync(path);
      bytes[at]! ^= 0x10;
      writeFileSync(path, bytes);
    };

    test("a flipped byte in the KV, in the tokens, in the checksum", async () => {
      for (const at of [(n: number) => Math.floor(n / 2), () => 130, (n: number) => n - 3]) {
        const { run, folder, result } = await restartAfter((f) => {
          const path = blockPath(f, hashes[BAD]!);
          flip(path, at(statSync(path).size));
        });
        expect(run.tier.blocksRejected).toBe(1);
        expect(result.cached_tokens_disk).toBe(BAD * blockSize);
        expect(run.warnings.length).toBe(1);
        expect(run.warnings[0]).toMatch(/removed a block file that failed its (checksum|key) check/);
        // Recomputed, and written again whole: the next restart reads it.
        expect(readFileSync(blockPath(folder, hashes[BAD]!)).length).toBe(statSync(blockPath(modelFolder(pristine), hashes[BAD]!)).size);
      }
    }, TIMEOUT_MS);

    test("a truncated file and an empty one", async () => {
      for (const length of [(n: number) => n - 100, () => 0]) {
        const { run, result } = await restartAfter((f) => {
          const path = blockPath(f, hashes[BAD]!);
          truncateSync(path, length(statSync(path).size));
        });
        expect(run.tier.blocksRejected).toBe(1);
        expect(result.cached_tokens_disk).toBe(BAD * blockSize);
      }
    }, TIMEOUT_MS);

    test("a FIFO, then a 1.5 GiB sparse file, under a block's name: the request returns, the block is recomputed and replaces it", async () => {
      // A FIFO is not a block file at all (the folder scan passes over it: nothing to say); the
      // sparse file is refused on its size, never read, and removed.
      const damages: [(path: string) => void, string[]][] = [
        [(path) => {
          rmSync(path);
          expect(Bun.spawnSync(["mkfifo", path]).exitCode).toBe(0);
        }, []],
        [(path) => truncateSync(path, 1.5 * 2 ** 30), ["failed its size check"]],
      ];
      for (const [damage, warnings] of damages) {
        const { run, folder, result } = await restartAfter((f) => damage(blockPath(f, hashes[BAD]!)));
        expect(result.cached_tokens_disk).toBe(BAD * blockSize);
        expect(run.warnings).toEqual(warnings.map((w) => expect.stringContaining(w)));
        expect(run.tier.blocksRejected).toBe(warnings.length);
        const path = blockPath(folder, hashes[BAD]!);
        expect(statSync(path).isFile()).toBe(true);
        expect(statSync(path).size).toBe(statSync(blockPath(modelFolder(pristine), hashes[BAD]!)).size);
      }
    }, TIMEOUT_MS);

    test("two block files swapped (a wrong key under a right name)", async () => {
      const { run, result } = await restartAfter((f) => {
        const a = blockPath(f, hashes[BAD]!);
        const b = blockPath(f, hashes[BAD + 2]!);
        renameSync(a, `${a}.x`);
        renameSync(b, a);
        renameSync(`${a}.x`, b);
      });
      // Every block on disk past memory is read at once, so both files are refused; the first bad one ends the hits.
      expect(run.tier.blocksRejected).toBe(2);
      expect(result.cached_tokens_disk).toBe(BAD * blockSize);
      expect(run.warnings[0]).toContain("key check");
    }, TIMEOUT_MS);

    test("another model's block under the same hash (same tokens, other weights)", async () => {
      await setUp();
      const otherRoot = newDir("other-model");
      await runWithTier({ ...load(blockSize, { kvCacheDir: otherRoot }), model: otherModel! }, prompt());
      const otherFolder = modelFolder(otherRoot);
      expect(otherFolder.split("/").pop()).not.toBe(modelFolder(pristine).split("/").pop());
      const { run, result } = await restartAfter((f) => {
        for (let i = 0; i <= BAD; i++) copyFileSync(blockPath(otherFolder, hashes[i]!), blockPath(f, hashes[i]!));
      });
      expect(result.cached_tokens_disk).toBe(0);
      expect(run.tier.blocksRejected).toBe(BAD + 1);
      expect(run.warnings).toEqual([expect.stringContaining("fingerprint check")]);
    }, TIMEOUT_MS);

    test("another salt's block under the unsalted name; salts never read each other's blocks", async () => {
      await setUp();
      const salted = newDir("salted");
      cpSync(pristine, salted, { recursive: true });
      const saltedRun = await runWithTier(load(blockSize, { kvCacheDir: salted }), [{ ...prompt()[0]!, cacheSalt: "tenant-a" }]);
      expect(saltedRun.results[0]!.cached_tokens).toBe(0); // the unsalted blocks on disk are not its blocks
      expect(outputsOf(saltedRun.results)).toEqual(expected);
      const saltedHashes = chainHashes(ids.long, blockSize, "tenant-a");
      const folder = modelFolder(salted);
      expect(existsSync(blockPath(folder, saltedHashes[0]!))).toBe(true);
      // Stored under its salt: the same salt reads it back, another salt and no salt do not.
      const again = await runWithTier(load(blockSize, { kvCacheDir: salted }), [
        { ...prompt()[0]!, id: "a", cacheSalt: "tenant-a" },
        { ...prompt()[0]!, id: "b", cacheSalt: "tenant-b" },
      ]);
      expect(again.results.map((r) => r.cached_tokens_disk)).toEqual([Math.floor((ids.long.length - 1) / blockSize) * blockSize, 0]);
      // The salted first block copied over the unsalted one's name: refused, recomputed.
      const { run, result } = await restartAfter((f) => copyFileSync(blockPath(folder, saltedHashes[0]!), blockPath(f, hashes[0]!)));
      expect(result.cached_tokens_disk).toBe(0);
      expect(run.tier.blocksRejected).toBe(1);
      // Its salt makes its header longer than an unsalted block's: refused on size before its key is read.
      expect(run.warnings[0]).toMatch(/(size|key) check/);
    }, TIMEOUT_MS);

    test("salts that UTF-8 would make one (lone surrogates) never read each other's blocks, after a restart either", async () => {
      await setUp();
      const root = newDir("lone-surrogates");
      const ask = (id: string, cacheSalt: string): GenerateRequest => ({ ...prompt()[0]!, id, cacheSalt });
      const first = await runWithTier(load(blockSize, { kvCacheDir: root }), [ask("first", "x\udbff")]);
      expect(first.results[0]!.cached_tokens).toBe(0);
      const restart = await runWithTier(load(blockSize, { kvCacheDir: root }), [ask("a", "x\ud800"), ask("b", "x\ufffd"), ask("c", "x\udbff")]);
      const whole = Math.floor((ids.long.length - 1) / blockSize) * blockSize;
      expect(restart.results.map((r) => [r.cached_tokens, r.cached_tokens_disk])).toEqual([[0, 0], [0, 0], [whole, whole]]);
      for (const r of restart.results) expect(outputsOf([r])[0]).toEqual({ ...(expected[0] as object), id: r.id });
    }, TIMEOUT_MS);

    test("a hand-made file with a wrong key under a right name, and stray files, are ignored", async () => {
      const { run, result } = await restartAfter((f) => {
        // The right header magic and size but another block's key (its parent hash) written over it.
        const path = blockPath(f, hashes[BAD]!);
        const bytes = readFileSync(path);
        readFileSync(blockPath(f, hashes[BAD + 1]!)).copy(bytes, 48, 48, 112);
        writeFileSync(path, bytes);
        writeFileSync(join(f, "notes.txt"), "not a block");
        writeFileSync(join(f, `.${hashes[BAD + 3]}.kvb.123.0.tmp`), "a torn temporary file");
      });
      expect(run.tier.blocksRejected).toBe(1);
      expect(result.cached_tokens_disk).toBe(BAD * blockSize);
    }, TIMEOUT_MS);
  });

  test("a full disk: one warning, then the memory cache only, outputs unchanged", async () => {
    const root = newDir("full");
    const full: BlockFileOps = {
      ...nodeBlockFileOps,
      writeAtomic: () => Promise.reject(Object.assign(new Error("no space left on device"), { code: "ENOSPC" })),
    };
    const expected = await cold(16);
    const run = await runWithTier(load(16, { kvCacheDir: root, kvCacheFileOps: full }), requests());
    expect(outputsOf(run.results)).toEqual(expected);
    expect(run.warnings).toEqual([expect.stringMatching(/cannot write to .* \(ENOSPC\); continuing with the memory cache only/)]);
    expect(run.tier.blocksWritten).toBe(0);
    expect(run.tier.writesDropped).toBeGreaterThan(0);
    // Memory hits still work: the seeded request shares the greedy one's first 70 tokens.
    expect(run.results[1]!.cached_tokens_memory).toBeGreaterThan(0);
  }, TIMEOUT_MS);

  test("the size bound removes the least recently used blocks, whoever wrote them", async () => {
    const root = newDir("bound");
    const blockSize = 4;
    await runWithTier(load(blockSize, { kvCacheDir: root }), [{ promptTokenIds: ids.long, maxTokens: 1, temperature: 0 }]);
    const folder = modelFolder(root);
    const oldFiles = readdirSync(folder).filter((n) => n.endsWith(".kvb"));
    const fileBytes = statSync(join(folder, oldFiles[0]!)).size;
    const old = new Date(Date.now() - 3_600_000);
    for (const name of oldFiles) utimesSync(join(folder, name), old, old);
    // Room for 30 blocks: the other prompt's 22 blocks (10 shared, read and so touched) push the old ones out, oldest first.
    const boundMb = (30 * fileBytes) / 2 ** 20;
    const run = await runWithTier(load(blockSize, { kvCacheDir: root, kvCacheDiskMb: boundMb }), [{ promptTokenIds: ids.other, maxTokens: 1, temperature: 0 }]);
    expect(run.tier.blocksRemoved).toBeGreaterThan(0);
    const left = readdirSync(folder).filter((n) => n.endsWith(".kvb"));
    const total = left.reduce((n, name) => n + statSync(join(folder, name)).size, 0);
    expect(total).toBeLessThanOrEqual(boundMb * 2 ** 20);
    const newHashes = new Set(chainHashes(ids.other, blockSize));
    // Blocks the two prompts share are reused (and touched); every block removed was an old one.
    for (const hash of newHashes) expect(left).toContain(`${hash}.kvb`);
  }, TIMEOUT_MS);

  test('"evict" writes blocks when memory evicts them and the rest at flush; a restart reads them', async () => {
    const root = newDir("evict");
    const blockSize = 4;
    const expected = await cold(blockSize);
    const numBlocks = 40; // a prompt takes ~25 blocks: each request evicts the one before
    const opts = (extra: Partial<LoadOptions>) => ({ ...load(blockSize, extra), engine: { threads: THREADS, blockSize, numBlocks, maxNumSeqs: 1 } });
    const llm = LLM.load(opts({ kvCacheDir: root, kvCacheWrite: "evict" }));
    try {
      const results = [];
      for (const r of requests()) results.push(...(await llm.generate([r])));
      expect(outputsOf(results)).toEqual(expected);
      await llm.flush();
      const tier = llm.stats().tier!;
      expect(llm.stats().evictions).toBeGreaterThan(0);
      expect(tier.blocksWritten).toBeGreaterThan(0);
    } finally {
      llm.close();
    }
    const restart = await runWithTier(opts({ kvCacheDir: root }), requests().slice(0, 1));
    expect(outputsOf(restart.results)).toEqual(expected.slice(0, 1));
    expect(restart.results[0]!.cached_tokens_disk).toBe(Math.floor((ids.long.length - 1) / blockSize) * blockSize);
  }, TIMEOUT_MS);

  test("blocks move layer by layer: a model split over several memories reads what one memory wrote, and back", async () => {
    const blockSize = 8;
    const expected = await cold(blockSize);
    const split = (root: string, wasmMemoryMb: number | null): LoadOptions => ({
      ...load(blockSize, { kvCacheDir: root }), engine: { threads: THREADS, blockSize, maxNumBatchedTokens: 256, wasmMemoryMb },
    });
    for (const [writer, reader] of [[null, 1], [1, null]] as const) {
      const root = newDir("memories");
      const first = await runWithTier(split(root, writer), requests());
      expect(outputsOf(first.results)).toEqual(expected);
      const restart = await runWithTier(split(root, reader), requests().slice(0, 1));
      expect(outputsOf(restart.results)).toEqual(expected.slice(0, 1));
      expect(restart.results[0]!.cached_tokens_disk).toBe(Math.floor((ids.long.length - 1) / blockSize) * blockSize);
    }
  }, TIMEOUT_MS);

  test("every KV type (f32, f16, q8_0): disk hits give the cold outputs; each type has its own folder", async () => {
    // Heads of 32 values, so q8_0 (32-value blocks) applies; tok512's vocabulary.
    const root = newDir("kv-types");
    const file = join(root, "..", `${root.split("/").pop()}-model.bin`);
    dirs.push(file);
    const config = makeConfig({ dim: 64, hiddenDim: 128, nLayers: 2, nHeads: 2, nKvHeads: 1, vocabSize: 512, seqLen: 512, sharedClassifier: true });
    writeLlama2c(file, config, randomWeights(config, 7), "legacy");
    const tokenizer = join(SHARED_DIR, "models", "llama2c", "tok512.bin");
    const reqs: GenerateRequest[] = [{ id: "t", promptTokenIds: ids.long.map((t) => t % 512), maxTokens: 8, temperature: 0.7, seed: 3, logprobs: 2 }];
    for (const kvType of ["f32", "f16", "q8_0"] as const) {
      const opts = (kvCacheDir?: string): LoadOptions => ({ model: file, tokenizer, engine: { threads: THREADS, blockSize: 16, kvType }, kvCacheDir });
      const llm = LLM.load(opts());
      const expected = outputsOf(await llm.generate(reqs).finally(() => llm.close()));
      await runWithTier(opts(root), reqs);
      const restart = await runWithTier(opts(root), reqs);
      expect(outputsOf(restart.results)).toEqual(expected);
      expect(restart.results[0]!.cached_tokens_disk).toBe(Math.floor((ids.long.length - 1) / 16) * 16);
    }
    expect(readdirSync(root).filter((n) => /^[0-9a-f]{16}-[0-9a-f]{8}$/.test(n)).length).toBe(3);
  }, TIMEOUT_MS);

  test("the fast hash and a disabled prefix cache are refused with the disk tier", () => {
    const root = newDir("refuse");
    expect(() => LLM.load({ ...load(16, { kvCacheDir: root }), engine: { threads: 1, prefixHash: "xxh64" } })).toThrow(/sha256/);
    expect(() => LLM.load({ ...load(16, { kvCacheDir: root }), engine: { threads: 1, enablePrefixCaching: false } })).toThrow(/prefix cache/);
  });
});

/**
 * Models with sliding-window layers (KV cache groups, kv-groups.ts): each group's blocks are stored
 * apart, and a hit reads the global group's blocks of the prefix and each local group's window
 * before its end. rnd-gemma3: layer 2 global, 0, 1 and 3 local (four groups of one layer);
 * rnd-gptoss: 1 and 3 global, 0 and 2 local (two groups of two). Both have a window of 32: with
 * blocks of 4 a hit needs each local group's last 8 blocks. A 50-token prompt and 4 new tokens: 13
 * full blocks computed per group, a hit of 12.
 */
describeShared("disk KV cache, sliding-window models", ["models/gguf/rnd-gemma3-Q4_K_M.gguf", "models/gguf/rnd-gptoss-MXFP4_MOE.gguf"], ([gemma3, gptoss]) => {
  const BLOCK = 4;
  const WINDOW_BLOCKS = 8;
  const load = (model: string, extra: Partial<LoadOptions> = {}): LoadOptions => ({
    model, tokenizer: model, engine: { threads: THREADS, blockSize: BLOCK, maxNumBatchedTokens: 64 }, ...extra,
  });
  const requestsOf = (prompt: number[]): GenerateRequest[] => [{ id: "w", promptTokenIds: prompt, maxTokens: 4, temperature: 0.8, seed: 5, logprobs: 2 }];
  /** Per model: the prompt, the cold run's outputs, and a folder its first run with the disk tier wrote (the first test's). */
  const runs = new Map<string, { prompt: number[]; expected: unknown[]; root: string }>();
  async function coldRun(model: string): Promise<{ prompt: number[]; expected: unknown[] }> {
    const llm = LLM.load(load(model));
    try {
      const prompt = llm.encode(`${TEXTS[0]} ${TEXTS[1]}`).slice(0, 50);
      return { prompt, expected: outputsOf(await llm.generate(requestsOf(prompt))) };
    } finally {
      llm.close();
    }
  }
  /** Block files per KV cache group in a model folder. */
  const filesPerGroup = (folder: string): Record<string, number> => {
    const counts: Record<string, number> = {};
    for (const name of readdirSync(folder).filter((n) => n.endsWith(".kvb"))) {
      const group = /-g(\d+)\.kvb$/.exec(name)?.[1] ?? "0";
      counts[group] = (counts[group] ?? 0) + 1;
    }
    return counts;
  };

  for (const [name, groups, localGroups] of [["gemma3", 4, 3], ["gptoss", 2, 1]] as const) {
    test(`${name}: a restart reads the global blocks and the window's local ones; outputs are the cold run's bits`, async () => {
      const model = name === "gemma3" ? gemma3! : gptoss!;
      const { prompt, expected } = await coldRun(model);
      const root = newDir(`swa-${name}`);
      const first = await runWithTier(load(model, { kvCacheDir: root }), requestsOf(prompt));
      expect(outputsOf(first.results)).toEqual(expected);
      // 53 positions computed: 13 full blocks, every group's stored.
      expect(first.tier.blocksWritten).toBe(13 * groups);
      expect(filesPerGroup(modelFolder(root))).toEqual(Object.fromEntries(Array.from({ length: groups }, (_, g) => [String(g), 13])));
      const restart = await runWithTier(load(model, { kvCacheDir: root }), requestsOf(prompt));
      expect(outputsOf(restart.results)).toEqual(expected);
      expect([restart.results[0]!.cached_tokens, restart.results[0]!.cached_tokens_disk]).toEqual([48, 48]);
      expect(restart.tier.blocksRead).toBe(12 * (groups - localGroups) + WINDOW_BLOCKS * localGroups);
      expect([restart.tier.blocksWritten, restart.tier.blocksRejected]).toEqual([0, 0]);
      expect(restart.warnings).toEqual([]);
      // pagellm cache ls: the groups, and the blocks split into global and windowed ones.
      const [folder] = scanRoot(root);
      const row = folderRow(folder!);
      expect(row.slice(2, 4)).toEqual([`f16, 4-token blocks, ${groups} groups (1 full, ${localGroups} window 32)`, `${13 * groups} (13 full, ${13 * localGroups} window)`]);
      const summary = folderSummary(folder!) as { groups: { attention: string; window?: number; blocks: number }[] };
      expect(summary.groups.map((g) => [g.attention, g.window ?? null, g.blocks])).toEqual([
        ["full", null, 13], ...Array.from({ length: localGroups }, () => ["sliding", 32, 13]),
      ]);
      runs.set(name, { prompt, expected, root });
    }, TIMEOUT_MS);
  }

  test("gemma3: a damaged local block, and a local group's block under another group's name, are removed; the hit is planned again around them", async () => {
    const { prompt, expected, root: pristine } = runs.get("gemma3")!;
    const hashes = chainHashes(prompt, BLOCK);
    const damages: [string, (folder: string) => void][] = [
      ["flipped", (folder) => {
        const path = blockPath(folder, hashes[11]!, 2);
        const bytes = readFileSync(path);
        bytes[bytes.length >> 1]! ^= 0x10;
        writeFileSync(path, bytes);
      }],
      ["another group's", (folder) => copyFileSync(blockPath(folder, hashes[11]!, 1), blockPath(folder, hashes[11]!, 2))],
    ];
    for (const [what, damage] of damages) {
      const root = newDir("swa-damaged");
      cpSync(pristine, root, { recursive: true });
      damage(modelFolder(root));
      const run = await runWithTier(load(gemma3!, { kvCacheDir: root }), requestsOf(prompt));
      expect(outputsOf(run.results), what).toEqual(expected);
      expect(run.tier.blocksRejected, what).toBe(1);
      expect(run.warnings.length, what).toBe(1);
      // Group 2 lacks block 11: the hit ends at 11 blocks, whose windows need block 3 of each local group too.
      expect(run.results[0]!.cached_tokens_disk, what).toBe(44);
      expect(run.tier.blocksRead, what).toBe(36 - 1 + 3);
      // The block was recomputed and written again.
      expect(existsSync(blockPath(modelFolder(root), hashes[11]!, 2)), what).toBe(true);
    }
  }, TIMEOUT_MS);

  test("gemma3 split over one WebAssembly memory per layer reads each group's blocks that one memory wrote", async () => {
    const { prompt, expected, root: written } = runs.get("gemma3")!;
    const root = newDir("swa-memories");
    cpSync(written, root, { recursive: true });
    const split = load(gemma3!, { kvCacheDir: root });
    const run = await runWithTier({ ...split, engine: { ...split.engine, wasmMemoryMb: 1 } }, requestsOf(prompt));
    expect(outputsOf(run.results)).toEqual(expected);
    expect(run.results[0]!.cached_tokens_disk).toBe(48);
  }, TIMEOUT_MS);

  test('gemma3, "evict": every group\'s blocks written at flush; a restart reads them', async () => {
    const { prompt, expected } = runs.get("gemma3")!;
    const root = newDir("swa-evict");
    const first = await runWithTier(load(gemma3!, { kvCacheDir: root, kvCacheWrite: "evict" }), requestsOf(prompt));
    expect(first.tier.blocksWritten).toBe(13 * 4);
    const restart = await runWithTier(load(gemma3!, { kvCacheDir: root }), requestsOf(prompt));
    expect(outputsOf(restart.results)).toEqual(expected);
    expect(restart.results[0]!.cached_tokens_disk).toBe(48);
  }, TIMEOUT_MS);
});
