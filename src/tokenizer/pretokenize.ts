/**
 * Pre-tokenizers of byte-level BPE vocabularies: the regex lists llama.cpp applies per
 * `tokenizer.ggml.pre` (llm_tokenizer_bpe's constructor in llama-vocab.cpp).
 *
 * Each regex of a list refines the fragments the previous ones left: a fragment is cut into its matches
 * and the gaps between them (both kept), and lookaheads and `$` see only the fragment, as in llama.cpp's
 * `unicode_regex_split`. Character classes come from the JavaScript engine's Unicode tables (`\p{L}`,
 * `\p{N}`, `\p{P}`, `\p{White_Space}`), which are llama.cpp's categories; `\s` is written
 * `\p{White_Space}` because JavaScript's `\s` also takes U+FEFF and misses U+0085, unlike llama.cpp's.
 */
import { ModelFormatError } from "../errors.ts";

/** How a vocabulary cuts text into words before BPE. */
export interface PreTokenizer {
  /** The `tokenizer.ggml.pre` name (or the tokenizer.json description). */
  readonly name: string;
  readonly regexes: readonly RegExp[];
  /** Use a word whole when it is a token, without merging (llama.cpp's ignore_merges: Llama 3, tekken). */
  readonly ignoreMerges: boolean;
}

const GPT2 = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)";
const CONTRACTIONS = "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])";
const LLAMA3 = `${CONTRACTIONS}|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+`;
const QWEN2 = `${CONTRACTIONS}|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+`;
const QWEN35 = `${CONTRACTIONS}|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+`;
const GPT4O_WORD = "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+";
const GPT4O_CAPS = "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*";
const GPT4O = `${GPT4O_WORD}${CONTRACTIONS}?|${GPT4O_CAPS}${CONTRACTIONS}?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+`;
const TEKKEN = `${GPT4O_WORD}|${GPT4O_CAPS}|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+`;
const CJK = "[一-龥ࠀ-一가-퟿]+";
/**
 * deepseek-llm's Latin, Greek, Cyrillic... letters, as its tokenizer.json spells them. Characters that NFC
 * would replace (U+1F7D, U+1FBE, U+1FD3, U+1FDB, U+2126, U+212A) are escaped so no editor can change them.
 */
const DEEPSEEK_LETTERS =
  "A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-ᴫᵫ-ᵷᵹ-ᶚḀ-ἕἘ-Ἕἠ-ὅὈ-Ὅὐ-ὗὙὛὝὟ-\u1f7dᾀ-ᾴᾶ-ᾼ\u1fbeῂ-ῄῆ-ῌῐ-\u1fd3ῖ-\u1fdbῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝℤ\u2126ℨ\u212a-ℭℯ-ℴℹℼ-ℿⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎꭰ-ꮿﬀ-ﬆﬓ-ﬗＡ-Ｚａ-ｚ𐐀-𐑏𐒰-𐓓𐓘-𐓻𐲀-𐲲𐳀-𐳲𑢠-𑣟𞤀-𞥃";
const BLOOM = " ?[^(\\s|.,!?…。，、।۔،)]+";

/** Regex lists per pre-tokenizer family, in llama.cpp's order. */
const FAMILIES: Readonly<Record<string, readonly string[]>> = {
  default: ["[\\p{P}\\$\\+<=>\\^~\\|]+", GPT2, "\\p{N}+", "[0-9][0-9][0-9]"],
  llama3: [LLAMA3],
  deepseekLlm: [
    "[\\r\\n]",
    `\\s?[${DEEPSEEK_LETTERS}]+`,
    "\\s?[!-/:-~！-／：-～‘-‟　-。]+",
    "\\s+$",
    CJK,
    "\\p{N}+",
  ],
  deepseek3: [
    "\\p{N}{1,3}",
    "[一-龥぀-ゟ゠-ヿ]+",
    "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\\r\\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
  ],
  deepseekCoder: ["[\\r\\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", CJK, "\\p{N}"],
  falcon: ["[\\p{P}\\$\\+<=>\\^~\\|`]+", GPT2, "[0-9][0-9][0-9]"],
  starcoder: ["\\p{N}", GPT2],
  gpt2: [GPT2],
  qwen2: [QWEN2],
  qwen35: [QWEN35],
  bloom: [BLOOM],
  viking: [BLOOM, "\\p{N}"],
  chatglm4: [`${CONTRACTIONS}|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+`],
  gpt4o: [GPT4O],
  tekken: [TEKKEN],
  superbpe: ["\\p{N}+", "(?=(\\d{3})+(?!\\d))"],
  seedCoder: [`${CONTRACTIONS}|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1}| ?[^\\s\\p{L}\\p{N}\\r\\n]+|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+`],
  bailingmoe: [
    "'(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]|\\s+(?!\\S)|\\s+",
  ],
};

/** `tokenizer.ggml.pre` names llama.cpp knows, and the family each uses. */
const PRE_NAMES: Readonly<Record<string, keyof typeof FAMILIES>> = {
  default: "default",
  llama3: "llama3",
  "llama-v3": "llama3",
  "llama-bpe": "llama3",
  falcon3: "llama3",
  "falcon-h1": "llama3",
  pixtral: "llama3",
  "midm-2.0": "llama3",
  lfm2: "llama3",
  dbrx: "llama3",
  "smaug-bpe": "llama3",
  "deepseek-llm": "deepseekLlm",
  "deepseek-v3": "deepseek3",
  "hunyuan-dense": "deepseek3",
  "deepseek-coder": "deepseekCoder",
  falcon: "falcon",
  starcoder: "starcoder",
  refact: "starcoder",
  "command-r": "starcoder",
  smollm: "starcoder",
  codeshell: "starcoder",
  exaone: "starcoder",
  "minerva-7b": "starcoder",
  "gpt-2": "gpt2",
  "phi-2": "gpt2",
  "jina-es": "gpt2",
  "jina-de": "gpt2",
  "jina-v1-en": "gpt2",
  "jina-v2-es": "gpt2",
  "jina-v2-de": "gpt2",
  "jina-v2-code": "gpt2",
  gigachat: "gpt2",
  mpt: "gpt2",
  olmo: "gpt2",
  jais: "gpt2",
  trillion: "gpt2",
  // GPT-NeoX-20B's tokenizer.json is GPT-2's ByteLevel regex.
  "gpt-neox": "gpt2",
  qwen2: "qwen2",
  "deepseek-r1-qwen": "qwen2",
  stablelm2: "qwen2",
  hunyuan: "qwen2",
  "grok-2": "qwen2",
  qwen35: "qwen35",
  "poro-chat": "bloom",
  bloom: "bloom",
  "gpt3-finnish": "bloom",
  viking: "viking",
  "chatglm-bpe": "chatglm4",
  "gpt-4o": "gpt4o",
  llama4: "gpt4o",
  "minimax-m2": "gpt4o",
  tekken: "tekken",
  superbpe: "superbpe",
  "seed-coder": "seedCoder",
  bailingmoe: "bailingmoe",
  "llada-moe": "bailingmoe",
};

/** Pre-tokenizers whose words are looked up whole before merging (llama.cpp sets ignore_merges). */
const IGNORE_MERGES: ReadonlySet<string> = new Set(["llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2", "tekken"]);

/** Compile a llama.cpp regex (ECMAScript syntax with `\p{..}`) with llama.cpp's whitespace class. */
export function compileRegex(source: string): RegExp {
  const translated = source.replaceAll("\\s", "\\p{White_Space}").replaceAll("\\S", "\\P{White_Space}");
  return new RegExp(translated, "gu");
}

/** The pre-tokenizer named by `tokenizer.ggml.pre`; an unknown name is a ModelFormatError naming it. */
export function preTokenizerByName(name: string, file: string): PreTokenizer {
  const family = Object.hasOwn(PRE_NAMES, name) ? PRE_NAMES[name] : undefined;
  if (family === undefined) {
    throw new ModelFormatError(file, `unknown pre-tokenizer "${name}" (tokenizer.ggml.pre)`);
  }
  return { name, regexes: FAMILIES[family].map(compileRegex), ignoreMerges: IGNORE_MERGES.has(name) };
}

/** Cut `text` into words: each regex splits every fragment into its matches and the gaps between them. */
export function splitWords(text: string, regexes: readonly RegExp[]): string[] {
  let fragments = [text];
  for (const regex of regexes) {
    const next: string[] = [];
    for (const fragment of fragments) {
      let from = 0;
      regex.lastIndex = 0;
      for (let match = regex.exec(fragment); match !== null; match = regex.exec(fragment)) {
        const at = match.index;
        const matched = match[0];
        if (matched.length === 0) {
          // An empty match (a pure lookahead, superbpe's) cuts the fragment there, as in llama.cpp.
          if (at > from) next.push(fragment.slice(from, at));
          from = at;
          regex.lastIndex = at + ((fragment.codePointAt(at) ?? 0) > 0xffff ? 2 : 1);
          continue;
        }
        if (at > from) next.push(fragment.slice(from, at));
        next.push(matched);
        from = at + matched.length;
      }
      if (from < fragment.length) next.push(from === 0 ? fragment : fragment.slice(from));
    }
    fragments = next;
  }
  return fragments;
}
