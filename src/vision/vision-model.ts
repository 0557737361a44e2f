/**
 * A language model's image side, as llama.cpp's libmtmd composes it: the mmproj file's encoder,
 * each image's content key, and prompts that hold images. A prompt is text with the marker
 * `<__media__>` where each image goes (llama.cpp's default marker); it becomes token ids with
 * placeholder tokens at the images' places and, for each image, an EmbeddedSpan: its encoder rows
 * (which replace the placeholders' input rows, unscaled), its content key (the prefix cache's
 * extra key for the blocks it covers) and, for Gemma 3, that its tokens attend to each other in
 * both directions. The engine sees only these spans (src/model/batch.ts); it never imports this
 * folder, and a text-only prompt takes none of this path.
 *
 * Tokenization follows mtmd_tokenize for gemma3: the text before each marker, `<start_of_image>`,
 * the image, `<end_of_image>`, and the text after are tokenized each on its own (so each gets
 * SentencePiece's leading space), special tokens parsed, BOS only before the first piece.
 *
 * An image's key is the SHA-256 of its decoded pixels with their width and height, the
 * preprocessing (its name and settings) and the mmproj file's own SHA-256: the same pixels at
 * another size, under another preprocessing or another encoder never share a key, and nothing a
 * client names (a file name, an id) enters it.
 */
import { closeSync, openSync, readSync } from "node:fs";
import { InputError, ModelFormatError } from "../errors.ts";
import type { EmbeddedSpan } from "../model/batch.ts";
import { readGGUF } from "../model/gguf.ts";
import type { Tokenizer } from "../tokenizer/tokenizer.ts";
import { readClipCheckpoint, type ClipCheckpoint, type ClipConfig } from "./clip-file.ts";
import type { RgbImage } from "./image-decode.ts";
import { VisionEncoder } from "./vision-encoder.ts";

/** llama.cpp's default media marker (mtmd_default_marker). */
export const MEDIA_MARKER = "<__media__>";
/** The token id an image's placeholder positions hold: their input rows are replaced, so any valid id does. */
const PLACEHOLDER_TOKEN = 0;
/** Encoded images kept by content key: a conversation's later turns re-encode nothing. */
const ENCODED_CACHE_SIZE = 16;

/** A prompt holding images: its token ids (placeholders at the images) and one span per image. */
export interface ImagePrompt {
  tokens: number[];
  embeds: EmbeddedSpan[];
  /** Per token: whether it is text (false: an image's placeholder). */
  isText: boolean[];
}

export class VisionModel {
  private readonly encoded = new Map<string, Float32Array>();
  /** Images encoded since load (cache misses). */
  encodeCount = 0;

  private constructor(
    readonly checkpoint: ClipCheckpoint,
    private readonly encoder: VisionEncoder,
    /** SHA-256 of the mmproj file, hex. */
    readonly fingerprint: string,
  ) {}

  /** The encoder of the mmproj file at `path`, on `threads` threads. */
  static open(path: string, threads = 1): VisionModel {
    const checkpoint = readClipCheckpoint(path);
    const fingerprint = fileSha256(path);
    return new VisionModel(checkpoint, VisionEncoder.load(checkpoint, threads), fingerprint);
  }

  get config(): ClipConfig {
    return this.checkpoint.config;
  }

  /** Refuses a language model this encoder does not feed: another width, or another family than the projector's. */
  checkLanguageModel(modelPath: string, width: number): void {
    const c = this.config;
    if (width !== c.projectionDim) {
      throw new ModelFormatError(this.checkpoint.file, `the encoder's rows are ${c.projectionDim} wide; the language model's embeddings are ${width}`);
    }
    const arch = readGGUF(modelPath).getString("general.architecture", "");
    if (c.projector === "gemma3" && arch !== "gemma3") {
      throw new ModelFormatError(this.checkpoint.file, `a gemma3 projector feeds a gemma3 language model, not ${arch === "" ? "this file" : arch}`);
    }
  }

  /** The preprocessing, as it enters each image's key. */
  private get preprocessing(): string {
    const c = this.config;
    return JSON.stringify({ resize: "pillow-bilinear-pad-black", size: c.imageSize, mean: c.imageMean, std: c.imageStd });
  }

  /** The image's content key (see the file comment), hex. */
  imageKey(img: RgbImage): string {
    const hasher = new Bun.CryptoHasher("sha256");
    const head = new DataView(new ArrayBuffer(8));
    head.setUint32(0, img.width, true);
    head.setUint32(4, img.height, true);
    hasher.update("pagellm/image/v1").update(new Uint8Array(head.buffer)).update(this.preprocessing).update(this.fingerprint).update(img.rgb);
    return hasher.digest("hex");
  }

  /** The image's rows for the language model (from the cache when it was encoded before). */
  encode(img: RgbImage, key: string = this.imageKey(img)): Float32Array {
    const hit = this.encoded.get(key);
    if (hit !== undefined) {
      // Most recently used last.
      this.encoded.delete(key);
      this.encoded.set(key, hit);
      return hit;
    }
    const rows = this.encoder.encodeImage(img);
    this.encodeCount++;
    this.encoded.set(key, rows);
    if (this.encoded.size > ENCODED_CACHE_SIZE) this.encoded.delete(this.encoded.keys().next().value!);
    return rows;
  }

  /** `text` with one `<__media__>` per image, as tokens and spans (see the file comment). */
  prompt(text: string, images: readonly RgbImage[], tokenizer: Tokenizer, addBos: boolean): ImagePrompt {
    const pieces = text.split(MEDIA_MARKER);
    if (pieces.length - 1 !== images.length) {
      throw new InputError(`the text holds ${pieces.length - 1} ${MEDIA_MARKER} marker(s) for ${images.length} image(s)`);
    }
    const tokens: number[] = [];
    const isText: boolean[] = [];
    const embeds: EmbeddedSpan[] = [];
    const addText = (piece: string) => {
      if (piece === "" && tokens.length > 0) return;
      const ids = tokenizer.encode(piece, { addBos: tokens.length === 0 && addBos, parseSpecial: true });
      for (const id of ids) {
        tokens.push(id);
        isText.push(true);
      }
    };
    const n = this.config.tokensPerImage;
    pieces.forEach((piece, i) => {
      addText(piece);
      const img = images[i];
      if (img === undefined) return;
      addText("<start_of_image>");
      const id = this.imageKey(img);
      embeds.push({ id, offset: tokens.length, length: n, rows: this.encode(img, id), bidirectional: this.config.projector === "gemma3" });
      for (let t = 0; t < n; t++) {
        tokens.push(PLACEHOLDER_TOKEN);
        isText.push(false);
      }
      addText("<end_of_image>");
    });
    return { tokens, embeds, isText };
  }

  close(): void {
    this.encoder.close();
  }
}

/** SHA-256 of a whole file, hex, read 8 MiB at a time. */
function fileSha256(path: string): string {
  const hasher = new Bun.CryptoHasher("sha256");
  const buf = new Uint8Array(8 << 20);
  const fd = openSync(path, "r");
  try {
    for (;;) {
      const n = readSync(fd, buf, 0, buf.length, null);
      if (n <= 0) break;
      hasher.update(buf.subarray(0, n));
    }
  } finally {
    closeSync(fd);
  }
  return hasher.digest("hex");
}
