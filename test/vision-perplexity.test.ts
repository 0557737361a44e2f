/**
 * `pagellm perplexity --mmproj P --image FILE` against llama.cpp's libmtmd (llref_mtmd score):
 * the text tokens around the image equal llama.cpp's (its `<start_of_image>`/`<end_of_image>`
 * pieces tokenized apart, as mtmd does), the image's 16 rows in place of its placeholders,
 * unscaled, attending to each other both ways. On the F32 language model the log-probabilities
 * after the image meet the F32 rule against llama.cpp's F32 run; on Q4_K_M the quantized rule
 * against it; the other image scores measurably further from the reference (the image is used).
 * And the one-line refusals of the command line.
 */
import { afterAll, expect, test } from "bun:test";
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { spawnSync } from "node:child_process";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { runPagellm } from "./helpers/cli.ts";
import { CHILD_PROCESS_MS, LONG_PROCESS_TEST_MS, PROCESS_TEST_MS } from "./helpers/limits.ts";
import { expectRule } from "./helpers/llama-cpp-rule.ts";
import { describeShared } from "./helpers/shared.ts";

const dir = mkdtempSync(join(tmpdir(), "pagellm-vision-ppl-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const CASE = "rnd-gemma3-Q4_K_M+rnd-gemma3-mmproj";
const REFS = "golden/llama-cpp/vision/refs";
const files = [
  "models/gguf/rnd-gemma3-Q4_K_M.gguf", "models/gguf/rnd-gemma3-mmproj.gguf", "models/gguf/stories260K.gguf",
  "golden/llama-cpp/vision/images/img-a.png", "golden/llama-cpp/vision/images/img-b.png", "golden/llama-cpp/texts/s-square.txt",
  `${REFS}/${CASE}.score.img-a.s-square.json`, `${REFS}/${CASE}-F32.score.img-a.s-square.json`, "tools/llama-ref/make_refmodels.ts",
];

interface MtmdScore {
  chunks: ({ type: "text"; tokens: number[] } | { type: "image"; n_tokens: number })[];
  logprobs: [number, number][];
}

interface Listing {
  tokens: number[];
  token_logprobs: number[];
  top_tokens: number[];
}

const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;

describeShared("perplexity with an image (gemma3)", files, ([q4, mmproj, stories, imgA, imgB, text, refQ4Path, refF32Path, makeRefmodels]) => {
  const refQ4 = JSON.parse(readFileSync(refQ4Path!, "utf8")) as MtmdScore;
  const refF32 = JSON.parse(readFileSync(refF32Path!, "utf8")) as MtmdScore;
  const textChunks = refQ4.chunks.flatMap((c) => (c.type === "text" ? [c.tokens] : []));
  const lastChunk = textChunks[textChunks.length - 1]!;
  const before = textChunks.slice(0, -1).reduce((n, c) => n + c.length, 0);

  const score = (model: string, image: string): Listing => {
    const r = runPagellm(["perplexity", "--model", model, "--mmproj", mmproj!, "--image", image, "--file", text!, "--json"]);
    expect(r.stderr).not.toContain("Error");
    expect(r.exitCode).toBe(0);
    return JSON.parse(r.stdout) as Listing;
  };
  /** Our log-probabilities of the last text chunk's transitions (llama.cpp's scored positions), and argmaxes. */
  const lastChunkOf = (l: Listing) => ({
    lp: l.token_logprobs.slice(before, before + lastChunk.length - 1),
    top: l.top_tokens.slice(before, before + lastChunk.length - 1),
  });
  const errorTo = (lp: number[], ref: MtmdScore) => mean(lp.map((v, j) => Math.abs(v - ref.logprobs[j]![0])));

  test("on the F32 language model: the text tokens are llama.cpp's, and the F32 rule holds after the image", () => {
    const f32 = join(dir, "rnd-gemma3-F32.gguf");
    if (!existsSync(f32)) {
      const r = spawnSync(process.execPath, [makeRefmodels!, dir, "rnd-gemma3"], { encoding: "utf8", timeout: CHILD_PROCESS_MS });
      expect(r.status).toBe(0);
    }
    const listing = score(f32, imgA!);
    expect(listing.tokens).toEqual(textChunks.flat());
    const { lp, top } = lastChunkOf(listing);
    expectRule("F32", {
      diffOwn: errorTo(lp, refF32), agreement: mean(top.map((t, j) => (t === refF32.logprobs[j]![1] ? 1 : 0))), errMine: NaN, errLlama: NaN,
    });
  }, LONG_PROCESS_TEST_MS);

  test("on Q4_K_M: the quantized rule against llama.cpp's F32 run; the other image is measurably further", () => {
    const errLlama = mean(refQ4.logprobs.map(([v], j) => Math.abs(v - refF32.logprobs[j]![0])));
    const a = lastChunkOf(score(q4!, imgA!));
    const figures = { diffOwn: errorTo(a.lp, refQ4), agreement: NaN, errMine: errorTo(a.lp, refF32), errLlama };
    expectRule("quantized", figures);
    const b = lastChunkOf(score(q4!, imgB!));
    // The image is used: with the other one the text moves away from llama.cpp's own run on this file.
    expect(errorTo(b.lp, refQ4)).toBeGreaterThan(errorTo(a.lp, refQ4) + 0.3);
  }, LONG_PROCESS_TEST_MS);

  test("one-line refusals: --image without --mmproj, too few markers, a corrupt image, an encoder that does not fit the model", () => {
    const broken = join(dir, "broken.png");
    writeFileSync(broken, readFileSync(imgA!).subarray(0, 200));
    const noMarker = join(dir, "plain.txt");
    writeFileSync(noMarker, "No image here.");
    const cases: [string[], RegExp][] = [
      [["--model", q4!, "--image", imgA!, "--file", text!], /--image needs --mmproj/],
      [["--model", q4!, "--mmproj", mmproj!, "--image", imgA!, "--file", noMarker], /holds 0 <__media__> marker\(s\) for 1 image\(s\)/],
      [["--model", q4!, "--mmproj", mmproj!, "--image", broken, "--file", text!], /broken\.png: corrupt or truncated PNG/],
      [["--model", stories!, "--mmproj", mmproj!, "--image", imgA!, "--file", text!], /the encoder's rows are 256 wide; the language model's embeddings are 64/],
    ];
    for (const [args, message] of cases) {
      const r = runPagellm(["perplexity", ...args]);
      expect(r.exitCode).not.toBe(0);
      expect(r.stderr).toMatch(message);
      expect(r.stderr.trim().split("\n").filter((l) => l.startsWith("error") || /Error/.test(l)).length).toBeLessThanOrEqual(1);
    }
  }, PROCESS_TEST_MS);
});
