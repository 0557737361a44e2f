/**
 * A minimal PNG reader for tests: 8-bit RGB or RGBA, not interlaced (what Chromium's screenshots
 * are), all five row filters. Enough to look at a rendered picture's pixels without a dependency.
 */
import { inflateSync } from "node:zlib";

export interface Picture {
  width: number;
  height: number;
  /** RGBA, 4 bytes a pixel, rows top to bottom. */
  rgba: Uint8Array;
}

const SIGNATURE = [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a];

function paeth(a: number, b: number, c: number): number {
  const p = a + b - c;
  const pa = Math.abs(p - a);
  const pb = Math.abs(p - b);
  const pc = Math.abs(p - c);
  return pa <= pb && pa <= pc ? a : pb <= pc ? b : c;
}

export function readPng(bytes: Uint8Array): Picture {
  if (!SIGNATURE.every((b, i) => bytes[i] === b)) throw new Error("not a PNG file");
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  let width = 0;
  let height = 0;
  let channels = 0;
  const idat: Uint8Array[] = [];
  for (let at = 8; at < bytes.length; ) {
    const length = view.getUint32(at);
    const type = String.fromCharCode(...bytes.subarray(at + 4, at + 8));
    const data = bytes.subarray(at + 8, at + 8 + length);
    if (type === "IHDR") {
      width = view.getUint32(at + 8);
      height = view.getUint32(at + 12);
      const [depth, colorType, , , interlace] = data.subarray(8, 13);
      if (depth !== 8 || interlace !== 0 || (colorType !== 2 && colorType !== 6)) {
        throw new Error(`unsupported PNG: depth ${depth}, colour type ${colorType}, interlace ${interlace}`);
      }
      channels = colorType === 6 ? 4 : 3;
    } else if (type === "IDAT") idat.push(data);
    else if (type === "IEND") break;
    at += 12 + length;
  }
  const raw = inflateSync(Buffer.concat(idat));
  const stride = width * channels;
  const pixels = new Uint8Array(height * stride);
  for (let y = 0; y < height; y++) {
    const filter = raw[y * (stride + 1)]!;
    const src = raw.subarray(y * (stride + 1) + 1, (y + 1) * (stride + 1));
    const row = pixels.subarray(y * stride, (y + 1) * stride);
    const up = y > 0 ? pixels.subarray((y - 1) * stride, y * stride) : new Uint8Array(stride);
    for (let i = 0; i < stride; i++) {
      const a = i >= channels ? row[i - channels]! : 0;
      const b = up[i]!;
      const c = i >= channels ? up[i - channels]! : 0;
      const predicted = filter === 0 ? 0 : filter === 1 ? a : filter === 2 ? b : filter === 3 ? (a + b) >> 1 : paeth(a, b, c);
      row[i] = (src[i]! + predicted) & 0xff;
    }
  }
  const rgba = new Uint8Array(width * height * 4);
  for (let p = 0; p < width * height; p++) {
    rgba[4 * p] = pixels[p * channels]!;
    rgba[4 * p + 1] = pixels[p * channels + 1]!;
    rgba[4 * p + 2] = pixels[p * channels + 2]!;
    rgba[4 * p + 3] = channels === 4 ? pixels[p * channels + 3]! : 255;
  }
  return { width, height, rgba };
}

/** Pixels that are not (nearly) white. */
export function inkedPixels(p: Picture): number {
  let n = 0;
  for (let i = 0; i < p.rgba.length; i += 4) if (p.rgba[i]! < 240 || p.rgba[i + 1]! < 240 || p.rgba[i + 2]! < 240) n++;
  return n;
}

/** Pixels within `tolerance` of the colour "#rrggbb" in every channel. */
export function pixelsNear(p: Picture, hex: string, tolerance = 24): number {
  const [r, g, b] = [1, 3, 5].map((i) => parseInt(hex.slice(i, i + 2), 16)) as [number, number, number];
  let n = 0;
  for (let i = 0; i < p.rgba.length; i += 4) {
    if (Math.abs(p.rgba[i]! - r) <= tolerance && Math.abs(p.rgba[i + 1]! - g) <= tolerance && Math.abs(p.rgba[i + 2]! - b) <= tolerance) n++;
  }
  return n;
}
