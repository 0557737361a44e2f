import { afterAll, expect, test } from "bun:test";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { InputError } from "../src/errors.ts";
import {
  LLAMA2C_BOS_ID,
  LLAMA2C_EOS_ID,
  loadGGUFTokenizer,
  loadLlama2cTokenizer,
  type Tokenizer,
} from "../src/tokenizer/index.ts";
import { describeShared } from "./helpers/shared.ts";
import { expectModelFormatError } from "./helpers/errors.ts";
import { randomTexts } from "./helpers/vocab-vectors.ts";

const TOK512 = "models/llama2c/tok512.bin";
const TOK512_RAW = "models/llama2c/variants/tok512_rawbytes.bin";
const LLAMA2_TOK = "models/llama2c/llama2_tokenizer.bin";
const SPM_VOCAB = "vocab/ggml-vocab-llama-spm.gguf";
const STORIES_GGUF = "models/gguf/stories260K.gguf";
const GPT2_VOCAB = "vocab/ggml-vocab-gpt-2.gguf";

const tempDir = mkdtempSync(join(tmpdir(), "pagellm-tokenizer-"));
afterAll(() => rmSync(tempDir, { recursive: true, force: true }));

/** Texts that exercise merges, byte fallback, whitespace runs and the dummy prefix. */
const SAMPLE_TEXTS = [
  "Once upon a time",
  " leading space",
  "   three spaces",
  "trailing space ",
  "Lily said, \"I'm happy.\"\n",
  "naïve café 日本 🦙",
  "tabs\tand\nnewlines\n\n",
  "emoji 😶‍🌫️ and zero\u200bwidth",
  "\ufeffbyte order mark",
  "<s> and </s> and <unk> and <0x0A> are just text",
  "\u2581 is the metaspace",
  "",
];

const WORDS = ["the", "cat", " ", "  ", "\n", "Hello", "world", "!", "'s", "ß", "é", "中文", "🚀", "\t", "3.5"];

/** Deterministic pseudo-random strings mixing ASCII words, spaces and code points from all planes. */
function randomWordTexts(count: number): string[] {
  return randomTexts(count, WORDS, { seed: 42, maxPieces: 10 });
}

/** Concatenated output of a stream decoder fed `ids` one by one. */
function streamDecode(tokenizer: Tokenizer, ids: readonly number[], prevTokenId?: number): string {
  const decoder = tokenizer.createStreamDecoder(prevTokenId);
  return ids.map((id) => decoder.push(id)).join("") + decoder.flush();
}


/**
 * The inputs of a llama.cpp `.gguf.inp` file: texts separated by "\n__ggml_vocab_test__\n". The file ends
 * with the separator, so the empty text after the last one is not an input (an empty input elsewhere is).
 */
function readVocabTestInputs(path: string): string[] {
  const parts = readFileSync(path, "utf8").split("\n__ggml_vocab_test__\n");
  expect(parts.at(-1)).toBe("");
  return parts.slice(0, -1);
}

/** The expected ids of a `.gguf.out` file: one line per input, ids separated by spaces (leading space). */
function readVocabTestOutputs(path: string): number[][] {
  const lines = readFileSync(path, "utf8").split("\n");
  expect(lines.at(-1)).toBe("");
  return lines.slice(0, -1).map((line) => line.split(" ").filter((id) => id !== "").map(Number));
}

/** Every vocabulary in ../shared/vocab that has a .gguf and llama.cpp's test vectors for it. */
const VECTOR_VOCABS = [
  "llama-spm", "phi-3", "gpt-2", "starcoder", "refact", "smollm", "mpt", "falcon", "deepseek-llm", "deepseek-coder", "bert-bge",
].map((name) => `vocab/ggml-vocab-${name}.gguf`);

for (const vocab of VECTOR_VOCABS) {
  describeShared(`llama.cpp test vectors: ${vocab}`, [vocab, `${vocab}.inp`, `${vocab}.out`], ([gguf, inp, out]) => {
    const { tokenizer } = loadGGUFTokenizer(gguf!);
    const inputs = readVocabTestInputs(inp!);
    const expected = readVocabTestOutputs(out!);

    test("has one expected line per input (46)", () => {
      expect(inputs.length).toBe(46);
      expect(expected.length).toBe(inputs.length);
    });

    inputs.forEach((input, i) => {
      test(`#${i} ${JSON.stringify(input).slice(0, 40)}: encodes as llama.cpp and round-trips`, () => {
        const ids = tokenizer.encode(input);
        expect(ids).toEqual(expected[i]!);
        if (vocab.includes("bert")) {
          // WordPiece lower-cases and strips accents and spacing, and its unknown token has no text:
          // the decoded text encodes to the same ids, unknown tokens aside.
          const unk = 100;
          expect(tokenizer.encode(tokenizer.decode(ids))).toEqual(ids.filter((id) => id !== unk));
        } else {
          expect(tokenizer.decode(ids)).toBe(input);
          expect(streamDecode(tokenizer, ids)).toBe(input);
        }
      });
    });
  });
}

describeShared("GGUF SentencePiece vocabulary", [SPM_VOCAB, GPT2_VOCAB], ([spm, gpt2]) => {
  const { tokenizer, addBos } = loadGGUFTokenizer(spm!);

  test("reads special ids and add_bos_token", () => {
    expect(tokenizer.vocabSize).toBe(32000);
    expect(tokenizer.bosId).toBe(1);
    expect(tokenizer.eosId).toBe(2);
    expect(addBos).toBe(true);
    expect(tokenizer.tokenPiece(15043)).toBe("\u2581Hello");
    expect(tokenizer.tokenPiece(13)).toBe("<0x0A>");
  });

  test("adds BOS and EOS on request and decodes them to nothing", () => {
    const ids = tokenizer.encode("Hello world", { addBos: true, addEos: true });
    expect(ids).toEqual([1, 15043, 3186, 2]);
    expect(tokenizer.decode(ids)).toBe("Hello world");
  });

  test("control pieces in text are not matched as control tokens", () => {
    const ids = tokenizer.encode("<s></s>");
    expect(ids).not.toContain(1);
    expect(ids).not.toContain(2);
    expect(tokenizer.decode(ids)).toBe("<s></s>");
  });

  test("round-trips random text", () => {
    for (const text of randomWordTexts(300)) expect(tokenizer.decode(tokenizer.encode(text))).toBe(text);
  });

  test("a literal metaspace in text reads as a space, as in llama.cpp", () => {
    expect(tokenizer.encode("a\u2581b")).toEqual(tokenizer.encode("a b"));
  });

  test("a GPT-2 vocabulary is byte-level BPE", () => {
    expect(loadGGUFTokenizer(gpt2!).tokenizer.encode("Hello world")).toEqual([15496, 995]);
  });
});

describeShared("llama2.c tokenizer.bin", [TOK512, LLAMA2_TOK, TOK512_RAW], ([tok512Path, llama2Path, rawPath]) => {
  const tok512 = loadLlama2cTokenizer(tok512Path!, 512);
  const llama2 = loadLlama2cTokenizer(llama2Path!, 32000);
  const tok512Raw = loadLlama2cTokenizer(rawPath!, 512);

  // Expected ids come from llama2.c run.c's encode(text, bos=0, eos=0).
  const RUN_C_IDS: readonly [text: string, tok512: number[], llama2: number[]][] = [
    ["Once upon a time", [403, 407, 261, 378], [9038, 2501, 263, 931]],
    ["Hello world!", [346, 306, 414, 263, 304, 341, 443], [15043, 3186, 29991]],
    [
      "Lily said, \"I'm happy.\"\n",
      [317, 336, 432, 313, 442, 439, 423, 393, 426, 436, 13],
      [365, 2354, 1497, 29892, 376, 29902, 29915, 29885, 9796, 1213, 13],
    ],
    [
      "naïve café 日本 🦙",
      [297, 412, 198, 178, 360, 280, 412, 431, 485, 410, 233, 154, 168, 233, 159, 175, 410, 243, 162, 169, 156],
      [1055, 30085, 345, 274, 28059, 29871, 30325, 30346, 29871, 243, 162, 169, 156],
    ],
    ["  two leading spaces", [410, 410, 259, 424, 414, 278, 411, 380, 299, 262, 427, 412, 331, 419], [259, 1023, 8236, 8162]],
  ];

  for (const [text, tok512Ids, llama2Ids] of RUN_C_IDS) {
    test(`encodes ${JSON.stringify(text)} as run.c does`, () => {
      expect(tok512.encode(text)).toEqual(tok512Ids);
      expect(llama2.encode(text)).toEqual(llama2Ids);
      expect(tok512.encode(text, { addBos: true, addEos: true })).toEqual([LLAMA2C_BOS_ID, ...tok512Ids, LLAMA2C_EOS_ID]);
    });
  }

  test("special ids are llama2.c's", () => {
    expect([tok512.bosId, tok512.eosId, tok512.vocabSize]).toEqual([1, 2, 512]);
    expect(llama2.vocabSize).toBe(32000);
    expect(tok512.encode("")).toEqual([]);
    expect(tok512.encode("", { addBos: true })).toEqual([1]);
  });

  test("round-trips sample and random text with both vocabularies", () => {
    for (const text of [...SAMPLE_TEXTS, ...randomWordTexts(300)]) {
      expect(tok512.decode(tok512.encode(text))).toBe(text);
      expect(llama2.decode(llama2.encode(text))).toBe(text);
    }
  });

  test("the raw-bytes variant encodes and decodes exactly like tok512.bin", () => {
    for (const text of [...SAMPLE_TEXTS, ...randomWordTexts(300)]) {
      const ids = tok512.encode(text);
      expect(tok512Raw.encode(text)).toEqual(ids);
      expect(tok512Raw.decode(ids)).toBe(tok512.decode(ids));
    }
    for (let id = 0; id < 512; id++) expect(tok512Raw.tokenPiece(id)).toBe(tok512.tokenPiece(id));
  });

  test("byte tokens are never matched from text, even where they look like text", () => {
    // In the raw-bytes variant id 3 + 0x41 is the piece "A"; text "A" must still map to the normal piece.
    const ids = tok512Raw.encode("A A");
    expect(ids.every((id) => id < 3 || id > 258)).toBe(true);
  });

  test("decodes BOS, EOS and UNK to nothing and strips the dummy prefix after BOS", () => {
    const ids = tok512.encode("Once upon a time", { addBos: true, addEos: true });
    expect(tok512.decode(ids)).toBe("Once upon a time");
    expect(tok512.decode([0, ...tok512.encode("x")])).toBe(" x");
  });

  test("rejects a token id outside the vocabulary", () => {
    expect(() => tok512.decode([512])).toThrow(InputError);
    expect(() => tok512.tokenPiece(-1)).toThrow(InputError);
  });

  test("a vocab size other than the model's is a ModelFormatError naming the file", () => {
    expectModelFormatError(() => loadLlama2cTokenizer(llama2Path!, 512), llama2Path!, /32000 tokens.*vocab_size is 512/);
  });

  test("truncated or garbled files are ModelFormatErrors naming the file", () => {
    const bytes = readFileSync(tok512Path!);
    const write = (name: string, data: Uint8Array): string => {
      const path = join(tempDir, name);
      writeFileSync(path, data);
      return path;
    };
    const midEntry = write("mid-entry.bin", bytes.subarray(0, bytes.length - 2));
    expectModelFormatError(() => loadLlama2cTokenizer(midEntry, 512), midEntry, /truncated at byte \d+ while reading/);
    const midHeader = write("mid-header.bin", bytes.subarray(0, 2));
    expectModelFormatError(() => loadLlama2cTokenizer(midHeader, 512), midHeader, /truncated.*max_token_length/);
    // Cut exactly after entry 300: the file parses but holds too few tokens.
    const atBoundary = write("at-boundary.bin", bytes.subarray(0, entryEnd(bytes, 300)));
    expectModelFormatError(() => loadLlama2cTokenizer(atBoundary, 512), atBoundary, /has 300 tokens/);
    const absurd = Uint8Array.from(bytes);
    new DataView(absurd.buffer).setInt32(8, 1 << 30, true); // length of token 0
    const absurdPath = write("absurd-length.bin", absurd);
    expectModelFormatError(() => loadLlama2cTokenizer(absurdPath, 512), absurdPath, /absurd length/);
    const missing = join(tempDir, "does-not-exist.bin");
    expectModelFormatError(() => loadLlama2cTokenizer(missing, 512), missing, /cannot read/);
  });

  /** Pairs the tokenizer looks up while encoding `text` (its merge work). */
  const lookupsOf = (text: string): number => {
    const before = llama2.pairLookups;
    llama2.encode(text);
    return llama2.pairLookups - before;
  };

  test("merging does linear work: a long word without spaces, merged over and over, takes fewer than 3 pair lookups per character", () => {
    // One chunk (the word cache cuts only at spaces); run.c's rescan after every merge looks up O(n²) pairs.
    const word = (copies: number) => "onceuponatimetherewasalittlegirlnamedlily".repeat(copies);
    const short = word(25);
    const long = word(50);
    const [shortLookups, longLookups] = [lookupsOf(short), lookupsOf(long)];
    expect(llama2.encode(long).length).toBeLessThan(long.length / 2); // merged, not left as characters
    expect(longLookups).toBeGreaterThanOrEqual(long.length); // at least the first pass over the pairs
    expect(longLookups).toBeLessThan(3 * (long.length + 1)); // +1: the dummy-prefix space
    // Twice the text, twice the work (a quadratic merge would do four times).
    expect(longLookups / shortLookups).toBeLessThan(2.1);
  });

  test("a ~2000-token prompt: every word is merged once, and encoding it again is served from the word cache", () => {
    const paragraph = SAMPLE_TEXTS.join(" ") + randomWordTexts(20).join(" ");
    let text = paragraph;
    while (llama2.encode(text).length < 2000) text += paragraph;
    const fresh = loadLlama2cTokenizer(llama2Path!, 32000);
    const before = fresh.pairLookups;
    const ids = fresh.encode(text);
    expect(ids.length).toBeGreaterThanOrEqual(2000);
    // The repeats of the paragraph cost nothing: the work is that of one copy of it.
    expect(fresh.pairLookups - before).toBeLessThan(3 * (paragraph.length + 1));
    const again = fresh.pairLookups;
    expect(fresh.encode(text)).toEqual(ids);
    expect(fresh.pairLookups).toBe(again);
  });
});

/** Byte offset just after entry `count` of a tokenizer.bin (entries start after the 4-byte header). */
function entryEnd(bytes: Uint8Array, count: number): number {
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  let at = 4;
  for (let i = 0; i < count; i++) at += 8 + view.getInt32(at + 4, true);
  return at;
}

describeShared("GGUF and llama2.c vocabularies agree", [STORIES_GGUF, TOK512], ([gguf, tok512Path]) => {
  test("stories260K.gguf's vocabulary encodes like tok512.bin", () => {
    const fromGGUF = loadGGUFTokenizer(gguf!).tokenizer;
    const fromBin = loadLlama2cTokenizer(tok512Path!, 512);
    // GGUF pieces spell spaces "▁", so a literal "▁" in text reads as a space there (as in llama.cpp).
    const texts = [...SAMPLE_TEXTS, ...randomWordTexts(200)].filter((text) => !text.includes("\u2581"));
    for (const text of texts) {
      const ids = fromBin.encode(text);
      expect(fromGGUF.encode(text)).toEqual(ids);
      expect(fromGGUF.decode(ids)).toBe(text);
    }
  });
});

describeShared("stream decoder", [TOK512], ([tok512Path]) => {
  const tokenizer = loadLlama2cTokenizer(tok512Path!, 512);

  test("holds back a character split over byte tokens until it is complete", () => {
    // "日" (E6 97 A5) is not a piece in tok512, so it falls back to three byte tokens.
    const ids = tokenizer.encode("a日b");
    const byteIds = ids.filter((id) => id >= 3 && id <= 258);
    expect(byteIds.map((id) => tokenizer.tokenPiece(id))).toEqual(["<0xE6>", "<0x97>", "<0xA5>"]);
    const decoder = tokenizer.createStreamDecoder(LLAMA2C_BOS_ID);
    const pieces = ids.map((id) => decoder.push(id));
    const firstByte = ids.indexOf(byteIds[0]!);
    expect(pieces.slice(firstByte, firstByte + 2)).toEqual(["", ""]);
    expect(pieces[firstByte + 2]).toBe("日");
    expect(pieces.join("") + decoder.flush()).toBe("a日b");
  });

  test("an incomplete character at the end flushes as U+FFFD", () => {
    const decoder = tokenizer.createStreamDecoder();
    expect(decoder.push(3 + 0xe2)).toBe("");
    expect(decoder.flush()).toBe("\ufffd");
  });

  test("strips the dummy-prefix space only at the start or after BOS", () => {
    const [once] = tokenizer.encode("Once");
    expect(tokenizer.tokenPiece(once!)).toBe(" Once");
    expect(tokenizer.createStreamDecoder().push(once!)).toBe("Once");
    expect(tokenizer.createStreamDecoder(LLAMA2C_BOS_ID).push(once!)).toBe("Once");
    const [word] = tokenizer.encode("upon");
    expect(tokenizer.createStreamDecoder(word).push(once!)).toBe(" Once");
    const afterBos = tokenizer.createStreamDecoder();
    expect(afterBos.push(LLAMA2C_BOS_ID)).toBe("");
    expect(afterBos.push(once!)).toBe("Once");
    expect(afterBos.push(once!)).toBe(" Once");
    expect(afterBos.push(LLAMA2C_EOS_ID)).toBe("");
  });

  test("streamed text equals decode for random text", () => {
    for (const text of randomWordTexts(200)) {
      const ids = tokenizer.encode(text, { addBos: true });
      expect(streamDecode(tokenizer, ids)).toBe(tokenizer.decode(ids));
      expect(tokenizer.decode(ids)).toBe(text);
    }
  });
});
