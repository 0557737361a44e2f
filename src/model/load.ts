/**
 * Opens a model file by what its first bytes say it is.
 */
import { closeSync, fstatSync, openSync, readSync } from "node:fs";
import { ModelFormatError } from "../errors.ts";
import type { Checkpoint } from "./checkpoint.ts";
import { readGGUFCheckpoint } from "./gguf-checkpoint.ts";
import { readLlama2cCheckpoint, readLlama2cHeader } from "./llama2c.ts";

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

/** The two kinds of model file pagellm reads. */
export type ModelFileKind = "gguf" | "llama2c";

/**
 * Which kind of model `path` is, from its first bytes (and a llama2.c header's fields, since the
 * legacy format has no magic): a ModelFormatError "not a GGUF or llama2.c model file" for any
 * other file, before anything (a tokenizer beside it, the weights) is looked for.
 */
export function modelFileKind(path: string): ModelFileKind {
  if (isGGUF(path)) return "gguf";
  readLlama2cHeader(path);
  return "llama2c";
}

/** Describe the checkpoint at `path`: a GGUF model, or a llama2.c checkpoint (legacy, v1, v2). */
export function openCheckpoint(path: string): Checkpoint {
  return isGGUF(path) ? readGGUFCheckpoint(path) : readLlama2cCheckpoint(path);
}
