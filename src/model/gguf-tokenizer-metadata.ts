/** The `tokenizer.*` metadata of a GGUF file, to give a written model a real vocabulary. */
import { readGGUF, type GGUFValue } from "./gguf.ts";

export function tokenizerMetadata(path: string): Map<string, GGUFValue> {
  const file = readGGUF(path);
  return new Map([...file.metadata].filter(([key]) => key.startsWith("tokenizer.")));
}
