/**
 * A real tokenizer for a written model: the `tokenizer.*` metadata of a GGUF file (a model, or one
 * of llama.cpp's vocabulary-only ggml-vocab-*.gguf files), optionally padded to a larger
 * vocabulary the way llama.cpp's convert_hf_to_gguf.py pads a model whose embedding has more rows
 * than its tokenizer has tokens (Qwen2.5's 151936 rows): `[PAD<id>]` tokens of type UNUSED.
 */
import { InputError } from "../errors.ts";
import { readGGUF, type GGUFValue } from "../model/gguf.ts";
import { gguf } from "./gguf-writer.ts";

/** llama_token_type CONTROL: a special token (a turn marker, a call token) that text names only as a special. */
const TOKEN_TYPE_CONTROL = 3;
/** llama_token_type UNUSED: a token no text encodes to. */
const TOKEN_TYPE_UNUSED = 5;
/** The score SentencePiece vocabularies give such tokens. */
const UNUSED_SCORE = -1000;

/** The `tokenizer.*` metadata of the GGUF file at `path`, in file order. */
export function tokenizerMetadata(path: string): Map<string, GGUFValue> {
  const file = readGGUF(path);
  return new Map([...file.metadata].filter(([key]) => key.startsWith("tokenizer.")));
}

/** Tokens in tokenizer metadata (0 when it has none). */
export function vocabularySize(meta: ReadonlyMap<string, GGUFValue>): number {
  const tokens = meta.get("tokenizer.ggml.tokens");
  return tokens?.type === "array" && tokens.value.itemType === "string" ? tokens.value.items.length : 0;
}

/**
 * `meta` with `pieces` appended to its vocabulary as CONTROL tokens of score 0, as a chat family's
 * own vocabulary types its turn markers and call tokens (Gemma's `<start_of_turn>`, Mistral's
 * `[TOOL_CALLS]`): a rendered template then tokenizes each to one id.
 */
export function appendControlTokens(meta: ReadonlyMap<string, GGUFValue>, pieces: readonly string[]): Map<string, GGUFValue> {
  const tokens = meta.get("tokenizer.ggml.tokens");
  const scores = meta.get("tokenizer.ggml.scores");
  const types = meta.get("tokenizer.ggml.token_type");
  if (tokens?.type !== "array" || tokens.value.itemType !== "string") throw new InputError("tokenizer metadata has no tokenizer.ggml.tokens");
  if (scores?.type !== "array" || scores.value.itemType !== "f32") throw new InputError("tokenizer metadata has no tokenizer.ggml.scores");
  if (types?.type !== "array" || types.value.itemType !== "i32") throw new InputError("tokenizer metadata has no tokenizer.ggml.token_type");
  const have = tokens.value.items;
  const out = new Map(meta);
  out.set("tokenizer.ggml.tokens", gguf.strings([...Array.from({ length: have.length }, (_, i) => have.bytes(i)), ...pieces]));
  out.set("tokenizer.ggml.scores", gguf.f32s([...scores.value.items, ...pieces.map(() => 0)]));
  out.set("tokenizer.ggml.token_type", gguf.i32s([...types.value.items, ...pieces.map(() => TOKEN_TYPE_CONTROL)]));
  return out;
}

/**
 * `meta` with `[PAD<id>]` tokens of type UNUSED appended up to `size` tokens (and scores and types
 * extended to match); `meta` itself when it already has `size`. A smaller size is refused.
 */
export function padVocabulary(meta: ReadonlyMap<string, GGUFValue>, size: number): Map<string, GGUFValue> {
  const tokens = meta.get("tokenizer.ggml.tokens");
  if (tokens?.type !== "array" || tokens.value.itemType !== "string") throw new InputError("tokenizer metadata has no tokenizer.ggml.tokens");
  const have = tokens.value.items;
  if (have.length > size) throw new InputError(`a vocabulary of ${have.length} tokens cannot be padded down to ${size}`);
  const out = new Map(meta);
  if (have.length === size) return out;
  const pieces: (string | Uint8Array)[] = [];
  for (let i = 0; i < size; i++) pieces.push(i < have.length ? have.bytes(i) : `[PAD${i}]`);
  out.set("tokenizer.ggml.tokens", gguf.strings(pieces));
  const scores = meta.get("tokenizer.ggml.scores");
  if (scores?.type === "array" && scores.value.itemType === "f32") {
    const padded = new Float32Array(size).fill(UNUSED_SCORE);
    padded.set(scores.value.items);
    out.set("tokenizer.ggml.scores", { type: "array", value: { itemType: "f32", items: padded } });
  }
  const types = meta.get("tokenizer.ggml.token_type");
  if (types?.type === "array" && types.value.itemType === "i32") {
    const padded = new Int32Array(size).fill(TOKEN_TYPE_UNUSED);
    padded.set(types.value.items);
    out.set("tokenizer.ggml.token_type", { type: "array", value: { itemType: "i32", items: padded } });
  }
  return out;
}
