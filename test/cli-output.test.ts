/**
 * What goes where: results on stdout and nothing else; --quiet leaves stderr to errors; --verbose
 * adds the stack to an error's one line; colour only on a terminal and never with NO_COLOR.
 */
import { afterAll, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { REPO_ROOT, runPagellm, stripAnsi } from "./helpers/cli.ts";
import { hasScript, PtySession } from "./helpers/pty.ts";
import { describeShared } from "./helpers/shared.ts";
import { PROCESS_TEST_MS } from "./helpers/limits.ts";

const dir = mkdtempSync(join(tmpdir(), "pagellm-cli-output-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describeShared("--quiet and the stderr lines", ["models/llama2c/stories260K.bin", "models/llama2c/tok512.bin"], ([model, tok]) => {
  const args = ["generate", "--model", model!, "--tokenizer", tok!, "--prompt", "Once upon a time", "--max-tokens", "8", "--temperature", "0", "--threads", "1"];

  test("without it: the text on stdout, load and speed statistics on stderr", () => {
    const r = runPagellm(args);
    expect(r.exitCode, r.stderr).toBe(0);
    expect(r.stdout.length).toBeGreaterThan(0);
    expect(r.stderr).toContain("load: ");
    expect(r.stderr).toContain("generation: ");
  }, PROCESS_TEST_MS);

  test("with --quiet (or -q, anywhere on the line): the same stdout, nothing on stderr", () => {
    const loud = runPagellm(args);
    for (const quiet of [[...args, "--quiet"], ["-q", ...args]]) {
      const r = runPagellm(quiet);
      expect(r.exitCode, r.stderr).toBe(0);
      expect(r.stdout).toBe(loud.stdout);
      expect(r.stderr).toBe("");
    }
  }, PROCESS_TEST_MS);

  test("--quiet keeps errors", () => {
    const r = runPagellm([...args.slice(0, 2), join(REPO_ROOT, "no-such-model.bin"), ...args.slice(3), "--quiet"]);
    expect(r.exitCode).toBe(2);
    expect(r.stderr).toMatch(/^pagellm: error: .*no-such-model\.bin[^\n]*\n$/);
  }, PROCESS_TEST_MS);
});

describe("--verbose", () => {
  test("an error is still one line first, then its stack", () => {
    const r = runPagellm(["generate", "--model", "no-such-model.bin", "--prompt", "x", "--verbose"]);
    expect(r.exitCode).toBe(2);
    const [first, ...rest] = r.stderr.split("\n");
    expect(first).toMatch(/^pagellm: error: .*no-such-model\.bin/);
    expect(rest.join("\n")).toMatch(/^\s+at /m);
  }, PROCESS_TEST_MS);

  test("without it, no stack", () => {
    const r = runPagellm(["generate", "--model", "no-such-model.bin", "--prompt", "x"]);
    expect(r.stderr).not.toMatch(/^\s+at /m);
    expect(r.stderr.split("\n").filter(Boolean)).toHaveLength(1);
  }, PROCESS_TEST_MS);

  test("every command's --help lists the global options", () => {
    for (const command of [[], ["generate"], ["chat"], ["bench", "decode"], ["pull"]]) {
      const r = runPagellm([...command, "--help"]);
      expect(r.exitCode).toBe(0);
      const text = stripAnsi(r.stdout);
      expect(text).toContain("--quiet, -q");
      expect(text).toContain("--verbose");
      expect(text).toContain("NO_COLOR");
    }
  }, PROCESS_TEST_MS);
});


describeShared("colour on a terminal", ["models/llama2c/stories260K.bin", "models/llama2c/tok512.bin"], ([model, tok]) => {
  /** `pagellm chat` in a pseudo-terminal with one message, then /exit, each sent once chat is ready for it; the raw output. */
  async function chatInPty(env: Record<string, string | undefined>): Promise<string> {
    const args = ["chat", "--model", model!, "--tokenizer", tok!, "--max-tokens", "4", "--temperature", "0", "--threads", "1"];
    // The line history goes to the test's folder, not the user's.
    const session = new PtySession(args, { ...process.env, TERM: "xterm", XDG_DATA_HOME: dir, ...env });
    try {
      await session.waitForCount(/> /g, 1);
      await session.send("Once\r");
      await session.waitForCount(/\[prompt \d+ tokens/g, 1);
      await session.send("/exit\r");
      expect(await session.end()).toBe(0);
    } finally {
      session.kill();
    }
    return session.output;
  }

  test.skipIf(!hasScript)("the statistics line is dim, unless NO_COLOR is set", async () => {
    const colour = await chatInPty({ NO_COLOR: undefined });
    expect(colour).toMatch(/\x1b\[2m\[prompt \d+ tokens/);
    const plain = await chatInPty({ NO_COLOR: "1" });
    expect(plain).toMatch(/\[prompt \d+ tokens/);
    expect(plain).not.toContain("\x1b[2m");
  }, PROCESS_TEST_MS);
});
