/**
 * Opens a model file by what its first bytes say it is.
 */
import { closeSync, fstatSync, openSync, readSync } from "node:fs";
import { ModelFormatError } from "../errors.ts";
import type { Checkpoint } from "./checkpoint.ts";
import { readGGUFCheckpoint } from "./gguf-checkpoint.ts";
import { NOT_A_MODEL, readLlama2cCheckpoint, readLlama2cHeader } from "./llama2c.ts";

const GGUF_MAGIC = 0x46554747;

/** The first `n` bytes of a file (fewer when it is shorter). */
function fileHead(path: string, n: number): Uint8Array {
  let fd: number;
  try {
    fd = openSync(path, "r");
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    throw new ModelFormatError(path, code === "ENOENT" ? "no such file" : `cannot open: ${(e as Error).message}`);
  }
  try {
    if (fstatSync(fd).isDirectory()) throw new ModelFormatError(path, "is a directory, not a file");
    const head = new Uint8Array(n);
    return head.subarray(0, readSync(fd, head, 0, n, 0));
  } finally {
    closeSync(fd);
  }
}

/** The first four bytes of a file as a little-endian u32 (null when it is shorter). */
export function fileMagic(path: string): number | null {
  const head = fileHead(path, 4);
  return head.length < 4 ? null : new DataView(head.buffer).getUint32(0, true);
}

/**
 * Refuse a GGUF file whose magic is damaged: a GGUF version (2 or 3) after four bytes that share
 * at least two with "GGUF". Read as a legacy llama2.c header instead, it would be refused for a
 * nonsense field, or, given --tokenizer, misread.
 */
function refuseDamagedGGUF(path: string): void {
  const head = fileHead(path, 8);
  if (head.length < 8) return;
  const version = new DataView(head.buffer).getUint32(4, true);
  const same = [0x47, 0x47, 0x55, 0x46].filter((b, i) => head[i] === b).length;
  if ((version === 2 || version === 3) && same >= 2 && same < 4) {
    const bytes = Array.from(head.subarray(0, 4), (b) => b.toString(16).padStart(2, "0")).join(" ");
    throw new ModelFormatError(path, `${NOT_A_MODEL}: it starts with the bytes ${bytes}, not the GGUF magic "GGUF", though a GGUF version (${version}) follows (a damaged GGUF file?)`);
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
  refuseDamagedGGUF(path);
  readLlama2cHeader(path);
  return "llama2c";
}

/** Describe the checkpoint at `path`: a GGUF model, or a llama2.c checkpoint (legacy, v1, v2). */
export function openCheckpoint(path: string): Checkpoint {
  if (isGGUF(path)) return readGGUFCheckpoint(path);
  refuseDamagedGGUF(path);
  return readLlama2cCheckpoint(path);
}
