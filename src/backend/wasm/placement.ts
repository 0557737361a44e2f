/**
 * Where a model goes when it is larger than one WebAssembly memory (4 GiB): over as many memories
 * as it needs, each holding whole items in the model's order: the token embedding, layers (their
 * weights, their part of the KV arena), the output norm and classifier. Each memory also holds
 * what its kernels need to run its part alone: the reserved static area, a copy of the step
 * batch, the activation buffers, RoPE tables and the kernels' scratch. Between memories only the
 * residual stream of the step travels (WasmForward).
 *
 * Greedy in model order: an item joins the current memory while the memory stays within the
 * limit, else it starts the next one. A memory exceeds the limit only when a single item is
 * larger than the limit; no memory exceeds 4 GiB (such an item is refused before loading).
 */
import { InputError, ModelFormatError } from "../../errors.ts";
import type { ModelPart } from "./llama.ts";
import type { PartBytes, WeightPlacement } from "./weights.ts";
import { MAX_MEMORY_BYTES } from "./wasm.ts";

/**
 * The default largest memory: 4 GiB less what the runtime needs beyond the plan (the plan counts
 * the load's staging buffer and every allocation's alignment; this keeps a margin for rounding
 * to 64 KiB pages).
 */
export const DEFAULT_MEMORY_LIMIT_BYTES = MAX_MEMORY_BYTES - (16 << 20);

/** The environment variable that sets the largest memory, in MiB. */
export const MEMORY_LIMIT_ENV = "PAGELLM_WASM_MEMORY_MB";

/**
 * The largest memory pagellm makes: `optionMb` when given, else PAGELLM_WASM_MEMORY_MB, else the
 * default; never above the default (a wasm32 memory cannot be larger).
 */
export function memoryLimitBytes(optionMb: number | null = null): number {
  const env = process.env[MEMORY_LIMIT_ENV];
  let mb = optionMb;
  if (mb === null && env !== undefined && env !== "") {
    mb = Number(env);
    if (!Number.isFinite(mb) || mb <= 0) throw new InputError(`${MEMORY_LIMIT_ENV} must be a positive number of MiB, got "${env}"`);
  }
  if (mb === null) return DEFAULT_MEMORY_LIMIT_BYTES;
  if (!Number.isFinite(mb) || mb <= 0) throw new InputError(`the largest WebAssembly memory must be a positive number of MiB, got ${mb}`);
  return Math.min(DEFAULT_MEMORY_LIMIT_BYTES, Math.floor(mb * 2 ** 20));
}

/** What the plan is made from: the weights of each item, the KV of a layer, and each memory's fixed bytes. */
export interface PlacementSizes {
  weights: PartBytes;
  sharedClassifier: boolean;
  /**
   * K and V for the whole block pool of a memory holding layers [first, end) (0 when the KV cache is
   * elsewhere, on a GPU): the arena of those layers' slots (kv-arena.ts).
   */
  kvBytes(first: number, end: number): number;
  /** Bytes a memory running `part` takes besides its weights and KV (static area, batch, buffers, scratch). */
  fixedBytes(part: ModelPart): number;
}

/** One memory of the plan: what it runs and what that takes. */
export interface PlacedMemory {
  part: ModelPart;
  weightBytes: number;
  kvBytes: number;
  /** Static area, step batch, activations, RoPE tables, kernel scratch, load staging. */
  bufferBytes: number;
  totalBytes: number;
}

export interface Placement {
  memories: PlacedMemory[];
  /** The memory of each item, as loadPlacedWeights takes it. */
  weights: WeightPlacement;
  limitBytes: number;
}

type Item = { kind: "embedding" } | { kind: "layer"; layer: number } | { kind: "output" };

/** Place a model of `nLayers` layers over memories of at most `limitBytes` each (see the file comment). */
export function placeModel(file: string, nLayers: number, sizes: PlacementSizes, limitBytes: number): Placement {
  const items: Item[] = [{ kind: "embedding" }];
  for (let l = 0; l < nLayers; l++) items.push({ kind: "layer", layer: l });
  if (!sizes.sharedClassifier) items.push({ kind: "output" });

  const memories: PlacedMemory[] = [];
  const weights = { embedding: 0, layers: new Array<number>(nLayers).fill(0), output: 0 };
  let current: Contents | null = null;
  const measure = (m: Contents): PlacedMemory => {
    const bufferBytes = sizes.fixedBytes(m.part);
    return { ...m, bufferBytes, totalBytes: m.weightBytes + m.kvBytes + bufferBytes };
  };
  const close = (): void => {
    if (current !== null) memories.push(measure(current));
    current = null;
  };

  for (const item of items) {
    const grown = withItem(current ?? EMPTY, item, sizes);
    if (current !== null && measure(grown).totalBytes > limitBytes) {
      close();
      current = withItem(EMPTY, item, sizes);
    } else {
      current = grown;
    }
    const total = measure(current).totalBytes;
    if (total > MAX_MEMORY_BYTES) {
      throw new ModelFormatError(
        file,
        `${describeItem(item)} needs ${gib(total)} with its buffers, more than the 4 GiB a WebAssembly memory holds` +
          (item.kind === "layer" ? " (its KV cache: lower --ctx-size or --kv-cache-mb)" : ""),
      );
    }
    const at = memories.length;
    if (item.kind === "embedding") {
      weights.embedding = at;
      if (sizes.sharedClassifier) weights.output = at;
    } else if (item.kind === "layer") weights.layers[item.layer] = at;
    else weights.output = at;
  }
  close();
  return { memories, weights, limitBytes };
}

/** What a memory holds while it is being filled. */
interface Contents {
  part: ModelPart;
  weightBytes: number;
  kvBytes: number;
}

const EMPTY: Contents = { part: { embed: false, firstLayer: 0, endLayer: 0, classify: false }, weightBytes: 0, kvBytes: 0 };

/** `m` with `item` added; a memory holding the embedding of a shared classifier runs the classifier too. */
function withItem(m: Contents, item: Item, sizes: PlacementSizes): Contents {
  const part = { ...m.part };
  let weightBytes = m.weightBytes;
  let kvBytes = m.kvBytes;
  if (item.kind === "embedding") {
    part.embed = true;
    weightBytes += sizes.weights.embedding;
    if (sizes.sharedClassifier) {
      part.classify = true;
      weightBytes += sizes.weights.output;
    }
  } else if (item.kind === "layer") {
    if (part.endLayer === part.firstLayer) part.firstLayer = item.layer;
    part.endLayer = item.layer + 1;
    weightBytes += sizes.weights.layers[item.layer]!;
    kvBytes = sizes.kvBytes(part.firstLayer, part.endLayer);
  } else {
    part.classify = true;
    weightBytes += sizes.weights.output;
  }
  return { part, weightBytes, kvBytes };
}

function describeItem(item: Item): string {
  if (item.kind === "embedding") return "the token embedding";
  if (item.kind === "layer") return `layer ${item.layer}`;
  return "the output matrix";
}

/** "embedding, layers 0-13, output": what a memory holds, for people. */
export function describePart(part: ModelPart): string {
  const what: string[] = [];
  if (part.embed) what.push("embedding");
  const n = part.endLayer - part.firstLayer;
  if (n === 1) what.push(`layer ${part.firstLayer}`);
  else if (n > 1) what.push(`layers ${part.firstLayer}-${part.endLayer - 1}`);
  if (part.classify) what.push("output");
  return what.join(", ");
}

function gib(bytes: number): string {
  return `${(bytes / 2 ** 30).toFixed(2)} GiB`;
}
