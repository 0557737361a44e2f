/**
 * GGUF models end to end: the llama, qwen2 and qwen3 architectures written by the project's own
 * writer and checked against the float64 reference forward pass (biases, per-head q/k norms, a
 * head size other than dim/heads, Llama 3.1 frequency factors, GQA, tied and untied output);
 * stories260K.gguf against llama2.c's run.c; and batch invariance on a quantized model.
 */
import { afterAll, expect, test } from "bun:test";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { LLM } from "../src/llm/llm.ts";
import { makeConfig, type ModelConfig } from "../src/model/config.ts";
import { readGGUF } from "../src/model/gguf.ts";
import { writeModelGGUF, type Arch, type ModelMix } from "../src/synth/gguf-model-writer.ts";
import { tokenizerMetadata } from "../src/synth/gguf-tokenizer-metadata.ts";
import type { Llama2cWeights } from "../src/synth/llama2c-writer.ts";
import { ReferenceTransformer, type ReferenceExtras } from "./reference/forward-f64.ts";
import { describeShared } from "./helpers/shared.ts";
import { testThreads } from "./helpers/threads.ts";

const THREADS = testThreads();
const dir = mkdtempSync(join(tmpdir(), "pagellm-gguf-model-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** Small shapes of each architecture with every optional part switched on. */
function shape(arch: Arch, vocabSize: number): ModelConfig {
  const base = { dim: 64, hiddenDim: 96, nLayers: 2, nHeads: 4, nKvHeads: 2, vocabSize, seqLen: 256, normEps: 1e-6 };
  if (arch === "llama") {
    return makeConfig({ ...base, sharedClassifier: false, ropeTheta: 500000, ropeFreqFactors: [1, 1, 1, 1, 2, 4, 6, 8] });
  }
  if (arch === "qwen2") return makeConfig({ ...base, sharedClassifier: true, ropeTheta: 1e6, ropeStyle: "neox", qkvBias: true });
  // qwen3: heads of 32, so q is 128 wide for a 64-wide model.
  return makeConfig({ ...base, headDim: 32, sharedClassifier: true, ropeTheta: 1e6, ropeStyle: "neox", qkNorm: true });
}

/** An F32 GGUF model's tensors, stacked over layers as the reference reads them. */
function referenceWeights(path: string, c: ModelConfig): { weights: Llama2cWeights; extras: ReferenceExtras } {
  const file = readGGUF(path);
  const bytes = readFileSync(path);
  const get = (name: string) => {
    const t = file.tensor(name)!;
    return new Float32Array(bytes.buffer.slice(bytes.byteOffset + t.fileOffset, bytes.byteOffset + t.fileOffset + t.byteSize));
  };
  const stack = (name: string) => {
    const parts = Array.from({ length: c.nLayers }, (_, l) => get(`blk.${l}.${name}`));
    const out = new Float32Array(parts.reduce((a, p) => a + p.length, 0));
    let at = 0;
    for (const p of parts) {
      out.set(p, at);
      at += p.length;
    }
    return out;
  };
  const weights: Llama2cWeights = {
    tokenEmbedding: get("token_embd.weight"), rmsAtt: stack("attn_norm.weight"), wq: stack("attn_q.weight"),
    wk: stack("attn_k.weight"), wv: stack("attn_v.weight"), wo: stack("attn_output.weight"), rmsFfn: stack("ffn_norm.weight"),
    w1: stack("ffn_gate.weight"), w2: stack("ffn_down.weight"), w3: stack("ffn_up.weight"), rmsFinal: get("output_norm.weight"),
    wcls: c.sharedClassifier ? null : get("output.weight"),
  };
  const extras: ReferenceExtras = c.qkvBias
    ? { bq: stack("attn_q.bias"), bk: stack("attn_k.bias"), bv: stack("attn_v.bias") }
    : c.qkNorm ? { qNorm: stack("attn_q_norm.weight"), kNorm: stack("attn_k_norm.weight") } : {};
  return { weights, extras };
}

function writeModel(arch: Arch, mix: ModelMix, vocabFile: string, vocabSize: number): string {
  const path = join(dir, `${arch}-${mix}.gguf`);
  writeModelGGUF(path, { arch, name: `test-${arch}`, config: shape(arch, vocabSize), mix, tokenizer: tokenizerMetadata(vocabFile), seed: 5 });
  return path;
}

/** Every position's logits of `tokens`, from the engine (teacher forcing). */
async function engineLogits(llm: LLM, tokens: number[]): Promise<Float32Array[]> {
  return (await llm.client.score({ tokens, logits: true })).logits!;
}

describeShared("GGUF architectures against the float64 reference", ["models/gguf/stories260K.gguf"], ([vocab]) => {
  const tokens = [1, 200, 37, 450, 12, 99, 300, 5, 77, 402, 256, 3, 8, 511, 41, 142, 17, 18, 19, 300];
  for (const arch of ["llama", "qwen2", "qwen3"] as const) {
    test(`${arch}: F32 logits at every position`, async () => {
      const path = writeModel(arch, "F32", vocab!, 512);
      // An f32 KV cache: the tolerance allows for the weights' rounding only, not GGUF's default f16 cache.
      const llm = LLM.load({ model: path, tokenizer: path, engine: { threads: THREADS, kvType: "f32" } });
      try {
        expect(llm.checkpoint.format).toContain(`GGUF v3 ${arch}`);
        const c = llm.config;
        const { weights, extras } = referenceWeights(path, c);
        const ref = new ReferenceTransformer(c, weights, extras);
        const got = await engineLogits(llm, tokens);
        tokens.forEach((tok, pos) => {
          const want = ref.forward(tok, pos);
          let worst = 0;
          let scale = 0;
          for (let i = 0; i < want.length; i++) {
            worst = Math.max(worst, Math.abs(got[pos]![i]! - want[i]!));
            scale = Math.max(scale, Math.abs(want[i]!));
          }
          expect(worst).toBeLessThan(1e-4 * Math.max(1, scale));
        });
      } finally {
        llm.close();
      }
    });
  }

  for (const mix of ["Q8_0", "Q4_K_M", "F16"] as const) {
    test(`qwen3 ${mix}: the same bits with the prefix cache on or off, at any batch size and chunking`, async () => {
      const path = writeModel("qwen3", mix, vocab!, 512);
      const prompts = ["Once upon a time", "The dog ran to the park and", "Once upon a time there"];
      const run = async (engine: Record<string, number | boolean>) => {
        const llm = LLM.load({ model: path, tokenizer: path, engine: { threads: THREADS, ...engine } });
        try {
          const results = await llm.generate(prompts.map((prompt) => ({ prompt, maxTokens: 12, temperature: 0 })));
          return results.map((r) => r.token_ids);
        } finally {
          llm.close();
        }
      };
      const alone: number[][] = [];
      for (const prompt of prompts) {
        const llm = LLM.load({ model: path, tokenizer: path, engine: { threads: THREADS } });
        alone.push((await llm.generate([{ prompt, maxTokens: 12, temperature: 0 }]))[0]!.token_ids);
        llm.close();
      }
      expect(await run({})).toEqual(alone);
      expect(await run({ enablePrefixCaching: false })).toEqual(alone);
      expect(await run({ maxNumBatchedTokens: 3, maxNumSeqs: 2 })).toEqual(alone);
    });
  }
});

describeShared(
  "stories260K.gguf is llama2.c's stories260K",
  ["models/gguf/stories260K.gguf", "golden/runc-greedy.json"],
  ([model, goldenPath]) => {
    const cases = (JSON.parse(readFileSync(goldenPath!, "utf8")) as { model: string; prompt: string; steps: number; temperature: number; stdout: string }[])
      .filter((g) => g.model === "llama2c/stories260K.bin" && g.temperature === 0);
    test("there are golden cases for it", () => expect(cases.length).toBeGreaterThan(0));
    for (const g of cases) {
      test(`greedy "${g.prompt}" equals run.c`, async () => {
        const llm = LLM.load({ model: model!, tokenizer: model!, engine: { threads: THREADS } });
        try {
          const prompt = llm.encode(g.prompt);
          const [r] = await llm.generate([{ promptTokenIds: prompt, maxTokens: g.steps - prompt.length + 1, temperature: 0 }]);
          // run.c stops where the model starts a new story (BOS); llama.cpp's vocabulary only stops at EOS.
          const ids = r!.token_ids;
          const untilBos = ids.includes(1) ? ids.slice(0, ids.indexOf(1)) : ids;
          const text = g.prompt + llm.tokenizer.decode([...prompt.slice(1), ...untilBos]).slice(g.prompt.length);
          expect(text).toBe(g.stdout.trimEnd());
        } finally {
          llm.close();
        }
      });
    }
  },
);
