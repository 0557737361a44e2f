/**
 * `pagellm cache ls|du|clear`: what the disk KV cache (--kv-cache-dir) holds, per model folder
 * (one per model fingerprint and KV layout: src/kv-disk/folder.ts), and removing it.
 */
import { defineCommand, type ArgsDef } from "citty";
import { existsSync, rmSync, statSync } from "node:fs";
import { InputError, PagellmError } from "../errors.ts";
import { errorCode } from "../kv-disk/file-ops.ts";
import type { SecondTierStats } from "../kv/second-tier.ts";
import { modelFingerprint } from "../kv-disk/fingerprint.ts";
import { resolveCacheDir, scanRoot, type ModelFolder } from "../kv-disk/folder.ts";
import { openCheckpoint } from "../model/load.ts";
import { checkKnownOptions, type ParsedValues } from "./options.ts";
import { resolveModelSpec } from "./load.ts";

const cacheArgs = {
  "kv-cache-dir": { type: "string", description: "The disk KV cache folder (default auto: $PAGELLM_CACHE/kv or ~/.cache/pagellm/kv)", valueHint: "dir" },
  model: { type: "string", description: "Only the folders of this model (a path or hf: spec; every block size and KV type of it)", valueHint: "model" },
  json: { type: "boolean", description: "One JSON object per model folder instead of a table" },
} as const satisfies ArgsDef;

/** One subcommand over the model folders `--model` selects. */
function cacheSubcommand(name: string, description: string, action: (root: string, folders: ModelFolder[], values: ParsedValues) => void) {
  return defineCommand({
    meta: { name, description },
    args: cacheArgs,
    async run({ args, rawArgs }) {
      checkKnownOptions(rawArgs, cacheArgs);
      const root = resolveCacheDir(typeof args["kv-cache-dir"] === "string" ? args["kv-cache-dir"] : "auto");
      if (existsSync(root) && !statSync(root).isDirectory()) throw new InputError(`--kv-cache-dir ${root}: not a folder`);
      try {
        action(root, await selectFolders(root, args.model), args);
      } catch (e) {
        // The folder or a file in it cannot be read or removed (permissions, a file system gone): one line.
        const code = errorCode(e);
        if (code === null || e instanceof PagellmError) throw e;
        throw new PagellmError(`--kv-cache-dir ${root}: cannot read or change the folder (${code})`);
      }
    },
  });
}

export const cacheCommand = defineCommand({
  meta: { name: "cache", description: "Show and manage the disk KV cache (--kv-cache-dir): ls, du, clear" },
  subCommands: {
    ls: cacheSubcommand("ls", "Per model folder: model, KV layout, blocks, bytes, last use", (root, folders, values) => {
      if (values.json === true) {
        for (const f of folders) process.stdout.write(`${JSON.stringify(folderSummary(f))}\n`);
        return;
      }
      if (folders.length === 0) {
        process.stdout.write(`no cached KV blocks in ${root}\n`);
        return;
      }
      process.stdout.write(table(["folder", "model", "KV layout", "blocks", "size", "last use"], folders.map(folderRow)));
    }),
    du: cacheSubcommand("du", "Bytes per model folder and in all", (root, folders, values) => {
      const total = folders.reduce((n, f) => n + f.bytes, 0);
      if (values.json === true) {
        process.stdout.write(`${JSON.stringify({ root, bytes: total, folders: folders.map(folderSummary) })}\n`);
        return;
      }
      for (const f of folders) process.stdout.write(`${mib(f.bytes).padStart(12)}  ${f.folder}  ${f.info?.model ?? "?"}\n`);
      process.stdout.write(`${mib(total).padStart(12)}  total (${root})\n`);
    }),
    clear: cacheSubcommand("clear", "Remove the cached blocks (of --model only, when given)", (root, folders) => {
      for (const f of folders) {
        rmSync(f.path, { recursive: true, force: true });
        process.stdout.write(`removed ${f.folder} (${f.info?.model ?? "?"}): ${f.blocks.length} blocks, ${mib(f.bytes)}\n`);
      }
      if (folders.length === 0) process.stdout.write(`nothing to remove in ${root}\n`);
    }),
  },
});

/** The model folders under root, only those of `model` when given (matched by its fingerprint). */
async function selectFolders(root: string, model: ParsedValues[string]): Promise<ModelFolder[]> {
  const folders = scanRoot(root);
  if (typeof model !== "string" || model === "") return folders;
  const path = await resolveModelSpec(model);
  if (!existsSync(path)) throw new InputError(`${model}: model file not found`);
  const prefix = Buffer.from(modelFingerprint(openCheckpoint(path))).toString("hex").slice(0, 16);
  return folders.filter((f) => f.folder.startsWith(`${prefix}-`));
}

/**
 * A model folder's row of `cache ls`. A model with sliding-window layers stores each KV cache group's
 * blocks apart: its layout names the groups, its blocks are split into global and windowed ones.
 */
export function folderRow(f: ModelFolder): string[] {
  const groups = f.info?.groups ?? [];
  const sliding = groups.filter((g) => g.attention === "sliding");
  let layout = f.info === null ? "?" : `${f.info.kvType}, ${f.info.blockSize}-token blocks`;
  let blocks = String(f.blocks.length);
  if (sliding.length > 0) {
    const windows = [...new Set(sliding.map((g) => g.window))].join("/");
    layout += `, ${groups.length} groups (${groups.length - sliding.length} full, ${sliding.length} window ${windows})`;
    const windowed = f.blocks.filter((b) => groups[b.group]?.attention === "sliding").length;
    blocks += ` (${f.blocks.length - windowed} full, ${windowed} window)`;
  }
  const lastUse = f.lastUseMs === null ? "-" : new Date(f.lastUseMs).toISOString().replace(/\.\d+Z$/, "Z");
  return [f.folder, f.info?.model ?? "?", layout, blocks, mib(f.bytes), lastUse];
}

/** A model folder as `cache ls --json` and `du --json` print it; `groups` per KV cache group when the model folder records them. */
export function folderSummary(f: ModelFolder): Record<string, unknown> {
  const groups = f.info?.groups?.map((g, i) => {
    const stored = f.blocks.filter((b) => b.group === i);
    return { ...g, blocks: stored.length, bytes: stored.reduce((n, b) => n + b.bytes, 0) };
  });
  return {
    folder: f.folder, model: f.info?.model ?? null, format: f.info?.format ?? null, kv_type: f.info?.kvType ?? null,
    block_size: f.info?.blockSize ?? null, blocks: f.blocks.length, bytes: f.bytes,
    last_use: f.lastUseMs === null ? null : new Date(f.lastUseMs).toISOString(),
    ...(groups === undefined ? {} : { groups }),
  };
}

/** The disk tier's counters in one line (chat /stats, generate's summary). */
export function diskTierLine(t: SecondTierStats): string {
  const speed = t.readMs > 0 ? `, ${(t.bytesRead / 2 ** 20 / (t.readMs / 1000)).toFixed(0)} MiB/s` : "";
  const trouble = [
    t.blocksRejected > 0 ? `${t.blocksRejected} bad blocks removed` : "",
    t.writesDropped > 0 ? `${t.writesDropped} writes dropped` : "",
    t.blocksRemoved > 0 ? `${t.blocksRemoved} old blocks removed` : "",
  ].filter(Boolean);
  return `disk KV cache: ${t.blocksRead} blocks read (${mib(t.bytesRead)}${speed}), ${t.blocksWritten} written (${mib(t.bytesWritten)})` +
    (trouble.length > 0 ? `; ${trouble.join(", ")}` : "");
}

function mib(bytes: number): string {
  return `${(bytes / 2 ** 20).toFixed(1)} MiB`;
}

function table(header: string[], rows: string[][]): string {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)));
  const line = (cells: string[]) => cells.map((c, i) => c.padEnd(widths[i]!)).join("  ").trimEnd();
  return `${[line(header), ...rows.map(line)].join("\n")}\n`;
}
