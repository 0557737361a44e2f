/**
 * The `pagellm` command: subcommands, --help and --version, and the one place that turns an
 * error into a one-line message and an exit code.
 */
import { defineCommand, renderUsage, runCommand, type CommandDef } from "citty";
import { readFileSync } from "node:fs";
import { PagellmError } from "../errors.ts";
import { configureOutput, GLOBAL_FLAGS, output } from "./output.ts";
import { chatCommand } from "./chat.ts";
import { benchCommand } from "./bench.ts";
import { generateCommand } from "./generate.ts";
import { embedCommand } from "./embed.ts";
import { rerankCommand } from "./rerank.ts";
import { infoCommand } from "./info.ts";
import { modelsCommand } from "./models-command.ts";
import { pullCommand } from "./pull.ts";
import { rmCommand } from "./rm.ts";
import { perplexityCommand } from "./perplexity.ts";
import { serveCommand } from "./serve.ts";
import { cacheCommand } from "./cache-command.ts";

const VERSION = (JSON.parse(readFileSync(new URL("../../package.json", import.meta.url), "utf8")) as { version: string }).version;

export const mainCommand = defineCommand({
  meta: {
    name: "pagellm",
    version: VERSION,
    description: "LLM inference for Bun: paged KV cache with automatic prefix caching, continuous batching, WebAssembly SIMD kernels",
  },
  subCommands: {
    generate: generateCommand,
    embed: embedCommand,
    rerank: rerankCommand,
    bench: benchCommand,
    chat: chatCommand,
    serve: serveCommand,
    perplexity: perplexityCommand,
    pull: pullCommand,
    models: modelsCommand,
    rm: rmCommand,
    info: infoCommand,
    cache: cacheCommand,
  },
});

/** Run the CLI on argv (without the runtime and script); returns the exit code. */
export async function runCli(argv: string[]): Promise<number> {
  configureOutput(argv);
  try {
    if (argv.includes("--version") || argv.includes("-v")) {
      process.stdout.write(`pagellm ${VERSION}\n`);
      return 0;
    }
    const helpAsked = argv.includes("--help") || argv.includes("-h");
    if (helpAsked || argv.length === 0) {
      const out = helpAsked ? process.stdout : process.stderr;
      const [command, parent] = await commandFor(argv);
      const usage = await renderUsage(command, parent);
      out.write(`${usage}\n\n${globalFlagsHelp()}\n`);
      return helpAsked ? 0 : 2;
    }
    await runCommand(mainCommand, { rawArgs: argv });
    return 0;
  } catch (e) {
    return reportError(e);
  }
}

/**
 * The (sub)command named by the leading words of argv, and a parent that carries the full command
 * path ("pagellm bench"), so nested usage reads "pagellm bench prefix".
 */
async function commandFor(argv: string[]): Promise<[CommandDef, CommandDef | undefined]> {
  let command: CommandDef = mainCommand as CommandDef;
  const path: string[] = ["pagellm"];
  for (const word of argv) {
    if (word.startsWith("-")) break;
    const subs = typeof command.subCommands === "function" ? await command.subCommands() : await command.subCommands;
    const next = subs?.[word];
    if (!next) break;
    path.push(word);
    command = (typeof next === "function" ? await next() : await next) as CommandDef;
  }
  const parent: CommandDef | undefined = path.length > 1 ? { meta: { name: path.slice(0, -1).join(" ") } } : undefined;
  return [command, parent];
}

/** The global flags and environment variables, under every command's usage. */
function globalFlagsHelp(): string {
  const width = Math.max(...GLOBAL_FLAGS.map((f) => f.names.join(", ").length));
  const lines = GLOBAL_FLAGS.map((f) => `  ${f.names.join(", ").padEnd(width)}  ${f.help}`);
  return ["GLOBAL OPTIONS", "", ...lines, "", "  NO_COLOR=1 turns colour off; HF_HOME, HF_ENDPOINT, HF_TOKEN, HF_HUB_OFFLINE=1 steer downloads"].join("\n");
}

/** One line on stderr for any error (the stack after it with --verbose), and the exit code. */
function reportError(e: unknown): number {
  const err = e instanceof Error ? e : new Error(String(e));
  const withStack = (line: string) => process.stderr.write(output.verbose || process.env.PAGELLM_DEBUG ? `${line}\n${err.stack}\n` : `${line}\n`);
  if (e instanceof PagellmError) {
    withStack(`pagellm: error: ${e.message}`);
    return e.exitCode;
  }
  if (err.name === "CLIError") {
    withStack(`pagellm: error: ${err.message.replace(/\x1b\[[0-9;]*m/g, "")} (see --help)`);
    return 2;
  }
  withStack(`pagellm: internal error: ${err.message.split("\n")[0]} (--verbose shows the stack; please report it)`);
  return 70;
}
