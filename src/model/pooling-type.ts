/**
 * How a model's token vectors become one embedding, as a GGUF file says it (`{arch}.pooling_type`,
 * llama.cpp's enum llama_pooling_type). Read here for encoders and decoder embedders alike.
 */
import { ModelFormatError } from "../errors.ts";
import type { GGUFFile } from "./gguf.ts";

/** llama.cpp's --pooling: every token's vector, their mean, the first's, the last's, a reranker's score head. */
export type PoolingType = "none" | "mean" | "cls" | "last" | "rank";

/** llama.cpp's LLAMA_POOLING_TYPE_* codes, by value (-1, unspecified, is the key's absence). */
const POOLING_CODES: readonly PoolingType[] = ["none", "mean", "cls", "last", "rank"];

/** The file's `{arch}.pooling_type`, or null when the file has none. */
export function filePooling(file: GGUFFile, arch: string): PoolingType | null {
  const key = `${arch}.pooling_type`;
  if (!file.has(key)) return null;
  const code = file.getI32(key);
  if (code === -1) return null;
  const pooling = POOLING_CODES[code];
  if (pooling === undefined) throw new ModelFormatError(file.path, `metadata key "${key}" is ${code}, not a pooling type (0 none, 1 mean, 2 cls, 3 last, 4 rank)`);
  return pooling;
}
