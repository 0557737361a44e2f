/**
 * Opening the disk tier for a model: resolve the folder, fingerprint the model and its KV layout,
 * and hand back the store the engine uses as its second tier.
 */
import { basename } from "node:path";
import { InputError } from "../errors.ts";
import type { Checkpoint } from "../model/checkpoint.ts";
import { KVCacheGroups } from "../kv/kv-groups.ts";
import type { KVLayout } from "../kv/kv-layout.ts";
import { KV_WRITE_MODES, type KVWriteMode } from "../kv/second-tier.ts";
import { DiskKVStore } from "./disk-store.ts";
import type { BlockFileOps } from "./file-ops.ts";
import { kvFingerprint, modelFingerprint } from "./fingerprint.ts";
import { resolveCacheDir } from "./folder.ts";

/** Default bound on the folder, MiB. */
export const DEFAULT_DISK_MB = 4096;

export interface DiskTierOptions {
  /** The folder, or "auto" (resolveCacheDir). */
  dir: string;
  write?: KVWriteMode;
  diskMb?: number;
  onWarning?: (line: string) => void;
  fileOps?: BlockFileOps;
}

/** The disk tier for `checkpoint` run with `layout` on the backend `kvProducer` names (ModelForward.kvProducer). */
export function openDiskTier(checkpoint: Checkpoint, layout: KVLayout, kvProducer: string, o: DiskTierOptions): DiskKVStore {
  if (o.dir === "") throw new InputError("--kv-cache-dir needs a folder (or auto)");
  const write = o.write ?? "through";
  if (!KV_WRITE_MODES.includes(write)) throw new InputError(`--kv-cache-write must be one of ${KV_WRITE_MODES.join(", ")}, got "${String(write)}"`);
  const diskMb = o.diskMb ?? DEFAULT_DISK_MB;
  if (!(diskMb > 0)) throw new InputError(`--kv-cache-disk-mb must be above 0, got ${diskMb}`);
  return new DiskKVStore({
    root: resolveCacheDir(o.dir),
    fingerprint: kvFingerprint(modelFingerprint(checkpoint), layout, checkpoint.config, kvProducer),
    layout,
    groups: KVCacheGroups.of(checkpoint.config),
    writeMode: write,
    maxBytes: Math.floor(diskMb * 2 ** 20),
    modelName: basename(checkpoint.file),
    modelFormat: checkpoint.format,
    onWarning: o.onWarning ?? ((line) => process.stderr.write(`${line}\n`)),
    fileOps: o.fileOps,
  });
}
