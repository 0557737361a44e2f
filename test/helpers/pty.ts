/**
 * Running pagellm in a pseudo-terminal with util-linux `script`. `script -c` hands the command to
 * $SHELL (/bin/sh, dash, when SHELL is unset); the command line starts with `exec` so that the
 * terminal's foreground process is bun itself. Without it dash stays in between, takes the
 * SIGINT of a Ctrl-C too, and exits 130 once the chat ends normally.
 */
export const hasScript = Bun.which("script") !== null;

/** One shell word. */
export function shellQuote(word: string): string {
  return `'${word.replaceAll("'", `'\\''`)}'`;
}

/** The argv that runs `bun bin/pagellm ARGS` in a pseudo-terminal, its output (both streams) on stdout. */
export function pagellmInPty(args: string[]): string[] {
  return ["script", "-qfec", `exec ${["bun", "bin/pagellm", ...args].map(shellQuote).join(" ")}`, "/dev/null"];
}
