/**
 * Bad input never crashes with a stack trace: every broken file, mismatched pair, impossible request
 * and malformed option ends the command with one line on stderr, `pagellm: error: ...`, that names the
 * file (where there is one) and the problem, and with the documented exit code: 2 for bad files and bad
 * input (ModelFormatError, InputError), 3 for a request that can never fit (RequestTooLongError).
 * Also: --help lists every option and exits 0.
 */
import { afterAll, describe, expect, test } from "bun:test";
import { copyFileSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { generateArgs } from "../src/cli/generate.ts";
import { Xoshiro128 } from "../src/util/random.ts";
import { runPagellm, stripAnsi, type CliResult } from "./helpers/cli.ts";
import { describeShared } from "./helpers/shared.ts";
import { PROCESS_TEST_MS } from "./helpers/limits.ts";
import { LLM } from "../src/index.ts";
import { ModelFormatError } from "../src/errors.ts";

const dir = mkdtempSync(join(tmpdir(), "pagellm-cli-errors-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const STORIES = "models/llama2c/stories260K.bin"; // legacy, seq_len 512, vocab 512
const STORIES_V1 = "models/llama2c/variants/stories260K_v1.bin";
const TOK512 = "models/llama2c/tok512.bin";
const LLAMA2_TOKENIZER = "models/llama2c/llama2_tokenizer.bin"; // 32000 tokens
const GGUF_VOCAB = "vocab/ggml-vocab-llama-spm.gguf";

/**
 * The one-line error contract: exit code, empty stdout, stderr exactly one line starting
 * "pagellm: error:", no stack frames, no "internal error"; the line must match every `mentions`.
 */
function expectOneLineError(r: CliResult, exitCode: number, mentions: (string | RegExp)[]): void {
  const where = `stderr was:\n${r.stderr}`;
  expect(r.stderr, where).not.toMatch(/^\s+at /m); // a stack frame
  expect(r.stderr, where).not.toContain("internal error");
  expect(r.stderr, where).toMatch(/^pagellm: error: [^\n]+\n$/); // exactly one line
  expect(r.exitCode, where).toBe(exitCode);
  expect(r.stdout).toBe("");
  for (const m of mentions) {
    if (typeof m === "string") expect(r.stderr, where).toContain(m);
    else expect(r.stderr, where).toMatch(m);
  }
}

/** Raw little-endian int32s followed by `padBytes` zero bytes. */
function int32File(path: string, ints: number[], padBytes: number): string {
  const view = new DataView(new ArrayBuffer(4 * ints.length + padBytes));
  ints.forEach((v, i) => view.setInt32(4 * i, v, true));
  writeFileSync(path, new Uint8Array(view.buffer));
  return path;
}

/** A llama2.c v1 ("ak42", version 1) header with the given 7 config ints, then `padBytes` zeros. */
function v1File(path: string, ints: number[], padBytes: number): string {
  const view = new DataView(new ArrayBuffer(256 + padBytes));
  view.setUint32(0, 0x616b3432, true);
  view.setInt32(4, 1, true);
  ints.forEach((v, i) => view.setInt32(8 + 4 * i, v, true));
  view.setUint8(36, 1);
  writeFileSync(path, new Uint8Array(view.buffer));
  return path;
}

describeShared("pagellm generate: broken model and tokenizer files", [STORIES, STORIES_V1, TOK512, LLAMA2_TOKENIZER, GGUF_VOCAB], (paths) => {
  const [stories, storiesV1, tok512, llama2Tokenizer, ggufVocab] = paths as [string, string, string, string, string];
  const gen = (model: string, tokenizer = tok512, ...rest: string[]) =>
    runPagellm(["generate", "--model", model, "--tokenizer", tokenizer, "--prompt", "Once upon a time", "--temperature", "0", "--max-tokens", "4", ...rest]);

  test("a truncated legacy model (a real one cut in half)", () => {
    const path = join(dir, "stories-cut.bin");
    writeFileSync(path, readFileSync(stories).subarray(0, 500_000));
    expectOneLineError(gen(path), 2, [path, /truncat/i]);
  }, PROCESS_TEST_MS);

  test("a truncated v1 model (cut one byte short)", () => {
    const bytes = readFileSync(storiesV1);
    const path = join(dir, "stories-v1-cut.bin");
    writeFileSync(path, bytes.subarray(0, bytes.length - 1));
    expectOneLineError(gen(path), 2, [path, /truncat/i]);
  }, PROCESS_TEST_MS);

  test("a model file cut inside the header", () => {
    const path = join(dir, "header-cut.bin");
    writeFileSync(path, readFileSync(stories).subarray(0, 10));
    expectOneLineError(gen(path), 2, [path, /truncat|header|short/i]);
  }, PROCESS_TEST_MS);

  test("an empty model file", () => {
    const path = join(dir, "empty.bin");
    writeFileSync(path, "");
    expectOneLineError(gen(path), 2, [path]);
  }, PROCESS_TEST_MS);

  test("a PNG passed as the model", () => {
    const path = join(dir, "picture.png");
    const png = new Uint8Array(4096);
    png.set([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0, 0, 0, 13, 0x49, 0x48, 0x44, 0x52]);
    writeFileSync(path, png);
    expectOneLineError(gen(path), 2, [path, /llama2\.c|checkpoint|header/i]);
  }, PROCESS_TEST_MS);

  test("random bytes passed as the model", () => {
    const path = join(dir, "random.bin");
    const bytes = new Uint8Array(100_000);
    const rng = new Xoshiro128(42);
    for (let i = 0; i < bytes.length; i++) bytes[i] = rng.nextUint32() & 0xff;
    writeFileSync(path, bytes);
    expectOneLineError(gen(path), 2, [path, /llama2\.c|checkpoint|header/i]);
  }, PROCESS_TEST_MS);

  test("a GGUF vocabulary passed as the model", () => {
    expectOneLineError(gen(ggufVocab), 2, [ggufVocab, /GGUF/]);
  }, PROCESS_TEST_MS);

  test("a legacy header with dim = 1e9", () => {
    const path = int32File(join(dir, "dim-1e9.bin"), [1_000_000_000, 2000, 6, 8, 8, 512, 512], 4096);
    expectOneLineError(gen(path), 2, [path, /dim/]);
  }, PROCESS_TEST_MS);

  test("a v1 header with hidden_dim = 1e9", () => {
    const path = v1File(join(dir, "hidden-1e9.bin"), [64, 1_000_000_000, 5, 8, 4, 512, 512], 4096);
    expectOneLineError(gen(path), 2, [path, /hidden/i]);
  }, PROCESS_TEST_MS);

  test("a legacy header whose sizes multiply past 2^53 bytes (40000 x 40000 x 1000 layers)", () => {
    const path = int32File(join(dir, "huge.bin"), [40000, 40000, 1000, 8, 8, 512, 512], 4096);
    expectOneLineError(gen(path), 2, [path]);
  }, PROCESS_TEST_MS);

  test("a header whose dim is not a multiple of n_heads", () => {
    const path = int32File(join(dir, "heads.bin"), [64, 172, 5, 7, 7, 512, 512], 4096);
    expectOneLineError(gen(path), 2, [path, /head/i]);
  }, PROCESS_TEST_MS);

  test("a directory passed as the model", () => {
    const path = join(dir, "a-directory.bin");
    mkdirSync(path, { recursive: true });
    expectOneLineError(gen(path), 2, [path, /directory/i]);
  }, PROCESS_TEST_MS);

  test("a directory passed as the tokenizer", () => {
    const path = join(dir, "a-tokenizer-directory");
    mkdirSync(path, { recursive: true });
    expectOneLineError(gen(stories, path), 2, [path, /directory/i]);
  }, PROCESS_TEST_MS);

  test("a model file that does not exist", () => {
    const path = join(dir, "no-such-model.bin");
    expectOneLineError(gen(path), 2, [path, /not found|no such/i]);
  }, PROCESS_TEST_MS);

  test("a tokenizer that does not exist", () => {
    const path = join(dir, "no-such-tokenizer.bin");
    expectOneLineError(gen(stories, path), 2, [path, /not found|no such/i]);
  }, PROCESS_TEST_MS);

  test("a tokenizer whose vocabulary does not match the model (32000 tokens for a 512-token model)", () => {
    expectOneLineError(gen(stories, llama2Tokenizer), 2, [llama2Tokenizer, "32000", "512"]);
  }, PROCESS_TEST_MS);

  test("a truncated tokenizer", () => {
    const path = join(dir, "tok-cut.bin");
    writeFileSync(path, readFileSync(tok512).subarray(0, 3000));
    expectOneLineError(gen(stories, path), 2, [path, /truncat/i]);
  }, PROCESS_TEST_MS);

  test("a model file passed as the tokenizer", () => {
    expectOneLineError(gen(stories, stories), 2, [stories]);
  }, PROCESS_TEST_MS);

  test("a model copied next to nothing, with no --tokenizer (default tokenizer.bin missing)", () => {
    const sub = join(dir, "lonely");
    mkdirSync(sub, { recursive: true });
    const path = join(sub, "model.bin");
    copyFileSync(stories, path);
    const r = runPagellm(["generate", "--model", path, "--prompt", "hi", "--max-tokens", "2"]);
    expectOneLineError(r, 2, [/tokenizer/i]);
  }, PROCESS_TEST_MS);
});

describeShared("pagellm generate: bad prompts and requests", [STORIES, TOK512], ([stories, tok512]) => {
  const base = () => ["generate", "--model", stories!, "--tokenizer", tok512!, "--temperature", "0"];

  test("a prompt file that does not exist", () => {
    const path = join(dir, "no-such-prompt.txt");
    expectOneLineError(runPagellm([...base(), "--prompt-file", path]), 2, [path, /not found|no such/i]);
  }, PROCESS_TEST_MS);

  test("a prompt longer than the context (512 tokens): exit 3, naming the file and the context", () => {
    const path = join(dir, "long-prompt.txt");
    writeFileSync(path, "Once upon a time there was a little dog. ".repeat(80));
    expectOneLineError(runPagellm([...base(), "--prompt-file", path]), 3, [path, /context/, "512"]);
  }, PROCESS_TEST_MS);

  test("--max-tokens pushing prompt + max past the context: exit 3 with the reason", () => {
    // "Once upon a time" is 5 tokens with BOS; 5 + 509 - 1 = 513 > 512.
    const r = runPagellm([...base(), "--prompt", "Once upon a time", "--max-tokens", "509"]);
    expectOneLineError(r, 3, [/max_tokens|max-tokens/, "509", /context/, "512"]);
  }, PROCESS_TEST_MS);

  test("a KV pool too small for the request (--num-blocks 1): exit 3 with the reason", () => {
    const r = runPagellm([...base(), "--prompt", "Once upon a time", "--max-tokens", "100", "--num-blocks", "1"]);
    expectOneLineError(r, 3, [/block/i]);
  }, PROCESS_TEST_MS);

  test("--max-tokens exactly filling the context (prompt + max - 1 = 512) is accepted", () => {
    const r = runPagellm([...base(), "--prompt", "Once upon a time", "--max-tokens", "508"]);
    expect(r.stderr).not.toContain("error");
    expect(r.exitCode).toBe(0);
    expect(r.stdout.length).toBeGreaterThan(1);
  }, PROCESS_TEST_MS);
});

describeShared("pagellm generate: bad options", [STORIES, TOK512], ([stories, tok512]) => {
  const withOption = (...opt: string[]) =>
    runPagellm(["generate", "--model", stories!, "--tokenizer", tok512!, "--prompt", "hi", "--max-tokens", "2", ...opt]);

  test("an unknown option", () => {
    expectOneLineError(withOption("--bogus-option", "3"), 2, ["--bogus-option"]);
  }, PROCESS_TEST_MS);

  test("--temperature abc", () => {
    expectOneLineError(withOption("--temperature", "abc"), 2, ["--temperature", "abc"]);
  }, PROCESS_TEST_MS);

  test("--max-tokens 0", () => {
    expectOneLineError(withOption("--max-tokens", "0"), 2, ["--max-tokens"]);
  }, PROCESS_TEST_MS);

  test("--threads 2.5", () => {
    expectOneLineError(withOption("--threads", "2.5"), 2, ["--threads", "2.5"]);
  }, PROCESS_TEST_MS);

  test("--eviction-policy nonsense", () => {
    expectOneLineError(withOption("--eviction-policy", "nonsense"), 2, ["--eviction-policy", "nonsense"]);
  }, PROCESS_TEST_MS);

  test("--top-p 7 is a bad option value (exit 2, naming top-p)", () => {
    expectOneLineError(withOption("--top-p", "7"), 2, [/top[-_]p/, "7"]);
  }, PROCESS_TEST_MS);

  test("--min-p 3 is a bad option value (exit 2, naming min-p)", () => {
    expectOneLineError(withOption("--min-p", "3"), 2, [/min[-_]p/, "3"]);
  }, PROCESS_TEST_MS);

  test("--temperature -1 is reported as a bad value of --temperature, not as an unknown option", () => {
    expectOneLineError(withOption("--temperature", "-1"), 2, ["--temperature"]);
  }, PROCESS_TEST_MS);

  test("no prompt at all", () => {
    const r = runPagellm(["generate", "--model", stories!, "--tokenizer", tok512!]);
    expectOneLineError(r, 2, [/prompt/]);
  }, PROCESS_TEST_MS);

  test("no --model", () => {
    expectOneLineError(runPagellm(["generate", "--tokenizer", tok512!, "--prompt", "hi"]), 2, ["--model"]);
  }, PROCESS_TEST_MS);
});

describe("pagellm: commands and help", () => {
  test("an unknown command", () => {
    expectOneLineError(runPagellm(["frobnicate"]), 2, ["frobnicate"]);
  }, PROCESS_TEST_MS);

  test("no arguments: usage on stderr, exit 2", () => {
    const r = runPagellm([]);
    expect(r.exitCode).toBe(2);
    expect(stripAnsi(r.stderr)).toContain("generate");
  }, PROCESS_TEST_MS);

  test("pagellm --help exits 0 and names the generate command", () => {
    const r = runPagellm(["--help"]);
    expect(r.exitCode).toBe(0);
    expect(r.stderr).toBe("");
    expect(stripAnsi(r.stdout)).toContain("generate");
  }, PROCESS_TEST_MS);

  test("pagellm generate --help exits 0 and lists every option of generate", () => {
    const r = runPagellm(["generate", "--help"]);
    expect(r.exitCode).toBe(0);
    expect(r.stderr).toBe("");
    const help = stripAnsi(r.stdout);
    for (const name of ["--model", "--tokenizer", "--prompt", "--prompt-file", "--prompts", "--max-tokens", "--temperature",
      "--top-k", "--top-p", "--min-p", "--seed", "--stop", "--threads", "--block-size", "--json", "--no-prefix-cache"]) {
      expect(help).toContain(name);
    }
    for (const name of Object.keys(generateArgs)) expect(help).toMatch(new RegExp(`--${name}(?![\\w-])`));
  }, PROCESS_TEST_MS);
});

describe("a file that is neither GGUF nor llama2.c", () => {
  // Random bytes named like a model, a text file and a GGUF whose magic was corrupted: each command
  // that opens a model names the file as no model, before looking for a tokenizer beside it.
  const random = new Uint8Array(65_536);
  const rng = new Xoshiro128(7);
  for (let i = 0; i < random.length; i++) random[i] = rng.nextUint32() & 0xff;
  const junk = join(dir, "junk.gguf");
  writeFileSync(junk, random);
  const text = join(dir, "notes.txt");
  writeFileSync(text, "Once upon a time there was a file that was not a model.\n".repeat(100));
  const corrupted = join(dir, "corrupted-magic.gguf");
  writeFileSync(corrupted, Buffer.concat([Buffer.from("GGUG"), random.subarray(4)]));
  const commands: [string, (model: string) => string[]][] = [
    ["generate", (m) => ["generate", "--model", m, "--prompt", "Once upon a time", "--max-tokens", "2"]],
    ["chat", (m) => ["chat", "--model", m]],
    ["info", (m) => ["info", m]],
    ["perplexity", (m) => ["perplexity", "--model", m, "--file", text]],
  ];
  for (const [name, args] of commands) {
    test(`${name}: random bytes named .gguf, a text file and a corrupted magic are "not a GGUF or llama2.c model file"`, () => {
      for (const model of [junk, text, corrupted]) {
        const r = runPagellm(args(model), { stdin: "" });
        expectOneLineError(r, 2, [model, "not a GGUF or llama2.c model file"]);
        expect(r.stderr).not.toMatch(/tokenizer/i);
      }
      expect(runPagellm(args(corrupted)).stderr).toContain("47 47 55 47");
    }, PROCESS_TEST_MS);
  }

  test("the library says the same: LLM.open on random bytes is a ModelFormatError naming the file", async () => {
    const opened = LLM.open({ model: junk, tokenizer: junk });
    await expect(opened).rejects.toBeInstanceOf(ModelFormatError);
    await expect(LLM.open({ model: junk, tokenizer: junk })).rejects.toThrow(`${junk}: not a GGUF or llama2.c model file`);
  });
});
