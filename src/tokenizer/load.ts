/**
 * Opens a tokenizer file by what it is: a GGUF model or vocabulary-only file, a Hugging Face
 * tokenizer.json, or llama2.c's tokenizer.bin.
 */
import { readFileSync } from "node:fs";
import { ModelFormatError } from "../errors.ts";
import { isGGUF } from "../model/load.ts";
import { loadGGUFTokenizer } from "./gguf-vocab.ts";
import { loadHFTokenizer } from "./hf-json.ts";
import { llama2cTokenizerFromFile, parseLlama2cTokenizer } from "./llama2c.ts";
import type { Tokenizer } from "./tokenizer.ts";

export interface LoadTokenizerOptions {
  /** The model's vocabulary size: when given, a tokenizer of another size is a ModelFormatError. */
  vocabSize?: number;
}

/** A tokenizer and what callers (generation, chat templates) need to know about its vocabulary. */
export interface LoadedTokenizer {
  tokenizer: Tokenizer;
  /** Whether prompts start with BOS (llama2.c always; GGUF and tokenizer.json say). */
  addBos: boolean;
  /** Whether prompts end with EOS (BERT-style vocabularies). */
  addEos: boolean;
  /** Every token that ends generation (the same set as `tokenizer.eogIds`). */
  eogIds: ReadonlySet<number>;
  /** Text of the BOS token (e.g. "<|begin_of_text|>"), for chat templates; null without one. */
  bosText: string | null;
  /** Text of the EOS token (e.g. "<|im_end|>"), for chat templates; null without one. */
  eosText: string | null;
  /** The file's `tokenizer.chat_template` (GGUF only); null without one. */
  chatTemplate: string | null;
}

/** True when the file starts like JSON (a tokenizer.json). */
function isJson(path: string): boolean {
  let head: Buffer;
  try {
    head = readFileSync(path).subarray(0, 64);
  } catch (error) {
    throw new ModelFormatError(path, `cannot read tokenizer: ${error instanceof Error ? error.message : String(error)}`);
  }
  return head.toString("utf8").trimStart().startsWith("{");
}

function llama2cTokenizer(path: string, vocabSize: number | undefined): Tokenizer {
  let bytes: Uint8Array;
  try {
    bytes = readFileSync(path);
  } catch (error) {
    throw new ModelFormatError(path, `cannot read tokenizer: ${error instanceof Error ? error.message : String(error)}`);
  }
  const parsed = parseLlama2cTokenizer(bytes, path);
  return llama2cTokenizerFromFile(parsed, path, vocabSize ?? parsed.pieces.length);
}

/**
 * Load the tokenizer at `path`. `opts.vocabSize`, when given, must equal the tokenizer's size (a GGUF
 * model may pad its embedding rows, but the vocabulary files here never do).
 */
export function loadTokenizer(path: string, opts: LoadTokenizerOptions = {}): LoadedTokenizer {
  let tokenizer: Tokenizer;
  let addBos: boolean;
  let addEos = false;
  let chatTemplate: string | null = null;
  if (isGGUF(path)) {
    ({ tokenizer, addBos, addEos, chatTemplate } = loadGGUFTokenizer(path));
  } else if (isJson(path)) {
    ({ tokenizer, addBos, addEos } = loadHFTokenizer(path));
  } else {
    tokenizer = llama2cTokenizer(path, opts.vocabSize);
    addBos = true;
  }
  if (opts.vocabSize !== undefined && tokenizer.vocabSize !== opts.vocabSize) {
    throw new ModelFormatError(path, `vocabulary has ${tokenizer.vocabSize} tokens, the model has ${opts.vocabSize}`);
  }
  const textOf = (id: number | null): string | null => (id === null ? null : tokenizer.tokenPiece(id));
  return {
    tokenizer,
    addBos,
    addEos,
    eogIds: tokenizer.eogIds,
    bosText: textOf(tokenizer.bosId),
    eosText: textOf(tokenizer.eosId),
    chatTemplate,
  };
}
