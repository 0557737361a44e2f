/**
 * `POST /v1/completions` bodies: the prompt as OpenAI allows it (a string, an array of strings,
 * token ids, or an array of token-id arrays), `echo`, `logprobs` (an integer) and the generation
 * fields, plus the sampling fields llama.cpp and vLLM accept (`top_k`, `min_p`,
 * `repetition_penalty`, read with the shared fields).
 */
import { ApiError } from "./api-error.ts";
import type { BodyFields, Json } from "./body-fields.ts";
import { MAX_LOGPROBS } from "../llm/generate-request.ts";
import { readGenerationFields, type GenerationSpec, type ServerRequestDefaults } from "./generation-fields.ts";

/** One prompt as given: text to tokenize, or token ids to take as they are. */
export type PromptInput = { text: string } | { tokenIds: Json[] };

export interface CompletionRequest {
  model: string | undefined;
  prompts: PromptInput[];
  echo: boolean;
  /** `echo` with max_tokens 0: the prompts' log-probabilities, nothing generated. */
  scoreOnly: boolean;
  spec: GenerationSpec;
}

/** The OpenAI default of the legacy completions endpoint. */
const DEFAULT_MAX_TOKENS = 16;

/** Reads a body; more than `maxPrompts` prompts is a 400 naming `prompt` (nothing tokenized yet). */
export function readCompletionRequest(f: BodyFields, maxPrompts: number, defaults: ServerRequestDefaults): CompletionRequest {
  const model = f.string("model");
  const prompts = readPrompts(f.raw("prompt"), maxPrompts);
  const echo = f.boolean("echo") ?? false;
  const logprobs = f.number("logprobs", { integer: true, min: 0, max: MAX_LOGPROBS });
  const spec = readGenerationFields(f, DEFAULT_MAX_TOKENS, logprobs ?? null, defaults);
  // max_tokens 0 scores an echoed prompt without generating (lm-evaluation-harness's loglikelihood requests).
  const scoreOnly = echo && spec.fields.maxTokens === 0;
  f.onlyNeutral("suffix", "'suffix' (insertion)", (v) => v === "");
  f.onlyNeutral("best_of", "'best_of' other than 'n'", (v) => v === 1 || v === spec.n);
  f.rejectUnknown();
  return { model, prompts, echo, scoreOnly, spec };
}

/** The prompts as given; their token ids are checked by the engine's request checks (a 400 naming the prompt). */
function readPrompts(v: Json | undefined, maxPrompts: number): PromptInput[] {
  if (v === undefined) throw ApiError.badField("prompt", "'prompt' is required");
  if (typeof v === "string") return [{ text: v }];
  if (!Array.isArray(v)) throw ApiError.badField("prompt", "'prompt' must be a string, an array of strings, an array of token ids or an array of those");
  if (v.length === 0) throw ApiError.badField("prompt", "'prompt' is an empty array: give at least one prompt");
  // An array of token ids is one prompt; any other array holds one prompt per item.
  if (v.every((p) => typeof p === "number")) return [{ tokenIds: v as number[] }];
  if (v.length > maxPrompts) {
    throw ApiError.badField("prompt", `'prompt' holds ${v.length} prompts; this server takes at most ${maxPrompts} in one request (--max-prompts): send them in several`);
  }
  if (v.every((p) => typeof p === "string")) return (v as string[]).map((text) => ({ text }));
  return v.map((p, i) => {
    if (!Array.isArray(p) || p.length === 0) throw ApiError.badField(`prompt[${i}]`, `'prompt[${i}]' must be a non-empty array of token ids (all items of 'prompt' of one kind)`);
    return { tokenIds: p as Json[] };
  });
}
