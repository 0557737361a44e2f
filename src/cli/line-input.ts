/**
 * The chat's input lines: readline's line editing on a terminal, with the history kept in a file
 * across sessions ($XDG_DATA_HOME/pagellm/chat_history, else ~/.local/share/pagellm/chat_history);
 * every line in order from a pipe.
 */
import { appendFileSync, existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { homedir } from "node:os";
import { dirname, join } from "node:path";
import { createInterface, type Interface } from "node:readline";

/** How many lines the history file keeps. */
const HISTORY_SIZE = 500;

/** Where the chat history lives: $XDG_DATA_HOME/pagellm, else ~/.local/share/pagellm. */
export function historyPath(env: NodeJS.ProcessEnv = process.env): string {
  const base = env.XDG_DATA_HOME && env.XDG_DATA_HOME !== "" ? env.XDG_DATA_HOME : join(homedir(), ".local", "share");
  return join(base, "pagellm", "chat_history");
}

/**
 * The history file's lines, newest first (readline's order). A file grown past twice the size is
 * cut back to its newest lines. A history that cannot be read or written is no error: the chat
 * goes on without it.
 */
function readHistory(path: string): string[] {
  try {
    if (!existsSync(path)) return [];
    const lines = readFileSync(path, "utf8").split("\n").filter((l) => l !== "");
    const kept = lines.slice(-HISTORY_SIZE);
    if (lines.length > 2 * HISTORY_SIZE) writeFileSync(path, kept.join("\n") + "\n");
    return kept.reverse();
  } catch {
    return [];
  }
}

/** Add a line to the history file (each line as typed: a multi-line message is several). */
function appendHistory(path: string, line: string): void {
  try {
    mkdirSync(dirname(path), { recursive: true });
    appendFileSync(path, line + "\n");
  } catch {
    // No history then; the chat does not depend on it.
  }
}

export const CANCEL = Symbol("cancel");

/**
 * Lines from stdin. On a terminal: readline's line editing and history, Ctrl-C at the prompt
 * reported through `onCtrlC`, and cooked mode while a reply runs so that Ctrl-C is a SIGINT.
 * From a pipe: every line in order, then null at EOF.
 */
export class LineInput {
  readonly tty = process.stdin.isTTY === true;
  private readonly rl: Interface;
  private readonly queue: string[] = [];
  private waiting: ((line: string | null | typeof CANCEL) => void) | null = null;
  private closed = false;
  private lastRemembered: string | undefined;
  /**
   * Ctrl-C that readline read (at the prompt, or typed ahead of a reply): discard what was typed
   * ("cancel"), quit ("exit"), or nothing more ("ignore": the handler dealt with it).
   */
  onCtrlC: (lineTyped: boolean) => "cancel" | "exit" | "ignore" = () => "exit";

  /** `historyFile`: where a terminal's lines are remembered across sessions (null: nowhere). */
  constructor(historyFile: string | null = historyPath()) {
    const file = this.tty ? historyFile : null;
    const history = file === null ? [] : readHistory(file);
    this.lastRemembered = history[0];
    this.rl = createInterface({
      input: process.stdin, output: this.tty ? process.stdout : undefined, terminal: this.tty, history, historySize: HISTORY_SIZE, removeHistoryDuplicates: true,
    });
    this.rl.on("line", (line) => {
      if (file !== null && line.trim() !== "" && line !== this.lastRemembered) {
        appendHistory(file, line);
        this.lastRemembered = line;
      }
      if (this.waiting) this.settle(line);
      else this.queue.push(line);
    });
    this.rl.on("close", () => {
      // Ctrl-D at the prompt: end the prompt's line.
      if (this.tty && this.waiting !== null && !this.closed) process.stdout.write("\n");
      this.closed = true;
      this.settle(null);
    });
    this.rl.on("SIGINT", () => {
      switch (this.onCtrlC(this.rl.line.length > 0)) {
        case "cancel":
          process.stdout.write("^C\n");
          this.clearLine();
          this.settle(CANCEL);
          return;
        case "exit":
          process.stdout.write("\n");
          this.close();
          return;
        case "ignore":
      }
    });
  }

  /** Whether a read is waiting for a line (else Ctrl-C was typed ahead, while a line is handled). */
  get reading(): boolean {
    return this.waiting !== null;
  }

  /** The next line, CANCEL when Ctrl-C discarded what was typed, null at EOF (or once closed). */
  read(prompt: string): Promise<string | null | typeof CANCEL> {
    const queued = this.queue.shift();
    if (queued !== undefined) return Promise.resolve(queued);
    if (this.closed) return Promise.resolve(null);
    if (this.tty) {
      this.rl.setPrompt(prompt);
      this.rl.prompt();
    }
    return new Promise((resolve) => {
      this.waiting = resolve;
    });
  }

  /** A reply starts: on a terminal, stop reading and let Ctrl-C raise SIGINT. */
  suspend(): void {
    if (!this.tty || this.closed) return;
    this.rl.pause();
    process.stdin.setRawMode(false);
  }

  /** The reply ended: back to line editing. */
  resume(): void {
    if (!this.tty || this.closed) return;
    process.stdin.setRawMode(true);
    this.rl.resume();
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.rl.close();
    this.settle(null);
  }

  private settle(value: string | null | typeof CANCEL): void {
    const resolve = this.waiting;
    this.waiting = null;
    resolve?.(value);
  }

  private clearLine(): void {
    // Ctrl-E then Ctrl-U: to the end of the line, delete everything before the cursor.
    this.rl.write(null, { ctrl: true, name: "e" });
    this.rl.write(null, { ctrl: true, name: "u" });
  }
}

