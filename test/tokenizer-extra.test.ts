/**
 * Checks on the tokenizers of real models beyond llama.cpp's fixed vectors: deterministic mixed-script
 * texts round-trip through encode, decode and stream decode on every vocabulary in ../shared/vocab (the
 * two without vectors included), SmolLM2's tokenizer.json equals its GGUF on those texts, and
 * pre-tokenizer details where JavaScript's regex defaults differ from llama.cpp's.
 */
import { expect, test } from "bun:test";
import { copyFileSync, existsSync, mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { loadTokenizer } from "../src/tokenizer/load.ts";
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
  test("Phi-3: user-defined </s> is matched in any text and drops the whitespace after it (rstrip)", () => {
    const { tokenizer } = loadTokenizer(phi3Path!);
    const [endId] = tokenizer.encode("</s>");
    expect(tokenizer.tokenPiece(endId!)).toBe("</s>");
    // After a special token the text gets its dummy-prefix space again, as llama.cpp does.
    expect(tokenizer.encode("a</s>   b")).toEqual([...tokenizer.encode("a"), endId!, ...tokenizer.encode("b")]);
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
