/**
 * Generation with an image through the engine (scheduler, paged KV cache, prefix cache): greedy
 * ids after the image equal llama.cpp's (llref_mtmd greedy) on the F32 language model, and the
 * prefix cache keys each block on the image it holds: the same image and text hit to the last
 * full block, another image (or the same pixels at another size) misses from the image's first
 * block on, and the output is the same bits with or without the hits. And `generate --image`.
 */
import { afterAll, expect, test } from "bun:test";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { spawnSync } from "node:child_process";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { LLM } from "../src/llm/llm.ts";
import { decodeImage } from "../src/vision/image-decode.ts";
import { VisionModel } from "../src/vision/vision-model.ts";
import { runPagellm } from "./helpers/cli.ts";
import { CHILD_PROCESS_MS, LONG_PROCESS_TEST_MS, PROCESS_TEST_MS } from "./helpers/limits.ts";
import { describeShared } from "./helpers/shared.ts";

const dir = mkdtempSync(join(tmpdir(), "pagellm-vision-gen-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const REF = "golden/llama-cpp/vision/refs/rnd-gemma3-Q4_K_M+rnd-gemma3-mmproj-F32.greedy.img-a.p-describe.json";
const files = [
  "models/gguf/rnd-gemma3-mmproj.gguf", "golden/llama-cpp/vision/images/img-a.png", "golden/llama-cpp/vision/images/img-b.png",
  "golden/llama-cpp/texts/p-describe.txt", REF, "tools/llama-ref/make_refmodels.ts",
];

describeShared("generation with an image (gemma3)", files, ([mmproj, imgA, imgB, text, refPath, makeRefmodels]) => {
  test("greedy ids equal llama.cpp's; the prefix cache hits and misses by the image each block holds", async () => {
    const r = spawnSync(process.execPath, [makeRefmodels!, dir, "rnd-gemma3"], { encoding: "utf8", timeout: CHILD_PROCESS_MS });
    expect(r.status).toBe(0);
    const ref = JSON.parse(readFileSync(refPath!, "utf8")) as { chunks: ({ type: string; tokens?: number[] })[]; generated: number[] };
    const llm = await LLM.open({ model: join(dir, "rnd-gemma3-F32.gguf"), device: "wasm", engine: { threads: 1, blockSize: 16 } });
    const vision = VisionModel.open(mmproj!, 1);
    try {
      const a = decodeImage(readFileSync(imgA!), "img-a.png");
      const b = decodeImage(readFileSync(imgB!), "img-b.png");
      const prompt = readFileSync(text!, "utf8");
      const run = async (img: typeof a) => {
        const p = vision.prompt(prompt, [img], llm.tokenizer, llm.addBos);
        const [out] = await llm.generate([{ promptTokenIds: p.tokens, embeds: p.embeds, maxTokens: ref.generated.length, temperature: 0 }]);
        return { p, out: out! };
      };
      const first = await run(a);
      expect(first.p.tokens.filter((_, i) => first.p.isText[i])).toEqual(ref.chunks.flatMap((c) => c.tokens ?? []));
      expect(first.out.token_ids).toEqual(ref.generated);
      expect(first.out.cached_tokens).toBe(0);
      // The prompt: 17 text tokens, the image at 17..32, 28 text tokens: 61, three full blocks of 16.
      expect(first.p.embeds.map((e) => [e.offset, e.length])).toEqual([[17, 16]]);
      const again = await run(a);
      expect(again.out.cached_tokens).toBe(48);
      expect(again.out.token_ids).toEqual(first.out.token_ids);
      expect(vision.encodeCount).toBe(1); // the second turn re-encodes nothing
      // Another image: only block 0 (text alone) is shared.
      const other = await run(b);
      expect(other.out.cached_tokens).toBe(16);
      expect(other.out.token_ids).not.toEqual(first.out.token_ids);
      // The same bytes read as a 240 x 320 image: another key, another image.
      const turned = await run({ width: a.height, height: a.width, rgb: a.rgb });
      expect(turned.out.cached_tokens).toBe(16);
      expect(vision.imageKey({ width: a.height, height: a.width, rgb: a.rgb })).not.toBe(vision.imageKey(a));
    } finally {
      vision.close();
      llm.close();
    }
  }, LONG_PROCESS_TEST_MS);

  test("pagellm generate --mmproj --image: the same greedy ids; --image with several prompts is refused in one line", () => {
    const ref = JSON.parse(readFileSync(refPath!, "utf8")) as { generated: number[] };
    const model = join(dir, "rnd-gemma3-F32.gguf");
    const args = ["generate", "--model", model, "--mmproj", mmproj!, "--image", imgA!, "--prompt-file", text!, "--temperature", "0"];
    const r = runPagellm([...args, "--max-tokens", String(ref.generated.length), "--json"]);
    expect(r.exitCode).toBe(0);
    expect((JSON.parse(r.stdout) as { token_ids: number[] }).token_ids).toEqual(ref.generated);
    const two = runPagellm([...args, "--prompt", "another <__media__>"]);
    expect(two.exitCode).toBe(2);
    expect(two.stderr).toMatch(/--image goes with one text prompt/);
  }, PROCESS_TEST_MS);
});
