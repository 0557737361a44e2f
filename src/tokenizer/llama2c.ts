/**
 * Reader for llama2.c's `tokenizer.bin`: i32 max_token_length, then per token f32 score, i32 byte length,
 * that many bytes. The file does not store the token count, so it is read to EOF and checked against the
 * model's vocab_size. Pieces are raw bytes with real spaces (the export replaced "▁"); ids 0, 1, 2 are
 * <unk>, BOS and EOS, and ids 3..258 are the byte tokens: "<0xXX>" pieces, or in the "raw bytes" variant the
 * single character U+00XX (UTF-8 encoded).
 */
import { readFileSync } from "node:fs";
import { ModelFormatError } from "../errors.ts";
import { hexBytePieceValue, PieceTable, SpmTokenizer, TokenType, type SpmVocab } from "./spm.ts";

export const LLAMA2C_UNK_ID = 0;
export const LLAMA2C_BOS_ID = 1;
export const LLAMA2C_EOS_ID = 2;
const FIRST_BYTE_TOKEN_ID = 3;

/** Vocabulary entries of a tokenizer.bin, in file order. */
export interface Llama2cTokenizerFile {
  readonly maxTokenLength: number;
  readonly pieces: PieceTable;
  readonly scores: Float32Array;
}

/** Parse tokenizer.bin bytes. Throws ModelFormatError naming `file` when truncated or absurd. */
export function parseLlama2cTokenizer(bytes: Uint8Array, file: string): Llama2cTokenizerFile {
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const fail = (problem: string): never => {
    throw new ModelFormatError(file, problem);
  };
  if (bytes.length < 4) fail(`truncated at byte ${bytes.length} while reading max_token_length`);
  const maxTokenLength = view.getInt32(0, true);
  if (maxTokenLength <= 0 || maxTokenLength > bytes.length) {
    fail(`max_token_length ${maxTokenLength} is absurd for a ${bytes.length}-byte file (not a llama2.c tokenizer?)`);
  }
  const starts: number[] = [];
  const lengths: number[] = [];
  const scores: number[] = [];
  let at = 4;
  while (at < bytes.length) {
    const index = starts.length;
    if (at + 8 > bytes.length) fail(`truncated at byte ${bytes.length} while reading the score and length of token ${index}`);
    scores.push(view.getFloat32(at, true));
    const length = view.getInt32(at + 4, true);
    if (length < 0 || length > maxTokenLength) {
      fail(`token ${index} at byte ${at} has absurd length ${length} (max_token_length is ${maxTokenLength})`);
    }
    at += 8;
    if (at + length > bytes.length) fail(`truncated at byte ${bytes.length} while reading the ${length} bytes of token ${index}`);
    starts.push(at);
    lengths.push(length);
    at += length;
  }
  const pieces = PieceTable.build(starts.length, (i) => bytes.subarray(starts[i], starts[i] + lengths[i]));
  return { maxTokenLength, pieces, scores: Float32Array.from(scores) };
}

const utf8Encoder = new TextEncoder();

function equalBytes(a: Uint8Array, b: Uint8Array): boolean {
  return a.length === b.length && a.every((byte, i) => byte === b[i]);
}

/** True when ids 3..258 are exactly the characters U+0000..U+00FF (the raw-bytes variant). */
function hasRawByteTokens(pieces: PieceTable): boolean {
  if (pieces.length < FIRST_BYTE_TOKEN_ID + 256) return false;
  for (let byte = 0; byte < 256; byte++) {
    const expected = utf8Encoder.encode(String.fromCharCode(byte));
    if (!equalBytes(pieces.bytes(FIRST_BYTE_TOKEN_ID + byte), expected)) return false;
  }
  return true;
}

/** Token types and byte values: ids 0..2 are special, byte tokens per the "<0xXX>" or raw-bytes convention. */
function classifyTokens(pieces: PieceTable): { types: Uint8Array; byteValues: Int16Array } {
  const types = new Uint8Array(pieces.length).fill(TokenType.normal);
  const byteValues = new Int16Array(pieces.length).fill(-1);
  const rawBytes = hasRawByteTokens(pieces);
  for (let id = 0; id < pieces.length; id++) {
    const byte = rawBytes
      ? id >= FIRST_BYTE_TOKEN_ID && id < FIRST_BYTE_TOKEN_ID + 256
        ? id - FIRST_BYTE_TOKEN_ID
        : -1
      : hexBytePieceValue(pieces.bytes(id));
    if (byte >= 0) {
      types[id] = TokenType.byte;
      byteValues[id] = byte;
    }
  }
  types[LLAMA2C_UNK_ID] = TokenType.unknown;
  types[LLAMA2C_BOS_ID] = TokenType.control;
  types[LLAMA2C_EOS_ID] = TokenType.control;
  for (const id of [LLAMA2C_UNK_ID, LLAMA2C_BOS_ID, LLAMA2C_EOS_ID]) byteValues[id] = -1;
  return { types, byteValues };
}

/** Build the tokenizer of a parsed tokenizer.bin; `file` is named in errors. */
export function llama2cTokenizerFromFile(parsed: Llama2cTokenizerFile, file: string, expectedVocabSize: number): SpmTokenizer {
  const count = parsed.pieces.length;
  if (count !== expectedVocabSize) {
    throw new ModelFormatError(
      file,
      `has ${count} tokens but the model's vocab_size is ${expectedVocabSize} (wrong tokenizer for this model?)`,
    );
  }
  if (count < FIRST_BYTE_TOKEN_ID) throw new ModelFormatError(file, `has only ${count} tokens; <unk>, BOS and EOS are required`);
  const vocab: SpmVocab = {
    file,
    pieces: parsed.pieces,
    scores: parsed.scores,
    ...classifyTokens(parsed.pieces),
    bosId: LLAMA2C_BOS_ID,
    eosId: LLAMA2C_EOS_ID,
    unkId: LLAMA2C_UNK_ID,
    // run.c always adds the dummy prefix to non-empty text and strips it after BOS.
    addSpacePrefix: true,
    spacesAsMetaspace: false,
  };
  return new SpmTokenizer(vocab);
}

/**
 * Load llama2.c's tokenizer.bin for a model with `expectedVocabSize` tokens (undefined: as many as the file
 * holds). Throws ModelFormatError naming the file when it cannot be read, is truncated mid-entry, has absurd
 * lengths, or has another token count.
 */
export function loadLlama2cTokenizer(path: string, expectedVocabSize?: number): SpmTokenizer {
  let bytes: Uint8Array;
  try {
    bytes = readFileSync(path);
  } catch (error) {
    throw new ModelFormatError(path, `cannot read tokenizer: ${error instanceof Error ? error.message : String(error)}`);
  }
  const parsed = parseLlama2cTokenizer(bytes, path);
  return llama2cTokenizerFromFile(parsed, path, expectedVocabSize ?? parsed.pieces.length);
}
