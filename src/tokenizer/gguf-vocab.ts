/**
 * Tokenizers from the `tokenizer.ggml.*` metadata of a GGUF file, one kind per
 * `tokenizer.ggml.model`: "llama" (SentencePiece BPE), "gpt2" (byte-level BPE with the
 * pre-tokenizer `tokenizer.ggml.pre` names), "bert" (WordPiece).
 */
import { ModelFormatError } from "../errors.ts";
import { quoteFileText } from "../util/file-text.ts";
import { readGGUF, type GGUFFile } from "../model/gguf.ts";
import { BpeTokenizer } from "./bpe.ts";
import { PreTokenizer } from "./pretokenizers.ts";
import { hexBytePieceValue, SpmTokenizer, TokenType, type SpmVocab } from "./spm.ts";
import type { StripFlags } from "./special-tokens.ts";
import type { Tokenizer } from "./tokenizer.ts";
import { addEogByText } from "./eog.ts";
import { WordPieceTokenizer } from "./wordpiece.ts";

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
  eot: "tokenizer.ggml.eot_token_id",
  eom: "tokenizer.ggml.eom_token_id",
  fimPad: "tokenizer.ggml.fim_pad_token_id",
  fimRep: "tokenizer.ggml.fim_rep_token_id",
  fimSep: "tokenizer.ggml.fim_sep_token_id",
  pre: "tokenizer.ggml.pre",
  merges: "tokenizer.ggml.merges",
  cls: "tokenizer.ggml.cls_token_id",
  sep: "tokenizer.ggml.seperator_token_id",
  lowercase: "tokenizer.ggml.normalizer.lowercase",
  stripAccents: "tokenizer.ggml.normalizer.strip_accents",
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

/** A GGUF file's tokenizer and whether prompts get BOS (and EOS) added. */
export interface GGUFTokenizer {
  readonly tokenizer: Tokenizer;
  /** `tokenizer.ggml.add_bos_token` (default: true for SentencePiece, false otherwise, as llama.cpp). */
  readonly addBos: boolean;
  readonly addEos: boolean;
  /** `tokenizer.chat_template`, the model's Jinja chat template. */
  readonly chatTemplate: string | null;
}

/** The token types, or all normal when the file has none. */
function tokenTypes(gguf: GGUFFile, count: number): Uint8Array {
  if (!gguf.has(KEY.tokenType)) return new Uint8Array(count).fill(TokenType.normal);
  const stored = gguf.getI32Array(KEY.tokenType);
  if (stored.length !== count) throw new ModelFormatError(gguf.path, `${KEY.tokenType} has ${stored.length} entries for ${count} tokens`);
  return Uint8Array.from(stored, (t) => (t >= 0 && t <= TokenType.byte ? t : TokenType.normal));
}

/**
 * EOT, EOM and FIM pad/repo/separator ids the metadata names, and every token whose text marks an
 * end of generation, as llama.cpp's is_eog (eog.ts: `types` adjusted in place as llama.cpp does).
 */
function eogIds(gguf: GGUFFile, texts: readonly string[], types: Uint8Array): number[] {
  const ids = new Set<number>();
  for (const key of [KEY.eot, KEY.eom, KEY.fimPad, KEY.fimRep, KEY.fimSep]) {
    const id = tokenIdOrNone(gguf, key, null);
    if (id !== null && id < texts.length) ids.add(id);
  }
  addEogByText(texts, types, ids);
  return [...ids];
}

/**
 * lstrip/rstrip of special tokens, which GGUF does not store: llama.cpp sets them by model name. Phi-3
 * drops the whitespace after its special tokens (after </s> too), except after <unk>, <s> and
 * <|endoftext|>.
 */
function stripFlagsByName(gguf: GGUFFile, texts: readonly string[], types: Uint8Array): StripFlags | undefined {
  const name = gguf.getString("general.name", "").toLowerCase();
  if (!name.includes("phi-3") && !name.includes("phi3")) return undefined;
  const keep = new Set(["<unk>", "<s>", "<|endoftext|>"]);
  const flags = new Map<number, { lstrip: boolean; rstrip: boolean }>();
  texts.forEach((text, id) => {
    const special = types[id] === TokenType.control || types[id] === TokenType.userDefined || types[id] === TokenType.unknown;
    if ((special || text === "</s>") && !keep.has(text)) flags.set(id, { lstrip: false, rstrip: true });
  });
  return flags;
}

function stringsOf(gguf: GGUFFile, key: string): string[] {
  const array = gguf.getStringArray(key);
  return Array.from({ length: array.length }, (_, i) => array.get(i));
}

/** Build the tokenizer described by a GGUF file's metadata. Throws ModelFormatError for unsupported ones. */
export function tokenizerFromGGUF(gguf: GGUFFile): GGUFTokenizer {
  const chatTemplate = gguf.has("tokenizer.chat_template") ? gguf.getString("tokenizer.chat_template") : null;
  return { ...tokenizerOf(gguf), chatTemplate };
}

function tokenizerOf(gguf: GGUFFile): Omit<GGUFTokenizer, "chatTemplate"> {
  const model = gguf.getString(KEY.model);
  // Before any token id is checked against it (BOS 1 "outside the vocabulary (0..-1)").
  if (gguf.getStringArray(KEY.tokens).length === 0) throw new ModelFormatError(gguf.path, `${KEY.tokens} is empty: the file has no vocabulary`);
  const checkId = (id: number | null, count: number, what: string): number | null => {
    if (id !== null && id >= count) throw new ModelFormatError(gguf.path, `${what} token id ${id} is outside the vocabulary (0..${count - 1})`);
    return id;
  };
  if (model === "llama") {
    const vocab = spmVocabFromGGUF(gguf);
    const texts = stringsOf(gguf, KEY.tokens);
    return {
      tokenizer: new SpmTokenizer({
        ...vocab,
        eogIds: eogIds(gguf, texts, vocab.types),
        stripFlags: stripFlagsByName(gguf, texts, vocab.types),
      }),
      addBos: gguf.getBool(KEY.addBos, true),
      addEos: gguf.getBool(KEY.addEos, false),
    };
  }
  if (model === "gpt2") {
    const tokens = stringsOf(gguf, KEY.tokens);
    const types = tokenTypes(gguf, tokens.length);
    const bosId = checkId(tokenIdOrNone(gguf, KEY.bos, null), tokens.length, "BOS");
    const eosId = checkId(tokenIdOrNone(gguf, KEY.eos, null), tokens.length, "EOS");
    const eog = new Set(eogIds(gguf, tokens, types));
    if (eosId !== null) eog.add(eosId);
    const tokenizer = new BpeTokenizer({
      file: gguf.path, tokens, types, merges: gguf.has(KEY.merges) ? stringsOf(gguf, KEY.merges) : [],
      // A file without a pre-tokenizer name gets llama.cpp's default (with its warning there).
      preTokenizer: PreTokenizer.named(gguf.getString(KEY.pre, "default"), gguf.path),
      bosId, eosId, eogIds: eog,
    });
    return { tokenizer, addBos: gguf.getBool(KEY.addBos, false), addEos: gguf.getBool(KEY.addEos, false) };
  }
  if (model === "bert") {
    const tokens = stringsOf(gguf, KEY.tokens);
    const unkId = checkId(tokenIdOrNone(gguf, KEY.unk, 100), tokens.length, "unknown");
    const lowercase = gguf.getBool(KEY.lowercase, gguf.getString(KEY.pre, "") !== "whitespace");
    if (unkId === null) throw new ModelFormatError(gguf.path, "a WordPiece vocabulary needs an unknown token");
    const tokenizer = new WordPieceTokenizer({
      file: gguf.path, tokens, types: tokenTypes(gguf, tokens.length), unkId,
      bosId: checkId(tokenIdOrNone(gguf, KEY.cls, 101), tokens.length, "CLS"),
      eosId: checkId(tokenIdOrNone(gguf, KEY.sep, 102), tokens.length, "SEP"),
      // As llama.cpp: lower-case unless the file says otherwise (or its pre-tokenizer is "whitespace"), strip accents as it lower-cases.
      lowercase,
      stripAccents: gguf.getBool(KEY.stripAccents, lowercase),
    });
    return { tokenizer, addBos: gguf.getBool(KEY.addBos, true), addEos: gguf.getBool(KEY.addEos, true) };
  }
  throw new ModelFormatError(gguf.path, `tokenizer model ${quoteFileText(model)} is not supported (supported: llama, gpt2, bert)`);
}

/** Read the GGUF header at `path` and build its tokenizer. */
export function loadGGUFTokenizer(path: string): GGUFTokenizer {
  return tokenizerFromGGUF(readGGUF(path));
}
