/**
 * `pagellm models`: the GGUF files in the Hugging Face hub cache (and those fetched by URL), with what
 * their headers say: size, architecture, quantization, context length.
 */
import { defineCommand, type ArgsDef } from "citty";
import { lstatSync, statSync } from "node:fs";
import { join } from "node:path";
import { listCachedModels, listFiles, type CachedModel } from "../hub/cache.ts";
import { hubOptionsFromEnv } from "../hub/http.ts";
import { formatBytes } from "../hub/progress.ts";
import { urlCacheDir } from "../hub/resolve.ts";
import { summarizeModel } from "../hub/summary.ts";
import { checkKnownOptions } from "./options.ts";
import { info } from "./output.ts";
import { showFileText, terminalSafeJson } from "../util/file-text.ts";

const modelsArgs = {
  json: { type: "boolean", description: "Print a JSON array instead of a table" },
} as const satisfies ArgsDef;

export interface ModelListing {
  /** "OWNER/REPO", or "url" for files fetched by URL. */
  readonly repo: string;
  readonly file: string;
  readonly spec: string;
  readonly path: string;
  readonly bytes: number;
  readonly architecture: string | null;
  readonly quantization: string | null;
  readonly contextLength: number | null;
  /** Set when the header could not be read. */
  readonly error?: string;
}

export const modelsCommand = defineCommand({
  meta: { name: "models", description: "List the models in the cache" },
  args: modelsArgs,
  run({ args, rawArgs }) {
    checkKnownOptions(rawArgs, modelsArgs);
    const listing = listModels();
    if (args.json === true) process.stdout.write(`${terminalSafeJson(JSON.stringify(listing, null, 2))}\n`);
    // An empty cache has no rows to print: stdout stays empty (results only), the hint is a note.
    else if (listing.length === 0) info(`no models cached in ${hubOptionsFromEnv().cacheDir} (pagellm pull hf:OWNER/REPO:QUANT fetches one)`);
    else process.stdout.write(formatTable(listing));
  },
});

export function listModels(): ModelListing[] {
  // One row per repo/file: the copy at refs/main when there is one, else the newest other snapshot's.
  const newest = new Map<string, CachedModel>();
  for (const m of listCachedModels(hubOptionsFromEnv().cacheDir)) {
    const key = `${m.repo}/${m.file}`;
    const seen = newest.get(key);
    if (seen === undefined || (!seen.isMain && (m.isMain || lstatSync(m.path).mtimeMs > lstatSync(seen.path).mtimeMs))) newest.set(key, m);
  }
  const hub = [...newest.values()].map((m) => describe(m.repo, m.file, `hf:${m.repo}/${m.file}`, m.path));
  const urlDir = urlCacheDir();
  const byUrl = listFiles(urlDir)
    .filter((f) => /\.gguf$/i.test(f))
    .map((f) => describe("url", f.split("/").pop()!, join(urlDir, f), join(urlDir, f)));
  return [...hub, ...byUrl];
}

function describe(repo: string, file: string, spec: string, path: string): ModelListing {
  const bytes = statSync(path).size;
  try {
    const s = summarizeModel(path);
    return { repo, file, spec, path, bytes, architecture: s.architecture, quantization: s.quantization, contextLength: s.contextLength };
  } catch (error) {
    return { repo, file, spec, path, bytes, architecture: null, quantization: null, contextLength: null, error: error instanceof Error ? error.message : String(error) };
  }
}

function formatTable(rows: readonly ModelListing[]): string {
  const table = [
    ["REPO", "FILE", "SIZE", "ARCH", "QUANT", "CONTEXT"],
    // The architecture is the file's own text; file names are the cache's (a download's name).
    ...rows.map((r) => [r.repo, r.file, formatBytes(r.bytes), r.architecture === null ? "?" : showFileText(r.architecture, 24), r.quantization ?? "?", r.contextLength === null ? "?" : String(r.contextLength)]),
  ];
  const widths = table[0]!.map((_, c) => Math.max(...table.map((row) => row[c]!.length)));
  return table.map((row) => row.map((cell, c) => (c === row.length - 1 ? cell : cell.padEnd(widths[c]!))).join("  ")).join("\n") + "\n";
}
