/**
 * llama.cpp's tokenizer vectors: every vocabulary in ../shared/vocab that has a .gguf must give exactly the
 * ids of NAME.gguf.out for each input of NAME.gguf.inp (common_tokenize with add_special=false,
 * parse_special=false), and decoding those ids must give the input back.
 */
import { expect, test } from "bun:test";
import { existsSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { loadGGUFTokenizer } from "../src/tokenizer/index.ts";
import { SHARED_DIR } from "./helpers/shared.ts";
import { describeShared } from "./helpers/shared.ts";
import { mixedTexts, readVectors } from "./helpers/vocab-vectors.ts";

const VOCAB_DIR = join(SHARED_DIR, "vocab");
const vocabNames = existsSync(VOCAB_DIR)
  ? readdirSync(VOCAB_DIR)
      .filter((file) => file.endsWith(".gguf.inp") && existsSync(join(VOCAB_DIR, file.replace(/\.inp$/, ""))))
      .map((file) => file.replace(/\.gguf\.inp$/, ""))
  : [];

/** Every vocabulary file, with or without vectors (baichuan and gpt-neox have none). */
const allVocabNames = existsSync(VOCAB_DIR)
  ? readdirSync(VOCAB_DIR)
      .filter((file) => file.endsWith(".gguf"))
      .map((file) => file.replace(/\.gguf$/, ""))
  : [];

describeShared("vocabulary vectors", ["vocab"], () => {
  test("finds vector files with a vocabulary beside them", () => {
    expect(vocabNames.length).toBeGreaterThan(0);
  });
  for (const name of vocabNames) {
    test(`${name}: llama.cpp's ids, and decode round-trips`, () => {
      const { tokenizer } = loadGGUFTokenizer(join(VOCAB_DIR, `${name}.gguf`));
      const vectors = readVectors(join(VOCAB_DIR, `${name}.gguf.inp`), join(VOCAB_DIR, `${name}.gguf.out`));
      const failures: string[] = [];
      for (const { input, ids } of vectors) {
        const got = tokenizer.encode(input);
        if (got.join(" ") !== ids.join(" ")) failures.push(`${JSON.stringify(input)}: got ${got.join(" ")} expected ${ids.join(" ")}`);
        // WordPiece lowercases and drops accents: its decode cannot give the input back.
        if (name !== "ggml-vocab-bert-bge" && tokenizer.decode(got) !== input) failures.push(`${JSON.stringify(input)}: decodes to ${JSON.stringify(tokenizer.decode(got))}`);
      }
      expect(failures.slice(0, 5)).toEqual([]);
    });
  }

  for (const name of allVocabNames.filter((name) => name !== "ggml-vocab-bert-bge")) {
    test(`${name}: mixed-script texts round-trip through encode, decode and stream decode`, () => {
      const { tokenizer } = loadGGUFTokenizer(join(VOCAB_DIR, `${name}.gguf`));
      const failures: string[] = [];
      for (const text of mixedTexts(300)) {
        const ids = tokenizer.encode(text);
        const decoder = tokenizer.createStreamDecoder();
        const streamed = ids.map((id) => decoder.push(id)).join("") + decoder.flush();
        // A control character whose byte has no token (falcon, smollm lack some) is dropped, as llama.cpp does.
        const expected = [...text].filter((char) => tokenizer.encode(char).length > 0).join("");
        if (tokenizer.decode(ids) !== expected || streamed !== expected) failures.push(JSON.stringify(text));
      }
      expect(failures.slice(0, 5)).toEqual([]);
    });
  }
});
