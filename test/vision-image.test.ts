/**
 * Images from bytes (src/vision/image-decode.ts) and llama.cpp's gemma3 preprocessing
 * (src/vision/preprocess.ts): PNG and JPEG decoded to RGB, the declared size refused before the
 * decoder runs, truncated and foreign bytes refused in one line, and the resize's arithmetic
 * checked on cases worked by hand (Pillow's bilinear resample, padding, normalization).
 */
import { describe, expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import { deflateSync } from "node:zlib";
import jpeg from "jpeg-js";
import { decodeImage, ImageError, sniffImageFormat } from "../src/vision/image-decode.ts";
import { bilinearResize, normalizePlanar, patchRows, resizeToSquare } from "../src/vision/preprocess.ts";
import { readPng } from "./helpers/png.ts";
import { describeShared } from "./helpers/shared.ts";

function crc32(bytes: Uint8Array): number {
  let c = ~0;
  for (const b of bytes) {
    c ^= b;
    for (let k = 0; k < 8; k++) c = (c >>> 1) ^ (0xedb88320 & -(c & 1));
  }
  return ~c >>> 0;
}

function chunk(type: string, data: Uint8Array): Uint8Array {
  const out = new Uint8Array(12 + data.length);
  const view = new DataView(out.buffer);
  view.setUint32(0, data.length);
  out.set(new TextEncoder().encode(type), 4);
  out.set(data, 8);
  view.setUint32(8 + data.length, crc32(out.subarray(4, 8 + data.length)));
  return out;
}

/** A PNG of 8-bit pixels (color type 2: RGB, 6: RGBA, 0: grey) with filter 0 on every row; `declared` overrides IHDR's size. */
function png(width: number, height: number, colorType: 0 | 2 | 6, pixels: Uint8Array, declared?: [number, number]): Uint8Array {
  const channels = colorType === 0 ? 1 : colorType === 2 ? 3 : 4;
  const raw = new Uint8Array(height * (1 + width * channels));
  for (let y = 0; y < height; y++) raw.set(pixels.subarray(y * width * channels, (y + 1) * width * channels), y * (1 + width * channels) + 1);
  const ihdr = new Uint8Array(13);
  const v = new DataView(ihdr.buffer);
  v.setUint32(0, declared?.[0] ?? width);
  v.setUint32(4, declared?.[1] ?? height);
  ihdr.set([8, colorType, 0, 0, 0], 8);
  const parts = [Uint8Array.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]), chunk("IHDR", ihdr), chunk("IDAT", deflateSync(raw)), chunk("IEND", new Uint8Array(0))];
  return Uint8Array.from(parts.flatMap((p) => [...p]));
}

function pattern(n: number, seed: number): Uint8Array {
  return Uint8Array.from({ length: n }, (_, i) => (i * 37 + seed * 101 + ((i * i) >> 3)) & 255);
}

describe("decoding", () => {
  test("RGB, RGBA (alpha dropped, not composited) and grey (replicated) PNGs", () => {
    const rgb = pattern(5 * 3 * 3, 1);
    expect(decodeImage(png(5, 3, 2, rgb), "a.png")).toEqual({ width: 5, height: 3, rgb });
    const rgba = pattern(4 * 2 * 4, 2);
    const dropped = Uint8Array.from({ length: 4 * 2 * 3 }, (_, i) => rgba[Math.floor(i / 3) * 4 + (i % 3)]!);
    expect(decodeImage(png(4, 2, 6, rgba), "b.png").rgb).toEqual(dropped);
    const grey = pattern(3 * 3, 3);
    expect(decodeImage(png(3, 3, 0, grey), "c.png").rgb).toEqual(Uint8Array.from({ length: 27 }, (_, i) => grey[Math.floor(i / 3)]!));
  });

  test("a JPEG decodes to the size it declares, close to the pixels encoded", () => {
    const w = 24;
    const h = 16;
    const rgba = new Uint8Array(4 * w * h);
    for (let i = 0; i < w * h; i++) rgba.set([(i % w) * 10, Math.floor(i / w) * 15, 128, 255], 4 * i);
    const file = jpeg.encode({ data: rgba, width: w, height: h }, 95).data;
    expect(sniffImageFormat(file, "x.jpg")).toBe("jpeg");
    const img = decodeImage(file, "x.jpg");
    expect([img.width, img.height]).toEqual([w, h]);
    let worst = 0;
    for (let i = 0; i < w * h; i++) for (let c = 0; c < 3; c++) worst = Math.max(worst, Math.abs(img.rgb[3 * i + c]! - rgba[4 * i + c]!));
    expect(worst).toBeLessThan(24);
  });

  test("a PNG declaring 50,000 x 50,000 pixels is refused from its header, before anything of that size is allocated", () => {
    const file = png(2, 2, 2, pattern(12, 4), [50_000, 50_000]);
    const before = process.memoryUsage().rss;
    expect(() => decodeImage(file, "huge.png")).toThrow(ImageError);
    expect(() => decodeImage(file, "huge.png")).toThrow(/huge\.png: the image declares 50000 x 50000 pixels, more than the limit/);
    expect(process.memoryUsage().rss - before).toBeLessThan(64 * 1024 * 1024);
    // A JPEG's frame header is read the same way.
    const jpg = jpeg.encode({ data: new Uint8Array(4 * 16), width: 4, height: 4 }, 90).data.slice();
    const sof = jpg.findIndex((b, i) => b === 0xff && jpg[i + 1] === 0xc0);
    new DataView(jpg.buffer).setUint16(sof + 5, 60_000);
    new DataView(jpg.buffer).setUint16(sof + 7, 60_000);
    expect(() => decodeImage(jpg, "huge.jpg")).toThrow(/huge\.jpg: the image declares 60000 x 60000 pixels/);
  });

  test("truncated, corrupt and foreign bytes are refused in one line naming the image", () => {
    const good = png(6, 6, 2, pattern(108, 5));
    const cases: [Uint8Array, RegExp][] = [
      [good.subarray(0, 20), /t\.png: truncated PNG/],
      [good.subarray(0, good.length - 30), /t\.png: corrupt or truncated PNG/],
      [Uint8Array.from([...new TextEncoder().encode("RIFF"), 0, 0, 0, 0, ...new TextEncoder().encode("WEBPVP8 ")]), /t\.png: WebP images are not supported/],
      [new TextEncoder().encode("GIF89a......"), /t\.png: GIF images are not supported/],
      [new TextEncoder().encode("hello, world"), /t\.png: not a PNG or JPEG image/],
      [new Uint8Array(0), /t\.png: the image is empty/],
      [Uint8Array.from([0xff, 0xd8, 0xff, 0xe0, 0, 4, 0, 0]), /t\.png: truncated JPEG/],
    ];
    for (const [bytes, message] of cases) {
      let error: unknown;
      try {
        decodeImage(bytes, "t.png");
      } catch (e) {
        error = e;
      }
      expect(error).toBeInstanceOf(ImageError);
      expect((error as Error).message).toMatch(message);
      expect((error as Error).message).not.toContain("\n");
    }
  });
});

describe("preprocessing", () => {
  test("the bilinear resample: a 2x shrink averages pixel pairs, same size is the identity", () => {
    const src = { width: 4, height: 1, rgb: Uint8Array.from([0, 0, 0, 10, 10, 10, 100, 100, 100, 200, 200, 200]) };
    // Shrinking by 2: each output is the triangle filter over 4 inputs, weights 1/8, 3/8, 3/8, 1/8 (clipped at the edges, renormalized).
    const out = bilinearResize(src, 2, 1);
    const expected = [Math.round((0 * 3 + 10 * 3 + 100) / 7), Math.round((10 + 100 * 3 + 200 * 3) / 7)];
    expect([out.rgb[0], out.rgb[3]]).toEqual(expected);
    expect(bilinearResize(src, 4, 1).rgb).toEqual(src.rgb);
  });

  test("resized to the square keeping the aspect ratio, centred on black", () => {
    const img = { width: 8, height: 4, rgb: new Uint8Array(8 * 4 * 3).fill(200) };
    const sq = resizeToSquare(img, 4);
    const rows = Array.from({ length: 4 }, (_, y) => sq.rgb[3 * (y * 4 + 1)]);
    expect(rows).toEqual([0, 200, 200, 0]);
    const planar = normalizePlanar(sq, [0.5, 0.5, 0.5], [0.5, 0.5, 0.5]);
    expect(planar[0]).toBe(-1);
    expect(planar[4]).toBeCloseTo((200 / 255 - 0.5) / 0.5, 6);
  });

  test("patches are rows of channel, then row, then column inside the patch", () => {
    const side = 4;
    const planar = Float32Array.from({ length: 3 * side * side }, (_, i) => i);
    const rows = patchRows(planar, side, 2);
    // Patch 1 (top right): channel 0 rows 0-1, columns 2-3; then channels 1 and 2.
    expect(Array.from(rows.subarray(12, 24))).toEqual([2, 3, 6, 7, 18, 19, 22, 23, 34, 35, 38, 39]);
  });
});

describeShared("the reference images", ["golden/llama-cpp/vision/images/img-a.png"], ([path]) => {
  test("pngjs decodes them as an independent reader does", () => {
    const bytes = readFileSync(path!);
    const mine = decodeImage(bytes, "img-a.png");
    const other = readPng(bytes);
    expect([mine.width, mine.height]).toEqual([other.width, other.height]);
    expect(mine.rgb).toEqual(Uint8Array.from({ length: 3 * other.width * other.height }, (_, i) => other.rgba[Math.floor(i / 3) * 4 + (i % 3)]!));
  });
});
