/**
 * A Hugging Face `tokenizer.json` with a byte-level BPE model (SmolLM, Qwen, Llama 3, GPT-2 and
 * their kin) as a BpeTokenizer: the vocabulary, merges and added tokens from the file, the
 * pre-tokenizer translated into the same regular expressions llama.cpp's converter would pick
 * (Split regexes, Digits, ByteLevel's GPT-2 expression); BOS and EOS ids from the config.json
 * beside it, else tokenizer_config.json's bos_token/eos_token, else the post-processor's template;
 * add_bos_token/add_eos_token and the chat template from tokenizer_config.json where present.
 */
import { existsSync, readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { ModelFormatError } from "../errors.ts";
import { quoteFileText } from "../util/file-text.ts";
import { BpeTokenizer } from "./bpe.ts";
import { GPT2_EXPRESSION, PreTokenizer } from "./pretokenizers.ts";
import { TokenType } from "./spm.ts";
import { addEogByText } from "./eog.ts";

type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

function obj(v: Json | undefined): { [key: string]: Json } | null {
  return v !== null && typeof v === "object" && !Array.isArray(v) ? v : null;
}

/** The regular expressions of a tokenizer.json pre_tokenizer, in order. */
function preTokenizerExpressions(file: string, p: { [key: string]: Json } | null, out: string[]): { ignoreMergesHint: boolean } {
  if (p === null) return { ignoreMergesHint: false };
  switch (p.type) {
    case "Sequence": {
      for (const inner of (p.pretokenizers as Json[] | undefined) ?? []) preTokenizerExpressions(file, obj(inner), out);
      return { ignoreMergesHint: false };
    }
    case "Digits":
      out.push(p.individual_digits === true ? "\\p{N}" : "\\p{N}+");
      return { ignoreMergesHint: false };
    case "ByteLevel":
      if (p.use_regex !== false) out.push(GPT2_EXPRESSION);
      return { ignoreMergesHint: false };
    case "Split": {
      const pattern = obj(p.pattern);
      const regex = pattern?.Regex ?? pattern?.String;
      if (typeof regex !== "string") throw new ModelFormatError(file, "a Split pre-tokenizer without a pattern");
      out.push(typeof pattern?.Regex === "string" ? regex.replace(/\(\?i:([^)]*)\)/g, (_, body: string) => caseless(body)) : regex.replace(/[.*+?^${}()|[\]\\]/g, "\\$&"));
      return { ignoreMergesHint: false };
    }
    default:
      throw new ModelFormatError(file, `pre-tokenizer type ${quoteFileText(String(p.type))} is not supported`);
  }
}

/** `(?i:'s|'t)` as llama.cpp writes it for engines without inline flags: `(?:'[sS]|'[tT])`. */
function caseless(body: string): string {
  return "(?:" + body.replace(/[a-z]/g, (c) => `[${c}${c.toUpperCase()}]`) + ")";
}

/** A JSON file beside the tokenizer as an object, or null when absent or not an object. */
function jsonBeside(path: string, name: string): { [key: string]: Json } | null {
  const file = join(dirname(path), name);
  if (!existsSync(file)) return null;
  try {
    return obj(JSON.parse(readFileSync(file, "utf8")) as Json);
  } catch (e) {
    throw new ModelFormatError(file, `not valid JSON: ${(e as Error).message}`);
  }
}

/** BOS and EOS ids from config.json (or generation_config.json) beside the tokenizer, when there. */
function specialIdsBeside(path: string): { bos: number | null; eos: number[] } {
  for (const name of ["config.json", "generation_config.json"]) {
    const c = jsonBeside(path, name);
    if (c === null) continue;
    const ids = (v: Json | undefined) => (typeof v === "number" ? [v] : Array.isArray(v) ? v.filter((x): x is number => typeof x === "number") : []);
    return { bos: ids(c.bos_token_id)[0] ?? null, eos: ids(c.eos_token_id) };
  }
  return { bos: null, eos: [] };
}

/** A tokenizer_config.json token field: a string, or an AddedToken object with its content. */
function tokenContent(v: Json | undefined): string | null {
  return typeof v === "string" ? v : typeof obj(v)?.content === "string" ? (obj(v)!.content as string) : null;
}

/** What tokenizer_config.json says: the chat template (the "default" one of a list), BOS/EOS texts, add_bos/add_eos. */
interface TokenizerConfig {
  chatTemplate: string | null;
  bosToken: string | null;
  eosToken: string | null;
  addBos: boolean | null;
  addEos: boolean | null;
}

function tokenizerConfigBeside(path: string): TokenizerConfig {
  const c = jsonBeside(path, "tokenizer_config.json");
  const t = c?.chat_template;
  const named = Array.isArray(t) ? t.map(obj).find((e) => e?.name === "default") ?? obj(t[0]) : null;
  const template = typeof t === "string" ? t : typeof named?.template === "string" ? named.template : null;
  const bool = (v: Json | undefined) => (typeof v === "boolean" ? v : null);
  return {
    chatTemplate: template, bosToken: tokenContent(c?.bos_token), eosToken: tokenContent(c?.eos_token),
    addBos: bool(c?.add_bos_token), addEos: bool(c?.add_eos_token),
  };
}

/** Whether a pre-tokenizer or decoder is, or holds in a Sequence, one of type `type`. */
function hasComponent(c: { [key: string]: Json } | null, type: string): boolean {
  if (c === null) return false;
  if (c.type === type) return true;
  const inner = [c.pretokenizers, c.decoders, c.processors].find(Array.isArray) as Json[] | undefined;
  return (inner ?? []).some((e) => hasComponent(obj(e), type));
}

/**
 * The TemplateProcessing of a post-processor (itself, or inside a Sequence, as Llama 3's
 * ByteLevel then TemplateProcessing): when its single-text template starts with a special token,
 * that token is the BOS every prompt starts with.
 */
function templateBos(post: { [key: string]: Json } | null): string | null {
  if (post === null) return null;
  if (post.type === "Sequence") {
    for (const p of (post.processors as Json[] | undefined) ?? []) {
      const found = templateBos(obj(p));
      if (found !== null) return found;
    }
    return null;
  }
  if (post.type !== "TemplateProcessing" || !Array.isArray(post.single)) return null;
  const first = obj(obj(post.single[0]!)?.SpecialToken);
  return typeof first?.id === "string" ? first.id : null;
}

export function loadTokenizerJson(path: string): { tokenizer: BpeTokenizer; addBos: boolean; addEos: boolean; chatTemplate: string | null } {
  let root: { [key: string]: Json } | null;
  try {
    root = obj(JSON.parse(readFileSync(path, "utf8")) as Json);
  } catch (e) {
    throw new ModelFormatError(path, `not a tokenizer.json: ${(e as Error).message}`);
  }
  const model = obj(root?.model);
  if (root === null || model === null) throw new ModelFormatError(path, "not a tokenizer.json (no model)");
  if (model.type !== "BPE") throw new ModelFormatError(path, `tokenizer model ${quoteFileText(String(model.type))} is not supported (only byte-level BPE)`);
  // A BPE over SentencePiece pieces (Llama 2, Mistral v0.1: Metaspace, byte fallback) spells text
  // differently: refused rather than read as byte-level.
  if (!hasComponent(obj(root.pre_tokenizer), "ByteLevel") && !hasComponent(obj(root.decoder), "ByteLevel")) {
    throw new ModelFormatError(path, "a SentencePiece-style BPE tokenizer.json (no ByteLevel pre-tokenizer or decoder) is not supported; use the model's GGUF file as the tokenizer");
  }
  const vocab = obj(model.vocab);
  if (vocab === null) throw new ModelFormatError(path, "the BPE model has no vocabulary");
  const added = ((root.added_tokens as Json[] | undefined) ?? []).map(obj).filter((a): a is { [key: string]: Json } => a !== null);
  let size = 0;
  for (const id of Object.values(vocab)) if (typeof id === "number") size = Math.max(size, id + 1);
  for (const a of added) if (typeof a.id === "number") size = Math.max(size, a.id + 1);
  const tokens: string[] = new Array<string>(size).fill("");
  const types = new Uint8Array(size).fill(TokenType.normal);
  const stripFlags = new Map<number, { lstrip: boolean; rstrip: boolean }>();
  for (const [text, id] of Object.entries(vocab)) if (typeof id === "number") tokens[id] = text;
  for (const a of added) {
    if (typeof a.id !== "number" || typeof a.content !== "string") continue;
    tokens[a.id] = a.content;
    // As llama.cpp's converter: special added tokens are control tokens, the others user-defined.
    types[a.id] = a.special === true ? TokenType.control : TokenType.userDefined;
    if (a.lstrip === true || a.rstrip === true) stripFlags.set(a.id, { lstrip: a.lstrip === true, rstrip: a.rstrip === true });
  }
  const merges = ((model.merges as Json[] | undefined) ?? []).map((m) => (Array.isArray(m) ? m.join(" ") : String(m)));
  const exprs: string[] = [];
  preTokenizerExpressions(path, obj(root.pre_tokenizer), exprs);
  const ids = specialIdsBeside(path);
  const config = tokenizerConfigBeside(path);
  const idOf = (text: string | null): number | null => {
    const at = text === null ? -1 : tokens.indexOf(text);
    return at >= 0 ? at : null;
  };
  const eog = new Set(ids.eos);
  addEogByText(tokens, types, eog);
  const eosId = ids.eos[0] ?? idOf(config.eosToken) ?? [...eog][0] ?? null;
  if (eosId !== null) eog.add(eosId);
  const bosText = templateBos(obj(root.post_processor));
  const bosId = ids.bos ?? idOf(config.bosToken) ?? idOf(bosText);
  const tokenizer = new BpeTokenizer({
    file: path, tokens, types, merges, preTokenizer: new PreTokenizer(model.ignore_merges === true ? "llama3" : "tokenizer.json", exprs),
    bosId, eosId, eogIds: eog, stripFlags,
  });
  // tokenizer_config.json's add_bos_token decides; else a post-processor that starts every text
  // with a special token adds it (llama.cpp's converter reads the same two places).
  const addBos = bosId !== null && (config.addBos ?? bosText !== null);
  return { tokenizer, addBos, addEos: eosId !== null && config.addEos === true, chatTemplate: config.chatTemplate };
}
