/**
 * pull, models, rm and info as a user runs them: child processes with HF_HOME in a temp folder and
 * HF_ENDPOINT pointing at the local fake hub, serving GGUF files from ../shared read in place.
 */
import { afterAll, expect, test } from "bun:test";
import { existsSync, lstatSync, mkdirSync, mkdtempSync, readFileSync, readlinkSync, rmSync, symlinkSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { REPO_ROOT, runPagellmAsync } from "./helpers/cli.ts";
import { FakeHub } from "../scripts/fake-hub.ts";
import { hasScript, pagellmInPty } from "./helpers/pty.ts";
import { describeShared } from "./helpers/shared.ts";
import { PROCESS_TEST_MS } from "./helpers/limits.ts";

describeShared("pagellm pull / models / rm / info", ["models/gguf/stories260K-Q8_0.gguf", "models/gguf/stories260K-Q4_0.gguf"], ([q8, q4]) => {
  const hub = new FakeHub();
  const REPO = "tinyllamas/stories260K-GGUF";
  hub.addFile(REPO, "stories260K-Q8_0.gguf", readFileSync(q8!));
  hub.addFile(REPO, "stories260K-Q4_0.gguf", readFileSync(q4!));
  const home = mkdtempSync(join(tmpdir(), "pagellm-hf-home-"));
  const repoDir = join(home, "hub", "models--tinyllamas--stories260K-GGUF");
  afterAll(() => {
    hub.stop();
    rmSync(home, { recursive: true, force: true });
  });

  // The fake hub answers in this process, so the CLI must run without blocking the event loop.
  const env = { HF_HOME: home, HF_HUB_CACHE: "", HF_ENDPOINT: hub.endpoint, HF_TOKEN: "", PAGELLM_CACHE: join(home, "pagellm"), NO_COLOR: "1" };
  const pagellm = (...args: string[]) => runPagellmAsync(args, { env });

  test("models on an empty cache says how to get one", async () => {
    const r = await pagellm("models");
    expect(r).toEqual({ exitCode: 0, stdout: "", stderr: `no models cached in ${join(home, "hub")} (pagellm pull hf:OWNER/REPO:QUANT fetches one)\n` });
  }, PROCESS_TEST_MS);

  test("pull prints the cached path and nothing else", async () => {
    const r = await pagellm("pull", `hf:${REPO}:Q8_0`);
    expect(r.stderr).toBe("");
    expect(r.exitCode).toBe(0);
    expect(r.stdout).toBe(`${join(repoDir, "snapshots", hub.commit, "stories260K-Q8_0.gguf")}\n`);
    expect(readFileSync(r.stdout.trim())).toEqual(readFileSync(q8!));
    const again = await pagellm("pull", `hf:${REPO}/stories260K-Q4_0.gguf`);
    expect(again.exitCode).toBe(0);
  }, PROCESS_TEST_MS);

  // `script` (util-linux) gives the child a pseudo-terminal, where the progress bar is drawn.
  test.skipIf(!hasScript)("on a terminal, pull draws a progress bar with size, speed and ETA", async () => {
    const env = { ...process.env, HF_HOME: join(home, "tty"), HF_HUB_CACHE: "", HF_ENDPOINT: hub.endpoint, HF_TOKEN: "", NO_COLOR: "1" };
    hub.faults = { chunkDelayMs: 20 };
    try {
      const proc = Bun.spawn(pagellmInPty(["pull", `hf:${REPO}:Q8_0`]), { cwd: REPO_ROOT, env, stdout: "pipe", stderr: "pipe", stdin: "ignore" });
      const [code, out] = await Promise.all([proc.exited, new Response(proc.stdout).text()]);
      expect(code).toBe(0);
      expect(out).toMatch(/\rstories260K-Q8_0\.gguf  \[=* *\] +\d+%  [\d.]+ KiB\/370\.3 KiB  [\d.]+ (B|KiB|MiB)\/s  ETA \d+:\d\d\x1b\[K/);
      expect(out).toEndWith(`snapshots/${hub.commit}/stories260K-Q8_0.gguf\r\n`);
    } finally {
      hub.faults = {};
    }
  }, PROCESS_TEST_MS);

  test("models lists repo, file, size, architecture, quantization and context", async () => {
    const text = await pagellm("models");
    expect(text.exitCode).toBe(0);
    expect(text.stdout.split("\n")).toEqual([
      "REPO                         FILE                   SIZE       ARCH   QUANT  CONTEXT",
      "tinyllamas/stories260K-GGUF  stories260K-Q4_0.gguf  270.5 KiB  llama  Q4_0   2048",
      "tinyllamas/stories260K-GGUF  stories260K-Q8_0.gguf  370.3 KiB  llama  Q8_0   2048",
      "",
    ]);
    const json = JSON.parse((await pagellm("models", "--json")).stdout) as { repo: string; file: string; bytes: number; quantization: string; contextLength: number }[];
    expect(json.map((m) => [m.repo, m.file, m.bytes, m.quantization, m.contextLength])).toEqual([
      [REPO, "stories260K-Q4_0.gguf", 277024, "Q4_0", 2048],
      [REPO, "stories260K-Q8_0.gguf", 379168, "Q8_0", 2048],
    ]);
  }, PROCESS_TEST_MS);

  test("info shows the model, its tensors, vocabulary and memory at --ctx-size", async () => {
    const requestsBefore = hub.requests.length;
    const text = await pagellm("info", `hf:${REPO}:Q8_0`, "--ctx-size", "512");
    expect(text.exitCode).toBe(0);
    expect(hub.requests.length).toBe(requestsBefore); // served from the cache
    for (const line of ["architecture      llama", "quantization      Q8_0", "context length    2048", "heads (q/kv)      8/4", "head dim          8",
      "Memory at --ctx-size 512", "KV cache (f16)      320.0 KiB"]) {
      expect(text.stdout).toContain(line);
    }
    expect(text.stdout).toMatch(/\n {4}kind +llama\n {4}size +512\n {4}bos token +1 "<s>"\n {4}eos token +2 "<\/s>"\n {4}unknown token +0 "<unk>"\n\n/);
    expect(text.stdout).toMatch(/\n {4}Q8_0 +69\.0% +246\.0 KiB  32 tensors\n {4}F16 +30\.2%/);
    const json = JSON.parse((await pagellm("info", `hf:${REPO}:Q8_0`, "--json", "--ctx-size", "512")).stdout) as {
      layers: number; kvHeads: number; headDim: number; parameters: number; vocabulary: { kind: string; size: number };
      tensorTypes: { type: string; fraction: number }[]; specialTokens: { role: string; id: number; text: string }[];
      memory: { kvCacheBytes: number; weightBytes: number; totalBytes: number };
    };
    // GGUF models get an f16 KV cache unless --kv-type says otherwise, as llama.cpp.
    expect(json.memory.kvCacheBytes).toBe(2 * json.layers * 512 * json.kvHeads * json.headDim * 2);
    expect(json.memory.kvCacheBytes).toBe(327680);
    const f32 = JSON.parse((await pagellm("info", `hf:${REPO}:Q8_0`, "--json", "--ctx-size", "512", "--kv-type", "f32")).stdout) as { memory: { kvType: string; kvCacheBytes: number } };
    expect(f32.memory).toMatchObject({ kvType: "f32", kvCacheBytes: 655360 });
    expect(json.vocabulary).toEqual({ kind: "llama", pre: null, size: 512 } as typeof json.vocabulary);
    expect(json.tensorTypes.reduce((s, t) => s + t.fraction, 0)).toBeCloseTo(1, 9);
    expect(json.specialTokens.find((t) => t.role === "bos")).toEqual({ role: "bos", id: 1, text: "<s>" });
    expect(json.memory.totalBytes).toBeGreaterThan(json.memory.weightBytes + json.memory.kvCacheBytes);
  }, PROCESS_TEST_MS);

  test("generate --model hf:OWNER/REPO:QUANT runs the cached file, same text as its path", async () => {
    const args = ["--prompt", "Once upon a time", "--max-tokens", "12", "--temperature", "0", "--threads", "1"];
    const viaHub = await pagellm("generate", "--model", `hf:${REPO}:Q8_0`, ...args);
    const viaPath = await pagellm("generate", "--model", q8!, ...args);
    expect(viaHub.exitCode).toBe(0);
    expect(viaHub.stdout.length).toBeGreaterThan(0);
    expect(viaHub.stdout).toBe(viaPath.stdout);
  }, PROCESS_TEST_MS);

  test("rm removes the snapshot link and, when unreferenced, the blob", async () => {
    // A second snapshot that shares the Q4_0 blob keeps it alive when the main one is removed.
    const q4Link = join(repoDir, "snapshots", hub.commit, "stories260K-Q4_0.gguf");
    const blobName = readlinkSync(q4Link).split("/").pop()!;
    const oldCommit = "1111111111111111111111111111111111111111";
    mkdirSync(join(repoDir, "snapshots", oldCommit), { recursive: true });
    symlinkSync(`../../blobs/${blobName}`, join(repoDir, "snapshots", oldCommit, "stories260K-Q4_0.gguf"));
    const listed = JSON.parse((await pagellm("models", "--json")).stdout) as { path: string }[];
    expect(listed.map((m) => m.path)).toEqual([q4Link, join(repoDir, "snapshots", hub.commit, "stories260K-Q8_0.gguf")]);

    const r = await pagellm("rm", `hf:${REPO}:q4_0`);
    expect(r.exitCode).toBe(0);
    expect(r.stdout.trim().split("\n").sort()).toEqual([
      `removed ${join(repoDir, "blobs", blobName)}`,
      `removed ${join(repoDir, "snapshots", oldCommit, "stories260K-Q4_0.gguf")}`,
      `removed ${q4Link}`,
    ].sort());
    expect(existsSync(join(repoDir, "blobs", blobName))).toBe(false);
    expect(existsSync(join(repoDir, "snapshots", oldCommit))).toBe(false);

    const q8 = await pagellm("rm", `hf:${REPO}/stories260K-Q8_0.gguf`);
    expect(q8.exitCode).toBe(0);
    expect(existsSync(repoDir)).toBe(false);
    expect((await pagellm("models", "--json")).stdout).toBe("[]\n");
    const missing = await pagellm("rm", `hf:${REPO}/stories260K-Q8_0.gguf`);
    expect(missing).toEqual({ exitCode: 2, stdout: "", stderr: `pagellm: error: hf:${REPO}/stories260K-Q8_0.gguf: not in the cache (pagellm models lists what is)\n` });
  }, PROCESS_TEST_MS);

  test("errors are one line naming the model and the fix; generate takes hf: specs", async () => {
    const notFound = await pagellm("pull", `hf:${REPO}/nope.gguf`);
    expect(notFound.exitCode).toBe(5);
    expect(notFound.stderr).toBe(`pagellm: error: ${REPO}/nope.gguf: 404 Not Found: the repository has no such file; \`pagellm pull hf:OWNER/REPO:QUANT\` picks one by quantization\n`);
    const noQuant = await pagellm("pull", `hf:${REPO}:Q6_K`);
    expect(noQuant.stderr).toBe(`pagellm: error: hf:${REPO}: no Q6_K GGUF file; it has: Q8_0, Q4_0\n`);
    const generate = await pagellm("generate", "--model", `hf:${REPO}/nope.gguf`, "--prompt", "hi");
    expect(generate.exitCode).toBe(5);
    expect(generate.stderr).toContain(`${REPO}/nope.gguf: 404 Not Found`);
    expect(lstatSync(home).isDirectory()).toBe(true);
  }, PROCESS_TEST_MS);
});

describeShared("pagellm info on a chat model", ["models/gguf/rnd-qwen2-Q5_K_M.gguf"], ([model]) => {
  test("parameters (embedding + layers, tied classifier), RoPE, pre-tokenizer, special tokens and the chat template", async () => {
    const { exitCode, stdout: out } = await runPagellmAsync(["info", model!]);
    expect(exitCode).toBe(0);
    // 49152 x 256 embedding, then per layer q/o 256x256, k/v 256x128 with biases, 3 x 256x768 feed-forward, 2 norms; the final norm.
    const perLayer = 2 * 256 * 256 + 2 * 256 * 128 + 256 + 2 * 128 + 3 * 256 * 768 + 2 * 256;
    expect((49152 * 256 + 3 * perLayer + 256) / 1e6).toBeCloseTo(14.95, 2);
    for (const line of ["parameters        14.95M", "quantization      Q5_K_M", "  RoPE\n    freq base   1000000\n    dimensions  64",
      "pre-tokenizer  smollm", "bos token      1 \"<|im_start|>\"", "eos token      2 \"<|im_end|>\"", "  Chat template\n    {% for message in messages %}"]) {
      expect(out).toContain(line);
    }
  }, PROCESS_TEST_MS);
});

describeShared("pagellm info on a mixture-of-experts model", ["models/gguf/rnd-qwen3moe-Q4_K_M.gguf"], ([model]) => {
  test("experts: how many, how many a token uses, one expert's size and the parameters a token runs", async () => {
    const proc = Bun.spawn(["bun", "bin/pagellm", "info", model!], { cwd: REPO_ROOT, stdout: "pipe", stderr: "pipe" });
    const [code, out] = await Promise.all([proc.exited, new Response(proc.stdout).text()]);
    expect(code).toBe(0);
    // One expert of a layer: gate, up, down of 256 x 256 = 196,608 parameters, in Q4_K: 256 rows of one
    // 144-byte super-block each, three matrices = 110,592 bytes. A token skips 6 of 8 experts in 3 layers.
    const oneExpert = 3 * 256 * 256;
    expect(((18.49e6 - 3 * 6 * oneExpert) / 1e6)).toBeCloseTo(14.95, 1);
    for (const line of ["feed forward       256", "experts            8, 2 used per token", "one expert         196.6K parameters, 108.0 KiB per layer", "active parameters  14.95M per token"]) {
      expect(out).toContain(line);
    }
    const json = JSON.parse((await pagellmJson(model!)).out) as { experts: { count: number; used: number; parametersOfOne: number; bytesOfOne: number } };
    expect(json.experts).toMatchObject({ count: 8, used: 2, parametersOfOne: oneExpert, bytesOfOne: 3 * 256 * 144 });
  }, PROCESS_TEST_MS);
});

async function pagellmJson(model: string): Promise<{ out: string }> {
  const proc = Bun.spawn(["bun", "bin/pagellm", "info", model, "--json"], { cwd: REPO_ROOT, stdout: "pipe", stderr: "pipe" });
  const [, out] = await Promise.all([proc.exited, new Response(proc.stdout).text()]);
  return { out };
}
