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
