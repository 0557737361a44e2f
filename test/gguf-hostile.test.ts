/**
 * Broken and hostile GGUF model files, crafted by rewriting bytes of the real stories260K.gguf: each
 * must be refused by openCheckpoint with one ModelFormatError that names the file and the problem,
 * before any weight memory is allocated; through the command line, a one-line error and exit 2.
 */
import { afterAll, expect, test } from "bun:test";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { LLM } from "../src/llm/llm.ts";
import { GGUFStringArray, type GGUFValue } from "../src/model/gguf.ts";
import { openCheckpoint } from "../src/model/load.ts";
import { runPagellm } from "./helpers/cli.ts";
import { expectModelFormatError } from "./helpers/errors.ts";
import { gguf } from "../src/synth/gguf-writer.ts";
import { patched, tensorRecord, valueAt, type HeaderMap } from "./helpers/gguf-patch.ts";
import { declareHugeTensor, rewriteGGUF } from "./helpers/hostile-gguf.ts";
import { describeShared } from "./helpers/shared.ts";
import { PROCESS_TEST_MS } from "./helpers/limits.ts";

const dir = mkdtempSync(join(tmpdir(), "pagellm-gguf-hostile-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const GGML_Q4_K = 12;
const GGML_F16 = 1;
const GGML_IQ4_NL = 20;

interface HostileCase {
  name: string;
  edit: (view: DataView, map: HeaderMap, bytes: Uint8Array) => void;
  problem: RegExp;
}

const CASES: HostileCase[] = [
  {
    name: "a tensor count in the billions",
    edit: (v, m) => v.setBigUint64(m.tensorCountAt, 3_000_000_000n, true),
    problem: /tensor_count/,
  },
  {
    name: "a tensor's data offset past the end of the file",
    edit: (v, m) => v.setBigUint64(tensorRecord(m, "output.weight").offsetAt, 1n << 40n, true),
    problem: /output\.weight.*past the end/,
  },
  {
    name: "two tensors overlapping",
    edit: (v, m) => {
      const q = v.getBigUint64(tensorRecord(m, "blk.0.attn_q.weight").offsetAt, true);
      v.setBigUint64(tensorRecord(m, "blk.0.attn_k.weight").offsetAt, q + 64n, true);
    },
    problem: /blk\.0\.attn_q\.weight.*blk\.0\.attn_k\.weight.*overlap/,
  },
  {
    name: "dimensions whose product overflows",
    edit: (v, m) => {
      const t = tensorRecord(m, "token_embd.weight");
      v.setBigUint64(t.dimsAt, 1n << 40n, true);
      v.setBigUint64(t.dimsAt + 8, 1n << 40n, true);
    },
    problem: /token_embd\.weight.*(absurd|dimension)/,
  },
  {
    name: "a byte size that does not match type and shape (rows not divisible into blocks)",
    edit: (v, m) => v.setUint32(tensorRecord(m, "output_norm.weight").typeAt, GGML_Q4_K, true),
    problem: /output_norm\.weight.*Q4_K.*not a multiple of 256/,
  },
  {
    name: "an unknown architecture",
    edit: (_v, m, b) => b.set(new TextEncoder().encode("gemma"), valueAt(m, "general.architecture") + 8),
    problem: /architecture "gemma" is not supported/,
  },
  {
    name: "a tensor type pagellm does not compute",
    edit: (v, m) => v.setUint32(tensorRecord(m, "token_embd.weight").typeAt, GGML_IQ4_NL, true),
    problem: /token_embd\.weight.*IQ4_NL/,
  },
  {
    name: "a missing tensor",
    edit: (_v, m, b) => {
      const at = tensorRecord(m, "blk.4.ffn_up.weight").nDimsAt - "up.weight".length;
      b.set(new TextEncoder().encode("uq.weight"), at);
    },
    problem: /missing tensor blk\.4\.ffn_up\.weight/,
  },
  {
    name: "a tensor of the wrong shape",
    edit: (v, m) => {
      const t = tensorRecord(m, "blk.0.attn_k.weight");
      v.setBigUint64(t.dimsAt, 32n, true);
      v.setBigUint64(t.dimsAt + 8, 64n, true);
    },
    problem: /blk\.0\.attn_k\.weight has shape \[64, 32\], expected \[32, 64\]/,
  },
  {
    name: "a norm vector that is not F32",
    edit: (v, m) => v.setUint32(tensorRecord(m, "blk.0.attn_norm.weight").typeAt, GGML_F16, true),
    problem: /blk\.0\.attn_norm\.weight has type F16; vectors must be F32/,
  },
  {
    name: "an odd rotary dimension",
    edit: (v, m) => v.setUint32(valueAt(m, "llama.rope.dimension_count"), 7, true),
    problem: /rope\.dimension_count 7/,
  },
  {
    // Read as it stands, the per-layer tensor list would be 36 billion names long (no error, the
    // memory filling up): the layer count is bounded by the tensor count first.
    name: "a block_count in the billions",
    edit: (v, m) => v.setUint32(valueAt(m, "llama.block_count"), 4_000_000_000, true),
    problem: /llama\.block_count" is 4000000000, more layers than the file has tensors \(48\)/,
  },
  {
    name: "head_count not a multiple of head_count_kv",
    edit: (v, m) => v.setUint32(valueAt(m, "llama.attention.head_count_kv"), 3, true),
    problem: /8 attention heads cannot be grouped over 3 key\/value heads/,
  },
];

describeShared("hostile GGUF model files", ["models/gguf/stories260K.gguf"], ([good]) => {
  const original = new Uint8Array(readFileSync(good!));

  test("the unmodified file opens (the edits below are what breaks each one)", () => {
    const ckpt = openCheckpoint(good!);
    expect(ckpt.config.dim).toBe(64);
    expect(ckpt.format).toStartWith("GGUF v3 llama");
  });

  CASES.forEach((c, i) => {
    test(`${c.name}: one ModelFormatError naming it`, () => {
      const path = join(dir, `hostile-${i}.gguf`);
      writeFileSync(path, patched(original, c.edit));
      expectModelFormatError(() => openCheckpoint(path), path, c.problem);
    });
  });

  test("through the CLI: a one-line error, exit 2, no stack trace", () => {
    const path = join(dir, "cli-overlap.gguf");
    writeFileSync(path, patched(original, CASES[2]!.edit));
    const r = runPagellm(["generate", "--model", path, "--prompt", "Once"]);
    expect(r.exitCode).toBe(2);
    expect(r.stderr.trim().split("\n")).toHaveLength(1);
    expect(r.stderr).toContain(path);
    expect(r.stderr).toMatch(/overlap/);
    // info shows what the header says, then why the model cannot run, with the same exit code.
    const shown = runPagellm(["info", path]);
    expect(shown.exitCode).toBe(2);
    expect(shown.stdout).toContain("architecture      llama");
    expect(shown.stderr.trim().split("\n")).toHaveLength(1);
    expect(shown.stderr).toMatch(/overlap/);
  }, PROCESS_TEST_MS);

  test("a KV cache larger than the machine's memory is refused before loading, with the sizes", () => {
    const r = runPagellm(["generate", "--model", good!, "--prompt", "Once", "--num-blocks", "50000000"]);
    expect(r.stderr.trim().split("\n")).toHaveLength(1);
    expect(r.stderr).toMatch(/needs [\d.]+ GiB \(weights [\d.]+ GiB, KV cache [\d.]+ GiB, buffers [\d.]+ GiB\), more than the [\d.]+ GiB this machine has available/);
    expect(r.exitCode).not.toBe(0);
  }, PROCESS_TEST_MS);
});

/** A GGUF array's items known to be strings (its itemType said so). */
function stringItems(items: unknown): GGUFStringArray {
  if (!(items instanceof GGUFStringArray)) throw new Error("not a string array");
  return items;
}

// ----------------------------------------------------------------------------
// What fuzzing the loader found, each with the file it describes

/** stderr of a refused run: one line, naming the file, bounded, with no raw control character. */
function expectOneSafeLine(stderr: string, file: string): void {
  const lines = stderr.trimEnd().split("\n");
  expect(lines).toHaveLength(1);
  expect(lines[0]!).toContain(file);
  expect(lines[0]!.length).toBeLessThan(400);
  expect(lines[0]!).not.toMatch(/[\u0000-\u001f\u007f-\u009f\u2028\u2029\u202a-\u202e]/);
  expect(lines[0]!).not.toMatch(/internal error|^\s+at /);
}

describeShared("hostile GGUF files", ["models/gguf/stories260K.gguf"], ([good]) => {
  const original = new Uint8Array(readFileSync(good!));
  const withRopeFreqs = (path: string) =>
    rewriteGGUF(good!, path, {
      tensors: (t) => t.splice(1, 0, { name: "rope_freqs.weight", dims: [4], type: 0, data: new Uint8Array(Float32Array.of(1, 1, 2, 4).buffer) }),
    });

  test("rope_freqs.weight as a 4-factor tensor is read (the control for the next test)", () => {
    const ckpt = openCheckpoint(withRopeFreqs(join(dir, "rope-freqs-ok.gguf")));
    expect(ckpt.config.ropeFreqFactors).toEqual([1, 1, 2, 4]);
  });

  for (const log2 of [26, 30, 31]) {
    test(`rope_freqs.weight declared with 2^${log2} elements (sparse): refused by its shape before a byte of it is read`, () => {
      const path = withRopeFreqs(join(dir, `rope-freqs-2^${log2}.gguf`));
      declareHugeTensor(path, "rope_freqs.weight", [1n << BigInt(log2)]);
      expect(statSync(path).size).toBeGreaterThan(2 ** (log2 + 2));
      const before = process.memoryUsage().rss;
      expectModelFormatError(() => openCheckpoint(path), path, new RegExp(`rope_freqs\\.weight has shape \\[${2 ** log2}\\], expected \\[4\\] from the hyper-parameters`));
      // Reading it first cost 256 MiB to 8 GiB (and 17-42 s); the check costs nothing.
      expect(process.memoryUsage().rss - before).toBeLessThan(64 << 20);
    });
  }

  test("a corrupted key length: the message shows a quoted, cut key, not 1 MB of binary", () => {
    // The first key's length set to most of the file: the key swallows the header.
    const path = join(dir, "key-length.gguf");
    writeFileSync(path, patched(original, (v) => v.setBigUint64(24, BigInt(original.length - 64), true)));
    expectModelFormatError(() => openCheckpoint(path), path, /key "[^"]{0,200}…" \(\d+ characters\)/);
    const r = runPagellm(["generate", "--model", path, "--prompt", "Once"]);
    expect(r.exitCode).toBe(2);
    expectOneSafeLine(r.stderr, path);
  }, 60_000);

  test("a tensor name with terminal escapes and a newline is shown escaped, in one line", () => {
    const evil = "\u001b]0;pwned\u0007\u001b[2J\nblk.0.fake\u009b31m\u202e";
    const path = rewriteGGUF(good!, join(dir, "evil-name.gguf"), {
      tensors: (t) => t.push({ ...t.find((x) => x.name === "output_norm.weight")!, name: evil }),
    });
    // The extra tensor is moved onto output_norm.weight's bytes: refused as an overlap, naming both.
    writeFileSync(path, patched(new Uint8Array(readFileSync(path)), (v, m) => {
      v.setBigUint64(tensorRecord(m, evil).offsetAt, v.getBigUint64(tensorRecord(m, "output_norm.weight").offsetAt, true), true);
    }));
    expectModelFormatError(() => openCheckpoint(path), path, /"\\u001b\]0;pwned\\u0007\\u001b\[2J\\nblk\.0\.fake\\u009b31m\\u202e".*overlap/);
    const r = runPagellm(["generate", "--model", path, "--prompt", "Once"]);
    expect(r.exitCode).toBe(2);
    expectOneSafeLine(r.stderr, path);
  }, 60_000);

  test("pagellm chat shows a reply's control characters escaped (a token's text is the file's)", () => {
    // Greedy stories260K continues "Once upon a time" with ", there": token 383 ("▁there") made an escape sequence.
    const path = rewriteGGUF(good!, join(dir, "evil-token.gguf"), {
      metadata: (m) => {
        const tokens = m.get("tokenizer.ggml.tokens")!;
        if (tokens.type !== "array" || tokens.value.itemType !== "string") throw new Error("no tokens");
        const pieces = Array.from({ length: tokens.value.items.length }, (_, i) => stringItems(tokens.value.items).bytes(i) as Uint8Array | string);
        pieces[383] = "\u2581\u001b]0;pwned\u0007\u001b[2J";
        m.set("tokenizer.ggml.tokens", gguf.strings(pieces));
      },
    });
    const r = runPagellm(["chat", "--model", path, "--max-tokens", "6", "--temperature", "0"], { stdin: "Once upon a time\n", timeoutMs: 90_000 });
    expect(r.exitCode).toBe(0);
    expect(r.stdout).toContain(", \\u001b]0;pwned\\u0007\\u001b[2J was a little");
    expect(r.stdout).not.toMatch(/[\u0000-\u0009\u000b-\u001f\u007f-\u009f]/);
  }, 120_000);

  test("pagellm info and models show file strings (name, architecture, special tokens, chat template) escaped and cut", () => {
    const path = rewriteGGUF(good!, join(dir, "evil-info.gguf"), {
      metadata: (m) => {
        m.set("general.name", gguf.str(`tiny\u001b]52;c;ZWNobyBwd25lZA==\u0007 ${"x".repeat(5000)}`));
        m.set("tokenizer.chat_template", gguf.str("{{ bos_token }}\u001b[31m{% for m in messages %}{{ m.content }}\u009b{% endfor %}"));
        const tokens = m.get("tokenizer.ggml.tokens")!;
        if (tokens.type !== "array" || tokens.value.itemType !== "string") throw new Error("no tokens");
        const pieces = Array.from({ length: tokens.value.items.length }, (_, i) => stringItems(tokens.value.items).bytes(i) as Uint8Array | string);
        pieces[1] = "<s>\u001b[2J\r\n";
        m.set("tokenizer.ggml.tokens", gguf.strings(pieces));
      },
    });
    const r = runPagellm(["info", path]);
    expect(r.exitCode).toBe(0);
    expect(r.stdout).not.toMatch(/[\u0000-\u0009\u000b-\u001f\u007f-\u009f]/);
    expect(r.stdout).toContain('name              "tiny\\u001b]52;c;ZWNobyBwd25lZA==\\u0007 xxxx');
    expect(r.stdout).toMatch(/bos token +1 "<s>\\u001b\[2J\\r\\n"/);
    expect(r.stdout).toContain("{{ bos_token }}\\u001b[31m");
    expect(Math.max(...r.stdout.split("\n").map((l) => l.length))).toBeLessThan(200);
    // pagellm models lists a cached file's architecture: a crafted one is escaped and cut there too.
    const home = join(dir, "hf-home");
    const snapshot = join(home, "hub", "models--evil--repo", "snapshots", "0123abc");
    mkdirSync(snapshot, { recursive: true });
    rewriteGGUF(good!, join(snapshot, "evil.gguf"), { metadata: (m) => m.set("general.architecture", gguf.str("llama\u001b]0;x\u0007\n".repeat(9))) });
    const env = { HF_HOME: home, HF_HUB_CACHE: "", NO_COLOR: "1" };
    const listed = runPagellm(["models"], { env, timeoutMs: 60_000 });
    expect(listed.exitCode).toBe(0);
    expect(listed.stdout).toContain('evil/repo  evil.gguf  1.1 MiB  "llama\\u001b]0;x\\u0007\\nllama\\u001b]0;x\\u0007\\n…" (108 characters)  F32');
    expect(listed.stdout).not.toMatch(/[\u0000-\u0009\u000b-\u001f\u007f-\u009f]/);
    expect(runPagellm(["models", "--json"], { env, timeoutMs: 60_000 }).stdout).not.toMatch(/[\u0000-\u0009\u000b-\u001f\u007f-\u009f]/);
    const json = runPagellm(["info", path, "--json"]);
    expect(json.stdout).not.toMatch(/[\u0000-\u0009\u000b-\u001f\u007f-\u009f]/);
    expect((JSON.parse(json.stdout) as { name: string }).name).toStartWith("tiny\u001b]52;");
  }, 60_000);
});

describeShared("hostile vocabularies and hyper-parameters", ["models/gguf/stories260K.gguf"], ([good]) => {
  /** stories260K with its tokenizer metadata changed by `edit`. */
  const withVocab = (name: string, edit: (m: Map<string, GGUFValue>) => void) => rewriteGGUF(good!, join(dir, name), { metadata: edit });
  const cutVocabulary = (m: Map<string, GGUFValue>, n: number): void => {
    const tokens = m.get("tokenizer.ggml.tokens")!;
    if (tokens.type !== "array" || tokens.value.itemType !== "string") throw new Error("no tokens");
    const items = tokens.value.items;
    m.set("tokenizer.ggml.tokens", gguf.strings(Array.from({ length: n }, (_, i) => items.bytes(i))));
    const scores = m.get("tokenizer.ggml.scores")!;
    const types = m.get("tokenizer.ggml.token_type")!;
    if (scores.type === "array" && scores.value.itemType === "f32") m.set("tokenizer.ggml.scores", gguf.f32s(scores.value.items.slice(0, n)));
    if (types.type === "array" && types.value.itemType === "i32") m.set("tokenizer.ggml.token_type", gguf.i32s(types.value.items.slice(0, n)));
  };

  test("a vocabulary shorter than the embedding: the rows past it are never sampled, every text is kept", async () => {
    // stories260K's ids 259.. are merges, which greedy decoding picks at once: the control shows it.
    const control = LLM.load({ model: good!, engine: { threads: 1 } });
    try {
      const [r] = await control.generate([{ prompt: "Once upon a time", maxTokens: 24, temperature: 0 }]);
      expect(r!.token_ids.some((id) => id >= 259)).toBe(true);
    } finally {
      control.close();
    }
    const path = withVocab("vocab-259.gguf", (m) => cutVocabulary(m, 259));
    const llm = LLM.load({ model: path, engine: { threads: 1 } });
    try {
      expect(llm.config.vocabSize).toBe(512);
      expect(llm.tokenizer.vocabSize).toBe(259);
      const results = await llm.generate([
        { prompt: "Once upon a time", maxTokens: 24, temperature: 0 },
        { prompt: "The dog", maxTokens: 24, temperature: 1.5, seed: 7 },
      ]);
      for (const r of results) {
        expect(r.finish_reason).toBe("length");
        expect(r.token_ids).toHaveLength(24);
        expect(Math.max(...r.token_ids)).toBeLessThan(259);
        expect(r.text).toBe(llm.tokenizer.decode(r.token_ids));
      }
      // A prompt id past the embedding's rows would read outside it: refused, the others kept.
      const [bad, ok] = await llm.generate([{ promptTokenIds: [1, 600], maxTokens: 2 }, { prompt: "Once", maxTokens: 2, temperature: 0 }]);
      expect(bad!.finish_reason).toBe("error");
      expect(bad!.error).toBe("promptTokenIds[1] must be a token id from 0 to 511, got 600");
      expect(ok!.finish_reason).toBe("length");
    } finally {
      llm.close();
    }
    const r = runPagellm(["generate", "--model", path, "--prompt", "Once upon a time", "--max-tokens", "24", "--temperature", "0"], { timeoutMs: 90_000 });
    expect(r.stderr).not.toContain("error");
    expect(r.exitCode).toBe(0);
  }, 120_000);

  test("an empty vocabulary: says so, naming the file (was: outside the vocabulary (0..-1))", () => {
    const path = withVocab("vocab-0.gguf", (m) => {
      m.set("tokenizer.ggml.model", gguf.str("gpt2"));
      m.set("tokenizer.ggml.tokens", gguf.strings([]));
      m.delete("tokenizer.ggml.scores");
      m.delete("tokenizer.ggml.token_type");
    });
    const r = runPagellm(["generate", "--model", path, "--prompt", "Once"], { timeoutMs: 90_000 });
    expect(r.exitCode).toBe(2);
    expect(r.stderr).toBe(`pagellm: error: ${path}: tokenizer.ggml.tokens is empty: the file has no vocabulary\n`);
  }, 120_000);

  test("a byte-level vocabulary of 3 tokens cannot spell the prompt: says so (was: empty prompt)", () => {
    const path = withVocab("vocab-3.gguf", (m) => {
      m.set("tokenizer.ggml.model", gguf.str("gpt2"));
      m.set("tokenizer.ggml.tokens", gguf.strings(["a", "b", "c"]));
      m.delete("tokenizer.ggml.scores");
      m.delete("tokenizer.ggml.token_type");
    });
    const r = runPagellm(["generate", "--model", path, "--prompt", "Hello"], { timeoutMs: 90_000 });
    expect(r.exitCode).toBe(2);
    expect(r.stderr).toBe(`pagellm: error: ${path}: the vocabulary (3 tokens) has no token for any of the text "Hello"\n`);
  }, 120_000);

  test("context_length 1: the prompt-too-long error names the file that declares it", () => {
    const path = withVocab("ctx-1.gguf", (m) => m.set("llama.context_length", gguf.u32(1)));
    const r = runPagellm(["generate", "--model", path, "--prompt", "Once upon a time"], { timeoutMs: 90_000 });
    expect(r.exitCode).toBe(3);
    expect(r.stderr.trim().split("\n")).toHaveLength(1);
    expect(r.stderr).toContain(`is longer than the context of 1 (${path} declares a context of only 1 token; a shorter prompt)`);
  }, 120_000);

  test("a damaged magic: named as a damaged GGUF file (was: --tokenizer is required)", () => {
    const bytes = new Uint8Array(readFileSync(good!));
    bytes[3] = 0x48; // "GGUH"
    const path = join(dir, "magic.gguf");
    writeFileSync(path, bytes);
    const message = `${path}: not a GGUF or llama2.c model file: it starts with the bytes 47 47 55 48, not the GGUF magic "GGUF", though a GGUF version (3) follows (a damaged GGUF file?)`;
    expectModelFormatError(() => openCheckpoint(path), path, /a damaged GGUF file/);
    for (const args of [["generate", "--model", path, "--prompt", "Once"], ["info", path]]) {
      const r = runPagellm(args, { timeoutMs: 90_000 });
      expect(r.exitCode).toBe(2);
      expect(r.stderr).toBe(`pagellm: error: ${message}\n`);
    }
  }, 120_000);
});
