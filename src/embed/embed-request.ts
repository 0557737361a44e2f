/**
 * The one place embedding and rerank requests are checked and turned into token sequences, for
 * every front end (LLM.embed and LLM.rerank, which the server and the CLI call). A bad field is a
 * RequestFieldError naming it as the request spells it: `input`, `input[3]`, `query`,
 * `documents`, `documents[2]` (`dimensions` and `normalize`: normalize.ts).
 */
import { RequestFieldError } from "../errors.ts";
import type { Tokenizer } from "../tokenizer/tokenizer.ts";
import type { EmbedInput } from "./embed-types.ts";

/** How texts become a model's sequences: its tokenizer and the special tokens its file asks for. */
export interface SequenceText {
  readonly tokenizer: Tokenizer;
  /** Start each text with BOS ([CLS] for BERT). */
  readonly addBos: boolean;
  /** End each text with EOS ([SEP] for BERT; the EOS Qwen3-Embedding's file asks for). */
  readonly addEos: boolean;
  /** The file's rerank prompt with {query} and {document} (Qwen3-Reranker's); absent or null: the pair layout. */
  readonly rerankTemplate?: string | null;
}

/** What a sequence may be: ids below `vocabSize`, at most `maxTokens` of them unless cut (`truncate`). */
export interface SequenceLimits {
  readonly vocabSize: number;
  readonly maxTokens: number;
  readonly truncate: boolean;
}

/** The sequences of an embedding request's inputs, in order: texts tokenized with their special tokens, token ids as given. */
export function embedSequences(inputs: readonly EmbedInput[], text: SequenceText, limits: SequenceLimits): number[][] {
  if (!Array.isArray(inputs) || inputs.length === 0) throw new RequestFieldError("input", "must be a non-empty array of texts or token id arrays");
  return inputs.map((input, i) => {
    const field = `input[${i}]`;
    if (typeof input === "string") {
      if (input.length === 0) throw new RequestFieldError(field, "is an empty string");
      return fitted(encodeText(text, input, text.addBos), field, text, limits);
    }
    if (!Array.isArray(input)) throw new RequestFieldError(field, "must be a text or an array of token ids");
    if (input.length === 0) throw new RequestFieldError(field, "is an empty array of token ids");
    const bad = input.findIndex((id) => !Number.isInteger(id) || id < 0 || id >= limits.vocabSize);
    if (bad >= 0) throw new RequestFieldError(field, `holds ${input[bad]} at ${bad}, not a token id of the vocabulary (0..${limits.vocabSize - 1})`);
    return fitted([...input], field, null, limits);
  });
}

/**
 * Each document's rerank sequence as llama.cpp's server makes it (format_prompt_rerank): with the
 * file's rerank template, the template with every {query} replaced by the query, then every
 * {document} by the document, tokenized with its special tokens parsed and none added; without
 * one, the pair layout: BOS, the query, EOS, the document, EOS (for BERT `[CLS] query [SEP]
 * document [SEP]`, every token of type 0).
 */
export function rerankSequences(query: string, documents: readonly string[], text: SequenceText, limits: SequenceLimits): number[][] {
  if (typeof query !== "string" || query.length === 0) throw new RequestFieldError("query", "must be a non-empty text");
  if (!Array.isArray(documents) || documents.length === 0) throw new RequestFieldError("documents", "must be a non-empty array of texts");
  const template = text.rerankTemplate ?? null;
  const queryIds = template === null ? encodeText(text, query, text.addBos) : [];
  return documents.map((doc, i) => {
    const field = `documents[${i}]`;
    if (typeof doc !== "string" || doc.length === 0) throw new RequestFieldError(field, "must be a non-empty text");
    const ids = template === null ? [...queryIds, ...encodeText(text, doc, false)] : templateIds(text, template, query, doc);
    return fitted(ids, field, template === null ? text : null, limits);
  });
}

/** The filled rerank template's tokens. split/join, not String.replaceAll: a "$&" in a text stays as written. */
function templateIds(text: SequenceText, template: string, query: string, doc: string): number[] {
  const prompt = template.split("{query}").join(query).split("{document}").join(doc);
  return text.tokenizer.encode(prompt, { addBos: false, addEos: false, parseSpecial: true });
}

function encodeText(text: SequenceText, input: string, addBos: boolean): number[] {
  return text.tokenizer.encode(input, { addBos, addEos: text.addEos });
}

/**
 * The sequence, or cut to the context when the request asks (`truncate`: a text keeps its final
 * EOS, as it ends every sequence the model was trained on), or refused naming its length.
 */
function fitted(ids: number[], field: string, text: SequenceText | null, limits: SequenceLimits): number[] {
  if (ids.length <= limits.maxTokens) return ids;
  if (!limits.truncate) throw new RequestFieldError(field, `has ${ids.length} tokens, over the model's context of ${limits.maxTokens}`);
  const eos = text?.addEos === true ? text.tokenizer.eosId : null;
  return eos === null ? ids.slice(0, limits.maxTokens) : [...ids.slice(0, limits.maxTokens - 1), eos];
}
