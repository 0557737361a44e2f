/**
 * Checks on the tokenizers of real models beyond llama.cpp's fixed vectors: deterministic mixed-script
 * texts round-trip through encode, decode and stream decode on every vocabulary in ../shared/vocab (the
 * two without vectors included), SmolLM2's tokenizer.json equals its GGUF on those texts, and
 * pre-tokenizer details where JavaScript's regex defaults differ from llama.cpp's.
 */
import { afterAll, describe, expect, test } from "bun:test";
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { readGGUF } from "../src/model/gguf.ts";
import { gguf, writeGGUF } from "../src/synth/gguf-writer.ts";
import { loadTokenizer } from "../src/tokenizer/load.ts";
import { Xoshiro128 } from "../src/util/random.ts";
import { PreTokenizer, PRE_TOKENIZER_NAMES } from "../src/tokenizer/pretokenizers.ts";
import { expectModelFormatError } from "./helpers/errors.ts";
import { describeShared, SHARED_DIR } from "./helpers/shared.ts";
import { mixedTexts } from "./helpers/vocab-vectors.ts";

const VOCAB_DIR = join(SHARED_DIR, "vocab");
const SMOLLM_GGUF = "vocab/ggml-vocab-smollm.gguf";
const SMOLLM_JSON = "models/tokenizers/smollm2-135m-instruct/tokenizer.json";

/** Every vocabulary file, with or without vectors (baichuan and gpt-neox have none). */
const vocabFiles = existsSync(VOCAB_DIR) ? readdirSync(VOCAB_DIR).filter((file) => file.endsWith(".gguf")) : [];

describeShared("mixed-script round trips", ["vocab"], () => {
  test("finds the vocabularies", () => expect(vocabFiles.length).toBeGreaterThan(0));
  // WordPiece lowercases and drops accents: its decode cannot give the input back.
  for (const file of vocabFiles.filter((file) => !file.includes("bert"))) {
    test(`${file}: encode, decode and stream decode give the text back`, () => {
      const { tokenizer } = loadTokenizer(join(VOCAB_DIR, file));
      const failures: string[] = [];
      for (const text of mixedTexts(300)) {
        const ids = tokenizer.encode(text);
        const decoder = tokenizer.createStreamDecoder();
        const streamed = ids.map((id) => decoder.push(id)).join("") + decoder.flush();
        // A control character whose byte has no token (falcon, smollm lack some) is dropped, as llama.cpp does.
        const expected = [...text].filter((char) => tokenizer.encode(char).length > 0).join("");
        if (tokenizer.decode(ids) !== expected || streamed !== expected) failures.push(JSON.stringify(text));
      }
      expect(failures.slice(0, 5)).toEqual([]);
    });
  }
});

describeShared("tokenizer.json on mixed texts", [SMOLLM_GGUF, SMOLLM_JSON], ([ggufPath, jsonPath]) => {
  test("SmolLM2's tokenizer.json gives its GGUF's ids, specials parsed or not", () => {
    const fromGGUF = loadTokenizer(ggufPath!).tokenizer;
    const fromJson = loadTokenizer(jsonPath!).tokenizer;
    for (const text of mixedTexts(300, 11)) {
      for (const parseSpecial of [false, true]) {
        expect(fromJson.encode(text, { parseSpecial })).toEqual(fromGGUF.encode(text, { parseSpecial }));
      }
    }
  });
});

test("pre-tokenizers: llama.cpp's whitespace (U+0085 is, U+FEFF is not) and Llama 3's digit groups", () => {
  const gpt2 = PreTokenizer.named("gpt-2", "t");
  expect(gpt2.split("a\u0085\u0085b")).toEqual(["a", "\u0085", "\u0085", "b"]);
  expect(gpt2.split("a \uFEFFb")).toEqual(["a", " \uFEFF", "b"]);
  const llama3 = PreTokenizer.named("llama-bpe", "t");
  expect(llama3.split("I'M 12345 apples!!\n\n  ok")).toEqual(["I", "'M", " ", "123", "45", " apples", "!!\n\n", " ", " ok"]);
});

test("every pre-tokenizer name compiles; names off Object.prototype are unknown", () => {
  for (const name of PRE_TOKENIZER_NAMES) expect(PreTokenizer.named(name, "t").split("Hello, World 123!")).toBeArray();
  expectModelFormatError(() => PreTokenizer.named("constructor", "x.gguf"), "x.gguf", /pre-tokenizer "constructor"/);
});

test("pre-tokenizers of newer families split as llama.cpp's expressions", () => {
  // gpt-4o / llama4: cased words split at the case change, contractions kept, digits in threes.
  expect(PreTokenizer.named("llama4", "t").split("HelloWorld's 12345")).toEqual(["Hello", "World's", " ", "123", "45"]);
  // superbpe: an empty lookahead match cuts digit runs into groups of three from the right.
  expect(PreTokenizer.named("superbpe", "t").split("1234567 x")).toEqual(["1", "234", "567", " x"]);
  // qwen35: combining marks stay with their letters.
  expect(PreTokenizer.named("qwen35", "t").split("e\u0301te 42")).toEqual(["e\u0301te", " ", "4", "2"]);
  expect(PreTokenizer.named("qwen2", "t").split("e\u0301te")).toEqual(["e", "\u0301te"]);
  // seed-coder: punctuation runs stop at line breaks.
  expect(PreTokenizer.named("seed-coder", "t").split("a;;\n\nb")).toEqual(["a", ";;", "\n\n", "b"]);
  expect(PreTokenizer.named("llama-bpe", "t").split("a;;\n\nb")).toEqual(["a", ";;\n\n", "b"]);
});

describeShared("special tokens as llama.cpp partitions them", ["vocab/ggml-vocab-phi-3.gguf", "vocab/ggml-vocab-llama-spm.gguf"], ([phi3Path, spmPath]) => {
  test("Phi-3: </s> is an end-of-generation control token, never from typed text; parsed, it drops the whitespace after it (rstrip)", () => {
    const { tokenizer } = loadTokenizer(phi3Path!);
    // llama.cpp (the pinned build's llama-tokenize --no-bos --no-parse-special) gives these ids.
    expect(tokenizer.encode("a</s>   b")).toEqual([263, 829, 29879, 29958, 259, 289]);
    const [endId] = tokenizer.encode("</s>", { parseSpecial: true });
    expect(tokenizer.tokenPiece(endId!)).toBe("</s>");
    expect(tokenizer.eogIds.has(endId!)).toBe(true);
    // After a special token the text gets its dummy-prefix space again, as llama.cpp does.
    expect(tokenizer.encode("a</s>   b", { parseSpecial: true })).toEqual([...tokenizer.encode("a"), endId!, ...tokenizer.encode("b")]);
    const end = tokenizer.encode("<|end|>\n x", { parseSpecial: true });
    expect(tokenizer.tokenPiece(end[0]!)).toBe("<|end|>");
    expect(end.slice(1)).toEqual(tokenizer.encode("x"));
    // <s> keeps the whitespace after it.
    expect(tokenizer.encode("<s> x", { parseSpecial: true })).toEqual([1, ...tokenizer.encode(" x")]);
  });

  test("unknown tokens are matched only when specials are parsed; empty text gives no tokens", () => {
    const { tokenizer } = loadTokenizer(spmPath!);
    expect(tokenizer.encode("<unk>", { parseSpecial: true })).toEqual([0]);
    expect(tokenizer.encode("<unk>")).not.toContain(0);
    expect(tokenizer.encode("", { parseSpecial: true })).toEqual([]);
  });
});

describeShared("loadTokenizer without the model", ["models/llama2c/tok512.bin", SMOLLM_JSON], ([tok512, json]) => {
  test("a tokenizer.bin needs no vocabulary size; given one, it is checked", () => {
    expect(loadTokenizer(tok512!).tokenizer.vocabSize).toBe(512);
    expect(loadTokenizer(tok512!, { modelVocabSize: 512 }).tokenizer.vocabSize).toBe(512);
    expectModelFormatError(() => loadTokenizer(tok512!, { modelVocabSize: 1000 }), tok512!, /512 tokens/);
  });

  test("a tokenizer.json under another name is recognised by its content", () => {
    const renamed = join(mkdtempSync(join(tmpdir(), "pagellm-tok-")), "tokenizer.data");
    copyFileSync(json!, renamed);
    expect(loadTokenizer(renamed).tokenizer.encode("Hello world")).toEqual(loadTokenizer(json!).tokenizer.encode("Hello world"));
    rmSync(dirname(renamed), { recursive: true });
  });
});

describeShared("SentencePiece word by word", ["vocab/ggml-vocab-llama-spm.gguf"], ([spmPath]) => {
  test("encoding word by word (with the cache) gives the ids of encoding the whole text at once", () => {
    const { tokenizer } = loadTokenizer(spmPath!);
    // The switch is private: flip it to compare the two paths on the same vocabulary.
    const internals = tokenizer as unknown as { wordsAreIndependent: boolean; chunkCache: Map<string, number[]> };
    expect(internals.wordsAreIndependent).toBe(true);
    const texts = [...mixedTexts(200, 23), "  two  spaces   and\u2581metaspace ", "word word word word"];
    const byWords = texts.map((text) => tokenizer.encode(text));
    internals.wordsAreIndependent = false;
    internals.chunkCache.clear();
    expect(texts.map((text) => tokenizer.encode(text))).toEqual(byWords);
  });
});

describeShared("byte-level BPE merges", ["vocab/ggml-vocab-gpt-2.gguf"], ([gpt2]) => {
  /** The plain definition: rescan every adjacent pair, merge the lowest rank (leftmost on ties), until none has one. */
  function mergeByRescan(word: string, ranks: Map<string, number>, ids: Map<string, number>): number[] {
    const symbols = Array.from(word);
    for (;;) {
      let best = -1;
      let bestRank = Infinity;
      for (let i = 0; i + 1 < symbols.length; i++) {
        const rank = ranks.get(`${symbols[i]} ${symbols[i + 1]}`);
        if (rank !== undefined && rank < bestRank) [best, bestRank] = [i, rank];
      }
      if (best < 0) return symbols.map((s) => ids.get(s)!);
      symbols.splice(best, 2, symbols[best]! + symbols[best + 1]!);
    }
  }

  test("the heap-ordered merge equals the rescanning definition on random words, and a 100,000-letter word is fast", () => {
    const file = readGGUF(gpt2!);
    const tokens = file.getStringArray("tokenizer.ggml.tokens");
    const merges = file.getStringArray("tokenizer.ggml.merges");
    const ids = new Map<string, number>();
    for (let i = tokens.length - 1; i >= 0; i--) ids.set(tokens.get(i), i);
    const ranks = new Map<string, number>();
    for (let i = merges.length - 1; i >= 0; i--) ranks.set(merges.get(i), i);
    const { tokenizer } = loadTokenizer(gpt2!);
    const rng = new Xoshiro128(12);
    // Letters only (one pre-tokenizer word), from small alphabets so that merges chain and tie.
    for (const alphabet of ["ab", "aeiou", "tehsanr", "abcdefghijklmnopqrstuvwxyz"]) {
      for (let iter = 0; iter < 60; iter++) {
        const word = Array.from({ length: 1 + Math.floor(rng.nextFloat() * 200) }, () => alphabet[Math.floor(rng.nextFloat() * alphabet.length)]).join("");
        expect(tokenizer.encode(word)).toEqual(mergeByRescan(word, ranks, ids));
      }
    }
    // Rescanning a word this long takes tens of minutes; the per-test limit is two.
    const long = "the".repeat(33_333) + "a";
    expect(tokenizer.decode(tokenizer.encode(long))).toBe(long);
  });
});

describe("end-of-generation tokens by text, as llama.cpp's is_eog", () => {
  const dir = mkdtempSync(join(tmpdir(), "pagellm-eog-"));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));
  let files = 0;
  /** A byte-level vocabulary of the given added tokens (control type 3 or user-defined 4) after "a" and "b". */
  function vocabWith(added: [string, number][]): string {
    const path = join(dir, `vocab-${files++}.gguf`);
    const tokens = ["a", "b", ...added.map(([t]) => t)];
    writeGGUF(path, new Map([
      ["general.architecture", gguf.str("llama")],
      ["tokenizer.ggml.model", gguf.str("gpt2")],
      ["tokenizer.ggml.pre", gguf.str("default")],
      ["tokenizer.ggml.tokens", gguf.strings(tokens)],
      ["tokenizer.ggml.token_type", gguf.i32s([1, 1, ...added.map(([, type]) => type)])],
      ["tokenizer.ggml.merges", gguf.strings([])],
      ["tokenizer.ggml.eos_token_id", gguf.u32(1)],
    ]), []);
    return path;
  }

  test("a user-defined </s> or [EOS] becomes a control token that ends generation; typed text never produces it", () => {
    const { tokenizer } = loadTokenizer(vocabWith([["</s>", 4], ["[EOS]", 4], ["<turn|>", 3]]));
    expect([...tokenizer.eogIds].sort()).toEqual([1, 2, 3, 4]);
    expect(tokenizer.encode("a</s>")).not.toContain(2);
    expect(tokenizer.encode("a</s>", { parseSpecial: true })).toEqual([0, 2]);
  });

  test("<|end|> ends generation, except in the harmony format (with <|return|> and <|call|>) where it ends a message", () => {
    expect(loadTokenizer(vocabWith([["<|end|>", 3]])).tokenizer.eogIds.has(2)).toBe(true);
    const harmony = loadTokenizer(vocabWith([["<|end|>", 3], ["<|return|>", 3], ["<|call|>", 3]])).tokenizer;
    expect([...harmony.eogIds].sort()).toEqual([1, 3, 4]);
  });

  test("a harmony reply keeps its channels in its text (llama.cpp renders <|start|>, <|channel|>, <|message|>, <|constrain|> and <|end|>), and ends at <|return|> or <|call|>", () => {
    const harmony = [["<|start|>", 3], ["<|channel|>", 3], ["<|message|>", 3], ["<|end|>", 3], ["<|return|>", 3], ["<|call|>", 3], ["<|constrain|>", 3]] as [string, number][];
    const { tokenizer } = loadTokenizer(vocabWith(harmony));
    const id = (t: string) => 2 + harmony.findIndex(([text]) => text === t);
    // <|channel|>a<|message|>b<|end|><|start|>b<|channel|>a<|message|>b, then <|return|>
    const reply = [id("<|channel|>"), 0, id("<|message|>"), 1, id("<|end|>"), id("<|start|>"), 1, id("<|channel|>"), 0, id("<|message|>"), 1];
    expect(tokenizer.decode(reply)).toBe("<|channel|>a<|message|>b<|end|><|start|>b<|channel|>a<|message|>b");
    expect([...tokenizer.eogIds].sort((a, b) => a - b)).toEqual([1, id("<|return|>"), id("<|call|>")]);
    expect(tokenizer.decode([id("<|return|>")])).toBe("");
  });
});

describeShared("inputs beyond llama.cpp's vectors, with the ids its pinned build gives", ["vocab"], () => {
  // llama-tokenize --no-bos --no-parse-special of ../shared/tools/llama-ref's llama.cpp.
  const CASES: [string, string, number[]][] = [
    // Whitespace beyond ASCII matches \s but never a literal range (U+3000 starts DeepSeek's "　-。").
    ["ggml-vocab-deepseek-llm.gguf", "c \u00a0\u3000 d", [66, 30683, 88946, 263]],
    ["ggml-vocab-deepseek-llm.gguf", "中文\u3000测试。\u3000。", [43757, 88946, 21370, 398, 88946, 398]],
    ["ggml-vocab-deepseek-coder.gguf", "a\u3000\u3001b \u2028x", [64, 343, 209, 534, 65, 207, 350, 101, 87]],
    // WordPiece drops format characters (zero-width space, BOM, soft hyphen) ...
    ["ggml-vocab-bert-bge.gguf", "\u200bx\ufeffy\u00adz", [1060, 2100, 2480]],
    // ... keeps the first code point of a decomposition (a Hangul syllable's first jamo, é's e),
    // lower-cases by the simple mapping (İ to i), and marks only BERT's CJK blocks as ideographs.
    ["ggml-vocab-bert-bge.gguf", "한국어 caf\u00e9 \u0130stanbul \u01c5", [1469, 29991, 29999, 7668, 9960, 100]],
    ["ggml-vocab-bert-bge.gguf", "\ufa0e \u3005 \u2e80", [100, 100, 100]],
  ];
  for (const [file, text, ids] of CASES) {
    test(`${file}: ${JSON.stringify(text)}`, () => {
      expect(loadTokenizer(join(VOCAB_DIR, file)).tokenizer.encode(text)).toEqual(ids);
    });
  }
});

describeShared("tokenizer.json: BOS, tokenizer_config.json, SentencePiece-style files", [SMOLLM_JSON], ([json]) => {
  const dir = mkdtempSync(join(tmpdir(), "pagellm-tokjson-"));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));
  const original = JSON.parse(readFileSync(json!, "utf8")) as Record<string, unknown>;
  let n = 0;
  /** A copy of SmolLM2's tokenizer.json with `changes`, and a tokenizer_config.json beside it when given. */
  function variant(changes: Record<string, unknown>, tokenizerConfig?: Record<string, unknown>): string {
    const folder = join(dir, String(n++));
    mkdirSync(folder);
    writeFileSync(join(folder, "tokenizer.json"), JSON.stringify({ ...original, ...changes }));
    if (tokenizerConfig !== undefined) writeFileSync(join(folder, "tokenizer_config.json"), JSON.stringify(tokenizerConfig));
    return join(folder, "tokenizer.json");
  }
  // Llama 3's post-processor: ByteLevel, then a template that starts every text with a special token.
  const llama3Post = {
    post_processor: {
      type: "Sequence",
      processors: [
        { type: "ByteLevel", add_prefix_space: false, trim_offsets: true, use_regex: true },
        { type: "TemplateProcessing", single: [{ SpecialToken: { id: "<|im_start|>", type_id: 0 } }, { Sequence: { id: "A", type_id: 0 } }], pair: [], special_tokens: {} },
      ],
    },
  };

  test("a template post-processor inside a Sequence starts prompts with its special token", () => {
    const loaded = loadTokenizer(variant(llama3Post));
    expect(loaded.addBos).toBe(true);
    expect(loaded.tokenizer.bosId).toBe(1);
  });

  test("tokenizer_config.json's add_bos_token, bos/eos tokens and default chat template take effect", () => {
    const loaded = loadTokenizer(variant(llama3Post, {
      add_bos_token: false, eos_token: { content: "<|im_end|>" },
      chat_template: [{ name: "tool_use", template: "T" }, { name: "default", template: "D" }],
    }));
    expect(loaded.addBos).toBe(false);
    expect(loaded.tokenizer.eosId).toBe(2);
    expect(loaded.chatTemplate).toBe("D");
  });

  test("a SentencePiece-style BPE (Metaspace, no ByteLevel) is refused, not read as byte-level", () => {
    const path = variant({
      pre_tokenizer: { type: "Metaspace", replacement: "▁", prepend_scheme: "first", split: false },
      decoder: { type: "Sequence", decoders: [{ type: "Replace", pattern: { String: "▁" }, content: " " }, { type: "ByteFallback" }] },
      post_processor: null,
    });
    expectModelFormatError(() => loadTokenizer(path), path, /SentencePiece-style BPE tokenizer\.json/);
  });
});
