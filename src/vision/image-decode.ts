/**
 * Images from bytes: PNG (pngjs) and JPEG (jpeg-js), both pure JavaScript, decoded to 8-bit RGB as
 * llama.cpp's stb_image loads them with 3 channels (an alpha channel is dropped, not composited;
 * grey is replicated; palettes are expanded). The format is told by the file's first bytes, never
 * by a name or a MIME type, and the declared size is read from the header and checked against
 * the limits before the decoder runs, so that a small file declaring 50,000 x 50,000 pixels is
 * refused before anything of that size is allocated. Truncated or corrupt data, and formats
 * without a decoder here (WebP, GIF, BMP, ...), are refused with one line naming the problem.
 */
import { PNG } from "pngjs";
import jpeg from "jpeg-js";
import { InputError } from "../errors.ts";

/** An 8-bit RGB image, rows top to bottom, 3 bytes a pixel. */
export interface RgbImage {
  width: number;
  height: number;
  rgb: Uint8Array;
}

export interface ImageLimits {
  /** Largest width or height accepted. */
  maxSide: number;
  /** Largest width x height accepted. */
  maxPixels: number;
}

/** 8192 pixels a side and 32 megapixels (about 128 MB of RGBA while decoding). */
export const DEFAULT_IMAGE_LIMITS: ImageLimits = { maxSide: 8192, maxPixels: 32 * 1024 * 1024 };

/** An image that cannot be used: its bytes are not an image of a supported format, are truncated or corrupt, or are too large. */
export class ImageError extends InputError {}

export type ImageFormat = "png" | "jpeg";

const PNG_SIGNATURE = [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a];

/** The format told by the first bytes, or a one-line refusal naming what the bytes are. */
export function sniffImageFormat(bytes: Uint8Array, name: string): ImageFormat {
  const starts = (...b: number[]) => b.every((v, i) => bytes[i] === v);
  const ascii = (at: number, s: string) => [...s].every((c, i) => bytes[at + i] === c.charCodeAt(0));
  if (starts(...PNG_SIGNATURE)) return "png";
  if (starts(0xff, 0xd8, 0xff)) return "jpeg";
  if (ascii(0, "RIFF") && ascii(8, "WEBP")) throw new ImageError(`${name}: WebP images are not supported (PNG and JPEG are)`);
  if (ascii(0, "GIF8")) throw new ImageError(`${name}: GIF images are not supported (PNG and JPEG are)`);
  if (bytes.length === 0) throw new ImageError(`${name}: the image is empty`);
  throw new ImageError(`${name}: not a PNG or JPEG image`);
}

/** Width and height as the header declares them (PNG's IHDR, JPEG's first start-of-frame). */
export function declaredImageSize(bytes: Uint8Array, format: ImageFormat, name: string): { width: number; height: number } {
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  if (format === "png") {
    if (bytes.length < 33 || String.fromCharCode(...bytes.subarray(12, 16)) !== "IHDR") throw new ImageError(`${name}: truncated PNG (no IHDR header)`);
    return { width: view.getUint32(16), height: view.getUint32(20) };
  }
  // JPEG: walk the marker segments up to the first SOFn (C0-CF but C4, C8, CC), which holds the size.
  let at = 2;
  while (at + 4 <= bytes.length) {
    if (bytes[at] !== 0xff) throw new ImageError(`${name}: corrupt JPEG (no marker at byte ${at})`);
    const marker = bytes[at + 1]!;
    if (marker === 0xff) {
      at++;
      continue;
    }
    const length = view.getUint16(at + 2);
    if (marker >= 0xc0 && marker <= 0xcf && marker !== 0xc4 && marker !== 0xc8 && marker !== 0xcc) {
      if (at + 9 > bytes.length) break;
      return { width: view.getUint16(at + 7), height: view.getUint16(at + 5) };
    }
    if (marker === 0xd9 || marker === 0xda) break;
    at += 2 + length;
  }
  throw new ImageError(`${name}: truncated JPEG (no frame header)`);
}

function checkSize(width: number, height: number, limits: ImageLimits, name: string): void {
  if (width === 0 || height === 0) throw new ImageError(`${name}: the image declares ${width} x ${height} pixels`);
  if (width > limits.maxSide || height > limits.maxSide || width * height > limits.maxPixels) {
    throw new ImageError(
      `${name}: the image declares ${width} x ${height} pixels, more than the limit of ${limits.maxSide} a side and ${(limits.maxPixels / 1048576).toFixed(0)} megapixels`,
    );
  }
}

/** Decode PNG or JPEG bytes to RGB, after checking the declared size. `name` names the image in errors. */
export function decodeImage(bytes: Uint8Array, name: string, limits: ImageLimits = DEFAULT_IMAGE_LIMITS): RgbImage {
  const format = sniffImageFormat(bytes, name);
  const { width, height } = declaredImageSize(bytes, format, name);
  checkSize(width, height, limits, name);
  let rgba: Uint8Array;
  let decoded: { width: number; height: number };
  try {
    if (format === "png") {
      const png = PNG.sync.read(Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength));
      decoded = png;
      rgba = png.data;
    } else {
      const img = jpeg.decode(bytes, {
        useTArray: true, formatAsRGBA: true, tolerantDecoding: false,
        maxResolutionInMP: limits.maxPixels / 1e6, maxMemoryUsageInMB: Math.ceil((limits.maxPixels * 8) / 1048576) + 64,
      });
      decoded = img;
      rgba = img.data;
    }
  } catch (e) {
    const why = e instanceof Error ? e.message : String(e);
    throw new ImageError(`${name}: corrupt or truncated ${format === "png" ? "PNG" : "JPEG"} (${why.split("\n")[0]})`);
  }
  if (decoded.width !== width || decoded.height !== height || rgba.length < 4 * width * height) {
    throw new ImageError(`${name}: corrupt ${format === "png" ? "PNG" : "JPEG"} (decoded ${decoded.width} x ${decoded.height}, header says ${width} x ${height})`);
  }
  const rgb = new Uint8Array(3 * width * height);
  for (let i = 0, j = 0; i < rgb.length; i += 3, j += 4) {
    rgb[i] = rgba[j]!;
    rgb[i + 1] = rgba[j + 1]!;
    rgb[i + 2] = rgba[j + 2]!;
  }
  return { width, height, rgb };
}
