/**
 * The chat REPL's daily-use commands and its input: /save and /load (a conversation as JSON that
 * `generate --prompts` also reads), /tokens, /info; line history kept in a file across sessions
 * (driven through a pseudo-terminal with util-linux `script`); a Jinja template file on a
 * SentencePiece GGUF model.
 */
import { afterAll, expect, test } from "bun:test";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { historyPath } from "../src/cli/line-input.ts";
import { turnStats } from "./helpers/chat-turns.ts";
import { REPO_ROOT, runPagellm } from "./helpers/cli.ts";
import { hasScript, PtySession, terminalText } from "./helpers/pty.ts";
import { describeShared } from "./helpers/shared.ts";
import { LONG_PROCESS_TEST_MS } from "./helpers/limits.ts";

const dir = mkdtempSync(join(tmpdir(), "pagellm-chat-repl-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

// Gemma 3 puts the system prompt into the first user turn, so each turn stays a prefix of the next
// (Mistral v0.3 moves it to the last user turn: every turn rewrites the one before).
const TEMPLATE = join(REPO_ROOT, "test", "fixtures", "chat-templates", "gemma3.jinja");

test("the history file lives under XDG_DATA_HOME, else ~/.local/share", () => {
  expect(historyPath({ XDG_DATA_HOME: "/x" })).toBe("/x/pagellm/chat_history");
  expect(historyPath({ HOME: "/h" })).toMatch(/\/\.local\/share\/pagellm\/chat_history$/);
});

describeShared("pagellm chat commands", ["models/gguf/stories260K.gguf"], ([model]) => {
  const base = ["chat", "--model", model!, "--template", TEMPLATE, "--temperature", "0", "--threads", "1", "--max-tokens", "8"];

  test("a Jinja template file: later turns from the prefix cache; /tokens, /info, /save, then /load and generate read the file", () => {
    const saved = join(dir, "conversation.json");
    const run = runPagellm([...base, "--system", "Be kind"], { stdin: `Once upon a time\nThe dog\n/tokens\n/info\n/save ${saved}\n` });
    expect(run.stderr).not.toContain("error");
    expect(run.exitCode).toBe(0);
    expect(run.stderr).toContain("template gemma3.jinja");
    const stats = turnStats(run.stderr);
    expect(stats.length).toBe(2);
    expect(stats[1]!.cached).toBeGreaterThan(0);
    // /tokens: the second turn's new prompt ids with their pieces, then the reply's.
    expect(run.stdout).toMatch(new RegExp(`prompt: ${stats[1]!.prompt} tokens, \\d+ from the conversation before, \\d+ new:`));
    // "The dog" after the template's "user\\n": tokenized with it, so no SentencePiece dummy prefix.
    expect(run.stdout).toMatch(/\n {2}\d+ "he"\n {2}\d+ "▁do"\n {2}\d+ "g"\n/);
    expect(run.stdout).toMatch(/reply: \d+ tokens?:/);
    expect(run.stdout).toContain(`model: ${model}`);
    expect(run.stdout).toContain('BOS 1 "<s>"');
    expect(run.stdout).toContain("chat format: gemma3.jinja");
    expect(run.stdout).toContain("saved 2 turns");
    const file = JSON.parse(readFileSync(saved, "utf8")) as { messages: { role: string; content: string }[] };
    expect(file.messages.map((m) => m.role)).toEqual(["system", "user", "assistant", "user", "assistant"]);
    expect(file.messages[0]!.content).toBe("Be kind");
    expect(file.messages[3]!.content).toBe("The dog");

    // /load continues it: the next prompt holds the loaded turns (all of them reused from the cache but the new one).
    const loaded = runPagellm(base, { stdin: `/load ${saved}\nThen\n/save ${join(dir, "again.json")}\n` });
    expect(loaded.exitCode).toBe(0);
    expect(loaded.stdout).toMatch(/loaded 2 turns from .*conversation\.json \(\d+ tokens\)/);
    const after = turnStats(loaded.stderr);
    expect(after.length).toBe(1);
    expect(after[0]!.prompt).toBeGreaterThan(stats[1]!.prompt);
    const again = JSON.parse(readFileSync(join(dir, "again.json"), "utf8")) as { messages: { role: string; content: string }[] };
    expect(again.messages.slice(0, 5)).toEqual(file.messages);

    // generate --prompts reads the saved messages once a user message follows them.
    const request = { id: "next", messages: [...file.messages, { role: "user", content: "Then" }] };
    writeFileSync(join(dir, "requests.jsonl"), JSON.stringify(request) + "\n");
    const gen = runPagellm(["generate", "--model", model!, "--template", TEMPLATE, "--temperature", "0", "--threads", "1", "--max-tokens", "8",
      "--prompts", join(dir, "requests.jsonl"), "--json"]);
    expect(gen.stderr).not.toContain("error");
    expect(gen.exitCode).toBe(0);
    expect((JSON.parse(gen.stdout.trim().split("\n")[0]!) as { prompt_tokens: number }).prompt_tokens).toBe(after[0]!.prompt);
  }, LONG_PROCESS_TEST_MS);

  test("/load of a file that is not a conversation says why and the chat goes on", () => {
    const bad = join(dir, "bad.json");
    writeFileSync(bad, JSON.stringify({ messages: [{ role: "assistant", content: "x" }] }) + "\n");
    const run = runPagellm(base, { stdin: `/load ${bad}\n/load ${join(dir, "missing.json")}\n/save\n/tokens\nOnce\n` });
    expect(run.exitCode).toBe(0);
    expect(run.stdout).toContain("a conversation is an optional system message, then user and assistant messages in turn");
    expect(run.stdout).toContain("missing.json: no such file");
    expect(run.stdout).toContain("/save needs a file name");
    expect(run.stdout).toContain("no turn yet");
    expect(turnStats(run.stderr).length).toBe(1);
  }, LONG_PROCESS_TEST_MS);

  test("--chat-template-kwargs passes variables to the template (Qwen3's enable_thinking); a bad one is an input error", () => {
    const qwen3 = join(REPO_ROOT, "test", "fixtures", "chat-templates", "qwen3.jinja");
    const gen = (...more: string[]) => runPagellm(["generate", "--model", model!, "--template", qwen3, "--chat", "--prompt", "Once upon a time",
      "--temperature", "0", "--threads", "1", "--max-tokens", "2", "--json", ...more]);
    const promptTokens = (r: { stdout: string }) => (JSON.parse(r.stdout.trim()) as { prompt_tokens: number }).prompt_tokens;
    const thinking = gen();
    const direct = gen("--chat-template-kwargs", '{"enable_thinking": false}');
    expect(thinking.exitCode).toBe(0);
    expect(direct.exitCode).toBe(0);
    // The empty "<think>\n\n</think>\n\n" that switches reasoning off.
    expect(promptTokens(direct)).toBeGreaterThan(promptTokens(thinking));
    const bad = gen("--chat-template-kwargs", "[1]");
    expect(bad.exitCode).toBe(2);
    expect(bad.stderr).toContain("--chat-template-kwargs must be a JSON object, got [1]");
  }, LONG_PROCESS_TEST_MS);

  test.skipIf(!hasScript)("history: lines typed in one session come back with the up arrow in the next", async () => {
    const env = { ...process.env, XDG_DATA_HOME: join(dir, "xdg") };
    const session = async (keys: string[]): Promise<string> => {
      const pty = new PtySession(base, env);
      try {
        await pty.waitForCount(/> /g, 1);
        for (const [i, k] of keys.entries()) {
          await pty.send(k);
          if (!k.startsWith("/")) await pty.waitForCount(/\[prompt \d+ tokens/g, i + 1);
        }
        await pty.end();
      } finally {
        pty.kill();
      }
      return terminalText(pty.output);
    };
    await session(["Once upon a time\r", "/exit\r"]);
    expect(readFileSync(join(dir, "xdg", "pagellm", "chat_history"), "utf8")).toBe("Once upon a time\n/exit\n");
    // Up twice: past "/exit" to the message, sent again.
    const out = await session(["\x1b[A\x1b[A\r", "/exit\r"]);
    expect(out).toContain("> Once upon a time");
    expect(turnStats(out).length).toBe(1);
  }, LONG_PROCESS_TEST_MS);
});
