/**
 * Special tokens, end-of-generation sets, streaming of split characters, tokenizer.json against GGUF, and
 * the loader's errors, on the vocabularies of ../shared.
 */
import { afterAll, expect, test } from "bun:test";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { readGGUF } from "../src/model/gguf.ts";
import { preTokenizerRegexes, type Json } from "../src/tokenizer/hf-json.ts";
import { compileRegex } from "../src/tokenizer/pretokenize.ts";
import { loadGGUFTokenizer, loadTokenizer, preTokenizerByName, splitWords, type Tokenizer } from "../src/tokenizer/index.ts";
import { expectModelFormatError } from "./helpers/errors.ts";
import { describeShared } from "./helpers/shared.ts";
import { mixedTexts, readVectors } from "./helpers/vocab-vectors.ts";

const SMOLLM = "vocab/ggml-vocab-smollm.gguf";
const SMOLLM_JSON = "models/tokenizers/smollm2-135m-instruct/tokenizer.json";
const GPT2 = "vocab/ggml-vocab-gpt-2.gguf";
const PHI3 = "vocab/ggml-vocab-phi-3.gguf";
const LLAMA_SPM = "vocab/ggml-vocab-llama-spm.gguf";
const DEEPSEEK_LLM = "vocab/ggml-vocab-deepseek-llm.gguf";
const TOK512 = "models/llama2c/tok512.bin";

const tempDir = mkdtempSync(join(tmpdir(), "pagellm-tokenizer-special-"));
afterAll(() => rmSync(tempDir, { recursive: true, force: true }));

/** Decode `ids` one token at a time through a stream decoder, recording each push. */
function streamPieces(tokenizer: Tokenizer, ids: readonly number[]): string[] {
  const decoder = tokenizer.createStreamDecoder();
  const pieces = ids.map((id) => decoder.push(id));
  pieces.push(decoder.flush());
  return pieces;
}

describeShared("tokenizer.json", [SMOLLM, SMOLLM_JSON, `${SMOLLM}.inp`, `${SMOLLM}.out`], ([gguf, json, inp, out]) => {
  test("SmolLM2's tokenizer.json gives the ids of its GGUF vocabulary on the smollm vectors", () => {
    const fromJson = loadTokenizer(json!);
    const fromGGUF = loadTokenizer(gguf!);
    expect(fromJson.tokenizer.vocabSize).toBe(fromGGUF.tokenizer.vocabSize);
    for (const { input, ids } of readVectors(inp!, out!)) {
      expect(fromJson.tokenizer.encode(input)).toEqual(ids);
      expect(fromJson.tokenizer.encode(input, { parseSpecial: true })).toEqual(fromGGUF.tokenizer.encode(input, { parseSpecial: true }));
    }
    const chat = "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n";
    expect(fromJson.tokenizer.encode(chat, { parseSpecial: true })).toEqual(fromGGUF.tokenizer.encode(chat, { parseSpecial: true }));
    expect([...fromJson.eogIds].sort()).toEqual([...fromGGUF.eogIds].sort());
    for (const text of mixedTexts(300, 11)) {
      expect(fromJson.tokenizer.encode(text)).toEqual(fromGGUF.tokenizer.encode(text));
      expect(fromJson.tokenizer.encode(text, { parseSpecial: true })).toEqual(fromGGUF.tokenizer.encode(text, { parseSpecial: true }));
    }
    expect(fromJson.bosText).toBe("<|im_start|>");
    expect(fromJson.eosText).toBe("<|im_end|>");
  });
});

describeShared("special tokens", [SMOLLM, LLAMA_SPM, PHI3], ([smollmPath, spmPath, phi3Path]) => {
  const smollm = loadTokenizer(smollmPath!);
  const chat = "<|im_start|>user\nHello<|im_end|>\n";

  test("control tokens typed by a user stay plain text", () => {
    const ids = smollm.tokenizer.encode(chat);
    expect(ids).not.toContain(1);
    expect(ids).not.toContain(2);
    expect(smollm.tokenizer.decode(ids)).toBe(chat);
  });

  test("parseSpecial matches control tokens whole in template text", () => {
    const ids = smollm.tokenizer.encode(chat, { parseSpecial: true });
    expect(ids[0]).toBe(1);
    expect(ids).toContain(2);
    expect(ids).toEqual([1, ...smollm.tokenizer.encode("user\nHello"), 2, ...smollm.tokenizer.encode("\n")]);
    // Control tokens contribute nothing to decoded text.
    expect(smollm.tokenizer.decode(ids)).toBe("user\nHello\n");
  });

  test("BOS and EOS are added only on request", () => {
    const spm = loadTokenizer(spmPath!);
    expect(spm.addBos).toBe(true);
    expect(spm.tokenizer.encode("Hi", { addBos: true, addEos: true })).toEqual([1, ...spm.tokenizer.encode("Hi"), 2]);
    expect(spm.bosText).toBe("<s>");
    expect(spm.eosText).toBe("</s>");
    // SentencePiece: after a parsed special token the text gets its dummy-prefix space again, as llama.cpp.
    expect(spm.tokenizer.encode("<s>Hi", { parseSpecial: true })).toEqual([1, ...spm.tokenizer.encode("Hi")]);
    expect(spm.tokenizer.encode("<s>Hi")).not.toContain(1);
  });

  test("end-of-generation sets follow llama.cpp's is_eog", () => {
    expect([...smollm.eogIds].sort()).toEqual([0, 2]); // <|endoftext|> by text, <|im_end|> as EOS
    const phi3 = loadTokenizer(phi3Path!);
    const textOf = (id: number): string => phi3.tokenizer.tokenPiece(id);
    expect(new Set([...phi3.eogIds].map(textOf))).toEqual(new Set(["<|endoftext|>", "<|end|>"]));
    expect(phi3.eogIds.has(phi3.tokenizer.eosId!)).toBe(true);
  });
});

describeShared("streaming decode", [GPT2, DEEPSEEK_LLM], ([gpt2Path, deepseekPath]) => {
  test("a character split over byte tokens is printed once, when complete", () => {
    const { tokenizer } = loadTokenizer(gpt2Path!);
    const text = "🦙 llamas";
    const ids = tokenizer.encode(text);
    // GPT-2 spells the 4-byte emoji with several byte tokens.
    expect(ids.length).toBeGreaterThan(2);
    const pieces = streamPieces(tokenizer, ids);
    expect(pieces.join("")).toBe(text);
    expect(pieces.filter((piece) => piece.includes("🦙")).length).toBe(1);
    expect(pieces.every((piece) => !piece.includes("\uFFFD"))).toBe(true);
  });

  test("stream decoding equals decoding the whole on mixed scripts", () => {
    const { tokenizer } = loadTokenizer(deepseekPath!);
    const text = "Grüße, 世界! Ελληνικά и русский 🦙🦙 1234567";
    const ids = tokenizer.encode(text);
    expect(streamPieces(tokenizer, ids).join("")).toBe(text);
    expect(tokenizer.decode(ids)).toBe(text);
  });
});

describeShared("loader", [GPT2, TOK512], ([gpt2Path, tok512Path]) => {
  test("an unknown pre-tokenizer is an error naming it", () => {
    expectModelFormatError(() => preTokenizerByName("no-such-pre", "x.gguf"), "x.gguf", /unknown pre-tokenizer "no-such-pre"/);
  });

  test("the model's vocabulary size is an optional check", () => {
    expect(loadTokenizer(gpt2Path!).tokenizer.vocabSize).toBe(50257);
    expect(loadTokenizer(gpt2Path!, { vocabSize: 50257 }).tokenizer.vocabSize).toBe(50257);
    expectModelFormatError(() => loadTokenizer(gpt2Path!, { vocabSize: 32000 }), gpt2Path!, /50257 tokens, the model has 32000/);
    expect(loadTokenizer(tok512Path!).tokenizer.vocabSize).toBe(512);
    expectModelFormatError(() => loadTokenizer(tok512Path!, { vocabSize: 1000 }), tok512Path!, /512 tokens/);
  });

  test("a GGUF vocabulary with an unknown tokenizer.ggml.pre fails naming it", () => {
    // Rewrite the pre-tokenizer name inside a copy of the gpt-2 vocabulary (same length keeps the file valid).
    const bytes = readFileSync(gpt2Path!);
    const at = bytes.indexOf(Buffer.from("gpt-2"), bytes.indexOf(Buffer.from("tokenizer.ggml.pre")));
    expect(at).toBeGreaterThan(0);
    bytes.write("zzz-9", at, "latin1");
    const path = join(tempDir, "unknown-pre.gguf");
    writeFileSync(path, bytes);
    expect(readGGUF(path).getString("tokenizer.ggml.pre")).toBe("zzz-9");
    expectModelFormatError(() => loadGGUFTokenizer(path), path, /unknown pre-tokenizer "zzz-9"/);
  });
});

test("pre-tokenizers split as llama.cpp's regexes do", () => {
  const llama3 = preTokenizerByName("llama-bpe", "t");
  expect(splitWords("I'M 12345 apples!!\n\n  ok", llama3.regexes)).toEqual(["I", "'M", " ", "123", "45", " apples", "!!\n\n", " ", " ok"]);
  const qwen2 = preTokenizerByName("qwen2", "t");
  expect(splitWords("x 12", qwen2.regexes)).toEqual(["x", " ", "1", "2"]);
  // llama.cpp's whitespace: U+0085 is whitespace, U+FEFF is not.
  const gpt2 = preTokenizerByName("gpt-2", "t");
  expect(splitWords("a\u0085\u0085b", gpt2.regexes)).toEqual(["a", "\u0085", "\u0085", "b"]);
  expect(splitWords("a \uFEFFb", gpt2.regexes)).toEqual(["a", " \uFEFF", "b"]);
});

describeShared("Phi-3 special tokens", [PHI3], ([phi3Path]) => {
  test("user-defined </s> is matched even in user text, and drops the whitespace after it (llama.cpp's rstrip)", () => {
    const { tokenizer } = loadTokenizer(phi3Path!);
    const endId = tokenizer.encode("</s>")[0];
    expect(tokenizer.tokenPiece(endId)).toBe("</s>");
    expect(tokenizer.encode("a</s>   b")).toEqual([...tokenizer.encode("a"), endId, ...tokenizer.encode("b")]);
    // Control tokens keep their characters unless parsed; <|end|> strips whitespace after it when parsed.
    const end = tokenizer.encode("<|end|>\nx", { parseSpecial: true });
    expect(tokenizer.tokenPiece(end[0])).toBe("<|end|>");
    expect(end.slice(1)).toEqual(tokenizer.encode("x"));
  });
});

test("an empty lookahead match cuts the fragment (superbpe's digit groups)", () => {
  const superbpe = preTokenizerByName("superbpe", "t");
  expect(splitWords("1234567", superbpe.regexes)).toEqual(["1", "234", "567"]);
});

test("tokenizer.json pre-tokenizers of Llama 3 and Qwen2 split as llama.cpp's llama-bpe and qwen2", () => {
  const llama3Json: Json = {
    type: "Sequence",
    pretokenizers: [
      {
        type: "Split",
        pattern: { Regex: "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+" },
        behavior: "Isolated",
        invert: false,
      },
      { type: "ByteLevel", add_prefix_space: false, trim_offsets: true, use_regex: false },
    ],
  };
  const qwen2Json: Json = {
    type: "Sequence",
    pretokenizers: [
      {
        type: "Split",
        pattern: { Regex: "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+" },
        behavior: "Isolated",
        invert: false,
      },
      { type: "ByteLevel", add_prefix_space: false, trim_offsets: false, use_regex: false },
    ],
  };
  for (const [json, pre] of [[llama3Json, "llama-bpe"], [qwen2Json, "qwen2"]] as const) {
    const fromJson = preTokenizerRegexes(json, "tokenizer.json").map(compileRegex);
    const fromName = preTokenizerByName(pre, "t").regexes;
    for (const text of [...mixedTexts(200, 5), "I'M HERE, y'all'LL 1234567"]) {
      expect(splitWords(text, fromJson)).toEqual(splitWords(text, fromName));
    }
  }
});
