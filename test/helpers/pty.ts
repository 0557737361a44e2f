/**
 * Running pagellm in a pseudo-terminal with util-linux `script`. `script -c` hands the command to
 * $SHELL (/bin/sh, dash, when SHELL is unset); the command line starts with `exec` so that the
 * terminal's foreground process is bun itself. Without it dash stays in between, takes the
 * SIGINT of a Ctrl-C too, and exits 130 once the chat ends normally.
 */
import type { Subprocess } from "bun";
import { REPO_ROOT } from "./cli.ts";

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
 * The longest a session may go without showing what a test waits for. It only stops a hung test:
 * a model load and a short reply take a few seconds even on a busy machine.
 */
const PTY_WAIT_MS = 60_000;

/**
 * `pagellm ARGS` in a pseudo-terminal, driven key by key: everything it prints is collected in
 * `output` (raw: escapes and carriage returns included), and `waitFor` resumes as soon as a chunk
 * of output makes its condition true, so keys are sent only once the program is ready for them.
 */
export class PtySession {
  /** Everything the program printed so far (both streams, as the terminal got them). */
  output = "";
  private ended = false;
  private readonly proc: Subprocess<"pipe", "pipe", "pipe">;
  private readonly reading: Promise<void>;
  private readonly waiters = new Set<() => void>();

  constructor(args: string[], env: Record<string, string | undefined>) {
    const proc = Bun.spawn(pagellmInPty(args), { cwd: REPO_ROOT, env, stdin: "pipe", stdout: "pipe", stderr: "pipe" });
    this.proc = proc;
    this.reading = (async () => {
      const decoder = new TextDecoder();
      for await (const chunk of proc.stdout) {
        this.output += decoder.decode(chunk, { stream: true });
        for (const wake of this.waiters) wake();
      }
      this.ended = true;
      for (const wake of this.waiters) wake();
    })();
  }

  /** Resolves once `ready()` holds; fails, with the session so far, if the program ends first or shows nothing for PTY_WAIT_MS. */
  waitFor(ready: () => boolean, what: string): Promise<void> {
    return new Promise((resolve, reject) => {
      let timer: ReturnType<typeof setTimeout> | undefined;
      const settle = (error: Error | null) => {
        this.waiters.delete(check);
        clearTimeout(timer);
        if (error === null) resolve();
        else reject(error);
      };
      const check = () => {
        if (ready()) settle(null);
        else if (this.ended) settle(new Error(`the session ended before ${what}:\n${terminalText(this.output)}`));
      };
      timer = setTimeout(() => settle(new Error(`no ${what} after ${PTY_WAIT_MS / 1000} s:\n${terminalText(this.output)}`)), PTY_WAIT_MS);
      this.waiters.add(check);
      check();
    });
  }

  /** Resolves once `pattern` (a /g regex) occurs at least `count` times in the output. */
  waitForCount(pattern: RegExp, count: number): Promise<void> {
    return this.waitFor(() => (this.output.match(pattern) ?? []).length >= count, `${count} × ${pattern}`);
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
    await this.reading;
    return code;
  }

  /** Stop the program at once (a test that failed half way). */
  kill(): void {
    this.proc.kill("SIGKILL");
  }
}
