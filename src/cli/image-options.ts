/**
 * The command line's image options, shared by `perplexity` and `generate`: `--mmproj FILE` (the
 * language model's image encoder) and `--image FILE` (repeatable, one per `<__media__>` marker of
 * the text), the images decoded (and their sizes checked) before the model loads.
 */
import { existsSync, readFileSync, statSync } from "node:fs";
import { InputError } from "../errors.ts";
import type { LLM } from "../llm/llm.ts";
import { decodeImage, type RgbImage } from "../vision/image-decode.ts";
import { VisionModel } from "../vision/vision-model.ts";
import { repeated, type ParsedValues } from "./options.ts";

export const imageArgs = {
  mmproj: { type: "string", description: "The language model's image encoder (a clip GGUF, llama.cpp's mmproj file)", valueHint: "path" },
  image: {
    type: "string",
    description: "An image (PNG or JPEG) for the text's next <__media__> marker; repeat for several (needs --mmproj)",
    valueHint: "path",
  },
} as const;

export interface ImageInputs {
  mmproj: string;
  images: RgbImage[];
}

/** The images and their encoder's path; null when neither option is given. */
export function imageInputs(values: ParsedValues, rawArgs: readonly string[]): ImageInputs | null {
  const paths = repeated(rawArgs, "image");
  const mmproj = typeof values.mmproj === "string" && values.mmproj !== "" ? values.mmproj : null;
  if (paths.length > 0 && mmproj === null) throw new InputError("--image needs --mmproj, the model's image encoder");
  if (mmproj === null) return null;
  const images = paths.map((path) => {
    if (!existsSync(path) || statSync(path).isDirectory()) throw new InputError(`${path}: image file not found`);
    return decodeImage(readFileSync(path), path);
  });
  return { mmproj, images };
}

/** Runs `use` with the encoder loaded and checked against the language model, and closes it after. */
export async function withVision<T>(llm: LLM, mmproj: string, threads: number, use: (vision: VisionModel) => Promise<T>): Promise<T> {
  const vision = VisionModel.open(mmproj, threads);
  try {
    vision.checkLanguageModel(llm.files[0]!, llm.checkpoint.config.dim);
    return await use(vision);
  } finally {
    vision.close();
  }
}
