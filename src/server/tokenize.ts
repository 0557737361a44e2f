/**
 * `POST /tokenize` and `POST /detokenize`, in llama-server's and vLLM's shapes, through the front
 * door (EngineClient), so that a client counts tokens as the server will:
 *
 *   - llama-server: `{content, add_special = false, parse_special = true, with_pieces = false}` ->
 *     `{tokens: [id, ...]}`, or with pieces `{tokens: [{id, piece}, ...]}` (a piece is a string, or
 *     its bytes where they are not whole UTF-8 characters);
 *   - vLLM: `{prompt, add_special_tokens = true}` or `{messages, add_generation_prompt = true,
 *     chat_template_kwargs, tools}` -> `{count, max_model_len, tokens}`: the prompt a completion or
 *     chat completion of that body would run, rendered by
 *     the same template and checks (a prompt longer than the context is counted, not refused);
 *   - `/detokenize`: `{tokens}` -> `{content, prompt}` (llama-server's name and vLLM's), control
 *     tokens written out as both servers show them.
 *
 * `model`, when given, must be the served name. Any other field is a 400 naming it.
 *
 * On a model that embeds as well (a decoder embedder), llama-server's `add_special` shows the
 * sequence LLM.embed runs. A model that only embeds (an encoder) has no prompts: `/tokenize` shows
 * the sequence LLM.embed runs for a text (`add_special`, or vLLM's `add_special_tokens`: [CLS] and [SEP] as the file
 * asks); `/detokenize` is for models that generate.
 */
import { RequestFieldError } from "../errors.ts";
import type { EngineClient } from "../llm/engine-client.ts";
import type { LLM } from "../llm/llm.ts";
import { ApiError, asApiError } from "./api-error.ts";
import type { BodyFields } from "./body-fields.ts";
import { readMessages } from "./chat-request.ts";
import { requestError, type GenerationSpec } from "./generation-fields.ts";
import { checkModel } from "./models.ts";

/**
 * The sequence LLM.embed runs for a text (the file's BOS and EOS: Qwen3-Embedding's EOS last), on a
 * model that embeds as well as generates; llama-server's `add_special` shows it, as llama.cpp adds
 * the special tokens its vocabulary asks for.
 */
export type EmbedSequenceIds = (text: string, parseSpecial: boolean) => number[];

export function tokenize(client: EngineClient, model: string, f: BodyFields, embedIds: EmbedSequenceIds | null): Response {
  checkModel(f.string("model"), model);
  if (f.raw("content") !== undefined) return Response.json(llamaServerTokenize(client, f, embedIds));
  return Response.json(vllmTokenize(client, f));
}

export function detokenize(client: EngineClient, model: string, f: BodyFields): Response {
  checkModel(f.string("model"), model);
  const tokens = f.raw("tokens");
  if (tokens === undefined) throw ApiError.badField("tokens", "'tokens' is required: an array of token ids");
  if (!Array.isArray(tokens)) throw ApiError.badField("tokens", "'tokens' must be an array of token ids");
  f.rejectUnknown();
  const text = fieldErrors(() => client.detokenize(tokens, "tokens"));
  return Response.json({ content: text, prompt: text });
}

/** `/tokenize` on a model that only embeds: the text's tokens, with the special tokens LLM.embed adds when asked. */
export function embeddingTokenize(llm: LLM, model: string, f: BodyFields): Response {
  checkModel(f.string("model"), model);
  const llamaShape = f.raw("content") !== undefined;
  const field = llamaShape ? "content" : "prompt";
  const text = f.raw(field);
  if (typeof text !== "string") throw ApiError.badField(field, `'${field}' must be a string ('content' in llama-server's shape, 'prompt' in vLLM's)`);
  const addSpecial = llamaShape ? (f.boolean("add_special") ?? false) : (f.boolean("add_special_tokens") ?? true);
  const parseSpecial = llamaShape ? (f.boolean("parse_special") ?? true) : false;
  f.rejectUnknown();
  const ids = addSpecial ? llm.embedTokenIds(text, parseSpecial) : llm.tokenizer.encode(text, { parseSpecial });
  if (llamaShape) return Response.json({ tokens: ids });
  return Response.json({ count: ids.length, tokens: ids });
}

/** llama-server's shape: a text as written, with or without BOS and control tokens. */
function llamaServerTokenize(client: EngineClient, f: BodyFields, embedIds: EmbedSequenceIds | null): { tokens: number[] | { id: number; piece: string | number[] }[] } {
  const content = f.string("content")!;
  const addSpecial = f.boolean("add_special") ?? false;
  const parseSpecial = f.boolean("parse_special") ?? true;
  const withPieces = f.boolean("with_pieces") ?? false;
  f.rejectUnknown();
  const ids = addSpecial && embedIds !== null ? embedIds(content, parseSpecial) : client.tokenizeText(content, { addSpecial, parseSpecial });
  if (!withPieces) return { tokens: ids };
  const pieces = client.tokenPieces(ids);
  return { tokens: ids.map((id, i) => ({ id, piece: pieces[i]! })) };
}

/** vLLM's shape: the prompt of a completion (`prompt`) or a chat completion (`messages`), counted. */
function vllmTokenize(client: EngineClient, f: BodyFields): { count: number; max_model_len: number; tokens: number[] } {
  const ids = f.raw("messages") !== undefined ? chatPromptIds(client, f) : textPromptIds(client, f);
  return { count: ids.length, max_model_len: client.info.maxPositions, tokens: ids };
}

function textPromptIds(client: EngineClient, f: BodyFields): number[] {
  const prompt = f.raw("prompt");
  if (prompt === undefined) throw ApiError.badField("prompt", "'prompt' (vLLM's shape), 'messages' or 'content' (llama-server's) is required");
  if (typeof prompt !== "string") throw ApiError.badField("prompt", "'prompt' must be a string");
  const addSpecial = f.boolean("add_special_tokens") ?? true;
  f.rejectUnknown();
  // With special tokens, the completion's own prompt (BOS where the model adds one); without, the text alone.
  if (addSpecial) return fieldErrors(() => client.promptTokenIds({ prompt }), "prompt");
  return client.tokenizeText(prompt, { addSpecial: false, parseSpecial: false });
}

function chatPromptIds(client: EngineClient, f: BodyFields): number[] {
  const messages = readMessages(f.raw("messages"));
  const kwargs = f.object("chat_template_kwargs");
  const tools = f.raw("tools");
  f.onlyNeutral("add_generation_prompt", "'add_generation_prompt' false (the prompt is rendered as a chat completion's, ready for the reply)", (v) => v === true);
  f.onlyNeutral("add_special_tokens", "'add_special_tokens' with messages (the chat template writes the special tokens)", (v) => v === false);
  f.rejectUnknown();
  const spec: GenerationSpec = { fields: { tools }, n: 1, logprobs: null, stream: false, includeUsage: false, aliases: {} };
  try {
    return client.promptTokenIds({ messages, chatTemplateKwargs: kwargs, ...(tools === undefined ? {} : { tools }) });
  } catch (e) {
    throw requestError(e, spec, "messages");
  }
}

/** The front door's field errors as 400s naming the field; `param` names the field for the tokenizer's other input errors. */
function fieldErrors<T>(run: () => T, param: string | null = null): T {
  try {
    return run();
  } catch (e) {
    if (e instanceof RequestFieldError) throw ApiError.badField(e.field, `'${e.field}' ${e.problem}`);
    throw asApiError(e, param);
  }
}
