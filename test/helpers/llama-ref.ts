/**
 * llama.cpp's own answers for files that have no references in ../shared (a model the test writes):
 * `llref` (../shared/tools/llama-ref: `build.sh WORK` builds it as WORK/llref), run into a scratch
 * folder as the shared references were made. Found at $PAGELLM_LLREF, else at ../llama-ref/llref
 * beside the repository. It is a tool of the machine, not shared data: without it the group is
 * skipped with the reason on every machine, CI included (CI does not build llama.cpp).
 */
import { describe, test } from "bun:test";
import { spawnSync } from "node:child_process";
import { existsSync, writeFileSync } from "node:fs";
import { basename, dirname, join, resolve } from "node:path";
import { CHILD_PROCESS_MS } from "./limits.ts";

/** Where llref is, or null. */
export function llrefPath(): string | null {
  const path = process.env.PAGELLM_LLREF ?? resolve(import.meta.dir, "..", "..", "..", "llama-ref", "llref");
  return existsSync(path) ? path : null;
}

/** `describe` tests that need llref (its path given to `fn`); skipped, saying why, when it is missing. */
export function describeWithLlref(name: string, fn: (llref: string) => void): void {
  const llref = llrefPath();
  if (llref !== null) {
    describe(name, () => fn(llref));
    return;
  }
  const reason = "llama.cpp's llref is not built (set PAGELLM_LLREF, or build ../shared/tools/llama-ref/build.sh into ../llama-ref)";
  console.warn(`[skip] ${name}: ${reason}`);
  describe.skip(name, () => {
    test(reason, () => {});
  });
}

/**
 * `llref MODE MODEL TEXT N` run in the model's folder with its bare name (as the shared references
 * were made), its JSON written beside the model as `out` and returned.
 */
export function runLlref<T>(llref: string, mode: "score" | "greedy", model: string, text: string, n: number, out: string): T {
  const r = spawnSync(llref, [mode, basename(model), text, String(n)], { cwd: dirname(model), encoding: "utf8", timeout: CHILD_PROCESS_MS });
  if (r.status !== 0) throw new Error(`llref ${mode} ${model}: exit ${r.status}: ${r.stderr}`);
  writeFileSync(join(dirname(model), out), r.stdout);
  return JSON.parse(r.stdout) as T;
}
