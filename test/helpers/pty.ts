/**
 * Running pagellm in a pseudo-terminal with util-linux `script`. `script -c` hands the command to
 * $SHELL (/bin/sh, dash, when SHELL is unset); the command line starts with `exec` so that the
 * terminal's foreground process is bun itself. Without it dash stays in between, takes the
 * SIGINT of a Ctrl-C too, and exits 130 once the chat ends normally.
 */
import type { Subprocess } from "bun";
import { REPO_ROOT } from "./cli.ts";
import { StreamText } from "./stream-text.ts";

export const hasScript = Bun.which("script") !== null;

/** One shell word. */
export function shellQuote(word: string): string {
  return `'${word.replaceAll("'", `'\\''`)}'`;
}

/** The argv that runs `bun bin/pagellm ARGS` in a pseudo-terminal, its output (both streams) on stdout. */
export function pagellmInPty(args: string[]): string[] {
  return ["script", "-qfec", `exec ${["bun", "bin/pagellm", ...args].map(shellQuote).join(" ")}`, "/dev/null"];
}

/** What a reader of the terminal sees: escape sequences and carriage returns removed. */
export function terminalText(raw: string): string {
  return raw.replace(/\x1b\[[0-9;?]*[a-zA-Z]/g, "").replaceAll("\r", "");
}

/**
 * `pagellm ARGS` in a pseudo-terminal, driven key by key: everything it prints is collected
 * (raw: escapes and carriage returns included), and its waits resume as soon as a chunk of output
 * makes their condition true, so keys are sent only once the program is ready for them.
 */
export class PtySession {
  private readonly proc: Subprocess<"pipe", "pipe", "pipe">;
  private readonly out: StreamText;

  constructor(args: string[], env: Record<string, string | undefined>) {
    this.proc = Bun.spawn(pagellmInPty(args), { cwd: REPO_ROOT, env, stdin: "pipe", stdout: "pipe", stderr: "pipe" });
    this.out = new StreamText(this.proc.stdout);
  }

  /** Everything the program printed so far (both streams, as the terminal got them). */
  get output(): string {
    return this.out.text;
  }

  /** Resolves once `ready()` holds; fails, with the session so far, if the program ends first or shows nothing for a minute. */
  waitFor(ready: () => boolean, what: string): Promise<void> {
    return this.out.waitFor(ready, what);
  }

  /** Resolves once `pattern` (a /g regex) occurs at least `count` times in the output. */
  waitForCount(pattern: RegExp, count: number): Promise<void> {
    return this.out.waitForCount(pattern, count);
  }

  /** Type `keys` (a line ends with "\r" as Enter sends it, Ctrl-C is "\x03"). */
  async send(keys: string): Promise<void> {
    this.proc.stdin.write(keys);
    await this.proc.stdin.flush();
  }

  /** Close the terminal's input and wait for the program to exit; its exit code. */
  async end(): Promise<number> {
    this.proc.stdin.end();
    const code = await this.proc.exited;
    await this.out.done;
    return code;
  }

  /** Stop the program at once (a test that failed half way). */
  kill(): void {
    this.proc.kill("SIGKILL");
  }
}
