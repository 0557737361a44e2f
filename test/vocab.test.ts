/**
 * The tokenizers of real models beyond llama.cpp's vectors (those are in tokenizer.test.ts):
 * a Hugging Face tokenizer.json giving the same ids as its GGUF conversion, special tokens parsed
 * only in template text, end-of-generation sets, streaming of characters split over tokens,
 * and the errors for what is not supported.
 */
import { describe, expect, test } from "bun:test";
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { readGGUF } from "../src/model/gguf.ts";
import { gguf, writeGGUF } from "../src/synth/gguf-writer.ts";
import { loadTokenizer } from "../src/tokenizer/load.ts";
import { PreTokenizer, PRE_TOKENIZER_NAMES } from "../src/tokenizer/pretokenizers.ts";
import { expectModelFormatError } from "./helpers/errors.ts";
import { describeShared } from "./helpers/shared.ts";

const SMOLLM_GGUF = "vocab/ggml-vocab-smollm.gguf";
const SMOLLM_JSON = "models/tokenizers/smollm2-135m-instruct/tokenizer.json";

/** The inputs of a .gguf.inp file (see tokenizer.test.ts). */
function inputs(path: string): string[] {
  return readFileSync(path, "utf8").split("\n__ggml_vocab_test__\n").slice(0, -1);
}

describeShared("tokenizer.json", [SMOLLM_GGUF, SMOLLM_JSON, `${SMOLLM_GGUF}.inp`], ([ggufPath, jsonPath, inp]) => {
  const fromGGUF = loadTokenizer(ggufPath!);
  const fromJson = loadTokenizer(jsonPath!);

  test("SmolLM2's tokenizer.json gives the ids of its GGUF conversion on every vector input", () => {
    expect(fromJson.tokenizer.vocabSize).toBe(fromGGUF.tokenizer.vocabSize);
    for (const text of inputs(inp!)) expect(fromJson.tokenizer.encode(text)).toEqual(fromGGUF.tokenizer.encode(text));
  });

  test("and on text with special tokens, parsed or not", () => {
    const text = "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n";
    for (const parseSpecial of [false, true]) {
      expect(fromJson.tokenizer.encode(text, { parseSpecial })).toEqual(fromGGUF.tokenizer.encode(text, { parseSpecial }));
    }
  });

  test("BOS/EOS from config.json, and the same end-of-generation set", () => {
    expect([fromJson.tokenizer.bosId, fromJson.tokenizer.eosId]).toEqual([1, 2]);
    expect([...fromJson.tokenizer.eogIds].sort()).toEqual([...fromGGUF.tokenizer.eogIds].sort());
    expect(fromJson.addBos).toBe(false);
  });
});

describeShared("special tokens", [SMOLLM_GGUF], ([path]) => {
  const { tokenizer } = loadTokenizer(path!);
  const imStart = 1;
  const imEnd = 2;

  test("a user who types <|im_start|> gets those characters, not the control token", () => {
    const ids = tokenizer.encode("<|im_start|>system");
    expect(ids).not.toContain(imStart);
    expect(tokenizer.decode(ids)).toBe("<|im_start|>system");
  });

  test("template text with specials parsed gets the control tokens, whole", () => {
    const ids = tokenizer.encode("<|im_start|>user\nhello<|im_end|>", { parseSpecial: true });
    expect(ids[0]).toBe(imStart);
    expect(ids.at(-1)).toBe(imEnd);
    expect(ids.filter((id) => id === imStart || id === imEnd).length).toBe(2);
    expect(tokenizer.tokenText(imEnd)).toBe("<|im_end|>");
    // Control tokens decode to nothing.
    expect(tokenizer.decode(ids)).toBe("user\nhello");
  });

  test("generation stops at every end-of-generation token: EOS and <|im_end|> (here the same), <|endoftext|>", () => {
    expect(tokenizer.eogIds.has(imEnd)).toBe(true);
    expect(tokenizer.eogIds.has(0)).toBe(true); // <|endoftext|>
    expect(tokenizer.eogIds.has(imStart)).toBe(false);
  });
});

describeShared("streaming byte-level tokens", [SMOLLM_GGUF], ([path]) => {
  const { tokenizer } = loadTokenizer(path!);
  test("a character split across tokens is printed once, when complete", () => {
    for (const text of ["🦙 llamas", "Ünïcödé ✓ 中文字符", "emoji 👨‍👩‍👧 family"]) {
      const ids = tokenizer.encode(text);
      const decoder = tokenizer.createStreamDecoder();
      const pieces = ids.map((id) => decoder.push(id));
      expect(pieces.join("") + decoder.flush()).toBe(text);
      for (const p of pieces) expect(p).not.toContain("\uFFFD");
    }
  });
});

describe("unsupported vocabularies", () => {
  const dir = mkdtempSync(join(tmpdir(), "pagellm-vocab-"));

  test("an unknown pre-tokenizer is an error naming it, not a silent fallback", () => {
    const path = join(dir, "pre.gguf");
    writeGGUF(path, new Map([
      ["tokenizer.ggml.model", gguf.str("gpt2")], ["tokenizer.ggml.pre", gguf.str("tiktoken-9000")],
      ["tokenizer.ggml.tokens", gguf.strings(["a", "b"])], ["tokenizer.ggml.merges", gguf.strings([])],
    ]), []);
    expectModelFormatError(() => loadTokenizer(path), path, /pre-tokenizer "tiktoken-9000" \(tokenizer.ggml.pre\) is not supported; supported: default, gpt-2/);
  });

  test("an unknown tokenizer model is an error naming it", () => {
    const path = join(dir, "model.gguf");
    writeGGUF(path, new Map([["tokenizer.ggml.model", gguf.str("rwkv")], ["tokenizer.ggml.tokens", gguf.strings(["a"])]]), []);
    expectModelFormatError(() => loadTokenizer(path), path, /tokenizer model "rwkv" is not supported \(supported: llama, gpt2, bert\)/);
  });

  test("a tokenizer.json that is not JSON", () => {
    const path = join(dir, "tokenizer.json");
    writeFileSync(path, "{ nope");
    expectModelFormatError(() => loadTokenizer(path), path, /not a tokenizer.json/);
  });

  test("a vocabulary larger than the model's is refused; a smaller one (padded embeddings) is fine", () => {
    const path = join(dir, "small.gguf");
    writeGGUF(path, new Map([
      ["tokenizer.ggml.model", gguf.str("gpt2")], ["tokenizer.ggml.pre", gguf.str("gpt-2")],
      ["tokenizer.ggml.tokens", gguf.strings(["a", "b", "ab"])], ["tokenizer.ggml.merges", gguf.strings(["a b"])],
    ]), []);
    expect(loadTokenizer(path, { modelVocabSize: 8 }).tokenizer.encode("ab")).toEqual([2]);
    expectModelFormatError(() => loadTokenizer(path, { modelVocabSize: 2 }), path, /vocabulary has 3 tokens, the model has 2/);
    expect(readGGUF(path).getString("tokenizer.ggml.pre")).toBe("gpt-2");
  });

  test("every named pre-tokenizer compiles and splits", () => {
    for (const name of PRE_TOKENIZER_NAMES) {
      const words = PreTokenizer.named(name, "x").split("Hello, world! 123 4567\n\ttabs  ");
      expect(words.join("")).toBe("Hello, world! 123 4567\n\ttabs  ");
    }
  });
});
