/**
 * Locates read-only reference data (models, goldens) in the `shared` directory that sits next to the
 * repository root (../shared). Tests read those files in place and never copy them into the repo.
 *
 * A missing file skips the test outside CI (with a console.warn naming it) and fails it in CI
 * (process.env.CI === "true"), so CI never passes by silently skipping.
 */
import { describe, test } from "bun:test";
import { existsSync } from "node:fs";
import { join, resolve } from "node:path";

/** Absolute path of the shared data directory: <repo root>/../shared. */
export const SHARED_DIR = resolve(import.meta.dir, "..", "..", "..", "shared");

/**
 * Absolute path of `rel` (relative to the shared directory) when the file exists; otherwise null after a
 * console.warn outside CI, and a thrown Error in CI. Use as `test.skipIf(sharedPath(x) === null)(...)`.
 */
export function sharedPath(rel: string): string | null {
  const path = join(SHARED_DIR, rel);
  if (existsSync(path)) return path;
  if (process.env.CI === "true") {
    throw new Error(`shared test data missing in CI: ${path}`);
  }
  console.warn(`[skip] shared test data missing: ${path}`);
  return null;
}

/**
 * `describe` a group of tests that read the shared files `relPaths`; `fn` receives their absolute paths in
 * the same order. When any is missing the group is skipped outside CI (a console.warn and a skipped test
 * name the missing files), and in CI it becomes one failing test naming them.
 */
export function describeShared(name: string, relPaths: readonly string[], fn: (paths: string[]) => void): void {
  const paths = relPaths.map((rel) => join(SHARED_DIR, rel));
  const missing = paths.filter((path) => !existsSync(path));
  if (missing.length === 0) {
    describe(name, () => fn(paths));
    return;
  }
  describeUnavailable(name, `shared test data missing: ${missing.join(", ")}`);
}

/**
 * The group `name` whose inputs this machine lacks (shared files, a WebGPU adapter), for `reason`:
 * outside CI skipped, with a console.warn and a skipped test naming the reason; under CI=true one
 * failing test naming it, so that CI never passes by skipping.
 */
export function describeUnavailable(name: string, reason: string): void {
  if (process.env.CI === "true") {
    describe(name, () => {
      test(reason, () => {
        throw new Error(reason);
      });
    });
    return;
  }
  console.warn(`[skip] ${name}: ${reason}`);
  describe.skip(name, () => {
    test(reason, () => {});
  });
}
