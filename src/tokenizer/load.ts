/**
 * Opens a tokenizer file by what it is: a GGUF file's vocabulary, or llama2.c's tokenizer.bin.
 * Either must have exactly the model's vocabulary size.
 */
import { ModelFormatError } from "../errors.ts";
import { isGGUF } from "../model/load.ts";
import { loadGGUFTokenizer } from "./gguf-vocab.ts";
import { loadLlama2cTokenizer } from "./llama2c.ts";
import type { Tokenizer } from "./tokenizer.ts";

export interface LoadedTokenizer {
  tokenizer: Tokenizer;
  /** Whether prompts start with BOS (llama2.c always; GGUF says). */
  addBos: boolean;
}

export function loadTokenizer(path: string, modelVocabSize: number): LoadedTokenizer {
  if (!isGGUF(path)) return { tokenizer: loadLlama2cTokenizer(path, modelVocabSize), addBos: true };
  const { tokenizer, addBos } = loadGGUFTokenizer(path);
  if (tokenizer.vocabSize !== modelVocabSize) {
    throw new ModelFormatError(path, `vocabulary has ${tokenizer.vocabSize} tokens, the model has ${modelVocabSize}`);
  }
  return { tokenizer, addBos };
}
