/**
 * What the CLI writes besides results, decided once per process from the global flags and the
 * environment:
 *
 * - stdout carries results only (generated text, JSON, reports); everything else goes to stderr.
 * - `--quiet` (`-q`) silences stderr's informational lines and progress bars; errors and the
 *   chat prompt itself still show.
 * - `--verbose` adds the stack trace to an error's one-line message.
 * - Colour only on a terminal, and never when NO_COLOR is set (https://no-color.org) or TERM=dumb.
 */

export interface OutputSettings {
  quiet: boolean;
  verbose: boolean;
  /** Escape sequences for dim/bold text on stderr. */
  color: boolean;
}

/** Flags every command accepts, with their help lines. */
export const GLOBAL_FLAGS: readonly { names: readonly string[]; help: string }[] = [
  { names: ["--quiet", "-q"], help: "only results and errors: no progress bars, statistics or notes on stderr" },
  { names: ["--verbose"], help: "an error prints its stack trace after the one-line message" },
];

export const output: OutputSettings = { quiet: false, verbose: false, color: colorWanted() };

function colorWanted(env: NodeJS.ProcessEnv = process.env): boolean {
  return process.stderr.isTTY === true && !env.NO_COLOR && env.TERM !== "dumb";
}

/** Set the output settings from argv (the words before `--`). */
export function configureOutput(argv: readonly string[], env: NodeJS.ProcessEnv = process.env): void {
  const end = argv.indexOf("--");
  const words = end < 0 ? argv : argv.slice(0, end);
  output.quiet = words.includes("--quiet") || words.includes("-q");
  output.verbose = words.includes("--verbose");
  output.color = colorWanted(env);
}

/** An informational line on stderr, unless --quiet. */
export function info(line: string): void {
  if (!output.quiet) process.stderr.write(`${line}\n`);
}

/** Whether a progress bar may draw: stderr is a terminal and --quiet was not given. */
export function progressWanted(): boolean {
  return process.stderr.isTTY === true && !output.quiet;
}

/** `text` dimmed when colour is on. */
export function dim(text: string): string {
  return output.color ? `\x1b[2m${text}\x1b[0m` : text;
}
