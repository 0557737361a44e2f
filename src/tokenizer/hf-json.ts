/**
 * Hugging Face `tokenizer.json` files of byte-level BPE models (GPT-2, SmolLM, Qwen, Llama 3, ...), turned
 * into the same BpeVocab a GGUF file gives, as llama.cpp's converter does: vocabulary ids, merges in rank
 * order, added tokens (special ones become control tokens, the others user-defined tokens), and the
 * pre-tokenizer's regexes. BOS and EOS come from the post-processor and from `config.json` beside the file.
 */
import { existsSync, readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { ModelFormatError } from "../errors.ts";
import { BpeTokenizer } from "./bpe.ts";
import { compileRegex, type PreTokenizer } from "./pretokenize.ts";
import { endOfGenerationIds } from "./special.ts";
import { TokenType } from "./spm.ts";

/** GPT-2's ByteLevel regex, which ByteLevel with use_regex applies. */
const BYTE_LEVEL_REGEX = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)";

export type Json = null | boolean | number | string | Json[] | { [key: string]: Json };
type JsonObject = { [key: string]: Json };

function isObject(value: Json | undefined): value is JsonObject {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/** What loading a tokenizer.json gives beyond the tokenizer. */
export interface HFTokenizer {
  readonly tokenizer: BpeTokenizer;
  readonly addBos: boolean;
  readonly addEos: boolean;
}

/**
 * Rust regex syntax → JavaScript: the case-insensitive contraction group `(?i:'s|'t|...)` becomes explicit
 * character classes, as llama.cpp rewrites it.
 */
function translateRegex(pattern: string): string {
  return pattern.replaceAll("(?i:'s|'t|'re|'ve|'m|'ll|'d)", "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])");
}

/** The regexes of a pre_tokenizer node, in order. Unsupported kinds are an error naming them. */
export function preTokenizerRegexes(node: Json | undefined, file: string): string[] {
  if (node === null || node === undefined) return [];
  if (!isObject(node)) throw new ModelFormatError(file, "pre_tokenizer is not an object");
  switch (node.type) {
    case "Sequence": {
      const items = node.pretokenizers;
      if (!Array.isArray(items)) throw new ModelFormatError(file, "Sequence pre_tokenizer has no pretokenizers list");
      return items.flatMap((item) => preTokenizerRegexes(item, file));
    }
    case "ByteLevel":
      if (node.add_prefix_space === true) throw new ModelFormatError(file, "ByteLevel pre_tokenizer with add_prefix_space is not supported");
      return node.use_regex === false ? [] : [BYTE_LEVEL_REGEX];
    case "Digits":
      return [node.individual_digits === true ? "\\p{N}" : "\\p{N}+"];
    case "Split": {
      const pattern = node.pattern;
      if (node.behavior !== "Isolated" || node.invert === true) {
        throw new ModelFormatError(file, `Split pre_tokenizer with behavior ${String(node.behavior)} is not supported`);
      }
      if (isObject(pattern) && typeof pattern.Regex === "string") return [translateRegex(pattern.Regex)];
      if (isObject(pattern) && typeof pattern.String === "string") return [pattern.String.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")];
      throw new ModelFormatError(file, "Split pre_tokenizer has no pattern");
    }
    default:
      throw new ModelFormatError(file, `pre_tokenizer type ${JSON.stringify(node.type)} is not supported`);
  }
}

/** The first special token a TemplateProcessing post-processor puts before and after a single text. */
function templateSpecials(node: Json | undefined, tokenId: (text: string) => number | undefined): { bos: number | null; eos: number | null } {
  const found = { bos: null as number | null, eos: null as number | null };
  if (!isObject(node)) return found;
  if (node.type === "Sequence" && Array.isArray(node.processors)) {
    for (const processor of node.processors) {
      const inner = templateSpecials(processor, tokenId);
      found.bos ??= inner.bos;
      found.eos ??= inner.eos;
    }
    return found;
  }
  if (node.type !== "TemplateProcessing" || !Array.isArray(node.single)) return found;
  const single = node.single;
  const specialAt = (item: Json | undefined): number | null => {
    if (!isObject(item) || !isObject(item.SpecialToken) || typeof item.SpecialToken.id !== "string") return null;
    return tokenId(item.SpecialToken.id) ?? null;
  };
  found.bos = specialAt(single[0]);
  found.eos = single.length > 1 ? specialAt(single[single.length - 1]) : null;
  return found;
}

/** `bos_token_id` / `eos_token_id` of the config.json next to the tokenizer, when there is one. */
function configIds(path: string): { bos: number | null; eos: number | null } {
  const configPath = join(dirname(path), "config.json");
  if (!existsSync(configPath)) return { bos: null, eos: null };
  const config = JSON.parse(readFileSync(configPath, "utf8")) as Json;
  if (!isObject(config)) return { bos: null, eos: null };
  const id = (value: Json | undefined): number | null => (typeof value === "number" ? value : Array.isArray(value) && typeof value[0] === "number" ? value[0] : null);
  return { bos: id(config.bos_token_id), eos: id(config.eos_token_id) };
}

/** Parse a tokenizer.json (already read) into a byte-level BPE tokenizer. */
export function tokenizerFromHFJson(json: Json, path: string): HFTokenizer {
  if (!isObject(json) || !isObject(json.model)) throw new ModelFormatError(path, "not a Hugging Face tokenizer.json (no model)");
  const model = json.model;
  if (model.type !== "BPE" || !isObject(model.vocab) || !Array.isArray(model.merges)) {
    throw new ModelFormatError(path, `tokenizer model ${JSON.stringify(model.type)} is not supported (only byte-level BPE)`);
  }
  if (json.normalizer !== null && json.normalizer !== undefined) {
    const type = isObject(json.normalizer) ? json.normalizer.type : undefined;
    // NFC changes nothing in the text these models see in practice; llama.cpp ignores it too.
    if (type !== "NFC") throw new ModelFormatError(path, `normalizer ${JSON.stringify(type)} is not supported`);
  }
  const tokens: string[] = [];
  const types: number[] = [];
  const setToken = (id: number, text: string, type: number): void => {
    if (!Number.isInteger(id) || id < 0 || id > 10_000_000) throw new ModelFormatError(path, `token ${JSON.stringify(text)} has id ${id}`);
    tokens[id] = text;
    types[id] = type;
  };
  for (const [text, id] of Object.entries(model.vocab)) setToken(Number(id), text, TokenType.normal);
  const stripFlags = new Map<number, { lstrip: boolean; rstrip: boolean }>();
  for (const added of Array.isArray(json.added_tokens) ? json.added_tokens : []) {
    if (!isObject(added) || typeof added.content !== "string" || typeof added.id !== "number") continue;
    setToken(added.id, added.content, added.special === true ? TokenType.control : TokenType.userDefined);
    if (added.lstrip === true || added.rstrip === true) stripFlags.set(added.id, { lstrip: added.lstrip === true, rstrip: added.rstrip === true });
  }
  for (let id = 0; id < tokens.length; id++) {
    if (tokens[id] === undefined) throw new ModelFormatError(path, `token id ${id} is missing from the vocabulary`);
  }
  const merges = model.merges.map((merge) => {
    if (typeof merge === "string") return merge;
    if (Array.isArray(merge) && merge.length === 2) return `${String(merge[0])} ${String(merge[1])}`;
    throw new ModelFormatError(path, `merge ${JSON.stringify(merge)} is neither "a b" nor ["a", "b"]`);
  });
  const preTokenizer: PreTokenizer = {
    name: "tokenizer.json",
    regexes: preTokenizerRegexes(json.pre_tokenizer, path).map(compileRegex),
    ignoreMerges: model.ignore_merges === true,
  };
  const idOf = new Map(tokens.map((text, id) => [text, id]));
  const template = templateSpecials(json.post_processor, (text) => idOf.get(text));
  const config = configIds(path);
  const typeArray = Uint8Array.from(types);
  const bosId = template.bos ?? config.bos;
  const eosId = template.eos ?? config.eos;
  const eogIds = endOfGenerationIds({ eosId, eotId: null, eomId: null, fimIds: [] }, tokens.length, typeArray, (id) => tokens[id]);
  const tokenizer = new BpeTokenizer({
    file: path,
    tokens,
    types: typeArray,
    merges,
    preTokenizer,
    bosId,
    eosId,
    eogIds,
    strip: (id) => stripFlags.get(id) ?? { lstrip: false, rstrip: false },
  });
  return { tokenizer, addBos: template.bos !== null, addEos: template.eos !== null };
}

/** Read and parse the tokenizer.json at `path`. */
export function loadHFTokenizer(path: string): HFTokenizer {
  let json: Json;
  try {
    json = JSON.parse(readFileSync(path, "utf8")) as Json;
  } catch (error) {
    throw new ModelFormatError(path, `cannot read tokenizer.json: ${error instanceof Error ? error.message : String(error)}`);
  }
  return tokenizerFromHFJson(json, path);
}
