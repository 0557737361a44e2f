/**
 * Tokenizers from the `tokenizer.ggml.*` metadata of a GGUF file. Only SentencePiece vocabularies
 * (`tokenizer.ggml.model` == "llama") are supported so far.
 */
import { ModelFormatError } from "../errors.ts";
import { readGGUF, type GGUFFile } from "../model/gguf.ts";
import { hexBytePieceValue, SpmTokenizer, TokenType, type SpmVocab } from "./spm.ts";

const KEY = {
  model: "tokenizer.ggml.model",
  tokens: "tokenizer.ggml.tokens",
  scores: "tokenizer.ggml.scores",
  tokenType: "tokenizer.ggml.token_type",
  bos: "tokenizer.ggml.bos_token_id",
  eos: "tokenizer.ggml.eos_token_id",
  unk: "tokenizer.ggml.unknown_token_id",
  addSpacePrefix: "tokenizer.ggml.add_space_prefix",
  addBos: "tokenizer.ggml.add_bos_token",
} as const;

/** A token id key: `fallback` when absent, null for the writers' "none" (u32 0xFFFFFFFF or i32 -1). */
function tokenIdOrNone(gguf: GGUFFile, key: string, fallback: number | null): number | null {
  if (!gguf.has(key)) return fallback;
  const value = gguf.get(key);
  if ((value.type === "u32" && value.value === 0xffffffff) || (value.type === "i32" && value.value === -1)) return null;
  return gguf.getU32(key);
}

/** Token types and byte values; byte tokens must spell their byte as "<0xXX>" as llama.cpp requires. */
function classifyTokens(gguf: GGUFFile, count: number, pieceAt: (id: number) => Uint8Array): {
  types: Uint8Array;
  byteValues: Int16Array;
} {
  const byteValues = new Int16Array(count).fill(-1);
  let types: Uint8Array;
  if (gguf.has(KEY.tokenType)) {
    const stored = gguf.getI32Array(KEY.tokenType);
    if (stored.length !== count) {
      throw new ModelFormatError(gguf.path, `${KEY.tokenType} has ${stored.length} entries for ${count} tokens`);
    }
    types = new Uint8Array(count);
    for (let id = 0; id < count; id++) {
      const type = stored[id];
      if (type < TokenType.undefined || type > TokenType.byte) {
        throw new ModelFormatError(gguf.path, `token ${id} has unknown token type ${type}`);
      }
      types[id] = type;
    }
  } else {
    // Without types, recognise byte tokens by their pieces, as llama.cpp's converters did.
    types = new Uint8Array(count).fill(TokenType.normal);
    for (let id = 0; id < count; id++) if (hexBytePieceValue(pieceAt(id)) >= 0) types[id] = TokenType.byte;
  }
  for (let id = 0; id < count; id++) {
    if (types[id] !== TokenType.byte) continue;
    const byte = hexBytePieceValue(pieceAt(id));
    if (byte < 0) throw new ModelFormatError(gguf.path, `byte token ${id} is not spelled "<0xXX>"`);
    byteValues[id] = byte;
  }
  return { types, byteValues };
}

/** The vocabulary of a GGUF file whose tokenizer model is "llama" (SentencePiece BPE). */
function spmVocabFromGGUF(gguf: GGUFFile): SpmVocab {
  const pieces = gguf.getStringArray(KEY.tokens);
  const count = pieces.length;
  const scores = gguf.has(KEY.scores) ? gguf.getF32Array(KEY.scores) : new Float32Array(count);
  if (scores.length !== count) {
    throw new ModelFormatError(gguf.path, `${KEY.scores} has ${scores.length} entries for ${count} tokens`);
  }
  return {
    file: gguf.path,
    pieces,
    scores,
    ...classifyTokens(gguf, count, (id) => pieces.bytes(id)),
    // llama.cpp's defaults for SentencePiece vocabularies.
    bosId: tokenIdOrNone(gguf, KEY.bos, 1),
    eosId: tokenIdOrNone(gguf, KEY.eos, 2),
    unkId: tokenIdOrNone(gguf, KEY.unk, 0),
    addSpacePrefix: gguf.getBool(KEY.addSpacePrefix, true),
    spacesAsMetaspace: true,
  };
}

/** A SentencePiece tokenizer that also records whether the model wants BOS prepended to prompts. */
export interface GGUFTokenizer {
  readonly tokenizer: SpmTokenizer;
  /** `tokenizer.ggml.add_bos_token` (default true for SentencePiece vocabularies). */
  readonly addBos: boolean;
}

/** Build the tokenizer described by a GGUF file's metadata. Throws ModelFormatError for unsupported models. */
export function tokenizerFromGGUF(gguf: GGUFFile): GGUFTokenizer {
  const model = gguf.getString(KEY.model);
  if (model !== "llama") {
    throw new ModelFormatError(
      gguf.path,
      `tokenizer model "${model}" is not supported yet (only "llama", SentencePiece BPE)`,
    );
  }
  return { tokenizer: new SpmTokenizer(spmVocabFromGGUF(gguf)), addBos: gguf.getBool(KEY.addBos, true) };
}

/** Read the GGUF header at `path` and build its tokenizer. */
export function loadGGUFTokenizer(path: string): GGUFTokenizer {
  return tokenizerFromGGUF(readGGUF(path));
}
