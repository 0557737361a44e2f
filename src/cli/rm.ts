/**
 * `pagellm rm MODEL`: remove a cached model: its snapshot link(s) and, when no other snapshot uses it,
 * its blob. Works from the cache alone (no network): hf:OWNER/REPO/FILE, hf:OWNER/REPO:QUANT, or a URL
 * that was pulled.
 */
import { defineCommand, type ArgsDef } from "citty";
import { existsSync, rmSync } from "node:fs";
import { removeCachedFile, RepoCache } from "../hub/cache.ts";
import { ModelSpecError } from "../hub/hub-errors.ts";
import { hubOptionsFromEnv } from "../hub/http.ts";
import { urlDownloadDir } from "../hub/resolve.ts";
import { parseModelSpec, pickQuantFile } from "../hub/spec.ts";
import { checkKnownOptions } from "./options.ts";

const rmArgs = {
  model: { type: "positional", description: "hf:OWNER/REPO/FILE.gguf, hf:OWNER/REPO:QUANT, or a pulled URL", valueHint: "model", required: true },
} as const satisfies ArgsDef;

export const rmCommand = defineCommand({
  meta: { name: "rm", description: "Remove a model from the cache" },
  args: rmArgs,
  run({ args, rawArgs }) {
    checkKnownOptions(rawArgs, rmArgs);
    for (const path of removeModel(args.model)) process.stdout.write(`removed ${path}\n`);
  },
});

/** Remove what `raw` names from the cache; returns the paths removed. */
export function removeModel(raw: string): string[] {
  const spec = parseModelSpec(raw);
  if (spec.kind === "path") throw new ModelSpecError(`${raw}: rm takes hf:OWNER/REPO/FILE.gguf, hf:OWNER/REPO:QUANT or a URL (see pagellm models), not a path`);
  if (spec.kind === "url") return removeUrlDownload(raw, spec.url);
  const cache = new RepoCache(hubOptionsFromEnv().cacheDir, spec.repo);
  const file = spec.kind === "hf-file" ? spec.file : pickQuantFile(spec.repo, cache.snapshotFiles(), spec.quant);
  const removed = removeCachedFile(cache, file);
  if (removed.length === 0) throw new ModelSpecError(`${raw}: not in the cache (pagellm models lists what is)`);
  return removed;
}

function removeUrlDownload(raw: string, url: string): string[] {
  const dir = urlDownloadDir(url);
  if (!existsSync(dir)) throw new ModelSpecError(`${raw}: not in the cache (pagellm models lists what is)`);
  rmSync(dir, { recursive: true, force: true });
  return [dir];
}
