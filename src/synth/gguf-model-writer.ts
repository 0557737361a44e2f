/**
 * Writes models of the llama, qwen2, qwen3, qwen3moe, gemma3, phi3 and smollm3 architectures as GGUF files, in any tensor type or
 * quantization mix (gguf-quant-mix.ts), with the metadata llama.cpp reads for them and a real
 * tokenizer's `tokenizer.*` keys: for tests, and for benchmarks of real shapes with random weights.
 *
 * Tensors are written in llama.cpp's order (token_embd, rope_freqs, each layer's tensors, output_norm,
 * output), each made a few MiB of rows at a time: random f32 values, then encoded in its type, so
 * the largest model costs one chunk of memory, not its size.
 *
 * Weights (reproducible from the seed; each tensor has its own random stream, so one can be made
 * alone): approximately normal, like src/synth/random-weights.ts, so activations stay sane at any
 * depth: every matrix std 1/sqrt(its input width), the embedding and classifier std 1/sqrt(dim),
 * norm gains 1 + N(0, 0.05), biases N(0, 0.1). Every mix draws the same f32 values for a tensor,
 * so a quantized file holds exactly what llama-quantize would make of the F32 file of the same seed.
 */
import { InputError } from "../errors.ts";
import { GGML_TYPE, quantize, type QuantTypeName } from "./quant/index.ts";
import { Xoshiro128 } from "../util/random.ts";
import { TensorName } from "../model/checkpoint.ts";
import { queryDim, type ModelConfig } from "../model/config.ts";
import type { GGUFValue } from "../model/gguf.ts";
import { decisiveRoutingProblem, routerWeights, spreadRoutingEntries, zeroRoutingRows } from "./decisive-routing.ts";
import { MODEL_MIXES, tensorType, type MixContext, type ModelMix, type TensorRole } from "./gguf-quant-mix.ts";
import { gguf, writeGGUF, type TensorToWrite } from "./gguf-writer.ts";

export { isModelMix, mixOfFileType, MODEL_MIXES, MODEL_MIX_NAMES, type ModelMix } from "./gguf-quant-mix.ts";

export type Arch = "llama" | "qwen2" | "qwen3" | "qwen3moe" | "gemma3" | "phi3" | "smollm3";
export const ARCHS: readonly Arch[] = ["llama", "qwen2", "qwen3", "qwen3moe", "gemma3", "phi3", "smollm3"];

/**
 * The layer parts each architecture has, which the config must say (ModelConfig's flags): q/k/v
 * biases, per-head q/k norms, post-norms, fused q/k/v and gate/up.
 */
const ARCH_PARTS: Record<Arch, { qkvBias: boolean; qkNorm: boolean; postNorms: boolean; fusedQkv: boolean; fusedGateUp: boolean }> = {
  llama: { qkvBias: false, qkNorm: false, postNorms: false, fusedQkv: false, fusedGateUp: false },
  qwen2: { qkvBias: true, qkNorm: false, postNorms: false, fusedQkv: false, fusedGateUp: false },
  qwen3: { qkvBias: false, qkNorm: true, postNorms: false, fusedQkv: false, fusedGateUp: false },
  qwen3moe: { qkvBias: false, qkNorm: true, postNorms: false, fusedQkv: false, fusedGateUp: false },
  gemma3: { qkvBias: false, qkNorm: true, postNorms: true, fusedQkv: false, fusedGateUp: false },
  phi3: { qkvBias: false, qkNorm: false, postNorms: false, fusedQkv: true, fusedGateUp: true },
  smollm3: { qkvBias: false, qkNorm: false, postNorms: false, fusedQkv: false, fusedGateUp: false },
};
const PART_NAMES: Record<keyof (typeof ARCH_PARTS)[Arch], string> = {
  qkvBias: "q/k/v biases are", qkNorm: "per-head q/k norms are", postNorms: "post-norms are",
  fusedQkv: "a fused q/k/v matrix is", fusedGateUp: "a fused gate/up matrix is",
};

export interface ModelToWrite {
  arch: Arch;
  /** general.name */
  name: string;
  /**
   * The shape. headDim may differ from dim/nHeads (qwen3); qkvBias (qwen2), qkNorm (qwen3, qwen3moe,
   * gemma3), postNorms (gemma3), fusedQkv and fusedGateUp (phi3) and experts (qwen3moe: softmax
   * gating, weights renormalized, no biases) must match the architecture; ropeFreqFactors adds
   * Llama 3's `rope_freqs.weight`, longRope Phi-3's factor tensors; slidingWindow (gemma3),
   * ropeFreqScale, ropeAttnFactor (phi3) are written as llama.cpp reads them; sharedClassifier
   * leaves out output.weight.
   */
  config: ModelConfig;
  mix: ModelMix;
  /** Every weight in the mix's base type (llama-quantize --pure), fallbacks aside. */
  pure?: boolean;
  /**
   * Metadata copied as it is, normally the `tokenizer.*` keys of a real vocabulary
   * (gguf-tokenizer-metadata.ts). Its token count must equal config.vocabSize.
   */
  tokenizer: ReadonlyMap<string, GGUFValue>;
  /** Seed of the random weights. */
  seed: number;
  /**
   * Experts chosen by wide margins (decisive-routing.ts): for comparing two engines whose rounding
   * differs, where random routers would let a near tie pick different experts.
   */
  decisiveRouting?: boolean;
  /**
   * `{arch}.*` keys beyond the shape, written after it (a decoder embedder's or reranker's
   * `pooling_type` and `classifier.output_labels`).
   */
  extraMetadata?: ReadonlyMap<string, GGUFValue>;
}

/** Values generated and encoded at a time. */
const CHUNK_VALUES = 1 << 20;
const NORM_NOISE = 0.05;
const BIAS_STD = 0.1;

// ----------------------------------------------------------------------------
// Random tensors

/** Changes a chunk of whole rows (the first `firstRow`) before it is encoded. */
export type RowEdit = (values: Float32Array, firstRow: number) => void;

/**
 * The bytes of a random rows x cols tensor in `type`, made chunk by chunk of whole rows (rows are
 * encoded independently, so chunking does not change a byte). Stream `stream` of `seed`; `edit`
 * changes each chunk's values first.
 */
export function randomTensorData(seed: number, stream: number, rows: number, cols: number, type: QuantTypeName, mean: number, std: number, edit?: RowEdit) {
  return function* chunks(): Generator<Uint8Array> {
    for (const [values, firstRow] of randomRows(seed, stream, rows, cols, mean, std)) {
      edit?.(values, firstRow);
      yield quantize(type, values);
    }
  };
}

/** The f32 values of randomTensorData, chunk by chunk, each with its first row. */
function* randomRows(seed: number, stream: number, rows: number, cols: number, mean: number, std: number): Generator<[Float32Array, number]> {
  const rng = new Xoshiro128((Math.imul(seed, 1000003) + Math.imul(stream + 1, 7919)) >>> 0);
  const chunkRows = Math.max(1, Math.floor(CHUNK_VALUES / cols));
  for (let r = 0; r < rows; r += chunkRows) {
    const values = new Float32Array(Math.min(chunkRows, rows - r) * cols);
    rng.fillNormalish(values, mean, std);
    yield [values, r];
  }
}

// ----------------------------------------------------------------------------
// Metadata


/** The `general.*` keys llama.cpp's converter writes for a model file of `arch` and `mix`. */
export function generalMetadata(arch: string, name: string, mix: ModelMix): [string, GGUFValue][] {
  return [
    ["general.architecture", gguf.str(arch)],
    ["general.type", gguf.str("model")],
    ["general.name", gguf.str(name)],
    ["general.file_type", gguf.u32(MODEL_MIXES[mix])],
    ["general.quantization_version", gguf.u32(2)],
    ["general.alignment", gguf.u32(32)],
  ];
}

/** The `{arch}.*` and `general.*` keys llama.cpp reads for these architectures (llama-arch.cpp's LLM_KV names). */
function modelMetadata(model: ModelToWrite): Map<string, GGUFValue> {
  const { arch, config: c } = model;
  const experts: [string, GGUFValue][] = c.experts === undefined ? [] : [
    [`${arch}.expert_count`, gguf.u32(c.experts.count)],
    [`${arch}.expert_used_count`, gguf.u32(c.experts.used)],
    [`${arch}.expert_feed_forward_length`, gguf.u32(c.experts.hiddenDim)],
  ];
  const metadata = new Map<string, GGUFValue>([
    ...generalMetadata(arch, model.name, model.mix),
    [`${arch}.vocab_size`, gguf.u32(c.vocabSize)],
    [`${arch}.context_length`, gguf.u32(c.seqLen)],
    [`${arch}.embedding_length`, gguf.u32(c.dim)],
    [`${arch}.block_count`, gguf.u32(c.nLayers)],
    [`${arch}.feed_forward_length`, gguf.u32(c.hiddenDim)],
    [`${arch}.attention.head_count`, gguf.u32(c.nHeads)],
    [`${arch}.attention.head_count_kv`, gguf.u32(c.nKvHeads)],
    [`${arch}.attention.key_length`, gguf.u32(c.headDim)],
    [`${arch}.attention.value_length`, gguf.u32(c.headDim)],
    [`${arch}.rope.dimension_count`, gguf.u32(c.ropeDim ?? c.headDim)],
    [`${arch}.rope.freq_base`, gguf.f32(c.ropeTheta)],
    [`${arch}.attention.layer_norm_rms_epsilon`, gguf.f32(c.normEps)],
    ...experts,
  ]);
  if (c.ropeFreqScale !== undefined && c.ropeFreqScale !== 1) {
    metadata.set(`${arch}.rope.scaling.type`, gguf.str("linear"));
    metadata.set(`${arch}.rope.scaling.factor`, gguf.f32(1 / c.ropeFreqScale));
  }
  const window = c.slidingWindow;
  if (window !== undefined) {
    metadata.set(`${arch}.attention.sliding_window`, gguf.u32(window.size));
    // As Gemma 3's converter: no pattern key for llama.cpp's default (five local layers, then a global one).
    const defaultPattern = window.local.every((local, l) => local === l % 6 < 5);
    if (!defaultPattern) metadata.set(`${arch}.attention.sliding_window_pattern`, gguf.bools(window.local));
    if (window.rope !== undefined) metadata.set(`${arch}.rope.freq_base_swa`, gguf.f32(window.rope.theta));
  }
  if (c.longRope !== undefined) metadata.set(`${arch}.rope.scaling.original_context_length`, gguf.u32(c.longRope.originalContext));
  if (c.ropeAttnFactor !== undefined) metadata.set(`${arch}.rope.scaling.attn_factor`, gguf.f32(c.ropeAttnFactor));
  return metadata;
}

/** Refuse shapes llama.cpp would refuse for the architecture, and a vocabulary of the wrong size. */
function checkModel(model: ModelToWrite): void {
  const { arch, config: c } = model;
  const fail = (problem: string): never => {
    throw new InputError(`cannot write ${arch} model "${model.name}": ${problem}`);
  };
  for (const [key, v] of Object.entries({ dim: c.dim, hiddenDim: c.hiddenDim, nLayers: c.nLayers, nHeads: c.nHeads, nKvHeads: c.nKvHeads, headDim: c.headDim, vocabSize: c.vocabSize, seqLen: c.seqLen })) {
    if (!Number.isInteger(v) || v < 1) fail(`${key} is ${v}`);
  }
  if (c.nHeads % c.nKvHeads !== 0) fail(`${c.nHeads} heads are not a multiple of ${c.nKvHeads} KV heads`);
  if (c.headDim % 2 !== 0) fail(`head size ${c.headDim} is odd`);
  for (const [part, wanted] of Object.entries(ARCH_PARTS[arch]) as [keyof (typeof ARCH_PARTS)[Arch], boolean][]) {
    if ((c[part] ?? false) !== wanted) fail(`${PART_NAMES[part]} ${wanted ? "required by" : "not part of"} ${arch}`);
  }
  if (c.slidingWindow !== undefined && (arch !== "gemma3" || c.slidingWindow.local.length !== c.nLayers)) fail("a sliding window needs gemma3 and a flag per layer");
  if (c.slidingWindow?.rope !== undefined && c.slidingWindow.rope.freqScale !== 1) fail("gemma3's local layers have no RoPE scaling");
  if ((c.longRope !== undefined || c.ropeAttnFactor !== undefined) && arch !== "phi3") fail("LongRoPE is phi3's");
  const e = c.experts;
  if ((e !== undefined) !== (arch === "qwen3moe")) fail(`experts are ${arch === "qwen3moe" ? "required by" : "not part of"} ${arch}`);
  if (model.decisiveRouting === true) {
    const problem = decisiveRoutingProblem(c);
    if (problem !== null) fail(problem);
  }
  if (e !== undefined) {
    if (!(e.count >= 1 && e.used >= 1 && e.used <= e.count && e.hiddenDim >= 1)) fail(`${e.used} of ${e.count} experts of width ${e.hiddenDim}`);
    if (e.gating !== "softmax" || !e.normalizeWeights || e.biases || e.activation !== "swiglu") fail("qwen3moe's experts are softmax-gated, renormalized SwiGLU without biases");
  }
  if (c.ropeFreqFactors !== undefined && c.ropeFreqFactors.length !== (c.ropeDim ?? c.headDim) / 2) {
    fail(`${c.ropeFreqFactors.length} RoPE frequency factors, expected ${(c.ropeDim ?? c.headDim) / 2}`);
  }
  const tokens = model.tokenizer.get("tokenizer.ggml.tokens");
  if (tokens === undefined || tokens.type !== "array" || tokens.value.itemType !== "string") fail("the tokenizer metadata has no tokenizer.ggml.tokens");
  else if (tokens.value.items.length !== c.vocabSize) {
    fail(`the tokenizer has ${tokens.value.items.length} tokens, the model's vocabulary ${c.vocabSize} (pad it with padVocabulary)`);
  }
  for (const key of model.tokenizer.keys()) if (!key.startsWith("tokenizer.")) fail(`tokenizer metadata key ${key} is not a tokenizer.* key`);
  for (const key of model.extraMetadata?.keys() ?? []) if (!key.startsWith(`${arch}.`)) fail(`extra metadata key ${key} is not a ${arch}.* key`);
}

// ----------------------------------------------------------------------------
// The model

/** The tensors of `model` in file order, each with its type, its data made when written. */
export function modelTensors(model: ModelToWrite): TensorToWrite[] {
  const { config: c, mix, seed } = model;
  const kvDim = c.nKvHeads * c.headDim;
  const qDim = queryDim(c);
  const ctx: MixContext = { nLayers: c.nLayers, tied: c.sharedClassifier, gqa: c.nHeads / c.nKvHeads, experts: c.experts?.count ?? 0 };
  const tensors: TensorToWrite[] = [];
  const matrix = (name: string, rows: number, cols: number, role: TensorRole, layer: number, std: number, edit?: RowEdit): void => {
    const type = tensorType(mix, role, layer, cols, ctx, model.pure);
    tensors.push({ name, dims: [cols, rows], type: GGML_TYPE[type], data: randomTensorData(seed, tensors.length, rows, cols, type, 0, std, edit) });
  };
  /** `count` experts' [rows][cols] matrices stacked, [count][rows][cols] (ggml dims [cols, rows, count]). */
  const experts = (name: string, count: number, rows: number, cols: number, role: TensorRole, layer: number, std: number, edit?: RowEdit): void => {
    const type = tensorType(mix, role, layer, cols, ctx, model.pure, true);
    tensors.push({ name, dims: [cols, rows, count], type: GGML_TYPE[type], data: randomTensorData(seed, tensors.length, count * rows, cols, type, 0, std, edit) });
  };
  /** The router stays F32 (llama-quantize never quantizes ffn_gate_inp). */
  const router = (name: string, rows: number, cols: number, std: number): void => {
    tensors.push({ name, dims: [cols, rows], type: GGML_TYPE.F32, data: randomTensorData(seed, tensors.length, rows, cols, "F32", 0, std) });
  };
  // Decisive routing (decisive-routing.ts): the embedding's routing entries spread, what writes to
  // them zero, each router reading its layer's entries through the FFN norm written just before it.
  const routed = model.decisiveRouting === true ? c.experts : undefined;
  const spreadEntries: RowEdit | undefined = routed && ((values) => spreadRoutingEntries(c, routed, values, input(c.dim)));
  const zeroRouting = (cols: number): RowEdit | undefined => routed && ((values, firstRow) => zeroRoutingRows(c, routed, values, firstRow, cols));
  const decisiveRouter = (name: string, l: number, ffnNormStream: number): void => {
    const [[ffnNorm]] = [...randomRows(seed, ffnNormStream, 1, c.dim, 1, NORM_NOISE)];
    const weights = routerWeights(c, routed!, l, ffnNorm!, input(c.dim));
    tensors.push({ name, dims: [c.dim, routed!.count], type: GGML_TYPE.F32, data: new Uint8Array(weights.buffer) });
  };
  const vector = (name: string, n: number, mean: number, std: number): void => {
    tensors.push({ name, dims: [n], type: GGML_TYPE.F32, data: randomTensorData(seed, tensors.length, 1, n, "F32", mean, std) });
  };
  const input = (width: number) => 1 / Math.sqrt(width);

  const factorTensor = (name: string, values: readonly number[]): void => {
    const factors = Float32Array.from(values);
    tensors.push({ name, dims: [factors.length], type: GGML_TYPE.F32, data: new Uint8Array(factors.buffer) });
  };
  matrix(TensorName.tokenEmbedding, c.vocabSize, c.dim, "token_embd", 0, input(c.dim), spreadEntries);
  if (c.ropeFreqFactors !== undefined) factorTensor(TensorName.ropeFreqs, c.ropeFreqFactors);
  if (c.longRope !== undefined) {
    factorTensor(TensorName.ropeFactorsLong, c.longRope.long);
    factorTensor(TensorName.ropeFactorsShort, c.longRope.short);
  }
  for (let l = 0; l < c.nLayers; l++) {
    vector(TensorName.attnNorm(l), c.dim, 1, NORM_NOISE);
    if (c.fusedQkv) matrix(TensorName.attnQkv(l), qDim + 2 * kvDim, c.dim, "attn_v", l, input(c.dim)); // attn_v's rules (gguf-quant-mix.ts)
    else {
      matrix(TensorName.attnQ(l), qDim, c.dim, "other", l, input(c.dim));
      matrix(TensorName.attnK(l), kvDim, c.dim, "attn_k", l, input(c.dim));
      matrix(TensorName.attnV(l), kvDim, c.dim, "attn_v", l, input(c.dim));
    }
    if (c.qkvBias) {
      vector(TensorName.attnQBias(l), qDim, 0, BIAS_STD);
      vector(TensorName.attnKBias(l), kvDim, 0, BIAS_STD);
      vector(TensorName.attnVBias(l), kvDim, 0, BIAS_STD);
    }
    if (c.qkNorm) {
      vector(TensorName.attnQNorm(l), c.headDim, 1, NORM_NOISE);
      vector(TensorName.attnKNorm(l), c.headDim, 1, NORM_NOISE);
    }
    matrix(TensorName.attnOutput(l), c.dim, qDim, "attn_output", l, input(qDim), zeroRouting(qDim));
    if (c.postNorms) vector(TensorName.postAttnNorm(l), c.dim, 1, NORM_NOISE);
    const ffnNormStream = tensors.length;
    vector(TensorName.ffnNorm(l), c.dim, 1, NORM_NOISE);
    const e = c.experts;
    if (e === undefined) {
      if (c.fusedGateUp) matrix(TensorName.ffnUp(l), 2 * c.hiddenDim, c.dim, "other", l, input(c.dim));
      else {
        matrix(TensorName.ffnGate(l), c.hiddenDim, c.dim, "other", l, input(c.dim));
        matrix(TensorName.ffnUp(l), c.hiddenDim, c.dim, "other", l, input(c.dim));
      }
      matrix(TensorName.ffnDown(l), c.dim, c.hiddenDim, "ffn_down", l, input(c.hiddenDim));
    } else {
      // The router's logits have a std of about 1 over the experts: routing differs token to token.
      if (routed) decisiveRouter(TensorName.ffnRouter(l), l, ffnNormStream);
      else router(TensorName.ffnRouter(l), e.count, c.dim, input(c.dim));
      experts(TensorName.ffnGateExperts(l), e.count, e.hiddenDim, c.dim, "other", l, input(c.dim));
      experts(TensorName.ffnUpExperts(l), e.count, e.hiddenDim, c.dim, "other", l, input(c.dim));
      experts(TensorName.ffnDownExperts(l), e.count, c.dim, e.hiddenDim, "ffn_down", l, input(e.hiddenDim), zeroRouting(e.hiddenDim));
    }
    if (c.postNorms) vector(TensorName.postFfnNorm(l), c.dim, 1, NORM_NOISE);
  }
  vector(TensorName.outputNorm, c.dim, 1, NORM_NOISE);
  if (!c.sharedClassifier) matrix(TensorName.output, c.vocabSize, c.dim, "output", 0, input(c.dim));
  return tensors;
}

/**
 * Write `model` to `path` as GGUF v3 (write to a temporary name and rename: a failed write leaves a
 * partial file). `tensors` are modelTensors(model), or those with their data made another way
 * (scripts/large-models.ts writes random blocks where quantizing billions of values would take hours).
 */
export function writeModelGGUF(path: string, model: ModelToWrite, tensors: TensorToWrite[] = modelTensors(model)): void {
  checkModel(model);
  const metadata = modelMetadata(model);
  for (const [key, value] of model.extraMetadata ?? []) metadata.set(key, value);
  for (const [key, value] of model.tokenizer) metadata.set(key, value);
  writeGGUF(path, metadata, tensors);
}
