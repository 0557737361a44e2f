/**
 * Loads the model named on the command line. Without --tokenizer, a GGUF model uses its own
 * vocabulary and a llama2.c checkpoint the tokenizer.bin beside it.
 */
import { existsSync, statSync } from "node:fs";
import { basename, dirname, join } from "node:path";
import { InputError } from "../errors.ts";
import { checkFormatChoice, type UntemplatedFormat } from "../chat/formats.ts";
import { reservedVariable } from "../chat/jinja-template.ts";
import { LLM } from "../llm/llm.ts";
import { hubOptionsFromEnv, resolveModel } from "../hub/resolve.ts";
import { modelFileKind } from "../model/load.ts";
import { deviceOption, engineOptions, gpuBackendOptions, kvCacheOptions, poolingOption, type ParsedValues } from "./options.ts";
import { info, progressWanted } from "./output.ts";
import { loadProgressBar } from "./batch-progress.ts";

/**
 * The model `values` name, loaded with their options. `templateOption` is the name of the chat
 * format's option on this command (`values.template` holds its value): a bad one is refused under
 * that name before the model is fetched or loaded. `untemplated`: the chat format of a model
 * without a chat template when the option names none.
 */
export async function loadLLM(values: ParsedValues, templateOption = "--template", untemplated: UntemplatedFormat = "chatml"): Promise<LLM> {
  if (typeof values.model !== "string" || values.model === "") throw new InputError("--model is required");
  const device = deviceOption(values);
  const gpuOptions = gpuBackendOptions(values);
  const chatTemplate = typeof values.template === "string" && values.template !== "" ? values.template : undefined;
  if (chatTemplate !== undefined) checkFormatChoice(chatTemplate, templateOption);
  // A path, hf:OWNER/REPO/FILE.gguf, hf:OWNER/REPO:QUANT or a URL: downloaded into the HF cache when needed.
  const model = await resolveModelSpec(values.model);
  const onLoadProgress = loadProgressBar(basename(model), statSync(model).size);
  const chatTemplateKwargs = templateKwargs(values["chat-template-kwargs"]);
  const engine = engineOptions(values);
  const pooling = poolingOption(values);
  const llm = await LLM.open({
    model, tokenizer: tokenizerPath(model, values.tokenizer), engine, onLoadProgress, chatTemplate, chatTemplateKwargs, device, gpuOptions, untemplatedChatFormat: untemplated,
    ...kvCacheOptions(values), onWarning: warn, ...(pooling === undefined ? {} : { pooling }),
  });
  // A model that only embeds runs no engine: no KV cache, no context option of its own.
  if (!llm.capabilities.generate) return llm;
  if (llm.info.kvTypeNote !== null) info(`note: ${llm.info.kvTypeNote}`);
  const own = llm.checkpoint.config.seqLen;
  if (engine.ctxSize !== null && engine.ctxSize > own) info(`note: --ctx-size ${engine.ctxSize} is more than ${basename(model)}'s own context of ${own} tokens; running at ${own}`);
  return llm;
}

/** The note of a model without a chat template (which format stands in), for a command that renders chats. */
export function noteChatFormat(llm: LLM, templateOption: string): void {
  if (llm.chatFormatNote !== null) info(`note: ${llm.chatFormatNote}; ${templateOption} NAME|FILE chooses another`);
}

/** A warning line on stderr, even with --quiet (it tells of lost work, e.g. a full disk). */
function warn(line: string): void {
  process.stderr.write(`pagellm: warning: ${line}\n`);
}

/** A model spec as a local path, downloaded with a progress bar unless --quiet or not on a terminal. */
export function resolveModelSpec(spec: string): Promise<string> {
  return resolveModel(spec, { ...hubOptionsFromEnv(), progress: progressWanted() });
}

/** --chat-template-kwargs: a JSON object of more template variables. */
export function templateKwargs(given: ParsedValues[string]): Record<string, unknown> | undefined {
  if (typeof given !== "string" || given === "") return undefined;
  let parsed: unknown;
  try {
    parsed = JSON.parse(given);
  } catch (e) {
    throw new InputError(`--chat-template-kwargs must be a JSON object: ${(e as Error).message}`);
  }
  if (typeof parsed !== "object" || parsed === null || Array.isArray(parsed)) throw new InputError(`--chat-template-kwargs must be a JSON object, got ${given}`);
  const reserved = reservedVariable(parsed as Record<string, unknown>);
  if (reserved !== null) throw new InputError(`--chat-template-kwargs: "${reserved.name}" ${reserved.problem}`);
  return parsed as Record<string, unknown>;
}

function tokenizerPath(model: string, given: ParsedValues[string]): string {
  // A foreign file is named as such before a tokenizer is looked for beside it.
  const kind = modelFileKind(model);
  if (typeof given === "string" && given !== "") {
    if (!existsSync(given)) throw new InputError(`${given}: tokenizer file not found`);
    return given;
  }
  if (kind === "gguf") return model;
  const beside = join(dirname(model), "tokenizer.bin");
  if (existsSync(beside)) return beside;
  throw new InputError(`--tokenizer is required: no tokenizer.bin next to ${model}`);
}
