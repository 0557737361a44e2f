/** llama.cpp's tokenizer vector files (test-tokenizer-0's NAME.gguf.inp / NAME.gguf.out). */
import { readFileSync } from "node:fs";

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

/**
 * `count` deterministic texts of 1 to `maxPieces` pieces each: mostly items of `pieces`, the rest
 * random code points from the first planes (no lone surrogates), from a seeded LCG.
 */
export function randomTexts(count: number, pieces: readonly string[], opts: { seed: number; maxPieces: number }): string[] {
  let state = opts.seed;
  const next = (): number => {
    state = (Math.imul(state, 1103515245) + 12345) & 0x7fffffff;
    return state / 0x7fffffff;
  };
  const texts: string[] = [];
  for (let i = 0; i < count; i++) {
    let text = "";
    const length = 1 + Math.floor(next() * opts.maxPieces);
    for (let j = 0; j < length; j++) {
      if (next() < 0.7) text += pieces[Math.floor(next() * pieces.length)];
      else {
        let codePoint = 1 + Math.floor(next() * (next() < 0.5 ? 0x800 : 0x2ffff));
        if (codePoint >= 0xd800 && codePoint < 0xe000) codePoint = 0x263a;
        text += String.fromCodePoint(codePoint);
      }
    }
    texts.push(text);
  }
  return texts;
}

const MIXED_PIECES = [
  "the", " cat", "  ", "\n\n", "\t", " Hello", "'s", "'LL", "ß", "é", "e\u0301", "中文", "🦙", "😶‍🌫️", "12345", " 3.14", "!!", " (",
  "\u00a0", "\u3000", "<|im_start|>", "<s>", "  \n ", "Ελληνικά", "русский",
];

/**
 * Deterministic mixed-script texts: words, whitespace runs, digits, punctuation, combining marks, emoji
 * and random code points from every plane in use (no lone surrogates).
 */
export function mixedTexts(count: number, seed = 7): string[] {
  return randomTexts(count, MIXED_PIECES, { seed, maxPieces: 12 });
}
