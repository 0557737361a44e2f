/**
 * A whole llama forward pass on WebGPU (GpuLlamaModel) against the WebAssembly engine's
 * (LlamaModel) on stories260K as llama2.c f32 and as GGUF F32, F16, Q8_0 and Q4_0, and on random
 * 256-wide llama (Q4_K_M, Q2_K), qwen2 (Q5_K_M) and qwen3moe (F32, Q4_K_M) models written here
 * (every K type), the shared gpt-oss file, and qwen3 models written by the project's writer (per-head
 * q/k norms, a head size other than dim/heads, neox RoPE, grouped KV heads) in F32 and Q4_K_M, and
 * gemma3, phi3 and smollm3 ones (test/helpers/written-models.ts: a sliding window, fused matrices,
 * LongRoPE, a layer without RoPE): the same
 * StepBatches, block tables and block ids, logits compared step after step through a
 * two-sequence prefill in chunks and greedy decode (driven by the WebAssembly engine's tokens).
 * And the GPU's own invariance: a sequence's logits are the same bits decoded alone or beside
 * another sequence. The WebAssembly block-type products quantize activations to int8 blocks (as
 * llama.cpp does) while the WGSL ones read them as f32, so those files agree more loosely.
 */
import { afterAll, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { CpuBackend } from "../src/backend/wasm/cpu.ts";
import { GpuLlamaModel } from "../src/backend/webgpu/llama-gpu.ts";
import { FileWeights } from "../src/backend/webgpu/file-weights.ts";
import { KVArena } from "../src/backend/wasm/kv-arena.ts";
import { KVCacheGroups } from "../src/kv/kv-groups.ts";
import { StepBatch } from "../src/model/batch.ts";
import { LlamaModel } from "../src/backend/wasm/llama.ts";
import { openCheckpoint } from "../src/model/load.ts";
import { loadWeights } from "../src/backend/wasm/weights.ts";
import { makeConfig } from "../src/model/config.ts";
import { writeModelGGUF, type ModelMix } from "../src/synth/gguf-model-writer.ts";
import { tokenizerMetadata } from "../src/synth/gguf-tokenizer-metadata.ts";
import { sharedPath } from "./helpers/shared.ts";
import { writtenModel } from "./helpers/written-models.ts";
import { describeGpu } from "./helpers/webgpu.ts";
import type { WebGpuBackend } from "../src/backend/webgpu/backend.ts";
import { expertTypes } from "../src/backend/device-choice.ts";

const dir = mkdtempSync(join(tmpdir(), "pagellm-webgpu-forward-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/**
 * A qwen3 model of `mix` written by the project's writer with stories260K's vocabulary: heads of
 * 32 for a 64-wide model (q is 128 wide), q/k norms, 2 KV heads for 4. Null without ../shared.
 */
function qwen3(mix: ModelMix): string | null {
  const vocab = sharedPath("models/gguf/stories260K.gguf");
  if (vocab === null) return null;
  const path = join(dir, `qwen3-${mix}.gguf`);
  const config = makeConfig({
    dim: 64, hiddenDim: 96, nLayers: 2, nHeads: 4, nKvHeads: 2, headDim: 32, vocabSize: 512, seqLen: 256, normEps: 1e-6,
    sharedClassifier: true, ropeTheta: 1e6, ropeStyle: "neox", qkNorm: true,
  });
  writeModelGGUF(path, { arch: "qwen3", name: "test-qwen3", config, mix, tokenizer: tokenizerMetadata(vocab), seed: 9 });
  return path;
}

/**
 * A 256-wide model of `arch` in `mix` (2 layers, 4 heads of 64, 2 KV heads) written by the
 * project's writer with stories260K's vocabulary. Null without ../shared.
 *
 * qwen3moe: q/k norms, 8 experts of 256 (2 per token) beside a dense width of 512 (written, unused),
 * and decisive routing: with random routers a near tie (a few 1e-4 apart) picks another expert on
 * the WebAssembly side, whose int8 activation blocks round differently, and the logits then differ
 * by a tenth of their range although both backends are right (docs/moe.md).
 */
function wide(arch: "llama" | "qwen2" | "qwen3moe", mix: ModelMix): string | null {
  const vocab = sharedPath("models/gguf/stories260K.gguf");
  if (vocab === null) return null;
  const path = join(dir, `${arch}-${mix}-wide.gguf`);
  const moe = arch === "qwen3moe";
  const config = makeConfig({
    dim: 256, hiddenDim: 512, nLayers: 2, nHeads: 4, nKvHeads: 2, headDim: 64, vocabSize: 512, seqLen: 256, normEps: 1e-5,
    sharedClassifier: false, ropeTheta: 1e4, ropeStyle: arch === "llama" ? "interleaved" : "neox", qkvBias: arch === "qwen2", qkNorm: moe,
    ...(moe ? { experts: { count: 8, used: 2, hiddenDim: 256, gating: "softmax", normalizeWeights: true, biases: false, activation: "swiglu" } } : {}),
  });
  writeModelGGUF(path, { arch, name: `test-${arch}`, config, mix, tokenizer: tokenizerMetadata(vocab), seed: 5, decisiveRouting: moe });
  return path;
}

/** Model file (in ../shared, or written here), and the tolerance of its logits relative to the largest (argmax checked when tight). */
const MODELS: (({ rel: string } | { name: string; write: () => string | null }) & { tolerance: number })[] = [
  { rel: "models/llama2c/stories260K.bin", tolerance: 1e-4 },
  { rel: "models/gguf/stories260K.gguf", tolerance: 1e-4 },
  // F16/BF16 products round their activations to the weights' type: where the two backends'
  // f32 sums differ in the last bit at a rounding boundary, an activation moves by half a 16-bit
  // step (2^-12 for F16, 2^-9 for BF16), so these agree less tightly than F32.
  { rel: "models/gguf/stories260K-F16.gguf", tolerance: 2e-3 },
  { rel: "models/gguf/stories260K-Q8_0.gguf", tolerance: 2e-2 },
  { rel: "models/gguf/stories260K-BF16.gguf", tolerance: 5e-3 },
  { rel: "models/gguf/stories260K-Q4_0.gguf", tolerance: 3e-2 },
  { rel: "models/gguf/stories260K-Q4_1.gguf", tolerance: 3e-2 },
  { rel: "models/gguf/stories260K-Q5_0.gguf", tolerance: 3e-2 },
  { rel: "models/gguf/stories260K-Q5_1.gguf", tolerance: 3e-2 },
  // Random weights 256 wide (whole K-quant rows; stories260K's vocabulary, so a step's classifier is
  // 512 rows, where the shared rnd-* files' 49,152 and 151,936 made this file minutes long on a
  // software adapter): larger activations, so int8 activation blocks on the wasm side cost more
  // (a wrong Q6_K scale index fails this by 0.7 of the largest logit).
  { name: "llama Q4_K_M (written, 256 wide)", write: () => wide("llama", "Q4_K_M"), tolerance: 6e-2 },
  // Q2_K and Q3_K tensors (llama.cpp's Q2_K mix).
  { name: "llama Q2_K (written, 256 wide)", write: () => wide("llama", "Q2_K"), tolerance: 6e-2 },
  // qwen2: q/k/v biases, neox RoPE; Q5_K and Q6_K tensors.
  { name: "qwen2 Q5_K_M (written, 256 wide)", write: () => wide("qwen2", "Q5_K_M"), tolerance: 6e-2 },
  { name: "qwen3 F32 (written)", write: () => qwen3("F32"), tolerance: 1e-4 },
  { name: "qwen3 Q4_K_M (written)", write: () => qwen3("Q4_K_M"), tolerance: 6e-2 },
  // qwen3moe (routing on the GPU, slots grouped by expert), 8 experts of 256, 2 per token, written 256
  // wide (the shared rnd-qwen3moe's 49,152-row classifier took minutes here; its accuracy is checked in
  // webgpu-engine.test.ts): heads of 64 with q/k norms, a dense width other than the experts'; in
  // Q4_K_M attn_k/attn_v Q8_0, attn_output Q5_K, Q4_K and Q6_K experts (llama-quantize's rules for 8 experts).
  { name: "qwen3moe F32 (written, 256 wide)", write: () => wide("qwen3moe", "F32"), tolerance: 1e-4 },
  { name: "qwen3moe Q4_K_M (written, 256 wide)", write: () => wide("qwen3moe", "Q4_K_M"), tolerance: 6e-2 },
  // gpt-oss: attention sinks, q/k/v/output biases, windows of 32 on the even layers, YaRN, MXFP4 experts with
  // biases and the clamped SwiGLU (4 of 8 per token), Q8_0 elsewhere.
  { rel: "models/gguf/rnd-gptoss-MXFP4_MOE.gguf", tolerance: 6e-2 },
  // gemma3: a sliding window of 4 (the decode outgrows it), GeGLU, post-norms, scaled embedding, two RoPEs.
  { name: "gemma3 F32 (written)", write: () => writtenModel(dir, "gemma3", "F32"), tolerance: 1e-4 },
  { name: "gemma3 Q4_K_M (written)", write: () => writtenModel(dir, "gemma3", "Q4_K_M"), tolerance: 6e-2 },
  // phi3: fused q/k/v and gate/up stacks, LongRoPE's long factors and attn_factor.
  { name: "phi3 F32 (written)", write: () => writtenModel(dir, "phi3", "F32"), tolerance: 1e-4 },
  { name: "phi3 Q8_0 (written)", write: () => writtenModel(dir, "phi3", "Q8_0"), tolerance: 6e-2 },
  // smollm3: layer 3 without RoPE.
  { name: "smollm3 F32 (written)", write: () => writtenModel(dir, "smollm3", "F32"), tolerance: 1e-4 },
];
const BLOCK = 4;
const MAX_TOKENS = 12;

function argmax(v: Float32Array): number {
  let best = 0;
  for (let i = 1; i < v.length; i++) if (v[i]! > v[best]!) best = i;
  return best;
}

/** The forward pass of each model on `gpu` against WebAssembly's, step after step. */
function compareForwardPasses(gpu: WebGpuBackend, models: typeof MODELS): void {
  for (const m of models) {
  const { tolerance } = m;
  const path = "rel" in m ? sharedPath(m.rel) : m.write();
  test.skipIf(path === null)(`${"rel" in m ? m.rel : m.name}: logits agree through chunked prefill of two sequences and greedy decode`, async () => {
    const cpu = new CpuBackend();
    try {
      const ckpt = openCheckpoint(path!);
      // A context of at most 256 positions (gpt-oss's 131072 would make the KV arena too large for one binding).
      const c = { ...ckpt.config, seqLen: Math.min(ckpt.config.seqLen, 256) };
      await gpu.prepareExperts(expertTypes(ckpt));
      const weights = loadWeights(ckpt, cpu.mem, cpu.kernels);
      const blocksPerSeq = Math.ceil(c.seqLen / BLOCK);
      // Every KV cache group its own blocks (sliding-window models have several, kv-groups.ts).
      const groups = KVCacheGroups.of(c);
      const perGroup = 2 * blocksPerSeq + 3;
      const numBlocks = perGroup * groups.groups.length;
      const wasm = new LlamaModel(c, weights, cpu, MAX_TOKENS, MAX_TOKENS);
      const kv = new KVArena(cpu.mem, c, numBlocks, BLOCK);
      const batch = new StepBatch(cpu.mem, MAX_TOKENS, 2, blocksPerSeq, BLOCK, MAX_TOKENS, groups.groups.length);
      const model = new GpuLlamaModel(c, new FileWeights({ ...ckpt, config: c }), cpu, gpu, {
        maxTokens: MAX_TOKENS, maxLogits: MAX_TOKENS, numBlocks, blockSize: BLOCK, maxSeqs: 2, maxBlocksPerSeq: blocksPerSeq, kv: kv.layout,
      });
      // Interleaved, reversed block ids: both caches must be read through the tables.
      const tables = [0, 1].map((s) => groups.disjointTables(Array.from({ length: blocksPerSeq }, (_, i) => perGroup - 1 - (2 * i + s)), perGroup));

      /** Compare the step's logits; returns the GPU rows and the WebAssembly engine's next tokens. */
      const compare = async (): Promise<{ rows: Float32Array[]; next: number[] }> => {
        wasm.forward(batch, kv);
        const got = (await model.forward(batch, cpu)).logits;
        const rows: Float32Array[] = [];
        const next: number[] = [];
        for (let r = 0; r < batch.numLogits; r++) {
          const want = cpu.mem.f32.slice(wasm.logitsAddr(r) >> 2, (wasm.logitsAddr(r) >> 2) + c.vocabSize);
          const row = got.slice(r * c.vocabSize, (r + 1) * c.vocabSize);
          let scale = 1;
          for (const v of want) scale = Math.max(scale, Math.abs(v));
          for (let i = 0; i < c.vocabSize; i++) {
            if (!(Math.abs(row[i]! - want[i]!) <= tolerance * scale)) throw new Error(`row ${r} logit ${i}: ${row[i]} vs ${want[i]}`);
          }
          if (tolerance <= 1e-4) expect(argmax(row)).toBe(argmax(want));
          rows.push(row);
          next.push(argmax(want));
        }
        return { rows, next };
      };

      // Prompts of 7 and 5 tokens: chunks of 4 + 3 and 5, the first chunk of one beside the other.
      const prompts = [[1, 403, 407, 261, 378, 291, 400], [1, 291, 400, 428, 300]];
      batch.reset();
      batch.addSequence(prompts[0]!.slice(0, 4), 0, tables[0]!, "none");
      batch.addSequence(prompts[1]!, 0, tables[1]!, "last");
      const [next1] = (await compare()).next;
      batch.reset();
      batch.addSequence(prompts[0]!.slice(4), 4, tables[0]!, "last");
      const [next0] = (await compare()).next;
      let tok = [next0!, next1!];
      let pos = [prompts[0]!.length, prompts[1]!.length];
      for (let step = 0; step < 6; step++) {
        batch.reset();
        batch.addSequence([tok[0]!], pos[0]!, tables[0]!, "last");
        batch.addSequence([tok[1]!], pos[1]!, tables[1]!, "last");
        const both = await compare();
        // Sequence 1's next logits alone: the same GPU bits as in the pair (written to the same slots again).
        batch.reset();
        batch.addSequence([tok[1]!], pos[1]!, tables[1]!, "last");
        expect((await model.forward(batch, cpu)).logits).toEqual(both.rows[1]!);
        tok = both.next;
        pos = pos.map((p) => p + 1);
      }
    } finally {
      cpu.close();
    }
  }, 240_000); // a busy machine's software adapter
  }
}

await describeGpu("forward pass: WebGPU against WebAssembly", (gpu) => compareForwardPasses(gpu, MODELS));

// f16 products (wgsl-matmul-f16.ts) on every model with quantized tensors, which together hold
// all ten quantized types: within the same tolerance (the WebAssembly side's int8 activations
// differ from exact more than f16 ones do), and the same invariance.
await describeGpu(
  "forward pass with f16 products: WebGPU against WebAssembly",
  (gpu) => compareForwardPasses(gpu, MODELS.filter((m) => /Q\d|MXFP4/.test("rel" in m ? m.rel : m.name))),
  { half: true },
);
