/**
 * `pagellm perplexity`: how well the model predicts a text, as llama-perplexity reports it. The
 * text is scored in windows of the context size (--ctx-size); with --json one object carries every
 * position's log-probability and argmax, for comparisons with other engines. With --mmproj and
 * --image, the text holds `<__media__>` where each image goes (llama.cpp's marker); the images'
 * tokens are left out of the listing, and the first text token after an image is scored from
 * the image's last position.
 */
import { defineCommand, type ArgsDef } from "citty";
import { existsSync, readFileSync, statSync } from "node:fs";
import { InputError } from "../errors.ts";
import type { LLM, ScoreResult } from "../llm/llm.ts";
import { loadLLM } from "./load.ts";
import { imageArgs, imageInputs, withVision, type ImageInputs } from "./image-options.ts";
import { checkKnownOptions, engineArgs, engineOptions, modelArgs, type ParsedValues } from "./options.ts";
import { info } from "./output.ts";

export const perplexityArgs = {
  ...modelArgs,
  file: { type: "string", description: "Text file to score", valueHint: "path", required: true },
  json: {
    type: "boolean",
    description: 'Print one JSON object: {"model","tokens","token_logprobs","top_tokens","ppl"}',
  },
  ...imageArgs,
  ...engineArgs,
} as const satisfies ArgsDef;

export const perplexityCommand = defineCommand({
  meta: { name: "perplexity", description: "Score a text: its perplexity under the model, in windows of the context size" },
  args: perplexityArgs,
  async run({ args, rawArgs }) {
    checkKnownOptions(rawArgs, perplexityArgs);
    await runPerplexity(args, rawArgs);
  },
});

function readText(path: string): string {
  if (!existsSync(path)) throw new InputError(`${path}: text file not found`);
  if (statSync(path).isDirectory()) throw new InputError(`${path}: text file is a directory`);
  return readFileSync(path, "utf8");
}

async function runPerplexity(values: ParsedValues, rawArgs: readonly string[]): Promise<void> {
  const file = values.file;
  if (typeof file !== "string" || file === "") throw new InputError("--file is required");
  const text = readText(file);
  const images = imageInputs(values, rawArgs);
  const llm = await loadLLM(values);
  try {
    const t0 = performance.now();
    const result = images === null ? await llm.score(text) : await scoreWithImages(llm, images, engineOptions(values).threads, text);
    const seconds = (performance.now() - t0) / 1000;
    if (result.tokens.length < 2) throw new InputError(`${file}: the text has ${result.tokens.length} token(s), perplexity needs at least 2`);
    if (values.json === true) {
      const { tokens, token_logprobs, top_tokens, ppl } = result;
      process.stdout.write(JSON.stringify({ model: values.model, tokens, token_logprobs, top_tokens, ppl }) + "\n");
    } else {
      process.stdout.write(report(result));
    }
    info(llm.device);
    info(`scored ${result.token_logprobs.length} tokens in ${seconds.toFixed(2)} s (${(result.token_logprobs.length / seconds).toFixed(1)} tokens/s), windows of ${result.window}`);
  } finally {
    await llm.flush();
    llm.close();
  }
}

/** The text's score with its images in place of its markers: only the text tokens listed, each scored from the position before it. */
async function scoreWithImages(llm: LLM, inputs: ImageInputs, threads: number, text: string): Promise<ScoreResult> {
  return withVision(llm, inputs.mmproj, threads, async (vision) => {
    const prompt = vision.prompt(text, inputs.images, llm.tokenizer, llm.addBos);
    const full = await llm.score(prompt.tokens, prompt.tokens.length, prompt.embeds);
    const keep = prompt.isText.map((t, j) => t && j > 0);
    const pick = (xs: number[]) => xs.filter((_, i) => keep[i + 1]);
    const tokenLogprobs = pick(full.token_logprobs);
    const mean = tokenLogprobs.reduce((a, b) => a + b, 0) / Math.max(1, tokenLogprobs.length);
    return {
      tokens: prompt.tokens.filter((_, j) => prompt.isText[j]), token_logprobs: tokenLogprobs, top_tokens: pick(full.top_tokens),
      ppl: Math.exp(-mean), window: full.window,
    };
  });
}

/** Running perplexity after each window ("[1]5.1234,[2]...") and the final estimate with its standard error. */
function report(r: ScoreResult): string {
  const lp = r.token_logprobs;
  const running: string[] = [];
  let sum = 0;
  for (let i = 0; i < lp.length; i++) {
    sum -= lp[i]!;
    if ((i + 1) % r.window === 0 || i === lp.length - 1) running.push(`[${running.length + 1}]${Math.exp(sum / (i + 1)).toFixed(4)}`);
  }
  const n = lp.length;
  const mean = sum / n;
  const meanSq = lp.reduce((a, x) => a + x * x, 0) / n;
  // Standard error of the mean negative log-likelihood, carried to the perplexity (as llama-perplexity).
  const err = n > 1 ? Math.sqrt(Math.max(0, meanSq - mean * mean) / (n - 1)) : 0;
  return `${running.join(",")}\nFinal estimate: PPL = ${r.ppl.toFixed(4)} +/- ${(r.ppl * err).toFixed(5)} (${n} tokens)\n`;
}
