/**
 * NaN or infinite weights: they gave empty output, silently. Each step's logits
 * are checked (one pass over a row, like the argmax sampling does anyway); a non-finite row ends
 * its request with an error naming the file and the first tensor holding such values (found by
 * reading the file then, not at every load), or saying that every weight is finite.
 */
import { afterAll, expect, test } from "bun:test";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { LLM } from "../src/llm/llm.ts";
import { readGGUF } from "../src/model/gguf.ts";
import { openCheckpoint } from "../src/model/load.ts";
import { firstNonFiniteTensor } from "../src/model/weight-scan.ts";
import { runPagellm } from "./helpers/cli.ts";
import { describeShared } from "./helpers/shared.ts";

const dir = mkdtempSync(join(tmpdir(), "pagellm-nonfinite-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** A copy of `src` with `edit` applied to the bytes of tensor `name` (a view of its data). */
function withTensorBytes(src: string, name: string, out: string, edit: (data: DataView) => void): string {
  const bytes = new Uint8Array(readFileSync(src));
  const t = readGGUF(src).tensor(name)!;
  edit(new DataView(bytes.buffer, t.fileOffset, t.byteSize));
  writeFileSync(join(dir, out), bytes);
  return join(dir, out);
}

describeShared("NaN or infinite weights", ["models/gguf/stories260K.gguf", "models/gguf/stories260K-Q8_0.gguf", "models/gguf/stories260K-F16.gguf"], ([f32, q8, f16]) => {
  test("the unmodified files have only finite weights", () => {
    for (const path of [f32!, q8!, f16!]) expect(firstNonFiniteTensor(openCheckpoint(path))).toBeNull();
  });

  test("one NaN in an F32 matrix: every request ends with an error naming the tensor, none is silently empty", async () => {
    const path = withTensorBytes(f32!, "blk.2.ffn_up.weight", "nan-f32.gguf", (d) => d.setFloat32(4 * 77, NaN, true));
    expect(firstNonFiniteTensor(openCheckpoint(path))).toBe("blk.2.ffn_up.weight");
    const llm = LLM.load({ model: path, engine: { threads: 1 } });
    try {
      const results = await llm.generate([{ prompt: "Once upon a time", maxTokens: 8, temperature: 0 }, { prompt: "The dog", maxTokens: 8, temperature: 0.8, seed: 3 }]);
      for (const r of results) {
        expect(r.finish_reason).toBe("error");
        expect(r.error).toBe(`${path}: the model computed NaN or infinite logits: tensor "blk.2.ffn_up.weight" holds NaN or infinite values`);
      }
    } finally {
      llm.close();
    }
    const r = runPagellm(["generate", "--model", path, "--prompt", "Once upon a time", "--max-tokens", "8"], { timeoutMs: 90_000 });
    expect(r.exitCode).not.toBe(0);
    expect(r.stderr.trim().split("\n").at(-1)).toContain(`${path}: the model computed NaN or infinite logits: tensor "blk.2.ffn_up.weight" holds NaN or infinite values`);
  }, 120_000);

  test("an infinite block scale in a Q8_0 matrix and an infinite F16 value are found", async () => {
    // Q8_0 blocks are 34 bytes: the f16 scale d first. 0x7c00 is +infinity.
    const q8Path = withTensorBytes(q8!, "blk.1.attn_q.weight", "inf-q8.gguf", (d) => d.setUint16(34 * 5, 0x7c00, true));
    expect(firstNonFiniteTensor(openCheckpoint(q8Path))).toBe("blk.1.attn_q.weight");
    const f16Path = withTensorBytes(f16!, "blk.3.ffn_down.weight", "inf-f16.gguf", (d) => d.setUint16(2 * 11, 0xfc00, true));
    expect(firstNonFiniteTensor(openCheckpoint(f16Path))).toBe("blk.3.ffn_down.weight");
    const llm = LLM.load({ model: q8Path, engine: { threads: 1 } });
    try {
      const [r] = await llm.generate([{ prompt: "Once upon a time", maxTokens: 8, temperature: 0 }]);
      expect(r!.finish_reason).toBe("error");
      expect(r!.error).toContain('tensor "blk.1.attn_q.weight" holds NaN or infinite values');
    } finally {
      llm.close();
    }
  }, 120_000);

  test("finite weights whose activations overflow: said so", async () => {
    const path = withTensorBytes(f32!, "output_norm.weight", "overflow.gguf", (d) => {
      for (let i = 0; i < d.byteLength; i += 4) d.setFloat32(i, 3e38, true);
    });
    expect(firstNonFiniteTensor(openCheckpoint(path))).toBeNull();
    const llm = LLM.load({ model: path, engine: { threads: 1 } });
    try {
      const [r] = await llm.generate([{ prompt: "Once upon a time", maxTokens: 8, temperature: 0 }]);
      expect(r!.finish_reason).toBe("error");
      expect(r!.error).toBe(`${path}: the model computed NaN or infinite logits: every weight is finite, so its activations overflowed (a broken model?)`);
    } finally {
      llm.close();
    }
  }, 120_000);
});

describeShared("NaN or infinite weights in a llama2.c int8 checkpoint", ["models/llama2c/stories260K_q80.bin", "models/llama2c/tok512.bin"], ([q80]) => {
  test("a NaN group scale of a q8 matrix is found (int8 values first, then one f32 scale per group)", () => {
    expect(firstNonFiniteTensor(openCheckpoint(q80!))).toBeNull();
    const ckpt = openCheckpoint(q80!);
    const t = [...ckpt.tensors.values()].find((x) => x.encoding.kind === "q8-llama2c")!;
    const values = t.shape.reduce((a, b) => a * b, 1);
    const bytes = new Uint8Array(readFileSync(q80!));
    new DataView(bytes.buffer).setFloat32(t.offset + values + 4 * 3, NaN, true);
    const path = join(dir, "nan-scale-q80.bin");
    writeFileSync(path, bytes);
    expect(firstNonFiniteTensor(openCheckpoint(path))).toBe(t.name);
  });
});
