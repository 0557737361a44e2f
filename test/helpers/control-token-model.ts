/**
 * Random-weight models whose vocabularies have a chat family's control tokens, for the tool-call
 * constraint's tests: stories260K's vocabulary of 512 with the family's tokens appended
 * as CONTROL tokens (as the family's own vocabulary types them; the tokenizer then adjusts
 * gpt-oss's as llama.cpp does, src/tokenizer/eog.ts) and the family's chat template:
 *   - "mistral": Mistral Nemo's template, `[TOOL_CALLS]` and its other bracketed tokens;
 *   - "harmony": gpt-oss's template and the harmony tokens (`<|channel|>`, `<|message|>`, ...,
 *     `<|call|>` and `<|return|>` ending a generation).
 */
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { makeConfig } from "../../src/model/config.ts";
import { writeModelGGUF } from "../../src/synth/gguf-model-writer.ts";
import { appendControlTokens, tokenizerMetadata, vocabularySize } from "../../src/synth/gguf-tokenizer-metadata.ts";
import { gguf } from "../../src/synth/gguf-writer.ts";
import { sharedPath } from "./shared.ts";

export type ControlTokenFamily = "mistral" | "harmony";

const FAMILIES: Record<ControlTokenFamily, { template: string; tokens: readonly string[] }> = {
  mistral: {
    template: "templates/mistralai-Mistral-Nemo-Instruct-2407.jinja",
    tokens: ["[INST]", "[/INST]", "[AVAILABLE_TOOLS]", "[/AVAILABLE_TOOLS]", "[TOOL_RESULTS]", "[/TOOL_RESULTS]", "[TOOL_CALLS]"],
  },
  harmony: {
    template: "templates/openai-gpt-oss-120b.jinja",
    tokens: ["<|start|>", "<|end|>", "<|message|>", "<|channel|>", "<|constrain|>", "<|return|>", "<|call|>"],
  },
};

/** The model of `family`, written into `dir` once; null without ../shared's vocabulary and templates. */
export function controlTokenModel(dir: string, family: ControlTokenFamily): string | null {
  const { template, tokens } = FAMILIES[family];
  const vocabPath = sharedPath("models/gguf/stories260K.gguf");
  const templatePath = sharedPath(template);
  if (vocabPath === null || templatePath === null) return null;
  const path = join(dir, `control-${family}.gguf`);
  if (existsSync(path)) return path;
  const meta = appendControlTokens(tokenizerMetadata(vocabPath), tokens);
  meta.set("tokenizer.chat_template", gguf.str(readFileSync(templatePath, "utf8")));
  const config = makeConfig({ dim: 64, hiddenDim: 96, nLayers: 2, nHeads: 4, nKvHeads: 2, headDim: 16, vocabSize: vocabularySize(meta), seqLen: 2048, normEps: 1e-5, sharedClassifier: false });
  writeModelGGUF(path, { arch: "llama", name: `test-control-${family}`, config, mix: "F32", tokenizer: meta, seed: 3 });
  return path;
}
