/**
 * The F32 random models of ../shared/tools/llama-ref/make_refmodels.ts (the shapes llama.cpp's references
 * were made from, written into a temp dir in about 1.5 s) against the float64 reference forward pass:
 * rnd-llama3 (Llama 3 rope_freqs factors, GQA 4:1, tied output), rnd-qwen2 (q/k/v biases, NeoX) and
 * rnd-qwen3 (per-head q/k norms, head size 128 while dim/heads is 64), rnd-qwen3moe (a mixture of
 * 8 experts, 2 per token), plus a copy of rnd-qwen3 whose
 * rope.dimension_count is cut to 64 (only half of each head rotates). On each, batch invariance: the
 * same logits, bit for bit, prefilled at once, in chunks of 7, token by token and beside another sequence.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { openCheckpoint } from "../src/model/load.ts";
import { GGUFRig } from "./helpers/gguf-rig.ts";
import { relativeError, sameBits } from "./helpers/logit-compare.ts";
import { patched, valueAt } from "./helpers/gguf-patch.ts";
import { SHARED_DIR, describeShared } from "./helpers/shared.ts";
import { testThreads } from "./helpers/threads.ts";
import { ReferenceTransformer } from "./reference/forward-f64.ts";
import { readGGUFF32Weights } from "./reference/read-gguf-f32.ts";
import { CHILD_PROCESS_MS, COMPUTE_TEST_MS, PROCESS_TEST_MS } from "./helpers/limits.ts";

const THREADS = testThreads();
const dir = mkdtempSync(join(tmpdir(), "pagellm-gguf-refmodels-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const MAKE_REFMODELS = "tools/llama-ref/make_refmodels.ts";
const SEQ = 40;
/** Largest normwise relative logit error against float64 (as test/model-reference.test.ts). */
const REL_TOL = 1e-4;

function refModel(name: string): string {
  const out = join(dir, "refmodels");
  const path = join(out, `${name}-F32.gguf`);
  if (!existsSync(path)) {
    const r = spawnSync(process.execPath, [join(SHARED_DIR, MAKE_REFMODELS), out, name], { encoding: "utf8", timeout: CHILD_PROCESS_MS });
    if (r.status !== 0 || !existsSync(path)) throw new Error(`make_refmodels wrote no ${path}: ${r.stderr}`);
  }
  return path;
}

/** rnd-qwen3 with rope.dimension_count 64 of its 128-wide heads. */
function partialRotaryQwen3(): string {
  const path = join(dir, "rnd-qwen3-rot64.gguf");
  if (!existsSync(path)) {
    const bytes = new Uint8Array(readFileSync(refModel("rnd-qwen3")));
    writeFileSync(path, patched(bytes, (v, map) => v.setUint32(valueAt(map, "qwen3.rope.dimension_count"), 64, true)));
  }
  return path;
}

const MODELS: { name: string; file: () => string; expectConfig: Record<string, unknown> }[] = [
  {
    name: "rnd-llama3 (llama, rope_freqs, GQA 4:1, tied)",
    file: () => refModel("rnd-llama3"),
    expectConfig: { ropeStyle: "interleaved", sharedClassifier: true, nHeads: 8, nKvHeads: 2, ropeTheta: 500000 },
  },
  {
    name: "rnd-qwen2 (q/k/v biases, NeoX)",
    file: () => refModel("rnd-qwen2"),
    expectConfig: { ropeStyle: "neox", qkvBias: true, sharedClassifier: true, ropeTheta: 1000000 },
  },
  {
    name: "rnd-qwen3 (q/k norms, head 128 != dim/heads 64)",
    file: () => refModel("rnd-qwen3"),
    expectConfig: { ropeStyle: "neox", qkNorm: true, dim: 256, nHeads: 4, headDim: 128 },
  },
  {
    name: "rnd-qwen3moe (8 experts, 2 per token, q/k norms)",
    file: () => refModel("rnd-qwen3moe"),
    expectConfig: { qkNorm: true, experts: { count: 8, used: 2, hiddenDim: 256, gating: "softmax", normalizeWeights: true, biases: false, activation: "swiglu" } },
  },
  {
    name: "rnd-qwen3 with rotary dimension 64 of 128",
    file: partialRotaryQwen3,
    expectConfig: { headDim: 128, ropeDim: 64 },
  },
];

describeShared("make_refmodels' F32 models against the float64 reference", [MAKE_REFMODELS], () => {
  for (const m of MODELS) {
    describe(m.name, () => {
      let rig: GGUFRig | undefined;
      let tokens: number[] = [];
      let logits: Float32Array[] = [];
      // m.file() may run make_refmodels.ts in a child process.
      beforeAll(() => {
        rig = new GGUFRig(m.file(), 2 * SEQ, THREADS);
        tokens = Array.from({ length: SEQ }, (_, i) => (i * 7919 + 13) % rig!.config.vocabSize);
        logits = rig.logits(tokens, SEQ);
      }, PROCESS_TEST_MS);
      afterAll(() => rig?.close());

      test("hyper-parameters from the file", () => {
        expect(openCheckpoint(m.file()).config).toMatchObject(m.expectConfig);
      });

      test(`logits at every position within ${REL_TOL} of float64`, () => {
        const ckpt = openCheckpoint(m.file());
        const { weights, extras } = readGGUFF32Weights(ckpt);
        const ref = new ReferenceTransformer({ ...ckpt.config, seqLen: SEQ }, weights, extras);
        for (let p = 0; p < SEQ; p++) {
          const error = relativeError(logits[p]!, ref.forward(tokens[p]!, p));
          if (!(error <= REL_TOL)) throw new Error(`position ${p}: relative error ${error}`);
        }
      }, COMPUTE_TEST_MS);

      test("batch invariance: chunks of 7, token by token, beside another sequence give the same bits", () => {
        expect(sameBits(rig!.logits(tokens, 7), logits)).toBe(true);
        expect(sameBits(rig!.logits(tokens, 1), logits)).toBe(true);
        const other = tokens.map((t) => (t * 31 + 5) % rig!.config.vocabSize);
        expect(sameBits(rig!.logits(tokens, 13, other), logits)).toBe(true);
      }, COMPUTE_TEST_MS);
    });
  }
});
