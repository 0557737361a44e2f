/**
 * The gemma3 image encoder (src/vision/) against llama.cpp's libmtmd: its 16 rows for each
 * reference image within 1e-3 of llama.cpp's (relative to the row's largest value), the same bits
 * at any thread count, an older file's swapped feed-forward names read the right way round, and
 * one-line refusals of a missing or mis-shaped tensor and of a file that is not an encoder.
 */
import { afterAll, expect, test } from "bun:test";
import { closeSync, mkdtempSync, openSync, readFileSync, readSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { ModelFormatError } from "../src/errors.ts";
import { readGGUF } from "../src/model/gguf.ts";
import { writeGGUF, type TensorToWrite } from "../src/synth/gguf-writer.ts";
import { readClipCheckpoint } from "../src/vision/clip-file.ts";
import { decodeImage } from "../src/vision/image-decode.ts";
import { VisionEncoder } from "../src/vision/vision-encoder.ts";
import { patched, tensorRecord } from "./helpers/gguf-patch.ts";
import { describeShared } from "./helpers/shared.ts";

const MMPROJ = "models/gguf/rnd-gemma3-mmproj.gguf";
const LM = "models/gguf/rnd-gemma3-Q4_K_M.gguf";
const IMAGES = ["img-a", "img-b"];
const dir = mkdtempSync(join(tmpdir(), "pagellm-vision-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** The largest |mine - ref| in each row, over the row's largest |ref|. */
function worstRelative(mine: Float32Array, ref: number[][]): number {
  let worst = 0;
  ref.forEach((row, t) => {
    const scale = Math.max(...row.map(Math.abs));
    row.forEach((v, j) => (worst = Math.max(worst, Math.abs(v - mine[t * row.length + j]!) / scale)));
  });
  return worst;
}

function refusal(run: () => unknown): string {
  try {
    run();
  } catch (e) {
    expect(e).toBeInstanceOf(ModelFormatError);
    const message = (e as Error).message;
    expect(message).not.toContain("\n");
    return message;
  }
  throw new Error("expected a refusal");
}

const paths = [MMPROJ, LM, ...IMAGES.flatMap((i) => [`golden/llama-cpp/vision/images/${i}.png`, `golden/llama-cpp/vision/refs/rnd-gemma3-mmproj.embd.${i}.json`])];

describeShared("gemma3 encoder", paths, ([mmproj, lm, ...rest]) => {
  const images = IMAGES.map((_, i) => decodeImage(readFileSync(rest[2 * i]!), IMAGES[i]!));
  const refs = IMAGES.map((_, i) => (JSON.parse(readFileSync(rest[2 * i + 1]!, "utf8")) as { n_embd: number; embd: number[][] }));

  test("the file's shape: 16 rows of 256 per image, from 224-pixel images in 14-pixel patches", () => {
    const c = readClipCheckpoint(mmproj!).config;
    expect([c.projector, c.imageSize, c.patchSize, c.dim, c.nLayers, c.nHeads, c.hiddenDim, c.poolSide, c.projectionDim, c.tokensPerImage])
      .toEqual(["gemma3", 224, 14, 192, 2, 4, 384, 4, 256, 16]);
  });

  test("each image's rows within 1e-3 of llama.cpp's, and the two images' rows differ", () => {
    const enc = VisionEncoder.load(readClipCheckpoint(mmproj!), 1);
    try {
      const rows = images.map((img) => enc.encodeImage(img));
      rows.forEach((r, i) => {
        expect(r.length).toBe(16 * refs[i]!.n_embd);
        expect(worstRelative(r, refs[i]!.embd)).toBeLessThan(1e-3);
      });
      // The image is used: the other image's rows are far from this one's reference.
      expect(worstRelative(rows[1]!, refs[0]!.embd)).toBeGreaterThan(0.05);
    } finally {
      enc.close();
    }
  });

  test("the same bits at 1 and 3 threads", () => {
    const ckpt = readClipCheckpoint(mmproj!);
    const one = VisionEncoder.load(ckpt, 1);
    const three = VisionEncoder.load(ckpt, 3);
    try {
      for (const img of images) expect(three.encodeImage(img)).toEqual(one.encodeImage(img));
    } finally {
      one.close();
      three.close();
    }
  });

  test("a file with ffn_up and ffn_down written under each other's names is read the right way round", () => {
    const file = readGGUF(mmproj!);
    const fd = openSync(mmproj!, "r");
    const swapName = (name: string) => name.replace(/ffn_(up|down)/, (_, w: string) => (w === "up" ? "ffn_down" : "ffn_up"));
    const tensors: TensorToWrite[] = file.tensors.map((t) => {
      const data = new Uint8Array(t.byteSize);
      readSync(fd, data, 0, t.byteSize, t.fileOffset);
      return { name: t.name.startsWith("v.blk.") ? swapName(t.name) : t.name, dims: t.dims, type: t.type, data };
    });
    closeSync(fd);
    const swapped = join(dir, "swapped-ffn.gguf");
    writeGGUF(swapped, file.metadata, tensors);
    const a = VisionEncoder.load(readClipCheckpoint(mmproj!), 1);
    const b = VisionEncoder.load(readClipCheckpoint(swapped), 1);
    try {
      expect(b.encodeImage(images[0]!)).toEqual(a.encodeImage(images[0]!));
    } finally {
      a.close();
      b.close();
    }
  });

  test("one-line refusals naming the missing or mis-shaped tensor, a projection stored the other way, a file that is no encoder", () => {
    const good = new Uint8Array(readFileSync(mmproj!));
    const write = (name: string, bytes: Uint8Array) => {
      const path = join(dir, name);
      writeFileSync(path, bytes);
      return path;
    };
    const renamed = patched(good, (_v, map, bytes) => {
      const at = tensorRecord(map, "v.blk.1.attn_k.weight").nDimsAt - "weight".length - 1 - "attn_k".length;
      bytes.set(new TextEncoder().encode("attn_x"), at);
    });
    expect(refusal(() => readClipCheckpoint(write("missing.gguf", renamed)))).toMatch(/missing tensor v\.blk\.1\.attn_k\.weight/);
    const narrow = patched(good, (view, map) => view.setBigUint64(tensorRecord(map, "v.blk.0.attn_q.weight").dimsAt + 8, 96n, true));
    expect(refusal(() => readClipCheckpoint(write("narrow.gguf", narrow)))).toMatch(/tensor v\.blk\.0\.attn_q\.weight has shape \[96, 192\], expected \[192, 192\]/);
    const turned = patched(good, (view, map) => {
      const t = tensorRecord(map, "mm.input_projection.weight");
      view.setBigUint64(t.dimsAt, 192n, true);
      view.setBigUint64(t.dimsAt + 8, 256n, true);
    });
    expect(refusal(() => readClipCheckpoint(write("turned.gguf", turned)))).toMatch(/mm\.input_projection\.weight is stored vision width first/);
    expect(refusal(() => readClipCheckpoint(lm!))).toMatch(/not an image encoder \(general\.architecture is gemma3, expected clip\)/);
  });
});
