/**
 * The same text embedded alone and as the first of 32 in one batch: llama.cpp's llama-embedding
 * gives two different vectors (its step's products and attention change with the batch), pagellm
 * gives the same bits. llama-embedding is a tool of the machine, not shared data: found at
 * $PAGELLM_LLAMA_EMBEDDING, else in ../llama-ref's llama.cpp build beside the repository; without
 * it the group is skipped, saying why, on every machine, CI included.
 */
import { afterAll, describe, expect, test } from "bun:test";
import { spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { LLM } from "../src/llm/llm.ts";
import { embedInputs } from "../src/bench/embed-inputs.ts";
import { readEncoderCheckpoint } from "../src/model/encoder.ts";
import { sharedPath } from "./helpers/shared.ts";
import { CHILD_PROCESS_MS, PROCESS_TEST_MS } from "./helpers/limits.ts";

const BIN = process.env.PAGELLM_LLAMA_EMBEDDING ?? resolve(import.meta.dir, "..", "..", "llama-ref", "llama.cpp", "build", "bin", "llama-embedding");
const MODELS = ["models/gguf/rnd-bert-Q8_0.gguf", "models/gguf/rnd-nomic-bert-Q8_0.gguf"];
const BATCH = 32;

const scratch = mkdtempSync(join(tmpdir(), "pagellm-embed-batch-"));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

/** llama-embedding's unnormalized vectors of the lines of `texts`, all in one 2048-token step, one thread. */
function llamaEmbeddings(model: string, pooling: string, texts: readonly string[]): number[][] {
  const input = join(scratch, "input.txt");
  writeFileSync(input, `${texts.join("\n")}\n`);
  const args = ["-m", model, "-f", input, "-t", "1", "-c", "2048", "-b", "2048", "-ub", "2048", "--pooling", pooling, "--embd-normalize", "-1", "--embd-output-format", "json"];
  const r = spawnSync(BIN, args, { encoding: "utf8", timeout: CHILD_PROCESS_MS });
  if (r.status !== 0) throw new Error(`llama-embedding exit ${r.status}: ${r.stderr.slice(-500)}`);
  return (JSON.parse(r.stdout) as { data: { embedding: number[] }[] }).data.map((d) => d.embedding);
}

const bits = (v: Float32Array): number[] => Array.from(new Uint32Array(v.buffer, v.byteOffset, v.length));

const paths = MODELS.map((m) => sharedPath(m));
const missing = !existsSync(BIN) ? `no llama-embedding at ${BIN} (set PAGELLM_LLAMA_EMBEDDING)` : paths.includes(null) ? `shared models missing: ${MODELS.join(", ")}` : null;
if (missing !== null) console.warn(`[skip] embeddings alone and in a batch, llama.cpp against pagellm: ${missing}`);

describe("embeddings alone and in a batch of 32, llama.cpp against pagellm", () => {
  for (const [i, model] of MODELS.entries()) {
    test.skipIf(missing !== null)(`${model}: llama.cpp's first vector changes with the batch, pagellm's keeps its bits`, async () => {
      const file = paths[i]!;
      const pooling = readEncoderCheckpoint(file).config.pooling;
      const inputs = embedInputs(file, BATCH, 16, 60, 3);
      const [alone] = llamaEmbeddings(file, pooling, inputs.texts.slice(0, 1));
      const batched = llamaEmbeddings(file, pooling, inputs.texts);
      expect(batched.length).toBe(BATCH);
      const differing = alone!.filter((v, j) => v !== batched[0]![j]).length;
      // Printed to seven decimals: a difference shows in most of the values (all of them here, up to 0.05).
      expect(differing).toBeGreaterThan(alone!.length / 2);

      const llm = await LLM.open({ model: file, engine: { threads: 1 } });
      try {
        const one = await llm.embed(inputs.tokenIds.slice(0, 1), { normalize: -1 });
        const all = await llm.embed(inputs.tokenIds, { normalize: -1 });
        expect(bits(all.embeddings[0]!.values)).toEqual(bits(one.embeddings[0]!.values));
      } finally {
        llm.close();
      }
    }, PROCESS_TEST_MS);
  }
});
