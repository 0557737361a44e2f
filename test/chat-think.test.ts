/**
 * pagellm chat and reasoning: --no-think renders the template with enable_thinking false (Qwen3's
 * template then closes an empty reasoning block in the prompt), on top of --chat-template-kwargs;
 * on a terminal, reasoning is shown dimmed.
 */
import { expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { runPagellm } from "./helpers/cli.ts";
import { LONG_PROCESS_TEST_MS } from "./helpers/limits.ts";
import { hasScript, PtySession } from "./helpers/pty.ts";
import { describeShared } from "./helpers/shared.ts";

/** The new prompt tokens' pieces that /tokens lists, joined (escapes left as they are shown). */
function promptPieces(stdout: string): string {
  const prompt = stdout.slice(stdout.indexOf("prompt: "), stdout.indexOf("reply: "));
  return [...prompt.matchAll(/^ {2}\d+ "(.*)"$/gm)].map((m) => m[1]!.replace(/\\"/g, '"')).join("");
}

describeShared("pagellm chat --no-think", ["models/gguf/stories260K.gguf", "templates/Qwen-Qwen3-0.6B.jinja"], ([model, template]) => {
  const base = ["chat", "--model", model!, "--template", template!, "--temperature", "0", "--threads", "1", "--max-tokens", "4"];

  test("the prompt closes an empty reasoning block; without it, none", () => {
    const off = runPagellm([...base, "--no-think", "--chat-template-kwargs", '{"custom": 1}'], { stdin: "Hello\n/tokens\n" });
    expect(off.stderr).not.toContain("error");
    expect(off.exitCode).toBe(0);
    expect(promptPieces(off.stdout)).toMatch(/<think>.*<\/think>/);
    const on = runPagellm(base, { stdin: "Hello\n/tokens\n" });
    expect(on.exitCode).toBe(0);
    const pieces = promptPieces(on.stdout);
    expect(pieces).toContain("assistant");
    expect(pieces).not.toContain("think>");
  });

  test("a bad --chat-template-kwargs is still one line with --no-think", () => {
    const bad = runPagellm([...base, "--no-think", "--chat-template-kwargs", "[1]"], { stdin: "" });
    expect(bad.exitCode).toBe(2);
    expect(bad.stderr.trim()).toBe("pagellm: error: --chat-template-kwargs must be a JSON object, got [1]");
  });
});

describeShared("pagellm chat shows reasoning dimmed", ["models/gguf/stories260K.gguf", "templates/deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja"], ([model, template]) => {
  /** The raw terminal output of one turn (DeepSeek-R1's template opens <think> in the prompt: the reply starts in its reasoning). */
  async function turn(extra: string[]): Promise<string> {
    const dir = mkdtempSync(join(tmpdir(), "pagellm-chat-think-"));
    const args = ["chat", "--model", model!, "--template", template!, "--temperature", "0", "--threads", "1", "--max-tokens", "6", ...extra];
    const session = new PtySession(args, { ...process.env, NO_COLOR: undefined, TERM: "xterm", XDG_DATA_HOME: join(dir, "xdg") });
    try {
      await session.waitForCount(/> /g, 1);
      await session.send("Hello\n");
      await session.waitForCount(/\[prompt \d+ tokens/g, 1);
      await session.end();
      return session.output;
    } finally {
      session.kill();
      rmSync(dir, { recursive: true, force: true });
    }
  }

  test.skipIf(!hasScript)("a reply in its reasoning is dimmed on a terminal; with --no-think the reply is plain", async () => {
    // The reasoning's own dim ends with \x1b[22m (status lines end theirs with \x1b[0m).
    expect(await turn([])).toContain("\x1b[22m");
    expect(await turn(["--no-think"])).not.toContain("\x1b[22m");
  }, LONG_PROCESS_TEST_MS);
});
