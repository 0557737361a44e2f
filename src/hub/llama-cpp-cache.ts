/**
 * llama.cpp's own download cache, read so that a model its `-hf` option already fetched is not
 * fetched again: `$LLAMA_CACHE`, else `$XDG_CACHE_HOME/llama.cpp` or `~/.cache/llama.cpp`, one flat
 * folder of `OWNER_REPO_FILE` names (a `/` of FILE as `_` too), each beside its `.etag`; a file in
 * flight is `*.downloadInProgress`, never under its final name. pagellm reads this folder and
 * never writes it: its own downloads go to the Hugging Face cache (cache.ts).
 */
import { existsSync, readdirSync, statSync } from "node:fs";
import { homedir } from "node:os";
import { join } from "node:path";

export function llamaCppCacheDir(env: NodeJS.ProcessEnv = process.env): string {
  if (env.LLAMA_CACHE) return env.LLAMA_CACHE;
  return join(env.XDG_CACHE_HOME || join(homedir(), ".cache"), "llama.cpp");
}

/** The name llama.cpp gives repo/file in its cache. */
function cachedName(repo: string, file: string): string {
  return `${repo.replaceAll("/", "_")}_${file.replaceAll("/", "_")}`;
}

/** The path of repo/file in llama.cpp's cache folder `dir`, or null when it is not there. */
export function llamaCppCachedFile(dir: string, repo: string, file: string): string | null {
  const path = join(dir, cachedName(repo, file));
  return existsSync(path) && statSync(path).isFile() ? path : null;
}

/** The repo's GGUF files in llama.cpp's cache, as names inside the repo (a `_` of a subfolder cannot be told apart, so top-level names). */
export function llamaCppCachedFiles(dir: string, repo: string): string[] {
  const prefix = `${repo.replaceAll("/", "_")}_`;
  let names: string[];
  try {
    names = readdirSync(dir);
  } catch {
    return [];
  }
  return names.filter((n) => n.startsWith(prefix) && /\.gguf$/i.test(n)).map((n) => n.slice(prefix.length));
}
