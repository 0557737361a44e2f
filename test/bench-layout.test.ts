/**
 * Where the benchmarks and the scripts sit: src/bench/ imports nothing from src/cli/ (its option
 * parsing lives in cli/bench-options.ts), no file of src/bench/ shares its name with another file
 * of src/, the synthetic models' writers and quantizers (src/synth/) serve only the benchmarks,
 * the tests and the library's exports, and scripts/ imports nothing from test/.
 */
import { expect, test } from "bun:test";
import { readdirSync, readFileSync } from "node:fs";
import { basename, dirname, join, relative, resolve } from "node:path";

const ROOT = resolve(import.meta.dir, "..");

function tsFiles(dir: string): string[] {
  return readdirSync(join(ROOT, dir), { recursive: true, encoding: "utf8" }).filter((f) => f.endsWith(".ts")).map((f) => join(dir, f));
}

/** The repository paths a file imports (static, type-only and dynamic imports with a relative specifier). */
function importsOf(file: string): string[] {
  const text = readFileSync(join(ROOT, file), "utf8");
  return [...text.matchAll(/(?:from|import)\s*\(?\s*["'](\.{1,2}\/[^"']+)["']/g)].map((m) => relative(ROOT, resolve(ROOT, dirname(file), m[1]!)));
}

test("src/bench/ imports nothing from src/cli/", () => {
  const arrows = tsFiles("src/bench").flatMap((f) => importsOf(f).filter((to) => to.startsWith("src/cli/")).map((to) => `${f} -> ${to}`));
  expect(arrows).toEqual([]);
});

test("no file of src/bench/ has the name of another file in src/", () => {
  const all = tsFiles("src");
  const clashes = tsFiles("src/bench").flatMap((f) => all.filter((g) => g !== f && basename(g) === basename(f)).map((g) => `${f} ~ ${g}`));
  expect(clashes).toEqual([]);
});

test("scripts/ imports nothing from test/", () => {
  const arrows = tsFiles("scripts").flatMap((f) => importsOf(f).filter((to) => to.startsWith("test/")).map((to) => `${f} -> ${to}`));
  expect(arrows).toEqual([]);
});

test("only the benchmarks and the library's exports import src/synth/", () => {
  const users = tsFiles("src")
    .filter((f) => !f.startsWith("src/synth/") && !f.startsWith("src/bench/") && !f.startsWith("src/cli/bench") && f !== "src/index.ts")
    .flatMap((f) => importsOf(f).filter((to) => to.startsWith("src/synth/")).map((to) => `${f} -> ${to}`));
  expect(users).toEqual([]);
});
