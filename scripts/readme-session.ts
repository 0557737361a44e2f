/**
 * Reproduces the session that opens the README: pull, info, generate and chat on GGUF models from
 * ../shared, with a local stand-in for the Hugging Face hub (scripts/fake-hub.ts: the hub's
 * URLs and headers) because the machines this was written on have no internet. Prints the session
 * as it would appear on a terminal: `bun scripts/readme-session.ts`. The model goes into the hub
 * cache where huggingface-cli would put it (HF_HOME, by default ~/.cache/huggingface), and the
 * session's last command, `pagellm rm`, takes it out again.
 */
import { readFileSync } from "node:fs";
import { homedir } from "node:os";
import { join, resolve } from "node:path";
import { FakeHub } from "./fake-hub.ts";

const ROOT = resolve(import.meta.dir, "..");
const SHARED = resolve(ROOT, "..", "shared");
const hub = new FakeHub();
hub.addFile("ggml-org/stories260K-GGUF", "stories260K-Q8_0.gguf", readFileSync(join(SHARED, "models/gguf/stories260K-Q8_0.gguf")));
hub.addFile("ggml-org/stories260K-GGUF", "stories260K-F16.gguf", readFileSync(join(SHARED, "models/gguf/stories260K-F16.gguf")));
const env = { ...process.env, HF_ENDPOINT: hub.endpoint, NO_COLOR: "1", TERM: "xterm" };

/**
 * Run one command as a shell would show it, in `cwd`; stderr and stdout interleaved as on a
 * terminal, and the home directory written `~`, so the session shows no path of this machine.
 */
async function show(shown: string, args: string[], opts: { input?: string; cwd?: string } = {}): Promise<void> {
  process.stdout.write(`$ ${shown}\n`);
  const command = ["bun", join(ROOT, "bin/pagellm"), ...args].map((a) => `'${a}'`).join(" ");
  const feed = opts.input === undefined ? "" : `${opts.input} | `;
  const proc = Bun.spawn(["sh", "-c", `${feed}script -qfec "${command.replaceAll('"', '\\"')}" /dev/null`], { cwd: opts.cwd ?? ROOT, env, stdout: "pipe", stderr: "inherit" });
  const text = await new Response(proc.stdout).text();
  await proc.exited;
  process.stdout.write(asSeen(text).replaceAll(`${homedir()}/`, "~/"));
}

/** Terminal output as a person sees it: escapes gone, a carriage return overwriting its line. */
function asSeen(text: string): string {
  const lines = text.replace(/\x1b\[[0-9;?]*[a-zA-Z]/g, "").replaceAll("\r\n", "\n").split("\n");
  return lines.map((line) => line.replace(/\r+$/, "")).map((line) => line.slice(line.lastIndexOf("\r") + 1)).join("\n").replace(/\n*$/, "\n");
}

try {
  await show("pagellm pull hf:ggml-org/stories260K-GGUF:Q8_0", ["pull", "hf:ggml-org/stories260K-GGUF:Q8_0"]);
  await show("pagellm info hf:ggml-org/stories260K-GGUF:Q8_0", ["info", "hf:ggml-org/stories260K-GGUF:Q8_0"]);
  await show(
    'pagellm generate --model hf:ggml-org/stories260K-GGUF:Q8_0 --prompt "Once upon a time" --max-tokens 48 --temperature 0',
    ["generate", "--model", "hf:ggml-org/stories260K-GGUF:Q8_0", "--prompt", "Once upon a time", "--max-tokens", "48", "--temperature", "0", "--threads", "1"],
  );
  await show("pagellm models", ["models"]);
  // Run where the model is, so the session shows its name alone.
  await show(
    "pagellm chat --model rnd-qwen2-Q5_K_M.gguf --max-tokens 12 --temperature 0    # random weights: the replies are noise",
    ["chat", "--model", "rnd-qwen2-Q5_K_M.gguf", "--max-tokens", "12", "--temperature", "0", "--threads", "1"],
    {
      cwd: join(SHARED, "models/gguf"),
      input: "(sleep 4; printf 'Hello! Who are you?\\r'; sleep 2; printf 'What is the capital of France?\\r'; sleep 2; printf '/info\\r'; sleep 1; printf '/exit\\r')",
    },
  );
  await show("pagellm rm hf:ggml-org/stories260K-GGUF:Q8_0", ["rm", "hf:ggml-org/stories260K-GGUF:Q8_0"]);
} finally {
  hub.stop();
}
