/**
 * Byte-level BPE pre-tokenizers, chosen by `tokenizer.ggml.pre` as llama.cpp chooses them
 * (llama-vocab.cpp): each is a list of regular expressions, applied in order, every one splitting
 * the pieces the previous ones left (matches and the text between them both stay pieces). The
 * expressions are those of the models' tokenizer.json files as llama.cpp adapts them; Unicode
 * classes come from JavaScript's own tables (\p{L}, \p{N}, \p{P}, \p{White_Space}).
 */
import { ModelFormatError } from "../errors.ts";
import { quoteFileText } from "../util/file-text.ts";

const GPT2 = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)";
/** GPT-2's expression, which a ByteLevel pre-tokenizer with use_regex applies. */
export const GPT2_EXPRESSION = GPT2;
const LLAMA3 =
  "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const QWEN2 =
  "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const DEFAULT = ["[\\p{P}\\$\\+<=>\\^~\\|]+", GPT2, "\\p{N}+", "[0-9][0-9][0-9]"];
const STARCODER = ["\\p{N}", GPT2];
const DEEPSEEK_LLM = [
  "[\\r\\n]",
  // DeepSeek LLM's tokenizer.json class of cased letters, with code points escaped: several are
  // singletons that Unicode normalisation of this source file would fold into other letters.
  "\\s?[A-Za-z\\u00B5\\u00C0-\\u00D6\\u00D8-\\u00F6\\u00F8-\\u01BA\\u01BC-\\u01BF\\u01C4-\\u0293\\u0295-\\u02AF\\u0370-\\u0373\\u0376\\u0377\\u037B-\\u037D\\u037F\\u0386\\u0388-\\u038A\\u038C\\u038E-\\u03A1\\u03A3-\\u03F5\\u03F7-\\u0481\\u048A-\\u052F\\u0531-\\u0556\\u10A0-\\u10C5\\u13A0-\\u13F5\\u13F8-\\u13FD\\u1C90-\\u1CBA\\u1CBD-\\u1CBF\\u1D00-\\u1D2B\\u1D6B-\\u1D77\\u1D79-\\u1D9A\\u1E00-\\u1F15\\u1F18-\\u1F1D\\u1F20-\\u1F45\\u1F48-\\u1F4D\\u1F50-\\u1F57\\u1F59\\u1F5B\\u1F5D\\u1F5F-\\u1F7D\\u1F80-\\u1FB4\\u1FB6-\\u1FBC\\u1FBE\\u1FC2-\\u1FC4\\u1FC6-\\u1FCC\\u1FD0-\\u1FD3\\u1FD6-\\u1FDB\\u1FE0-\\u1FEC\\u1FF2-\\u1FF4\\u1FF6-\\u1FFC\\u2102\\u2107\\u210A-\\u2113\\u2115\\u2119-\\u211D\\u2124\\u2126\\u2128\\u212A-\\u212D\\u212F-\\u2134\\u2139\\u213C-\\u213F\\u2145-\\u2149\\u214E\\u2183\\u2184\\u2C00-\\u2C7B\\u2C7E-\\u2CE4\\u2CEB-\\u2CEE\\u2CF2\\u2CF3\\uA640-\\uA66D\\uA680-\\uA69B\\uA722-\\uA76F\\uA771-\\uA787\\uA78B-\\uA78E\\uAB70-\\uABBF\\uFB00-\\uFB06\\uFB13-\\uFB17\\uFF21-\\uFF3A\\uFF41-\\uFF5A\\u{10400}-\\u{1044F}\\u{104B0}-\\u{104D3}\\u{104D8}-\\u{104FB}\\u{10C80}-\\u{10CB2}\\u{10CC0}-\\u{10CF2}\\u{118A0}-\\u{118DF}\\u{1E900}-\\u{1E943}]+",
  "\\s?[!-/:-~！-／：-～‘-‟　-。]+",
  "\\s+$",
  "[一-龥ࠀ-一가-퟿]+",
  "\\p{N}+",
];
const DEEPSEEK_CODER = ["[\\r\\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", "[一-龥ࠀ-一가-퟿]+", "\\p{N}"];
const FALCON = ["[\\p{P}\\$\\+<=>\\^~\\|`]+", GPT2, "[0-9][0-9][0-9]"];
const CONTRACTIONS = "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])";
/** Qwen3.5: letters take their combining marks along. */
const QWEN35 = `${CONTRACTIONS}|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+`;
const CHATGLM4 = `${CONTRACTIONS}|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+`;
const SEED_CODER = `${CONTRACTIONS}|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1}| ?[^\\s\\p{L}\\p{N}\\r\\n]+|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+`;
const BAILINGMOE = "'(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]|\\s+(?!\\S)|\\s+";
/** GPT-4o's cased words: upper-case run then lower-case run, or an all-caps run (llama.cpp's lookahead form). */
const GPT4O_LOWER = "[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+";
const GPT4O_UPPER = "[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))+((?=[\\p{L}])([^A-Z]))*";
const GPT4O = `${GPT4O_LOWER}${CONTRACTIONS}?|${GPT4O_UPPER}${CONTRACTIONS}?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+`;
const TEKKEN = `${GPT4O_LOWER}|${GPT4O_UPPER}|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+`;
const BLOOM = " ?[^(\\s|.,!?…。，、।۔،)]+";
const DEEPSEEK_V3 = [
  "\\p{N}{1,3}",
  "[一-龥぀-ゟ゠-ヿ]+",
  "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\\r\\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
];

/** Pre-tokenizer names of tokenizer.ggml.pre, as llama.cpp maps them to its types. */
const BY_NAME: Readonly<Record<string, readonly string[]>> = {
  default: DEFAULT,
  "gpt-2": [GPT2], "phi-2": [GPT2], "jina-es": [GPT2], "jina-de": [GPT2], "jina-v1-en": [GPT2], "jina-v2-es": [GPT2],
  "jina-v2-de": [GPT2], "jina-v2-code": [GPT2], gigachat: [GPT2], mpt: [GPT2], olmo: [GPT2], jais: [GPT2], trillion: [GPT2],
  "llama3": [LLAMA3], "llama-v3": [LLAMA3], "llama-bpe": [LLAMA3], "falcon3": [LLAMA3], "falcon-h1": [LLAMA3], pixtral: [LLAMA3],
  dbrx: [LLAMA3], "smaug-bpe": [LLAMA3], "seed-coder": [SEED_CODER],
  qwen2: [QWEN2], "deepseek-r1-qwen": [QWEN2], stablelm2: [QWEN2], megrez: [QWEN2], hunyuan: [QWEN2],
  starcoder: STARCODER, refact: STARCODER, "command-r": STARCODER, smollm: STARCODER, codeshell: STARCODER, exaone: STARCODER,
  "minerva-7b": STARCODER,
  "deepseek-llm": DEEPSEEK_LLM,
  "deepseek-v3": DEEPSEEK_V3, "hunyuan-dense": DEEPSEEK_V3,
  qwen35: [QWEN35], "grok-2": [QWEN2],
  "lfm2": [LLAMA3], "midm-2.0": [LLAMA3],
  "chatglm-bpe": [CHATGLM4],
  "gpt-4o": [GPT4O], llama4: [GPT4O], "minimax-m2": [GPT4O],
  tekken: [TEKKEN],
  "poro-chat": [BLOOM], bloom: [BLOOM], "gpt3-finnish": [BLOOM], viking: [BLOOM, "\\p{N}"],
  superbpe: ["\\p{N}+", "(?=(\\d{3})+(?!\\d))"],
  bailingmoe: [BAILINGMOE], "llada-moe": [BAILINGMOE],
  "deepseek-coder": DEEPSEEK_CODER,
  falcon: FALCON,
};

export const PRE_TOKENIZER_NAMES: readonly string[] = Object.keys(BY_NAME);

/**
 * llama.cpp's \s is Unicode's White_Space property; JavaScript's \s also takes U+FEFF. Spell the
 * property out so the split is llama.cpp's.
 */
function compile(expr: string): RegExp {
  return new RegExp(expr.replaceAll("\\s", "\\p{White_Space}").replaceAll("\\S", "\\P{White_Space}"), "gu");
}

/** Whitespace beyond ASCII (U+0085, U+00A0, U+1680, U+2000-U+200A, U+2028/9, U+202F, U+205F, U+3000: all in the BMP). */
const NON_ASCII_WHITESPACE = /(?![\x00-\x7f])\p{White_Space}/gu;

export class PreTokenizer {
  private readonly regexes: RegExp[];

  constructor(readonly name: string, exprs: readonly string[]) {
    this.regexes = exprs.map(compile);
  }

  /** `name`'s pre-tokenizer; an unknown name is an error naming it (no silent fallback). */
  static named(name: string, file: string): PreTokenizer {
    // hasOwn: a name such as "constructor" must not find Object.prototype's members.
    const exprs = Object.hasOwn(BY_NAME, name) ? BY_NAME[name] : undefined;
    if (exprs === undefined) {
      throw new ModelFormatError(file, `pre-tokenizer ${quoteFileText(name)} (tokenizer.ggml.pre) is not supported; supported: ${PRE_TOKENIZER_NAMES.join(", ")}`);
    }
    return new PreTokenizer(name, exprs);
  }

  /**
   * The words of `text`: every expression splits each piece into its matches and the gaps between
   * them. The expressions see the text as llama.cpp's unicode_regex_split shows it to them: every
   * whitespace character beyond ASCII as U+000B, so that it matches \s but never a literal range
   * of the expression (DeepSeek LLM's `　-。` starts at the ideographic space U+3000). Each such
   * character is one UTF-16 unit, so offsets into the shown text are offsets into `text`.
   */
  split(text: string): string[] {
    const words: string[] = [];
    this.forEachWord(text, (w) => {
      words.push(w);
    });
    return words;
  }

  /**
   * split()'s words, given to `each` in order, until it returns false. The pieces are kept as flat
   * [start, end) offsets, not a pair array per word, and the last expression's words go to `each`
   * as they are found: a text of a million one-character words (digits) stays small, and a
   * caller that has seen enough stops the search.
   */
  forEachWord(text: string, each: (word: string) => boolean | void): void {
    const shown = text.replace(NON_ASCII_WHITESPACE, "\v");
    let pieces: number[] = [0, text.length];
    this.regexes.forEach((re, r) => {
      const last = r === this.regexes.length - 1;
      const next: number[] = [];
      let going = true;
      const emit = (start: number, end: number): void => {
        if (!last) next.push(start, end);
        else if (going) going = each(text.slice(start, end)) !== false;
      };
      for (let p = 0; p < pieces.length && going; p += 2) {
        const start = pieces[p]!, end = pieces[p + 1]!;
        const piece = shown.slice(start, end);
        let at = 0;
        re.lastIndex = 0;
        for (let m = re.exec(piece); m !== null && going; m = re.exec(piece)) {
          if (m[0].length === 0) {
            // An empty match (superbpe's lookahead) cuts the piece there, as llama.cpp's split does;
            // step over a whole code point so the next search never starts inside a surrogate pair.
            if (m.index > at) emit(start + at, start + m.index);
            at = m.index;
            re.lastIndex = m.index + ((piece.codePointAt(m.index) ?? 0) > 0xffff ? 2 : 1);
            continue;
          }
          if (m.index > at) emit(start + at, start + m.index);
          emit(start + m.index, start + m.index + m[0].length);
          at = m.index + m[0].length;
        }
        if (at < piece.length) emit(start + at, end);
      }
      pieces = next;
    });
    if (this.regexes.length === 0) each(text);
  }
}
