/**
 * Opens a model file by what its first bytes say it is.
 */
import { closeSync, fstatSync, openSync, readSync } from "node:fs";
import { ModelFormatError } from "../errors.ts";
import type { Checkpoint } from "./checkpoint.ts";
import { readLlama2cCheckpoint } from "./llama2c.ts";

const GGUF_MAGIC = 0x46554747;

/** The first four bytes of a file as a little-endian u32 (null when it is shorter). */
export function fileMagic(path: string): number | null {
  let fd: number;
  try {
    fd = openSync(path, "r");
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    throw new ModelFormatError(path, code === "ENOENT" ? "no such file" : `cannot open: ${(e as Error).message}`);
  }
  try {
    if (fstatSync(fd).isDirectory()) throw new ModelFormatError(path, "is a directory, not a file");
    const head = new Uint8Array(4);
    if (readSync(fd, head, 0, 4, 0) < 4) return null;
    return new DataView(head.buffer).getUint32(0, true);
  } finally {
    closeSync(fd);
  }
}

export function isGGUF(path: string): boolean {
  return fileMagic(path) === GGUF_MAGIC;
}

/** Describe the checkpoint at `path` (llama2.c legacy/v1/v2). */
export function openCheckpoint(path: string): Checkpoint {
  if (isGGUF(path)) {
    throw new ModelFormatError(path, "GGUF model weights are not supported yet (GGUF vocabularies are: use it as --tokenizer)");
  }
  return readLlama2cCheckpoint(path);
}
