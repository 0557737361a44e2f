/**
 * Small models of the newer dense architectures, written by the project's writer
 * (src/synth/gguf-model-writer.ts) with stories260K's vocabulary of 512, for tests that need a
 * file of a given shape: gemma3 with a sliding window of 4 (so a dozen positions outgrow it),
 * phi3 with LongRoPE (its long factors at the file's context), smollm3 with a NoPE layer.
 */
import { existsSync } from "node:fs";
import { join } from "node:path";
import { makeConfig, type ModelConfig } from "../../src/model/config.ts";
import { writeModelGGUF, type Arch, type ModelMix } from "../../src/synth/gguf-model-writer.ts";
import { tokenizerMetadata } from "../../src/synth/gguf-tokenizer-metadata.ts";
import { sharedPath } from "./shared.ts";

export type WrittenArch = "gemma3" | "phi3" | "smollm3";

const BASE = { dim: 64, hiddenDim: 96, nHeads: 4, vocabSize: 512, seqLen: 256, normEps: 1e-6 } as const;

/** The shape written for each architecture. */
export function writtenConfig(arch: WrittenArch): ModelConfig {
  switch (arch) {
    case "gemma3":
      // Layer 0 local (window 4, its own RoPE base), layer 1 global (base 1e6, linear scaling 8); one KV head.
      return makeConfig({
        ...BASE, nLayers: 2, nKvHeads: 1, headDim: 32, sharedClassifier: true, ropeTheta: 1e6, ropeFreqScale: 1 / 8, ropeStyle: "neox",
        qkNorm: true, postNorms: true, slidingWindow: { size: 4, local: [true, false], rope: { theta: 10000, freqScale: 1 } },
      });
    case "phi3":
      // Fused q/k/v and gate/up; LongRoPE switching at 128 positions, below the file's 256.
      return makeConfig({
        ...BASE, nLayers: 2, nKvHeads: 2, headDim: 16, sharedClassifier: false, ropeStyle: "neox", fusedQkv: true, fusedGateUp: true,
        longRope: { originalContext: 128, long: Array.from({ length: 8 }, (_, i) => 1 + 3 * i), short: Array.from({ length: 8 }, (_, i) => 1 + i / 16) },
        ropeAttnFactor: 1.19,
      });
    case "smollm3":
      // Layer 3 has no RoPE.
      return makeConfig({ ...BASE, nLayers: 4, nKvHeads: 2, headDim: 16, sharedClassifier: true });
  }
}

/** The model of `arch` in `mix`, written into `dir` once; null without ../shared's vocabulary. */
export function writtenModel(dir: string, arch: WrittenArch, mix: ModelMix, seed = 11): string | null {
  const vocab = sharedPath("models/gguf/stories260K.gguf");
  if (vocab === null) return null;
  const path = join(dir, `${arch}-${mix}-${seed}.gguf`);
  if (!existsSync(path)) {
    writeModelGGUF(path, { arch: arch satisfies Arch, name: `test-${arch}`, config: writtenConfig(arch), mix, tokenizer: tokenizerMetadata(vocab), seed });
  }
  return path;
}
