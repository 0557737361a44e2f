/**
 * Writes docs/cli.md, the reference of every command and option, from the CLI's own definitions
 * (the citty commands of src/cli/, their descriptions, value hints, defaults and aliases, and the
 * global flags), so the reference cannot drift from `--help`:
 *
 *     bun scripts/cli-docs.ts           # rewrite docs/cli.md
 *     bun scripts/cli-docs.ts --check   # exit 1 when docs/cli.md is not what it would write
 *
 * test/cli-docs.test.ts fails when docs/cli.md is stale. Run this after adding or changing an option.
 */
import type { ArgDef, ArgsDef, CommandDef, CommandMeta, Resolvable } from "citty";
import { readFileSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { mainCommand } from "../src/cli/main.ts";
import { GLOBAL_FLAGS } from "../src/cli/output.ts";

export const CLI_DOC_PATH = resolve(import.meta.dir, "..", "docs", "cli.md");

/** One command of the tree, with the words that name it ("pagellm bench decode"). */
interface CommandEntry {
  path: string[];
  meta: CommandMeta;
  args: ArgsDef;
  subCommands: string[];
}

async function resolved<T>(value: Resolvable<T> | undefined): Promise<T | undefined> {
  if (value === undefined) return undefined;
  return typeof value === "function" ? await (value as () => T | Promise<T>)() : await value;
}

/** Every command under `command`, depth first, in the order they are defined. */
async function commandTree(command: CommandDef, path: string[]): Promise<CommandEntry[]> {
  const meta = (await resolved(command.meta)) ?? {};
  const args = (await resolved(command.args)) ?? {};
  const subs = (await resolved(command.subCommands)) ?? {};
  const entry: CommandEntry = { path, meta, args, subCommands: Object.keys(subs) };
  const below: CommandEntry[] = [];
  for (const [name, sub] of Object.entries(subs)) {
    const def = (await resolved(sub)) as CommandDef;
    below.push(...(await commandTree(def, [...path, name])));
  }
  return [entry, ...below];
}

/** Text safe inside a Markdown table cell. */
function cell(text: string): string {
  return text.replaceAll("|", "\\|").replaceAll("\n", " ");
}

function anchor(path: string[]): string {
  return path.join("-");
}

function positionals(args: ArgsDef): [string, ArgDef][] {
  return Object.entries(args).filter(([, def]) => def.type === "positional");
}

function usageLine(entry: CommandEntry): string {
  const words = [...entry.path];
  for (const [name, def] of positionals(entry.args)) words.push(def.required === false ? `[${def.valueHint ?? name}]` : `<${def.valueHint ?? name}>`);
  for (const [name, def] of Object.entries(entry.args)) {
    if (def.type !== "positional" && def.required === true) words.push(`--${name} <${def.valueHint ?? name}>`);
  }
  if (entry.subCommands.length > 0) words.push("<command>");
  if (Object.values(entry.args).some((def) => def.type !== "positional" && def.required !== true)) words.push("[options]");
  return words.join(" ");
}

/** The option as typed: `--name <hint>`, `--[no-]name` for a boolean that is on by default, aliases after. */
function optionName(name: string, def: ArgDef): string {
  const aliases = "alias" in def && def.alias !== undefined ? [def.alias].flat().map((a) => (a.length === 1 ? `-${a}` : `--${a}`)) : [];
  const value = def.type === "boolean" ? "" : ` <${def.valueHint ?? name}>`;
  const flag = def.type === "boolean" && def.default === true ? `--[no-]${name}` : `--${name}`;
  return [`\`${flag}${value}\``, ...aliases.map((a) => `\`${a}\``)].join(", ");
}

function optionText(def: ArgDef): string {
  const parts = [def.description ?? ""];
  if (def.type === "boolean" && def.default === true && "negativeDescription" in def && def.negativeDescription) {
    parts.push(`\`--no-\`: ${def.negativeDescription}.`);
  }
  if (def.required === true) parts.push("Required.");
  return parts.filter(Boolean).join(" ");
}

function commandSection(entry: CommandEntry): string[] {
  const out = [`## ${entry.path.join(" ")}`, "", entry.meta.description ?? "", "", "```", usageLine(entry), "```", ""];
  const pos = positionals(entry.args);
  if (pos.length > 0) {
    out.push("| argument | description |", "|---|---|");
    for (const [name, def] of pos) out.push(`| \`<${def.valueHint ?? name}>\` | ${cell(optionText(def))} |`);
    out.push("");
  }
  const options = Object.entries(entry.args).filter(([, def]) => def.type !== "positional");
  if (options.length > 0) {
    out.push("| option | description |", "|---|---|");
    for (const [name, def] of options) out.push(`| ${cell(optionName(name, def))} | ${cell(optionText(def))} |`);
    out.push("");
  }
  if (entry.subCommands.length > 0) {
    out.push("| command | description |", "|---|---|");
    out.push(...subCommandRows(entry));
    out.push("");
  }
  return out;
}

let allEntries: CommandEntry[] = [];

function subCommandRows(entry: CommandEntry): string[] {
  return entry.subCommands.map((name) => {
    const path = [...entry.path, name];
    const sub = allEntries.find((e) => e.path.join(" ") === path.join(" "));
    return `| [\`${path.join(" ")}\`](#${anchor(path)}) | ${cell(sub?.meta.description ?? "")} |`;
  });
}

/** docs/cli.md as the definitions say it should read. */
export async function cliReference(): Promise<string> {
  allEntries = await commandTree(mainCommand as CommandDef, ["pagellm"]);
  const [root, ...commands] = allEntries;
  const out = [
    "# Command-line reference",
    "",
    "<!-- Generated by `bun scripts/cli-docs.ts` from the definitions in src/cli/. Do not edit by hand:",
    "     test/cli-docs.test.ts fails when this file differs from what the script writes. -->",
    "",
    `${root!.meta.description ?? ""}.`,
    "",
    "```",
    "pagellm <command> [options]",
    "pagellm <command> --help",
    "pagellm --version",
    "```",
    "",
    "Every option below is also listed by `pagellm <command> --help`. [usage.md](usage.md) explains",
    "what the commands do with them: inputs and outputs, the result schema, exit codes.",
    "",
    "| command | description |",
    "|---|---|",
    ...subCommandRows(root!),
    "",
    "## Global options",
    "",
    "Every command takes these.",
    "",
    "| option | description |",
    "|---|---|",
    ...GLOBAL_FLAGS.map((f) => `| ${f.names.map((n) => `\`${n}\``).join(", ")} | ${cell(f.help)} |`),
    "",
    "Environment: `NO_COLOR=1` turns colour off; `HF_HOME`, `HF_HUB_CACHE`, `HF_ENDPOINT`, `HF_TOKEN` and",
    "`HF_HUB_OFFLINE=1` steer downloads as huggingface_hub's do; `PAGELLM_HUGE_PAGES=0` turns the",
    "transparent huge-page advice off.",
    "",
  ];
  for (const entry of commands) out.push(...commandSection(entry));
  return `${out.join("\n").replace(/\n{3,}/g, "\n\n").trimEnd()}\n`;
}

if (import.meta.main) {
  const want = await cliReference();
  if (process.argv.includes("--check")) {
    const have = readFileSync(CLI_DOC_PATH, "utf8");
    if (have !== want) {
      process.stderr.write(`${join("docs", "cli.md")} is stale: run bun scripts/cli-docs.ts\n`);
      process.exit(1);
    }
  } else {
    writeFileSync(CLI_DOC_PATH, want);
    process.stderr.write(`wrote ${join("docs", "cli.md")}\n`);
  }
}
