/**
 * Opens any tokenizer file by what it is: a GGUF model or vocabulary-only file, a Hugging Face
 * tokenizer.json, or llama2.c's tokenizer.bin. The model's vocabulary size is an optional check:
 * a model may have more embedding rows than its tokenizer has tokens (padding), never fewer.
 */
import { closeSync, openSync, readSync } from "node:fs";
import { ModelFormatError } from "../errors.ts";
import { isGGUF } from "../model/load.ts";
import { loadGGUFTokenizer } from "./gguf-vocab.ts";
import { loadTokenizerJson } from "./hf-tokenizer-json.ts";
import { loadLlama2cTokenizer } from "./llama2c.ts";
import type { Tokenizer } from "./tokenizer.ts";

export interface LoadedTokenizer {
  tokenizer: Tokenizer;
  /** Whether prompts start with BOS (llama2.c always; GGUF and tokenizer.json say). */
  addBos: boolean;
  /** Whether prompts end with EOS (BERT-style models). */
  addEos: boolean;
  /** The model's chat template (Jinja), when the file has one. */
  chatTemplate: string | null;
}

export interface LoadTokenizerOptions {
  /** The model's vocabulary size, checked against the tokenizer's. */
  modelVocabSize?: number;
}

/** True when the file's first non-blank byte is "{" (a tokenizer.json under another name). */
function startsLikeJson(path: string): boolean {
  const head = Buffer.alloc(64);
  let length: number;
  try {
    const fd = openSync(path, "r");
    try {
      length = readSync(fd, head, 0, head.length, 0);
    } finally {
      closeSync(fd);
    }
  } catch {
    return false; // the loader that follows names the unreadable file
  }
  return head.subarray(0, length).toString("latin1").trimStart().startsWith("{");
}

export function loadTokenizer(path: string, opts: LoadTokenizerOptions = {}): LoadedTokenizer {
  let loaded: LoadedTokenizer;
  if (isGGUF(path)) loaded = loadGGUFTokenizer(path);
  else if (path.endsWith(".json") || startsLikeJson(path)) loaded = loadTokenizerJson(path);
  // llama2.c's file does not store its size: it is read to its end, and checked against the model's when given.
  else loaded = { tokenizer: loadLlama2cTokenizer(path, opts.modelVocabSize), addBos: true, addEos: false, chatTemplate: null };
  const size = opts.modelVocabSize;
  if (size !== undefined && loaded.tokenizer.vocabSize > size) {
    throw new ModelFormatError(path, `vocabulary has ${loaded.tokenizer.vocabSize} tokens, the model has ${size}`);
  }
  return loaded;
}
