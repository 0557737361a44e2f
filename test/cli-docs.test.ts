/**
 * docs/cli.md is generated from the CLI's own definitions by scripts/cli-docs.ts: this fails when
 * an option or command changed and the reference was not regenerated, and says how to fix it.
 */
import { describe, expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import { CLI_DOC_PATH, cliReference } from "../scripts/cli-docs.ts";
import { mainCommand } from "../src/cli/main.ts";
import { generateArgs } from "../src/cli/generate.ts";

describe("docs/cli.md", () => {
  test("is what `bun scripts/cli-docs.ts` writes from the current definitions", async () => {
    const want = await cliReference();
    const have = readFileSync(CLI_DOC_PATH, "utf8");
    if (have !== want) {
      const haveLines = have.split("\n");
      const wantLines = want.split("\n");
      const at = wantLines.findIndex((line, i) => line !== haveLines[i]);
      throw new Error(
        `docs/cli.md is stale: run \`bun scripts/cli-docs.ts\` and commit docs/cli.md\n` +
        `first difference at line ${at + 1}:\n  docs/cli.md: ${haveLines[at] ?? "(end of file)"}\n  generated:   ${wantLines[at] ?? "(end of file)"}`,
      );
    }
    expect(have).toBe(want);
  });

  test("names every command and every option of generate", async () => {
    const text = await cliReference();
    const commands = Object.keys(mainCommand.subCommands as Record<string, unknown>);
    expect(commands.length).toBeGreaterThan(5);
    for (const name of commands) expect(text).toContain(`## pagellm ${name}\n`);
    for (const name of Object.keys(generateArgs)) expect(text).toMatch(new RegExp(`\`--(\\[no-\\])?${name}[ \`]`));
  });

  test("shows no path of the machine it was generated on", async () => {
    expect(await cliReference()).not.toMatch(/\/(work|root|home|tmp)\//);
  });
});
