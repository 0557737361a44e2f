/**
 * A Hugging Face `tokenizer.json` with a byte-level BPE model (SmolLM, Qwen, Llama 3, GPT-2 and
 * their kin) as a BpeTokenizer: the vocabulary, merges and added tokens from the file, the
 * pre-tokenizer translated into the same regular expressions llama.cpp's converter would pick
 * (Split regexes, Digits, ByteLevel's GPT-2 expression), BOS and EOS from the config.json or
 * tokenizer_config.json beside it where present.
 */
import { existsSync, readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { ModelFormatError } from "../errors.ts";
import { BpeTokenizer } from "./bpe.ts";
import { GPT2_EXPRESSION, PreTokenizer } from "./pretokenizers.ts";
import { TokenType } from "./spm.ts";
import { EOG_TEXTS } from "./tokenizer.ts";

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
      throw new ModelFormatError(file, `pre-tokenizer type "${String(p.type)}" is not supported`);
  }
}

/** `(?i:'s|'t)` as llama.cpp writes it for engines without inline flags: `(?:'[sS]|'[tT])`. */
function caseless(body: string): string {
  return "(?:" + body.replace(/[a-z]/g, (c) => `[${c}${c.toUpperCase()}]`) + ")";
}

/** BOS and EOS ids from config.json (or generation_config.json) beside the tokenizer, when there. */
function specialIdsBeside(path: string): { bos: number | null; eos: number[] } {
  for (const name of ["config.json", "generation_config.json"]) {
    const file = join(dirname(path), name);
    if (!existsSync(file)) continue;
    const c = obj(JSON.parse(readFileSync(file, "utf8")) as Json);
    if (c === null) continue;
    const ids = (v: Json | undefined) => (typeof v === "number" ? [v] : Array.isArray(v) ? v.filter((x): x is number => typeof x === "number") : []);
    return { bos: ids(c.bos_token_id)[0] ?? null, eos: ids(c.eos_token_id) };
  }
  return { bos: null, eos: [] };
}

/** The chat_template of the tokenizer_config.json beside a tokenizer.json, when there. */
function chatTemplateBeside(path: string): string | null {
  const file = join(dirname(path), "tokenizer_config.json");
  if (!existsSync(file)) return null;
  const template = obj(JSON.parse(readFileSync(file, "utf8")) as Json)?.chat_template;
  return typeof template === "string" ? template : null;
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
  if (model.type !== "BPE") throw new ModelFormatError(path, `tokenizer model "${String(model.type)}" is not supported (only byte-level BPE)`);
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
  const eog = new Set(ids.eos);
  tokens.forEach((t, id) => {
    if (types[id] === TokenType.control && EOG_TEXTS.has(t)) eog.add(id);
  });
  const eosId = ids.eos[0] ?? [...eog][0] ?? null;
  if (eosId !== null) eog.add(eosId);
  const tokenizer = new BpeTokenizer({
    file: path, tokens, types, merges, preTokenizer: new PreTokenizer(model.ignore_merges === true ? "llama3" : "tokenizer.json", exprs),
    bosId: ids.bos, eosId, eogIds: eog, stripFlags,
  });
  // A TemplateProcessing post-processor that starts with a special token is the model's BOS.
  const post = obj(root.post_processor);
  const single = post?.type === "TemplateProcessing" && Array.isArray(post.single) ? obj(post.single[0]!) : null;
  return { tokenizer, addBos: obj(single?.SpecialToken) !== null, addEos: false, chatTemplate: chatTemplateBeside(path) };
}
