/**
 * llama.cpp's tokenizer vectors: every vocabulary in ../shared/vocab that has a .gguf must give exactly the
 * ids of NAME.gguf.out for each input of NAME.gguf.inp (common_tokenize with add_special=false,
 * parse_special=false), and decoding those ids must give the input back.
 */
import { expect, test } from "bun:test";
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { loadGGUFTokenizer } from "../src/tokenizer/index.ts";
import { SHARED_DIR } from "./helpers/shared.ts";
import { describeShared } from "./helpers/shared.ts";

const VOCAB_DIR = join(SHARED_DIR, "vocab");
const SEPARATOR = "\n__ggml_vocab_test__\n";

/** Inputs and expected ids of a vector pair (llama.cpp's test-tokenizer-0 format). */
export function readVectors(inpPath: string, outPath: string): { input: string; ids: number[] }[] {
  const inputs = readFileSync(inpPath, "utf8").split(SEPARATOR);
  // The file ends with a separator, which leaves one empty item after it.
  if (inputs.at(-1) === "") inputs.pop();
  const lines = readFileSync(outPath, "utf8").split("\n");
  if (lines.at(-1) === "") lines.pop();
  if (lines.length !== inputs.length) throw new Error(`${outPath}: ${lines.length} lines for ${inputs.length} inputs`);
  return inputs.map((input, i) => ({
    input,
    ids: lines[i].trim() === "" ? [] : lines[i].trim().split(/\s+/).map(Number),
  }));
}

const vocabNames = existsSync(VOCAB_DIR)
  ? readdirSync(VOCAB_DIR)
      .filter((file) => file.endsWith(".gguf.inp") && existsSync(join(VOCAB_DIR, file.replace(/\.inp$/, ""))))
      .map((file) => file.replace(/\.gguf\.inp$/, ""))
  : [];

describeShared("vocabulary vectors", ["vocab"], () => {
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
});
