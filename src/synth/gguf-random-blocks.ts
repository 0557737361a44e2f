/**
 * Random quantized tensors made as blocks, not by quantizing random values: random values of the
 * type's width in every block, with one scale per tensor that gives each matrix the standard
 * deviation the writer gives it (1/sqrt(its input width)). The reference quantizers take hours
 * for billions of values (Q4_K: ~0.5 M values/s); this writes ~100 MB/s. For models whose
 * shape and types matter, not their values: the > 4 GiB models of docs/large-models.md and the
 * memory test's Qwen2.5-0.5B-shaped file.
 */
import type { ModelToWrite } from "./gguf-model-writer.ts";
import { modelTensors } from "./gguf-model-writer.ts";
import type { TensorToWrite } from "./gguf-writer.ts";
import { f32ToHalf, GGML_TYPE } from "./quant/index.ts";
import { Xoshiro128 } from "../util/random.ts";

/** How a block type is made random: its size, its fixed bytes for a standard deviation, and which bytes are random. */
interface RandomBlock {
  bytes: number;
  template(std: number): Uint8Array;
  randomFrom: number;
  randomTo: number;
}

/** The standard deviation of a uniform integer on 0..n-1. */
const uniformStd = (n: number) => Math.sqrt((n * n - 1) / 12);

function halfAt(block: Uint8Array, at: number, value: number): Uint8Array {
  new DataView(block.buffer).setUint16(at, f32ToHalf(value), true);
  return block;
}

/** Q4_K's sub-block scale and minimum, Q6_K's 16-value scale (all blocks alike; the values are random). */
const Q4_K_SCALE = 20;
const Q6_K_SCALE = 8;

const RANDOM_BLOCKS: Record<number, RandomBlock> = {
  // Q8_0: d, 32 int8 values q uniform in -128..127: d * q.
  [GGML_TYPE.Q8_0]: { bytes: 34, template: (std) => halfAt(new Uint8Array(34), 0, std / uniformStd(256)), randomFrom: 2, randomTo: 34 },
  // Q5_0: d, 4 bytes of high bits, 16 of low nibbles: d * (q - 16), q uniform in 0..31.
  [GGML_TYPE.Q5_0]: { bytes: 22, template: (std) => halfAt(new Uint8Array(22), 0, std / uniformStd(32)), randomFrom: 2, randomTo: 22 },
  // Q4_K: d, dmin, 12 bytes of 6-bit scales and minimums, 128 of nibbles: d * 20 * q - dmin * 20, q
  // uniform in 0..15; dmin = 7.5 d centres them. Scales (ggml get_scale_min_k4): sub-blocks 0-3 in
  // the low 6 bits of bytes 0-3 (scale) and 4-7 (minimum), sub-blocks 4-7 in the nibbles of bytes
  // 8-11 with their top 2 bits above those of 0-7.
  [GGML_TYPE.Q4_K]: {
    bytes: 144,
    template: (std) => {
      const d = std / (Q4_K_SCALE * uniformStd(16));
      const block = halfAt(halfAt(new Uint8Array(144), 0, d), 2, 7.5 * d);
      for (let j = 0; j < 8; j++) block[4 + j] = (Q4_K_SCALE & 63) | ((Q4_K_SCALE >> 4) << 6);
      for (let j = 8; j < 12; j++) block[4 + j] = (Q4_K_SCALE & 15) | ((Q4_K_SCALE & 15) << 4);
      return block;
    },
    randomFrom: 16,
    randomTo: 144,
  },
  // Q6_K: 128 bytes of low nibbles, 64 of high bits, 16 int8 scales, d: d * 8 * (q - 32), q uniform in 0..63.
  [GGML_TYPE.Q6_K]: {
    bytes: 210,
    template: (std) => {
      const block = halfAt(new Uint8Array(210), 208, std / (Q6_K_SCALE * uniformStd(64)));
      block.fill(Q6_K_SCALE, 192, 208);
      return block;
    },
    randomFrom: 0,
    randomTo: 192,
  },
};

const CHUNK_BLOCKS = 16384;

/** `blocks` blocks of `kind` for standard deviation `std`, their random bytes from `rng`. */
function* randomBlocks(rng: Xoshiro128, blocks: number, kind: RandomBlock, std: number): Generator<Uint8Array> {
  const template = kind.template(std);
  const size = kind.bytes;
  const words = new Uint32Array(Math.ceil((kind.randomTo - kind.randomFrom) / 4));
  const bytes = new Uint8Array(words.buffer, 0, kind.randomTo - kind.randomFrom);
  for (let b = 0; b < blocks; b += CHUNK_BLOCKS) {
    const n = Math.min(CHUNK_BLOCKS, blocks - b);
    const out = new Uint8Array(n * size);
    for (let i = 0; i < n; i++) {
      for (let w = 0; w < words.length; w++) words[w] = rng.nextUint32();
      out.set(template, i * size);
      out.set(bytes, i * size + kind.randomFrom);
    }
    yield out;
  }
}

/**
 * modelTensors(model) with every Q8_0, Q5_0, Q4_K and Q6_K matrix (and expert stack) made of
 * random blocks of the writer's standard deviation.
 */
export function withRandomBlocks(model: ModelToWrite): TensorToWrite[] {
  return modelTensors(model).map((t, i) => {
    const kind = RANDOM_BLOCKS[t.type];
    if (kind === undefined || t.dims.length < 2) return t;
    const cols = t.dims[0]!;
    const rows = t.dims.slice(1).reduce((a, b) => a * b, 1);
    const perBlock = t.type === GGML_TYPE.Q8_0 || t.type === GGML_TYPE.Q5_0 ? 32 : 256;
    const blocks = (rows * cols) / perBlock;
    return { ...t, data: () => randomBlocks(new Xoshiro128(model.seed * 100_003 + i), blocks, kind, 1 / Math.sqrt(cols)) };
  });
}

