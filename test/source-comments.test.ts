/**
 * The repository's text never cites an issue, by its number or as one the reader should know
 * without it (a floor or inputs "of" some issue): the issue tracker is not part of the repository,
 * so a reader cannot follow the citation. A comment, a doc or a test name says what it means and
 * why instead (the floor's figure, the inputs themselves). Checked in every file under src/,
 * test/, scripts/, assembly/ and docs/, and in README.md and .ci/run.
 */
import { expect, test } from "bun:test";
import { readdirSync, readFileSync, statSync } from "node:fs";
import { join, relative, resolve } from "node:path";

const ROOT = resolve(import.meta.dir, "..");
const FOLDERS = ["src", "test", "scripts", "assembly", "docs"];
const FILES = ["README.md", ".ci/run"];

// "issue" or "issues", then a number (after a space, a hyphen or a "#"), any case. Built from
// pieces so that this file's own source holds no citation.
const CITATION = new RegExp(["\\bissues?", "[ -]?#?", "[0-9]+"].join(""), "i");
// "the", "this" or "that" before issue(s), or the word's possessive, any case: one without its number
// ("the issue tracker" is a thing the repository can name). Built from pieces like CITATION.
const UNNUMBERED = new RegExp(["\\b(?:the|this|that) issues?\\b(?! tracker)", "\\bissue's\\b"].join("|"), "i");

function filesUnder(dir: string, out: string[] = []): string[] {
  for (const name of readdirSync(dir)) {
    if (name === "node_modules") continue;
    const path = join(dir, name);
    if (statSync(path).isDirectory()) filesUnder(path, out);
    else out.push(path);
  }
  return out;
}

/** "path:line: text" for every line of the checked files that `pattern` matches. */
function linesMatching(pattern: RegExp): string[] {
  const paths = [...FOLDERS.flatMap((folder) => filesUnder(join(ROOT, folder))), ...FILES.map((file) => join(ROOT, file))];
  return paths.flatMap((path) => {
    const file = relative(ROOT, path);
    return readFileSync(path, "utf8").split("\n").flatMap((line, i) => (pattern.test(line) ? [`${file}:${i + 1}: ${line.trim()}`] : []));
  });
}

test("no file cites an issue number", () => {
  expect(linesMatching(CITATION)).toEqual([]);
});

test("the pattern finds a citation in each spelling, and not a bare word or number", () => {
  const cite = (word: string, rest: string) => CITATION.test(`${word}${rest}`);
  expect([cite("issue", " 38"), cite("Issues", " 18 and 32"), cite("issue", "-18"), cite("ISSUE", " #4")]).toEqual([true, true, true, true]);
  expect([cite("issue", "s found"), cite("tissue", " 3"), cite(["the", "issue"].join(" "), "'s floor")]).toEqual([false, false, false]);
});

test("no file names an issue without its number (after the, this or that, or as a possessive)", () => {
  expect(linesMatching(UNNUMBERED)).toEqual([]);
});

test("the unnumbered pattern finds each spelling, and not the tracker or the verb", () => {
  const issue = ["iss", "ue"].join("");
  const names = (text: string) => UNNUMBERED.test(text);
  expect([`The ${issue}'s floor`, `the ${issue}`, `of the ${issue}s`, `outside this ${issue}.`, `the GGUF ${issue}'s targets`].map(names)).toEqual([true, true, true, true, true]);
  expect([`the ${issue} tracker`, `Requests it ${issue}s`, `an ${issue}`, `t${issue}'ssimilar`, `the ${issue}d command`].map(names)).toEqual([false, false, false, false, false]);
});
