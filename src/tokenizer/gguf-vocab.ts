/**
 * Tokenizers from the `tokenizer.ggml.*` metadata of a GGUF file, one per `tokenizer.ggml.model`:
 * "llama" (SentencePiece BPE), "gpt2" (byte-level BPE with the pre-tokenizer `tokenizer.ggml.pre`) and
 * "bert" (WordPiece).
 */
import { ModelFormatError } from "../errors.ts";
import { readGGUF, type GGUFFile } from "../model/gguf.ts";
import { BpeTokenizer } from "./bpe.ts";
import { preTokenizerByName } from "./pretokenize.ts";
import { endOfGenerationIds, type EogMetadata, type StripFlags } from "./special.ts";
import { hexBytePieceValue, SpmTokenizer, TokenType, type SpmVocab } from "./spm.ts";
import type { Tokenizer } from "./tokenizer.ts";
import { WpmTokenizer } from "./wpm.ts";

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
  addEos: "tokenizer.ggml.add_eos_token",
  merges: "tokenizer.ggml.merges",
  pre: "tokenizer.ggml.pre",
  eot: "tokenizer.ggml.eot_token_id",
  eom: "tokenizer.ggml.eom_token_id",
  fimPad: "tokenizer.ggml.fim_pad_token_id",
  fimRep: "tokenizer.ggml.fim_rep_token_id",
  fimSep: "tokenizer.ggml.fim_sep_token_id",
} as const;

/**
 * lstrip/rstrip of special tokens, which GGUF does not store: llama.cpp sets them by model name (Phi-3:
 * whitespace after its special tokens is dropped, except after <unk>, <s> and <|endoftext|>) and by
 * pre-tokenizer (jina v2: whitespace before <mask>).
 */
function stripFlags(gguf: GGUFFile, textOf: (id: number) => string): StripFlags | undefined {
  const name = gguf.getString("general.name", "").toLowerCase();
  const pre = gguf.getString(KEY.pre, "");
  if (name.includes("phi-3") || name.includes("phi3")) {
    const keep = new Set(["<unk>", "<s>", "<|endoftext|>"]);
    return (id) => ({ lstrip: false, rstrip: !keep.has(textOf(id)) });
  }
  if (["jina-v2-de", "jina-v2-es", "jina-v2-code"].includes(pre)) {
    return (id) => ({ lstrip: textOf(id) === "<mask>", rstrip: false });
  }
  return undefined;
}

/** The metadata ids end-of-generation detection starts from. */
function eogMetadata(gguf: GGUFFile, eosId: number | null): EogMetadata {
  return {
    eosId,
    eotId: tokenIdOrNone(gguf, KEY.eot, null),
    eomId: tokenIdOrNone(gguf, KEY.eom, null),
    fimIds: [KEY.fimPad, KEY.fimRep, KEY.fimSep].map((key) => tokenIdOrNone(gguf, key, null)),
  };
}

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
  const classified = classifyTokens(gguf, count, (id) => pieces.bytes(id));
  const eosId = tokenIdOrNone(gguf, KEY.eos, 2);
  const eogIds = endOfGenerationIds(eogMetadata(gguf, eosId), count, classified.types, (id) => pieces.get(id));
  const scores = gguf.has(KEY.scores) ? gguf.getF32Array(KEY.scores) : new Float32Array(count);
  if (scores.length !== count) {
    throw new ModelFormatError(gguf.path, `${KEY.scores} has ${scores.length} entries for ${count} tokens`);
  }
  return {
    file: gguf.path,
    pieces,
    scores,
    ...classified,
    // llama.cpp's defaults for SentencePiece vocabularies.
    bosId: tokenIdOrNone(gguf, KEY.bos, 1),
    eosId,
    eogIds,
    strip: stripFlags(gguf, (id) => pieces.get(id)),
    unkId: tokenIdOrNone(gguf, KEY.unk, 0),
    addSpacePrefix: gguf.getBool(KEY.addSpacePrefix, true),
    spacesAsMetaspace: true,
  };
}

/** Token types of a vocabulary without SentencePiece byte tokens; missing types are normal tokens. */
function tokenTypes(gguf: GGUFFile, count: number): Uint8Array {
  const types = new Uint8Array(count).fill(TokenType.normal);
  if (!gguf.has(KEY.tokenType)) return types;
  const stored = gguf.getI32Array(KEY.tokenType);
  if (stored.length !== count) throw new ModelFormatError(gguf.path, `${KEY.tokenType} has ${stored.length} entries for ${count} tokens`);
  stored.forEach((type, id) => {
    if (type < TokenType.undefined || type > TokenType.byte) throw new ModelFormatError(gguf.path, `token ${id} has unknown token type ${type}`);
    types[id] = type;
  });
  return types;
}

/** Byte-level BPE from a "gpt2" vocabulary. A missing `tokenizer.ggml.pre` is llama.cpp's "default". */
function bpeFromGGUF(gguf: GGUFFile): BpeTokenizer {
  const stored = gguf.getStringArray(KEY.tokens);
  const tokens = Array.from({ length: stored.length }, (_, id) => stored.get(id));
  const storedMerges = gguf.getStringArray(KEY.merges);
  const merges = Array.from({ length: storedMerges.length }, (_, rank) => storedMerges.get(rank));
  const types = tokenTypes(gguf, tokens.length);
  const eosId = tokenIdOrNone(gguf, KEY.eos, 11);
  const eogIds = endOfGenerationIds(eogMetadata(gguf, eosId), tokens.length, types, (id) => tokens[id]);
  return new BpeTokenizer({
    file: gguf.path,
    tokens,
    types,
    merges,
    preTokenizer: preTokenizerByName(gguf.getString(KEY.pre, "default"), gguf.path),
    // llama.cpp's defaults for BPE vocabularies.
    bosId: tokenIdOrNone(gguf, KEY.bos, 11),
    eosId,
    eogIds,
    strip: stripFlags(gguf, (id) => tokens[id]),
  });
}

/** WordPiece from a "bert" vocabulary; BOS and EOS are BERT's [CLS] and [SEP]. */
function wpmFromGGUF(gguf: GGUFFile): WpmTokenizer {
  const stored = gguf.getStringArray(KEY.tokens);
  const tokens = Array.from({ length: stored.length }, (_, id) => stored.get(id));
  const types = tokenTypes(gguf, tokens.length);
  const eosId = tokenIdOrNone(gguf, "tokenizer.ggml.seperator_token_id", 102);
  const eogIds = endOfGenerationIds(eogMetadata(gguf, eosId), tokens.length, types, (id) => tokens[id]);
  return new WpmTokenizer({
    file: gguf.path,
    tokens,
    types,
    unkId: tokenIdOrNone(gguf, KEY.unk, 100) ?? 100,
    bosId: tokenIdOrNone(gguf, "tokenizer.ggml.cls_token_id", 101),
    eosId,
    eogIds,
  });
}

/** A GGUF file's tokenizer and what its metadata says about BOS and EOS. */
export interface GGUFTokenizer {
  readonly tokenizer: Tokenizer;
  /** `tokenizer.ggml.add_bos_token` (llama.cpp's default per vocabulary kind when absent). */
  readonly addBos: boolean;
  /** `tokenizer.ggml.add_eos_token`. */
  readonly addEos: boolean;
  /** `tokenizer.chat_template`, when the file has one. */
  readonly chatTemplate: string | null;
}

/** Build the tokenizer described by a GGUF file's metadata. Throws ModelFormatError for unsupported models. */
export function tokenizerFromGGUF(gguf: GGUFFile): GGUFTokenizer {
  const model = gguf.getString(KEY.model);
  const chatTemplate = gguf.has("tokenizer.chat_template") ? gguf.getString("tokenizer.chat_template") : null;
  const addEos = gguf.getBool(KEY.addEos, model === "bert");
  switch (model) {
    case "llama":
      return { tokenizer: new SpmTokenizer(spmVocabFromGGUF(gguf)), addBos: gguf.getBool(KEY.addBos, true), addEos, chatTemplate };
    case "gpt2":
      return { tokenizer: bpeFromGGUF(gguf), addBos: gguf.getBool(KEY.addBos, false), addEos, chatTemplate };
    case "bert":
      return { tokenizer: wpmFromGGUF(gguf), addBos: gguf.getBool(KEY.addBos, true), addEos, chatTemplate };
    default:
      throw new ModelFormatError(
        gguf.path,
        `tokenizer model "${model}" is not supported (supported: "llama" SentencePiece, "gpt2" byte-level BPE, "bert" WordPiece)`,
      );
  }
}

/** Read the GGUF header at `path` and build its tokenizer. */
export function loadGGUFTokenizer(path: string): GGUFTokenizer {
  return tokenizerFromGGUF(readGGUF(path));
}
