/**
 * The image encoder of a vision-language model: a GGUF file of `general.architecture` "clip" (an
 * "mmproj" file, as llama.cpp's tools/mtmd writes and reads it), its `clip.projector_type`, the
 * `clip.vision.*` hyper-parameters and every `v.*` and `mm.*` tensor the forward pass reads, each
 * checked against the shape the keys imply before anything is allocated.
 *
 * The layout is SigLIP's (llama.cpp's build_vit with learned positions and pre-norm blocks): a
 * patch embedding (a convolution with stride = kernel = patch size, read here as a matrix over the
 * flattened patches), learned positions, blocks of LayerNorm → attention → residual, LayerNorm →
 * GELU feed-forward → residual, and `v.post_ln`. The projector follows:
 *   - gemma3: the patch grid average-pooled by `clip.vision.projector.scale_factor` in both
 *     directions, an RMS norm times `mm.soft_emb_norm.weight` (Gemma's converter stores it with
 *     the +1 of Gemma's norms already added: it multiplies as stored), then
 *     `mm.input_projection.weight`, which Gemma 3's converter stores with the text width first
 *     (ggml ne = [text, vision]), so the product is with its transpose.
 *
 * Known traps of older files: `ffn_up` and `ffn_down` swapped (detected by their shapes, as
 * llama.cpp does, and read the right way round).
 */
import { ModelFormatError } from "../errors.ts";
import type { TensorInfo } from "../model/checkpoint.ts";
import { tensorInfo } from "../model/gguf-checkpoint.ts";
import { readGGUF, type GGUFFile } from "../model/gguf.ts";

/** Projectors this reader knows; llama.cpp's names. */
export type ProjectorType = "gemma3";
const PROJECTORS: ReadonlySet<string> = new Set<ProjectorType>(["gemma3"]);

export interface ClipConfig {
  projector: ProjectorType;
  /** The encoder's square input, in pixels (`clip.vision.image_size`). */
  imageSize: number;
  patchSize: number;
  /** Patches per side: imageSize / patchSize. */
  gridSide: number;
  dim: number;
  nLayers: number;
  nHeads: number;
  headDim: number;
  hiddenDim: number;
  /** LayerNorm's (and the projector's RMS norm's) epsilon. */
  normEps: number;
  /** Per channel (R, G, B): the value normalized is (pixel / 255 - mean) / std. */
  imageMean: [number, number, number];
  imageStd: [number, number, number];
  /** gemma3: the pooling kernel and stride, in patches. */
  poolSide: number;
  /** Width of the rows the encoder hands to the language model (its embedding width). */
  projectionDim: number;
  /** Rows one image becomes: (gridSide / poolSide)^2 for gemma3. */
  tokensPerImage: number;
}

/** Tensor names, as llama.cpp's clip-impl.h spells them. */
export const ClipTensor = {
  patchEmbd: "v.patch_embd.weight",
  patchBias: "v.patch_embd.bias",
  positions: "v.position_embd.weight",
  ln1: (l: number) => `v.blk.${l}.ln1.weight`,
  ln1Bias: (l: number) => `v.blk.${l}.ln1.bias`,
  q: (l: number) => `v.blk.${l}.attn_q.weight`,
  qBias: (l: number) => `v.blk.${l}.attn_q.bias`,
  k: (l: number) => `v.blk.${l}.attn_k.weight`,
  kBias: (l: number) => `v.blk.${l}.attn_k.bias`,
  v: (l: number) => `v.blk.${l}.attn_v.weight`,
  vBias: (l: number) => `v.blk.${l}.attn_v.bias`,
  out: (l: number) => `v.blk.${l}.attn_out.weight`,
  outBias: (l: number) => `v.blk.${l}.attn_out.bias`,
  ln2: (l: number) => `v.blk.${l}.ln2.weight`,
  ln2Bias: (l: number) => `v.blk.${l}.ln2.bias`,
  up: (l: number) => `v.blk.${l}.ffn_up.weight`,
  upBias: (l: number) => `v.blk.${l}.ffn_up.bias`,
  down: (l: number) => `v.blk.${l}.ffn_down.weight`,
  downBias: (l: number) => `v.blk.${l}.ffn_down.bias`,
  postLn: "v.post_ln.weight",
  postLnBias: "v.post_ln.bias",
  softEmbNorm: "mm.soft_emb_norm.weight",
  inputProjection: "mm.input_projection.weight",
} as const;

/** Names of a layer's feed-forward tensors as the forward reads them (up: [hidden][dim], down: [dim][hidden]). */
export interface FeedForwardNames {
  up: string;
  upBias: string;
  down: string;
  downBias: string;
}

export interface ClipCheckpoint {
  file: string;
  config: ClipConfig;
  /** Every tensor the forward reads, by the name the forward uses (see ClipTensor). */
  tensors: Map<string, TensorInfo>;
  /** Per layer: which file tensors hold up and down (swapped in older files). */
  feedForward: FeedForwardNames[];
  /** Size of the file in bytes and its tensor data's sizes: part of the encoder's fingerprint. */
  fileSize: number;
}

/** Whether the GGUF file is an image encoder (general.architecture "clip"). */
export function isClipFile(file: GGUFFile): boolean {
  return file.has("general.architecture") && file.getString("general.architecture") === "clip";
}

/** The image encoder in the mmproj file at `path` (`file`: its header, when read already). */
export function readClipCheckpoint(path: string, file: GGUFFile = readGGUF(path)): ClipCheckpoint {
  if (!isClipFile(file)) {
    const arch = file.has("general.architecture") ? file.getString("general.architecture") : "none";
    throw new ModelFormatError(path, `not an image encoder (general.architecture is ${arch}, expected clip)`);
  }
  const config = readClipConfig(file);
  const tensors = new Map<string, TensorInfo>();
  const feedForward: FeedForwardNames[] = [];
  const add = (name: string, shape: number[], as: string = name) => tensors.set(as, tensorInfo(file, name, shape));
  const { dim, hiddenDim, patchSize: p } = config;
  // The convolution's kernel [dim][3][p][p] (ggml ne [p, p, 3, dim]) is a [dim][3 p p] matrix over flattened patches.
  const patch = tensorInfo(file, ClipTensor.patchEmbd, [dim, 3, p, p]);
  tensors.set(ClipTensor.patchEmbd, { ...patch, shape: [dim, 3 * p * p] });
  add(ClipTensor.patchBias, [dim]);
  add(ClipTensor.positions, [config.gridSide * config.gridSide, dim]);
  for (let l = 0; l < config.nLayers; l++) {
    const T = ClipTensor;
    for (const [w, b] of [[T.ln1(l), T.ln1Bias(l)], [T.ln2(l), T.ln2Bias(l)]] as const) {
      add(w, [dim]);
      add(b, [dim]);
    }
    for (const [w, b] of [[T.q(l), T.qBias(l)], [T.k(l), T.kBias(l)], [T.v(l), T.vBias(l)], [T.out(l), T.outBias(l)]] as const) {
      add(w, [dim, dim]);
      add(b, [dim]);
    }
    const names = feedForwardNames(file, l, dim, hiddenDim);
    feedForward.push(names);
    add(names.up, [hiddenDim, dim], T.up(l));
    add(names.upBias, [hiddenDim], T.upBias(l));
    add(names.down, [dim, hiddenDim], T.down(l));
    add(names.downBias, [dim], T.downBias(l));
  }
  add(ClipTensor.postLn, [dim]);
  add(ClipTensor.postLnBias, [dim]);
  add(ClipTensor.softEmbNorm, [dim]);
  const proj = file.tensor(ClipTensor.inputProjection);
  if (proj !== undefined && proj.dims.length === 2 && proj.dims[0] === dim && proj.dims[1] === config.projectionDim && dim !== config.projectionDim) {
    throw new ModelFormatError(path, `tensor ${ClipTensor.inputProjection} is stored vision width first ([${config.projectionDim}, ${dim}]); Gemma 3's layout has the text width first`);
  }
  // Stored [vision][text] (ne = [text, vision]): read transposed, as [text][vision], by the loader.
  add(ClipTensor.inputProjection, [dim, config.projectionDim]);
  return { file: path, config, tensors, feedForward, fileSize: file.fileSize };
}

/**
 * The file tensors of layer l's feed-forward up and down projections. Older converters wrote them
 * under each other's names; their shapes tell (up has `dim` inputs: ggml ne[0] = dim).
 */
function feedForwardNames(file: GGUFFile, l: number, dim: number, hiddenDim: number): FeedForwardNames {
  const T = ClipTensor;
  const straight = { up: T.up(l), upBias: T.upBias(l), down: T.down(l), downBias: T.downBias(l) };
  const up = file.tensor(T.up(l));
  const down = file.tensor(T.down(l));
  if (up === undefined || down === undefined || dim === hiddenDim) return straight;
  const swapped = up.dims[0] === hiddenDim && up.dims[1] === dim && down.dims[0] === dim && down.dims[1] === hiddenDim;
  return swapped ? { up: T.down(l), upBias: T.downBias(l), down: T.up(l), downBias: T.upBias(l) } : straight;
}

function readClipConfig(file: GGUFFile): ClipConfig {
  const fail = (problem: string): never => {
    throw new ModelFormatError(file.path, problem);
  };
  const projector = file.getString("clip.projector_type", "");
  if (projector === "") fail('metadata key "clip.projector_type" is missing');
  if (!PROJECTORS.has(projector)) fail(`projector type ${JSON.stringify(projector)} is not supported (supported: ${[...PROJECTORS].join(", ")})`);
  if (!file.getBool("clip.has_vision_encoder", true)) fail("the file has no vision encoder (clip.has_vision_encoder is false)");
  const positive = (key: string, fallback?: number): number => {
    const value = file.getU32(`clip.vision.${key}`, fallback);
    if (value <= 0) fail(`metadata key "clip.vision.${key}" is ${value}, expected a positive integer`);
    return value;
  };
  const imageSize = positive("image_size");
  const patchSize = positive("patch_size");
  if (imageSize % patchSize !== 0) fail(`image size ${imageSize} is not a whole number of ${patchSize}-pixel patches`);
  const gridSide = imageSize / patchSize;
  const dim = positive("embedding_length");
  const nHeads = positive("attention.head_count");
  if (dim % nHeads !== 0) fail(`width ${dim} is not a whole number of ${nHeads} heads`);
  const nLayers = positive("block_count");
  if (nLayers > file.tensors.length) fail(`metadata key "clip.vision.block_count" is ${nLayers}, more layers than the file has tensors (${file.tensors.length})`);
  const poolSide = positive("projector.scale_factor", 4);
  if (gridSide % poolSide !== 0) fail(`a grid of ${gridSide} patches cannot be pooled by ${poolSide}`);
  if (file.getBool("clip.use_silu", false)) fail("a SiLU feed-forward is not supported (gemma3's is GELU)");
  const projectionDim = positive("projection_dim");
  const triple = (key: string): [number, number, number] => {
    const values = file.getF32Array(`clip.vision.${key}`);
    if (values.length !== 3) fail(`metadata key "clip.vision.${key}" has ${values.length} values, expected 3 (R, G, B)`);
    return [values[0]!, values[1]!, values[2]!];
  };
  const imageStd = triple("image_std");
  if (imageStd.some((s) => !(s > 0) || !Number.isFinite(s))) fail('metadata key "clip.vision.image_std" must hold positive finite values');
  const imageMean = triple("image_mean");
  if (imageMean.some((m) => !Number.isFinite(m))) fail('metadata key "clip.vision.image_mean" must hold finite values');
  const side = gridSide / poolSide;
  return {
    projector: projector as ProjectorType,
    imageSize,
    patchSize,
    gridSide,
    dim,
    nLayers,
    nHeads,
    headDim: dim / nHeads,
    hiddenDim: positive("feed_forward_length"),
    normEps: file.getF32("clip.vision.attention.layer_norm_epsilon", 1e-6),
    imageMean,
    imageStd,
    poolSide,
    projectionDim,
    tokensPerImage: side * side,
  };
}
