/**
 * Loads the model named on the command line, finding llama2.c's tokenizer.bin beside it when
 * --tokenizer is not given.
 */
import { existsSync } from "node:fs";
import { dirname, join } from "node:path";
import { InputError } from "../errors.ts";
import { LLM } from "../engine/llm.ts";
import { resolveModel } from "../hub/resolve.ts";
import { engineOptions, type ParsedValues } from "./options.ts";

export async function loadLLM(values: ParsedValues): Promise<LLM> {
  if (typeof values.model !== "string" || values.model === "") throw new InputError("--model is required");
  // A path, hf:OWNER/REPO/FILE.gguf, hf:OWNER/REPO:QUANT or a URL: downloaded into the HF cache when needed.
  const model = await resolveModel(values.model);
  return LLM.load({ model, tokenizer: tokenizerPath(model, values.tokenizer), engine: engineOptions(values) });
}

function tokenizerPath(model: string, given: ParsedValues[string]): string {
  if (typeof given === "string" && given !== "") {
    if (!existsSync(given)) throw new InputError(`${given}: tokenizer file not found`);
    return given;
  }
  const beside = join(dirname(model), "tokenizer.bin");
  if (existsSync(beside)) return beside;
  throw new InputError(`--tokenizer is required: no tokenizer.bin next to ${model}`);
}
