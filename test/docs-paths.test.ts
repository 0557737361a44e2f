/**
 * No document shows a path of the machine it was written on (a home directory, the work folder,
 * a temporary file): examples use relative paths or ~, so they read the same on any machine.
 */
import { expect, test } from "bun:test";
import { readdirSync, readFileSync } from "node:fs";
import { homedir } from "node:os";
import { join, resolve } from "node:path";

const ROOT = resolve(import.meta.dir, "..");
const documents = ["README.md", ...readdirSync(join(ROOT, "docs")).filter((f) => f.endsWith(".md")).map((f) => join("docs", f))];
const machinePaths = [/\/root\//, /\/home\/\w+/, /\/work\//, /\/tmp\/[\w.-]/, /\/Users\/\w+/, new RegExp(`${homedir().replace(/[.*+?^${}()|[\]\\]/g, "\\$&")}/`)];

for (const doc of documents) {
  test(`${doc} shows no path of the machine it was written on`, () => {
    const lines = readFileSync(join(ROOT, doc), "utf8").split("\n");
    const found = lines.flatMap((line, i) => (machinePaths.some((p) => p.test(line)) ? [`${doc}:${i + 1}: ${line.trim()}`] : []));
    expect(found).toEqual([]);
  });
}
